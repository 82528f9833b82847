"""``save_html``: what a TraceView shows, as one self-contained, interactive HTML file.

The file holds the widget's ES module and CSS, each forward's rows payload and every row's details as
JSON, and ``standalone.js``, which plays anywidget's model in the page, so the same ``render()`` runs
with no kernel. Nothing in it is fetched: a Content-Security-Policy allows only the file's own script
and style (by hash), so even a hostile module name that slipped into markup could load nothing.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import html
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..capture.write import write_atomic
from .assets import CSS_PARTS, ESM_PARTS, joined
from .shown import Shown, open_source
from .steps_source import StepSource

#: rows whose details are packed together: the first selection inflates one chunk, not the whole trace's
DETAIL_CHUNK = 1000

#: every word the page itself shows (the view's words come with its payload)
PAGE_WORDS = {
    "title": "nbtrace · {what}",
    "footer": "Saved with nbtrace {version}: one self-contained file, no kernel and no network needed.",
    "footer_values": " Printed values are left out (save_html(..., values=True) keeps them).",
    "noscript": "This file shows an nbtrace trace with JavaScript; allow scripts for this file to explore it.",
    "missing_row": "row {row} is not in this file",
    "unreadable": "the details of this step could not be read: {error}",
}


@dataclass
class PageState:
    """What the page opens on: the steps (None for one forward), the step shown and its ``Shown``, the
    filter and the selected row."""

    steps: StepSource | None
    step: int
    shown: Shown
    filter: str = ""
    selected_row: int = -1
    selected: str = ""
    expand_depth: int = 2


def page_state(source: Any, *, step: int | None = None, expand_depth: int = 2) -> PageState:
    """The state a new TraceView of ``source`` opens on (a TraceView gives its own: ``TraceView.page_state``)."""
    own = getattr(source, "page_state", None)
    if callable(own):
        if step is not None:
            raise ValueError(f"step={step}: a TraceView is saved at the step it shows (set view.step first)")
        return own()
    steps, shown_step, (trace, report, comparison) = open_source(source, step, who="save_html")
    divergence = steps.divergence(trace) if steps is not None and report is not None else None
    shown = Shown(trace, report, comparison, expand_depth=expand_depth, divergence=divergence)
    return PageState(steps, shown_step, shown, selected_row=shown.selected_row, selected=shown.selected,
                     expand_depth=expand_depth)


def _without_values(value: Any) -> Any:
    """``value`` with the printed value lines of every tensor left out (a summary's size)."""
    if isinstance(value, dict):
        if "shape" in value and "lines" in value:
            value = {k: v for k, v in value.items() if k not in ("lines", "more_lines")}
        return {k: _without_values(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_without_values(v) for v in value]
    return value


def _short_path(text: str) -> str:
    """The last folder and the file name of a path: where it came from, without the sender's home folders."""
    parts = Path(text).parts
    return str(Path(*parts[-2:])) if len(parts) > 2 else text


def _private(payload: dict[str, Any], details: list[dict[str, Any]]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The payload and details with the local absolute paths they name cut to their last parts."""

    def cut(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: _short_path(v) if k == "file_path" and v else cut(v) for k, v in value.items()}
        return [cut(v) for v in value] if isinstance(value, list) else value

    payload = dict(payload)
    if "initial_detail" in payload:
        payload["initial_detail"] = cut(payload["initial_detail"])
    if payload.get("source"):
        payload["source"] = _short_path(payload["source"])
    if isinstance(payload.get("compare"), dict) and payload["compare"].get("b_source"):
        payload["compare"] = dict(payload["compare"], b_source=_short_path(payload["compare"]["b_source"]))
    return payload, [cut(detail) for detail in details]


def _json(value: Any) -> str:
    """JSON that cannot end the <script> it sits in: every ``<``, ``>`` and ``&`` written as a \\u escape."""
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _data(name: str, text: str) -> str:
    return f'<script type="application/json" id="{name}">{text}</script>\n'


def _hash(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode("ascii") + "'"


def _packed(value: Any) -> str:
    """``value`` as gzip-compressed JSON in base64 (the page inflates it with the browser's DecompressionStream):
    a 20,000-call trace's details shrink about tenfold, and base64 holds nothing that could end a <script>."""
    data = json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode("utf-8")
    return base64.b64encode(gzip.compress(data, compresslevel=6, mtime=0)).decode("ascii")


def _has_values(shown: Shown) -> bool:
    """True when a side of what ``shown`` shows is a FULL trace (a SUMMARY holds no printed values)."""
    sides = [shown.trace] + ([shown.comparison.b] if shown.comparison is not None else [])
    return any(side.kind != "summary" for side in sides)


def _forwards(state: PageState, values: bool) -> list[tuple[str, list[str], str]]:
    """Each step's payload (JSON), its rows' details, packed in chunks of ``DETAIL_CHUNK`` rows, and its gradient
    plot (JSON, "" without a backward pass); one forward: a list of one."""
    out = []
    count = state.steps.count if state.steps is not None else 1
    for k in range(count):
        shown = state.shown
        if k != state.step:
            assert state.steps is not None
            trace, report, comparison = state.steps.get(k)
            divergence = state.steps.divergence(trace) if report is not None else None
            shown = Shown(trace, report, comparison, expand_depth=state.expand_depth, divergence=divergence)
        payload: Any = shown.rows
        details: Any = [shown.detail(row) for row in range(len(shown.row_nodes))]
        if not values and _has_values(shown):
            payload, details = _without_values(payload), _without_values(details)
        payload, details = _private(payload, details)
        chunks = [_packed(details[at:at + DETAIL_CHUNK]) for at in range(0, len(details), DETAIL_CHUNK)]
        gradients = shown.gradients_json()
        out.append((_json(payload), chunks, _json(json.loads(gradients)) if gradients else ""))
    return out


def html_document(state: PageState, *, values: bool = False) -> str:
    """The page for ``state`` (see ``save_html``)."""
    from .. import __version__

    view = {
        "step": state.step,
        "steps": json.dumps(state.steps.facts(), separators=(",", ":"), allow_nan=False) if state.steps else "",
        "filter": state.filter,
        "selected_row": state.selected_row,
        "selected": state.selected,
        "chunk": DETAIL_CHUNK,
        "words": {key: PAGE_WORDS[key] for key in ("missing_row", "unreadable")},
    }
    script = joined(*ESM_PARTS, "standalone.js")
    style = joined(*CSS_PARTS, "standalone.css")
    if "</script" in script.lower() or "</style" in style.lower():  # would end the element early
        raise ValueError("the page's module or style contains '</script' or '</style'; escape it in its source")
    policy = (f"default-src 'none'; script-src {_hash(script)}; style-src {_hash(style)}; "
              "base-uri 'none'; form-action 'none'")
    trace = state.shown.trace
    what = trace.model_name
    comparison = state.shown.comparison
    if comparison is not None:
        what = f"{trace.model_name} vs {comparison.b.model_name}"
    footer = PAGE_WORDS["footer"].format(version=__version__) + ("" if values else PAGE_WORDS["footer_values"])
    parts = [
        "<!doctype html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n",
        f'<meta http-equiv="Content-Security-Policy" content="{policy}">\n',
        '<meta name="color-scheme" content="light dark">\n',
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n',
        f"<title>{html.escape(PAGE_WORDS['title'].format(what=what))}</title>\n",
        f"<style>{style}</style>\n</head>\n<body>\n",
        f'<noscript>{html.escape(PAGE_WORDS["noscript"])}</noscript>\n',
        '<main id="nbt-page-view"></main>\n',
        f'<footer class="nbt-page-foot">{html.escape(footer)}</footer>\n',
        _data("nbt-view", _json(view)),
    ]
    for k, (payload, details, gradients) in enumerate(_forwards(state, values)):
        parts.append(_data(f"nbt-payload-{k}", payload))
        if gradients:
            parts.append(_data(f"nbt-gradients-{k}", gradients))
        for chunk, packed in enumerate(details):
            parts.append(f'<script type="application/octet-stream" id="nbt-details-{k}-{chunk}">{packed}</script>\n')
    parts.append(f'<script type="module">{script}</script>\n</body>\n</html>\n')
    return "".join(parts)


def save_html(
    source: Any,
    path: str | os.PathLike,
    *,
    values: bool = False,
    step: int | None = None,
    expand_depth: int = 2,
) -> Path:
    """Write what ``TraceView(source)`` shows into one self-contained, interactive HTML file; returns its path.

    ``source`` is anything TraceView takes (a Trace, a trace file or folder, several forwards, a comparison)
    or a TraceView (saved as it is: its step, filter and selection). The file opens in any browser,
    offline, from disk: the tree, filter, detail pane, verdict banner and step picker work with no kernel
    and no network request. Every step of several forwards is in it. ``values=True`` keeps the printed
    values of a FULL trace (the file grows by about their size); by default only the summaries are kept.
    ``step`` is the step it opens on (default: as TraceView does).
    """
    target = Path(path)
    if target.suffix.lower() not in (".html", ".htm"):
        raise ValueError(f"{str(target)!r}: save_html writes an .html file; give a path ending in .html")
    if not target.parent.is_dir():
        raise FileNotFoundError(f"{str(target)!r}: folder {str(target.parent)!r} does not exist")
    document = html_document(page_state(source, step=step, expand_depth=expand_depth), values=values)
    write_atomic(target, document.encode("utf-8"))
    return target
