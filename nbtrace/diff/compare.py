"""``compare(a, b)``: the front door of every comparison, and which way each call of it goes.

Four paths, by what the two sides are:

- **two live modules** (``compare(original, port, inputs=...)``): both traced on the inputs, aligned, every aligned
  pair run in float64 on the reference's recorded inputs (``replay/live.py``: ``compare_both_live``);
- **a trace and the live port** (``compare(folder, port)``): the port runs on the inputs the trace recorded
  (``replay/live.py``: ``compare_live``);
- **two runs of several forwards** (``generate``, a list of traces, a Recorder): forward by forward, the KV cache
  and the picked tokens too (``steps/step_compare.py``);
- **two traces of one forward each** (``comparison.py``).

How a live port is called, when its ``forward`` takes other arguments than the reference's, is said once for both
live paths: ``inputs_map`` (a recorded argument -> the port's parameter), ``call`` (``call(port, *args,
**kwargs)`` with the arguments as recorded) or, with two live modules, ``port_inputs`` (the port's own
arguments). A keyword that does not apply to the path taken is refused with a sentence naming it, never ignored.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from torch import nn

from .comparison import Comparison
from .comparison import compare as compare_forward
from .steps.step_compare import check_side, compare_steps, holds_several
from .steps.steps import StepsComparison

#: the keywords each path takes, beyond rename, rtol, atol and ignore (which every path takes)
_PATH_KEYWORDS = {
    "two live modules": {"inputs", "port_inputs", "inputs_map", "call", "replay"},
    "a trace and the live port": {"inputs_map", "call", "replay"},
    "two runs of several forwards": {"check_cache"},
    "two traces": set(),
}
_WHY = {
    "inputs": "the inputs both live modules run on",
    "port_inputs": "the port's own arguments when both sides are live",
    "inputs_map": "how the reference's arguments reach a live port",
    "call": "how a live port is called",
    "replay": "how much of a live port is run again in float64",
    "check_cache": "the KV cache check of runs of several forwards",
}


def compare(
    a: Any,
    b: Any,
    *,
    rename: Mapping[str, str] | None = None,
    rtol: float | None = None,
    atol: float | None = None,
    ignore: str | None = None,
    inputs: Any = None,
    port_inputs: Any = None,
    inputs_map: Mapping[str, str] | None = None,
    call: Callable[..., Any] | None = None,
    replay: bool | str | None = None,
    check_cache: bool | None = None,
) -> Comparison | StepsComparison:
    """Compare ``b`` (the port) against the reference ``a``: a Comparison for one forward each, a StepsComparison
    for runs of several forwards.

    ``a`` and ``b`` are Traces or trace paths (files or folders), runs of several forwards (a folder written by a
    traced ``generate``: ``forward_<i>/`` folders, per rank in ``rank_<r>/`` folders; a list of Traces or paths;
    a Recorder), or live ``nn.Module``\\ s:

    - ``compare(reference_module, port_module, inputs=...)``: both traced on ``inputs`` (a tensor, a dict of
      keywords, or ``(args, kwargs)``), aligned, and each aligned pair run in float64 on the reference's recorded
      inputs (``decided_by == "both live"``). ``port_inputs`` (the same forms) gives the port its own arguments
      where it takes them differently (the original ``(mel, tokens)``, the port ``input_features=,
      decoder_input_ids=``).
    - ``compare(trace, port_module)``: the port runs on the trace's recorded top-level inputs, is traced, and each
      aligned module is replayed on the inputs the trace recorded for that call; ``replay`` limits that
      ("leaves", "all"; False: the verdict from files).

    On both live paths ``inputs_map`` (recorded argument -> the port's parameter: ``{"args.1":
    "decoder_input_ids"}``) or ``call`` (``call(port, *args, **kwargs)``, the arguments as recorded) say how the
    reference's arguments reach the port. ``rename`` maps regular expressions over b's module paths to a's (a
    ``#k`` after a path picks its k-th call); ``rtol``/``atol`` judge each tensor by a per-element tolerance
    instead of measured rounding; ``ignore`` (a regex over argument names) leaves tensors out. With runs of
    several forwards ``first_divergence.step`` is the first forward that diverges and ``check_cache`` (default
    True) compares each step's KV cache update too. A keyword that does not apply to the path taken raises
    ValueError naming it.
    """
    common = {"rename": rename, "rtol": rtol, "atol": atol, "ignore": ignore}
    given = {name for name, value in (("inputs", inputs), ("port_inputs", port_inputs), ("inputs_map", inputs_map),
                                      ("call", call), ("replay", replay), ("check_cache", check_cache))
             if value is not None}
    if isinstance(a, nn.Module):
        if not isinstance(b, nn.Module) or inputs is None:
            raise ValueError("a live reference module needs a live port module and inputs=: "
                             "compare(reference_module, port_module, inputs=(args, kwargs) or a dict or a tensor)")
        _refuse(given, "two live modules")
        _one_way_to_call(inputs_map, call, port_inputs)
        from .replay.live import compare_both_live

        return compare_both_live(a, b, inputs, replay=True if replay is None else replay, inputs_map=inputs_map,
                                 call=call, port_inputs=port_inputs, **common)
    if inputs is not None:
        raise ValueError("inputs= is for two live modules (compare(reference_module, port_module, inputs=...)); "
                         "with a trace as the reference the port runs on its recorded inputs")
    check_side(a, "a")
    if isinstance(b, nn.Module):
        if holds_several(a):
            raise ValueError("a live port can be compared with one forward of the reference; for several "
                             "(generate), trace the port too and compare the two runs")
        _refuse(given, "a trace and the live port")
        _one_way_to_call(inputs_map, call, None)
        from .replay.live import compare_live

        return compare_live(a, b, replay=True if replay is None else replay, inputs_map=inputs_map, call=call,
                            **common)
    check_side(b, "b", " or the live port (an nn.Module)")
    if holds_several(a) or holds_several(b):
        _refuse(given, "two runs of several forwards")
        return compare_steps(a, b, check_cache=True if check_cache is None else check_cache, **common)
    _refuse(given, "two traces")
    return compare_forward(a, b, **common)


def _refuse(given: set[str], path: str) -> None:
    """ValueError naming the first keyword given that ``path`` does not take."""
    for name in sorted(given - _PATH_KEYWORDS[path]):
        takes = [p for p, names in _PATH_KEYWORDS.items() if name in names]
        raise ValueError(f"{name}= ({_WHY[name]}) does not apply to a comparison of {path}; it applies to "
                         f"{' or '.join(takes)}")


def _one_way_to_call(inputs_map: Any, call: Any, port_inputs: Any) -> None:
    given = [name for name, value in (("inputs_map", inputs_map), ("call", call), ("port_inputs", port_inputs))
             if value is not None]
    if len(given) > 1:
        raise ValueError(f"give one of inputs_map, call or port_inputs, not {' and '.join(given)}: each says on its "
                         "own how the port is called (call receives the arguments as recorded)")
