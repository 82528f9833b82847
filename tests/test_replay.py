"""Replay: compare(reference, port) with the port itself, a live module, against a reference folder traced without
its float64 twin (``measure_rounding=False``; with the twin, the port's twin decides: tests/test_twin_live.py). The
port runs on the reference's recorded inputs and each aligned module again on the inputs the reference recorded for
that call; afterwards the port, torch's random state and grad mode are as they were, also when a module raises; what
cannot be replayed falls back to the verdict from the files, and says so."""

from __future__ import annotations

import types

import pytest
import torch

import nbtrace
from tests.models.ports import BUGS, P, TinyLlamaPort, build_original, trace_original
from tests.models.precision import CASES, DTYPES, build_reference, make_inputs, one_thread  # noqa: F401


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    return trace_original(tmp_path_factory.mktemp("original"), use_repr=False, prune=False, measure_rounding=False)


def _port(bugs=()):
    return TinyLlamaPort.from_original(build_original(), set(bugs))


@pytest.mark.parametrize("bug", ["eps", "rotary_k", "transposed_o", "gate_up_swapped", "residual", "rope_theta"])
def test_replay_names_the_bug_of_a_port_with_other_names(reference, bug):
    c = nbtrace.compare(reference, _port([bug]))
    if bug == "residual":  # the layer's output is not recorded, and the tensors that may be it disagree
        assert c.first_divergence is None and c.unresolved[0] == BUGS[bug], c.summary()
        return
    assert c.first_divergence is not None and c.first_divergence.module_path == BUGS[bug], c.summary()
    if bug == "residual":  # the block's output is nothing like what a recorded: the files answer, and say so
        assert not c.first_divergence.replayed and "matches none of the reference's" in c.replay.note
    else:
        assert c.method == "replay" and c.first_divergence.replayed


def test_a_faithful_port_agrees_and_calls_are_replayed(reference):
    c = nbtrace.compare(reference, _port())
    assert c.verdict == "agree" and c.method == "replay"
    assert f"{P}.layers.0.self_attn.o_proj" in c.replay.replayed and c.replay.seconds > 0
    assert c.b.model_name == "TinyLlamaPort" and len(c.b) > 20  # the port was traced on a's inputs


def _state(model: torch.nn.Module) -> dict:
    return {
        "forwards": {name: m.__dict__.get("forward") for name, m in model.named_modules()},
        "hooks": {name: (len(m._forward_hooks), len(m._forward_pre_hooks)) for name, m in model.named_modules()},
        "training": {name: m.training for name, m in model.named_modules()},
        "tensors": {name: t.clone() for name, t in model.state_dict().items()},
        "rng": torch.random.get_rng_state(),
        "grad": torch.is_grad_enabled(),
        "dtype": torch.get_default_dtype(),
    }


def _assert_same(before: dict, after: dict) -> None:
    assert before["forwards"] == after["forwards"]
    assert before["hooks"] == after["hooks"] and before["training"] == after["training"]
    assert before["tensors"].keys() == after["tensors"].keys()
    assert all(torch.equal(before["tensors"][k], after["tensors"][k]) for k in before["tensors"])
    assert torch.equal(before["rng"], after["rng"])
    assert before["grad"] == after["grad"] and before["dtype"] == after["dtype"]


def test_the_port_is_left_as_it_was_even_when_a_module_raises_in_replay(reference):
    port = _port(["transposed_o"])
    down = port.blocks[0].ffn.down

    def fragile(self, x):  # runs in the port's dtype, raises on the float64 copy
        if x.dtype == torch.float64:
            raise RuntimeError("no float64 here")
        return torch.nn.functional.linear(x, self.weight)

    down.forward = types.MethodType(fragile, down)
    before = _state(port)
    c = nbtrace.compare(reference, port)
    _assert_same(before, _state(port))
    assert "no float64 here" in c.replay.skipped[f"{P}.layers.0.mlp.down_proj"]
    assert c.first_divergence.module_path == BUGS["transposed_o"]
    assert any("not replayed" in note for note in c.notes)


def test_a_port_that_raises_is_named_and_left_unwrapped(reference):
    port = _port()
    block = port.blocks[1]
    block.forward = types.MethodType(lambda self, *args: (_ for _ in ()).throw(ValueError("broken block")), block)
    before = _state(port)
    with pytest.raises(RuntimeError, match=r"running the port TinyLlamaPort .* raised ValueError: broken block"):
        nbtrace.compare(reference, port)
    _assert_same(before, _state(port))


