"""What the TraceView's gradient plot draws, as plain data (the view's ``gradients`` trait; a saved page's too).

For a trace recorded with ``backward=True``, two panels over the layers (``render/gradient_layers.py`` computes
the numbers): the backward (the norm of the gradient reaching each layer's output, of what it sent on to its
input, of its parameters' gradients), and beside it the forward (the RMS of the hidden state entering each layer).
Each point names the payload row of its layer, so a click selects that call in the tree. For a comparison both
sides are drawn, b's lines dashed; a point of b selects the call of a it was paired with. The front end
(``gradient_plot.js``) draws whatever series this lists, on a log scale, and spells no word of its own.
"""

from __future__ import annotations

import json
import math
from typing import Any

from ..core.node import Node
from ..core.paths import layer_number, without_root
from ..core.trace import Trace
from ..render.gradient_layers import LayerGradient, layer_gradients
from ..render.vocabulary import format_number

#: every word the plot shows
GRADIENT_WORDS = {
    "title": "gradient norms across layers",
    "pass": "backward pass {k} of {n}",
    "backward": "backward: ‖gradient‖ (log scale)",
    "forward": "forward: RMS of the hidden state entering each layer (log scale)",
    "x_layers": "layer",
    "x_calls": "call (in call order)",
    "hint": "click a point to select its layer",
    "arrived": "reaching its output",
    "sent": "sent to its input",
    "parameters": "its parameters",
    "input_rms": "entering it",
    "no_row": "(no counterpart in a)",
    "pruned": "(pruned from the files: its norms only)",
    "nonfinite": "NaN or inf",
    "go": "go to",
}
#: the backward verdict's mark in a comparison's plot, by its state
VERDICT_WORDS = {"diverge": "✗ backward diverges", "agree": "✓ backward agrees", "unresolved": "? backward unresolved",
                 "forward": "backward not judged", "none": "backward not compared"}
#: the series of each panel: (panel, kind) in drawing order
SERIES = (("backward", "arrived"), ("backward", "sent"), ("backward", "parameters"), ("forward", "input_rms"))


def _value(layer: LayerGradient, kind: str) -> float | None:
    value = getattr(layer, kind)
    return value if value is not None and math.isfinite(value) and value > 0 else None


def _series(layers: list[LayerGradient], side: str, rows: list[int], label: str) -> list[dict[str, Any]]:
    out = []
    for panel, kind in SERIES:
        points = []
        for layer, row in zip(layers, rows):
            value = _value(layer, kind)
            if value is None:
                continue
            name = without_root(layer.path) or layer.path
            tip = f"{label}{name} · {GRADIENT_WORDS[kind]}: {format_number(value)}"
            if kind == "sent" and layer.gain is not None:
                tip += f" (×{format_number(layer.gain)} of what reached it)"
            if layer.node is None:
                tip += f" {GRADIENT_WORDS['pruned']}"
            elif row < 0:
                tip += f" {GRADIENT_WORDS['no_row']}"
            points.append([layer.x, value, row, layer.path, tip])
        bad = [[layer.x, row, layer.path, f"{label}{without_root(layer.path) or layer.path} · {GRADIENT_WORDS[kind]}: "
                f"{GRADIENT_WORDS['nonfinite']}"] for layer, row in zip(layers, rows) if kind in layer.nonfinite]
        if points or bad:
            out.append({"panel": panel, "kind": kind, "side": side,
                        "name": f"{label}{GRADIENT_WORDS[kind]}", "points": points, "nonfinite": bad})
    return out


def _ticks(layers: list[LayerGradient]) -> tuple[list[list[Any]], list[list[Any]]]:
    """The x axis's labels ([x, text]) and, for several layer stacks, each stack's span ([first x, last x, name])."""
    ticks, stacks = [], {}
    for layer in layers:
        ticks.append([layer.x, str(layer.layer) if layer.layer is not None else without_root(layer.path)])
        if layer.stack:
            first, _, _ = stacks.get(layer.stack, (layer.x, layer.x, ""))
            stacks[layer.stack] = (first, layer.x, without_root(layer.stack) or layer.stack)
    return ticks, [list(span) for span in stacks.values()] if len(stacks) > 1 else []


