"""On a CUDA GPU: what a porter does there, end to end (skipped without one; run on a lent GPU, see
docs/performance.md "On a GPU").

The reference traced on the GPU and the port live on the GPU (``compare(folder, port)`` feeds the recorded
inputs, which load on the CPU, to the port where it lives); a reference traced on the CPU against a port on the
GPU; ``narrow`` with both sides live on the GPU; real sdpa kernels (flash / memory-efficient) and TF32 matmuls
judged correct, planted bugs named. The CPU half of the device move is ``test_replay``'s meta-device test.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

import nbtrace
from tests.models import invariant_ports as ip
from tests.models.invariant_suite import run_case

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


class Block(nn.Module):
    def __init__(self, size: int = 64) -> None:
        super().__init__()
        self.norm, self.up, self.down = nn.LayerNorm(size), nn.Linear(size, 4 * size), nn.Linear(4 * size, size)

    def forward(self, x):
        return x + self.down(nn.functional.gelu(self.up(self.norm(x))))


class TanhBlock(Block):
    def forward(self, x):
        return x + self.down(nn.functional.gelu(self.up(self.norm(x)), approximate="tanh"))


def _pair(port_class, reference_device: str, port_device: str):
    torch.manual_seed(0)
    original = nn.Sequential(*[Block() for _ in range(3)]).eval()
    port = nn.Sequential(*[port_class() for _ in range(3)]).eval()
    port.load_state_dict(original.state_dict())
    return original.to(reference_device), port.to(port_device)


@pytest.mark.parametrize("reference_device", ["cuda", "cpu"])
def test_a_gpu_port_against_a_trace_names_the_gelu_line(tmp_path, reference_device):
    original, port = _pair(TanhBlock, reference_device, "cuda")
    with torch.no_grad(), nbtrace.trace(original, debug_path=tmp_path / "a", use_repr=False, do_prune_layers=False):
        original(torch.randn(2, 8, 64, device=reference_device))
    c = nbtrace.compare(tmp_path / "a", port)
    assert c.decided_by == "replayed" and c.first_divergence.module_path == "Sequential.0"
    first = nbtrace.narrow(c, reference=original).first
    assert first.port.name == "gelu" and 'approximate="tanh"' in first.port.source.text
    assert "only the port is live" in str(nbtrace.narrow(c))


def test_a_correct_gpu_port_agrees(tmp_path):
    original, port = _pair(Block, "cuda", "cuda")
    with torch.no_grad(), nbtrace.trace(original, debug_path=tmp_path / "a", use_repr=False, do_prune_layers=False):
        original(torch.randn(2, 8, 64, device="cuda"))
    assert nbtrace.compare(tmp_path / "a", port).verdict == "agree"


@pytest.mark.parametrize("dtype", ["bf16", "fp16", "fp32"])
@pytest.mark.parametrize("method", ["replay", "live", "measured"])
def test_real_sdpa_kernels_are_correct_and_a_bug_beside_them_is_named(tmp_path, dtype, method):
    correct = run_case(tmp_path, dtype, "sdpa", None, method, device="cuda")
    assert correct.grade in ("ok", "unresolved"), correct
    bug = run_case(tmp_path, dtype, "sdpa", "weights_x1.01", method, device="cuda")
    assert bug.named == ip.BUGS["weights_x1.01"][1], bug


@pytest.mark.parametrize("method", ["replay", "live"])
def test_tf32_matmuls_are_correct_and_left_as_the_user_set_them(tmp_path, method):
    matmul = torch.backends.cuda.matmul
    before = matmul.allow_tf32
    matmul.allow_tf32 = True
    try:
        outcome = run_case(tmp_path, "fp32", "itself", None, method, device="cuda")
        assert matmul.allow_tf32 is True  # replay's float64 truths turn it off and put it back
    finally:
        matmul.allow_tf32 = before
    assert outcome.grade == "ok", outcome