def test_replay_option_and_bad_inputs(reference, tmp_path):
    leaves = nbtrace.compare(reference, _port(["transposed_o"]), replay="leaves")
    assert leaves.replay.skipped[f"{P}.layers.0"] == "not a leaf (replay='leaves')"
    assert leaves.first_divergence.module_path == BUGS["transposed_o"]
    files = nbtrace.compare(reference, _port(["transposed_o"]), replay=False)
    assert files.method == "files" and files.replay is None
    with pytest.raises(ValueError, match="replay must be"):
        nbtrace.compare(reference, _port(), replay="everything")
    printed = trace_original(tmp_path / "printed", use_repr=True, prune=False, measure_rounding=False)
    with pytest.raises(ValueError, match="use_repr=False"):
        nbtrace.compare(printed, _port())
    with pytest.raises(ValueError, match="one forward"):
        nbtrace.compare([reference, reference], _port())


def test_calls_that_cannot_be_replayed_fall_back_to_the_files(tmp_path):
    """With use_cache=True every decoder layer gets a DynamicCache, which a trace keeps only as its printout."""
    case = next(c for c in CASES if c.name == "attn_scale")
    model = build_reference(DTYPES["fp16"])
    with torch.no_grad(), nbtrace.trace(model, debug_path=tmp_path, use_repr=False, do_prune_layers=False, measure_rounding=False):
        model(**make_inputs(1, padded=False), use_cache=True)
    c = nbtrace.compare(nbtrace.load_trace(tmp_path), case.make_port(model))
    assert c.first_divergence is None and c.verdict == "unresolved" and c.unresolved[0] == case.bug.born
    assert c.replay.answered_by == "files" and f"replay cannot settle {case.bug.born}" in c.replay.note
    assert any("cannot be rebuilt" in why for why in c.replay.skipped.values())


def test_the_recorded_inputs_go_where_the_port_lives(tmp_path):
    """compare(folder, port) with the port on another device than the trace's CPU-loaded inputs: they are moved
    to the port's first parameter's device (the meta device stands in for a GPU here; tests/test_on_cuda.py runs
    it on one). A port without parameters gets them where they load."""
    from nbtrace.core.load import load_trace
    from nbtrace.diff.replay.live import top_level_inputs

    model = torch.nn.Linear(4, 3)
    with nbtrace.trace(model, debug_path=tmp_path / "a", use_repr=False, measure_rounding=False):
        model(torch.randn(2, 4))
    recorded = load_trace(tmp_path / "a")
    args, _ = top_level_inputs(recorded, torch.nn.Linear(4, 3, device="meta"))
    assert args[0].device.type == "meta" and args[0].shape == (2, 4)
    args, _ = top_level_inputs(recorded, torch.nn.ReLU())
    assert args[0].device.type == "cpu"


class _Block(torch.nn.Module):
    def __init__(self, size: int) -> None:
        super().__init__()
        self.norm, self.up, self.down = torch.nn.LayerNorm(size), torch.nn.Linear(size, 4 * size), torch.nn.Linear(4 * size, size)

    def forward(self, x):
        return x + self.down(torch.nn.functional.gelu(self.up(self.norm(x))))


class _Stack(torch.nn.Module):
    def __init__(self, layers: int, size: int = 16) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList([_Block(size) for _ in range(layers)])
        self.head = torch.nn.Linear(size, 4)

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return self.head(x)


@pytest.mark.parametrize("seed,layers", [(0, 4), (1, 3), (2, 6)])
def test_a_pruned_reference_judges_no_layer_by_what_the_pruned_blocks_made(tmp_path, seed, layers):
    """With the default do_prune_layers=True the layer blocks between the first and the last are not recorded:
    what follows layer 0 in the trace is what the pruned blocks made, not layer 0's output. A faithful copy agrees;
    a bug inside a pruned block is blamed on their parent, a bug in a kept layer is still named."""
    import copy

    torch.manual_seed(seed)
    original = _Stack(layers).eval()
    x = torch.randn(2, 8, 16)
    with torch.no_grad(), nbtrace.trace(original, debug_path=tmp_path, use_repr=False, measure_rounding=False):  # pruned
        original(x)
    assert [n.module_path for n in nbtrace.load_trace(tmp_path).root.children] == ["_Stack.layers.0", f"_Stack.layers.{layers - 1}", "_Stack.head"]
    c = nbtrace.compare(tmp_path, copy.deepcopy(original))
    assert c.verdict == "agree" and c.method == "replay", c.summary()
    for where, named in (("layers.1.up", "_Stack"), ("layers.0.up", "_Stack.layers.0.up")):
        port = copy.deepcopy(original)
        with torch.no_grad():
            port.get_submodule(where).weight.mul_(1.01)
        c = nbtrace.compare(tmp_path, port)
        assert c.first_divergence is not None and c.first_divergence.module_path == named, c.summary()


def test_a_pruned_reference_and_a_faithful_port_with_other_names_agree(tmp_path):
    c = nbtrace.compare(trace_original(tmp_path, use_repr=False, prune=True, measure_rounding=False), _port())
    assert c.verdict == "agree" and c.method == "replay", c.summary()
