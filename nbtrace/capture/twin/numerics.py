"""The numerics a float64 truth runs in, every switch restored afterwards whatever happens.

``exact_numerics()``: TF32 off for matmuls and convolutions (what a module computes in float32 is computed in
full float32), the math attention backend, autocast off on the CPU and CUDA, no autograd, and the CPU and CUDA
random states as they were before (a dropout in a float64 copy draws what the run drew). Used for every run of a
copy in float64 or float32 (replay's float32 truths need the same exactness).

``float64_twin()``: ``exact_numerics()`` plus what keeps a float64 copy in float64 through its own code: the
default dtype float64 (``torch.tensor(0.5)``, ``torch.arange(n).float()``) and the ``Widen`` mode (``widen.py``).
It yields the mode, whose ``low`` lists what stayed narrower.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

import torch

from .widen import Widen


@contextmanager
def exact_numerics() -> Iterator[None]:
    """TF32 off, the math attention backend, autocast off, no grad; flags and random states restored."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    cuda = torch.cuda.is_available() and torch.cuda.is_initialized()
    cpu_state = torch.get_rng_state()
    cuda_states = torch.cuda.get_rng_state_all() if cuda else None
    flags = _tf32_flags()
    saved = [(owner, name, getattr(owner, name)) for owner, name in flags]
    try:
        precision: str | None = torch.get_float32_matmul_precision()
    except RuntimeError:  # a program that mixed the legacy and new TF32 settings: torch refuses to report it
        precision = None
    try:
        with ExitStack() as stack:
            if precision is not None:
                torch.set_float32_matmul_precision("highest")
            for owner, name in flags:
                setattr(owner, name, "ieee" if name == "fp32_precision" else False)
            stack.enter_context(sdpa_kernel([SDPBackend.MATH]))
            for device in ("cpu", "cuda"):
                try:
                    stack.enter_context(torch.autocast(device, enabled=False))
                except RuntimeError:  # pragma: no cover  (a build without that device type)
                    continue
            stack.enter_context(torch.no_grad())
            yield
    finally:
        if precision is not None:
            torch.set_float32_matmul_precision(precision)
        for owner, name, value in reversed(saved):
            setattr(owner, name, value)
        torch.set_rng_state(cpu_state)
        if cuda_states is not None:
            torch.cuda.set_rng_state_all(cuda_states)


@contextmanager
def float64_twin() -> Iterator[Widen]:
    """``exact_numerics()``, the default dtype float64 and the ``Widen`` mode (yielded); all undone afterwards."""
    default = torch.get_default_dtype()
    mode = Widen()
    with exact_numerics():
        torch.set_default_dtype(torch.float64)
        try:
            with mode:
                yield mode
        finally:
            torch.set_default_dtype(default)


def _tf32_flags() -> list[tuple[Any, str]]:
    """The TF32 switches of matmuls and convolutions: torch's ``fp32_precision`` settings where they exist
    (they read and restore in every state, the legacy flags refuse to when both APIs were used)."""
    matmul, cudnn = torch.backends.cuda.matmul, torch.backends.cudnn
    conv = getattr(cudnn, "conv", None)
    if hasattr(matmul, "fp32_precision") and conv is not None and hasattr(conv, "fp32_precision"):
        found = [(matmul, "fp32_precision"), (conv, "fp32_precision")]
        mkldnn = getattr(torch.backends, "mkldnn", None)  # the CPU's reduced-precision float32 matmuls
        for part in ("matmul", "conv"):
            owner = getattr(mkldnn, part, None)
            if owner is not None and hasattr(owner, "fp32_precision"):
                found.append((owner, "fp32_precision"))
        return found
    return [(matmul, "allow_tf32"), (cudnn, "allow_tf32")]