def gradient_plot(
    trace: Trace, row_of_node: dict[int, int], comparison: Any = None, report: list[dict[str, Any]] | None = None
) -> dict[str, Any] | None:
    """The plot of ``trace`` (a comparison's a, with ``comparison`` and its ``report``: b drawn too), each point
    with the row that shows its call (``row_of_node``: id(node) -> row); None when no side recorded a backward."""
    layers = _safe_layers(trace)
    b_layers = _safe_layers(comparison.b) if comparison is not None else []
    if not layers and not b_layers:
        return None
    label = "a: " if comparison is not None else ""
    series = _series(layers, "a", [row_of_node.get(id(g.node), -1) if g.node is not None else -1 for g in layers],
                     label)
    if b_layers:
        b_rows = _b_rows(trace, row_of_node, report or [])
        series += _series(b_layers, "b", [b_rows.get(g.path, -1) if g.node is not None else -1 for g in b_layers],
                          "b: ")
    ticks, stacks = _ticks(layers or b_layers)
    backward = trace.backward or (comparison.b.backward if comparison is not None else None)
    layered = any(g.layer is not None for g in layers or b_layers)
    words = dict(GRADIENT_WORDS, x=GRADIENT_WORDS["x_layers" if layered else "x_calls"])
    words["pass"] = GRADIENT_WORDS["pass"].format(k=len(backward), n=len(backward)) if backward is not None else ""
    plot = {"words": words, "series": series, "ticks": ticks, "stacks": stacks}
    if comparison is not None and layers and b_layers:
        plot["verdict"] = _verdict(comparison, trace, row_of_node, layers)
    return plot


def _verdict(comparison: Any, trace: Trace, row_of_node: dict[int, int], layers: list[LayerGradient]) -> dict[str, Any]:
    """The comparison's backward verdict for the plot: its words, the row to select for the module it names (its
    nearest call the tree shows: a module pruned from the files is inside a layer that is not) and that layer's x."""
    try:
        verdict = comparison.backward
    except Exception as exc:  # noqa: BLE001 - the plot stays; the verdict says why it is missing
        return {"state": "none", "mark": VERDICT_WORDS["none"], "text": f"{type(exc).__name__}: {exc}", "row": -1}
    path = verdict.module_path or (verdict.suspect if verdict.state == "unresolved" else None)
    row, x = -1, None
    if path:
        shown = {node.module_path: row_of_node[id(node)] for node in trace.nodes() if id(node) in row_of_node}
        probe = path
        while probe and probe not in shown:
            probe = probe.rpartition(".")[0]
        row = shown.get(probe, -1)
        inside = [g for g in layers if path == g.path or path.startswith(g.path + ".")]
        x = inside[0].x if inside else _hidden_x(path, layers)  # pruned from the files: its layer number says where
    return {"state": verdict.state, "mark": VERDICT_WORDS.get(verdict.state, verdict.state), "text": str(verdict),
            "row": row, "x": x, "path": path or ""}


def _hidden_x(path: str, layers: list[LayerGradient]) -> float | None:
    """The x of a layer pruned from the files, from its stack's other layers (x = stack offset + layer number)."""
    number = layer_number(path)
    for g in layers:
        if g.layer is not None and number is not None and path.startswith(g.stack + "."):
            return g.x - g.layer + number
    return None


def _safe_layers(trace: Trace) -> list[LayerGradient]:
    try:
        return layer_gradients(trace)
    except Exception:  # noqa: BLE001 - a broken backward file must not cost the user the forward's view
        return []


def _b_rows(trace: Trace, row_of_node: dict[int, int], report: list[dict[str, Any]]) -> dict[str, int]:
    """b's module path -> the row of the call of a it was paired with (the first such call)."""
    found: dict[str, int] = {}
    nodes: list[Node] = trace.nodes()
    for node, entry in zip(nodes, report):
        b_path = entry.get("b_path")
        if b_path and b_path not in found and id(node) in row_of_node:
            found[b_path] = row_of_node[id(node)]
    return found


def gradient_plot_json(*args: Any, **kwargs: Any) -> str:
    """``gradient_plot`` as compact JSON ("" for no plot): what the ``gradients`` trait holds."""
    plot = gradient_plot(*args, **kwargs)
    return "" if plot is None else json.dumps(plot, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
