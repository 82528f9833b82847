"""``assert_port_matches``: the port computes the reference's function, or the test fails saying where not.

Everything it decides comes from ``nbtrace.compare`` (the float64 twins, both live, a golden folder against the
live port); this module only chooses which verdicts fail and, for a live port, narrows the blamed call to its
first diverging operation and source line (``nbtrace.narrow``) before it fails.
"""

from __future__ import annotations

import os
from typing import Any

from torch import nn

from ..render.assert_message import failure_message


class PortMismatch(AssertionError):
    """A failed ``assert_port_matches``; ``comparison`` holds the whole verdict (``.to_dict()`` for a report)."""

    kind = "diverge"

    def __init__(self, comparison: Any) -> None:
        self.comparison = comparison
        super().__init__(failure_message(comparison, self.kind))


class PortDiverges(PortMismatch):
    """The port computes another function than the reference: ``comparison.first_divergence`` says where."""

    kind = "diverge"


class PortUnresolved(PortMismatch):
    """Nothing decided either way (``verdict == "unresolved"``): the message says what would decide."""

    kind = "unresolved"


class PortBackwardDiverges(PortDiverges):
    """The forward agrees, but the port's backward computes other gradients (``comparison.backward`` says where)."""

    kind = "backward"

    def __init__(self, comparison: Any) -> None:
        from ..render.backward_words import backward_lines

        self.comparison = comparison
        head = "the port's backward differs from the reference's" if self.kind == "backward" else (
            "the port's backward could not be decided")
        AssertionError.__init__(self, "\n".join([head, *backward_lines(comparison)]))


class PortBackwardUnresolved(PortUnresolved):
    """The forward agrees, and nothing decided the backward either way: the message says what would."""

    kind = "backward unresolved"

    __init__ = PortBackwardDiverges.__init__


class PortLosesPrecision(PortMismatch):
    """The same function, but the port's run lost precision the reference's kept (``comparison.precision``)."""

    kind = "precision"


def assert_port_matches(
    reference: Any,
    port: Any,
    inputs: Any = None,
    *,
    unresolved_fails: bool = True,
    precision_fails: bool = False,
    narrow: bool = True,
    backward: bool = False,
    **options: Any,
) -> Any:
    """Pass when ``port`` computes the function ``reference`` computes; otherwise raise an ``AssertionError``
    naming the first divergence (module, operation and line, the numbers and the rule that decided).

    ``reference`` is the original module (then ``inputs``: a tensor, a dict of keywords or ``(args, kwargs)``)
    or a trace folder recorded from it (a golden folder: the port is run on the inputs the folder kept);
    ``port`` the live port module, or a folder traced from it. ``unresolved_fails``: an unresolved verdict
    fails (``PortUnresolved``); ``precision_fails``: a precision finding fails (``PortLosesPrecision``), else
    it is only reported on the returned comparison. ``narrow``: with a live port, find the first diverging
    operation inside the blamed module. ``backward``: both sides are folders (or Traces) recorded with
    ``nbtrace.trace(..., backward=True)``, and once the forward agrees, the backward must agree too
    (``PortBackwardDiverges``, ``PortBackwardUnresolved``).
    Other keywords (``rename``, ``rtol``, ``atol``, ``ignore``,
    ``inputs_map``, ``call``...) go to ``nbtrace.compare``. Returns the Comparison when it passes.
    """
    __tracebackhide__ = True  # pytest shows the message, not this function's code
    from ..diff.compare import compare

    live_reference = isinstance(reference, nn.Module)
    if live_reference and inputs is None:
        raise TypeError("assert_port_matches: a live reference module needs inputs= (a tensor, a dict of "
                        "keywords, or (args, kwargs)) to run both modules on")
    if not live_reference and inputs is not None:
        raise TypeError("assert_port_matches: inputs= is for a live reference; a reference folder runs the port on "
                        "the inputs it recorded")
    if not live_reference and not isinstance(reference, (str, os.PathLike)) and not hasattr(reference, "nodes"):
        raise TypeError(f"assert_port_matches: reference must be a module or a trace folder, got "
                        f"{type(reference).__name__}")
    if backward and (live_reference or isinstance(port, nn.Module)):
        raise TypeError("assert_port_matches(backward=True) compares recorded backward passes: trace both sides "
                        "with nbtrace.trace(model, folder, backward=True) around a training step and pass the folders")
    if live_reference:
        comparison = compare(reference, port, inputs=inputs, **options)
    else:
        comparison = compare(reference, port, **options)
    verdict = comparison.verdict
    if verdict == "diverge":
        if narrow and isinstance(port, nn.Module):
            _narrow(comparison, reference if live_reference else None, port)
        raise PortDiverges(comparison)
    if verdict == "unresolved" and unresolved_fails:
        raise PortUnresolved(comparison)
    state = comparison.backward.state if backward else "agree"
    if state == "none":
        raise ValueError(f"assert_port_matches(backward=True): {comparison.backward.reason}")
    if state == "diverge":
        raise PortBackwardDiverges(comparison)
    if state == "unresolved" and unresolved_fails:
        raise PortBackwardUnresolved(comparison)
    if precision_fails and _precision(comparison):
        raise PortLosesPrecision(comparison)
    return comparison


def _narrow(comparison: Any, reference: nn.Module | None, port: nn.Module) -> None:
    """The blamed call's first diverging operation, on ``comparison.first_divergence.operation``; a call that
    cannot be narrowed (a step of generate, a module that will not re-run) keeps the module-level message."""
    from ..diff.operations import narrow

    if getattr(comparison, "steps", None) is not None:
        return
    try:
        found = narrow(comparison, reference=reference, port=port)
    except Exception:  # noqa: BLE001 - narrowing adds a line; the divergence is reported without it
        return
    if found is not None and found.first is None:  # not narrowed (only the port live): no line to name
        comparison.first_divergence.operation = None


def _precision(comparison: Any) -> list:
    if getattr(comparison, "steps", None) is None:
        return comparison.precision
    return [p for result in comparison.steps if result.status == "match"
            for p in comparison.comparison(result.step).precision][:1]
