"""One vocabulary for every view: how numbers, shapes, dtypes, pruned layers, statuses and verdicts read.

The text tree, the static HTML, the tables, the plots, the CLI and the widget all
take their words, number formats and colours from here; the widget's ES module gets
``widget_vocabulary()`` with its payload, so a status reads the same in Python and in
the browser. Sentences about one comparison are assembled in ``verdict.py`` from these.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..core.dtypes import short_dtype

if TYPE_CHECKING:  # pragma: no cover
    from ..core.tensor import TensorValue

SIGNIFICANT_DIGITS = 3

# -- statuses of a comparison's calls (``diff.verdict.report.STATUSES``) ------------------------------------
STATUS_WORDS = {
    "match": "match",
    "diverged": "diverged",
    "first": "first divergence",
    "only_a": "only in a",
    "no_data": "no data",
    "unresolved": "unresolved",
}
STATUS_MARKS = {"match": "ok", "diverged": "DIFF", "first": ">>>", "only_a": "only a", "no_data": "-",
                "unresolved": "???"}
#: what each status means, for legends and tooltips
STATUS_MEANINGS = {
    "match": "its tensors agree with b's",
    "diverged": "a tensor of this call, or of a call inside it, differs",
    "first": "where the difference is born",
    "only_a": "no counterpart in b",
    "no_data": "nothing to compare here",
    "unresolved": "where the verdict stopped undecided (this call, or a call inside it): see the advice",
}
#: a call's situation in a sentence (the detail pane's first line), by status and whether its own tensors differ
CALL_SITUATIONS = {
    "first": "the difference is born here: this call's code makes it",
    "diverged_own": "its tensors differ from b's",
    "diverged_inside": "its own tensors agree; a call inside it differs",
    "match": "every tensor compared agrees",
    "only_a": "no counterpart in b: nothing was compared",
    "no_data": "nothing could be compared (no tensors on both sides, or pruned from b)",
    "unresolved": "the verdict stopped here undecided: this call, or a call inside it, differs by more than a model "
                  "of rounding allows, and nothing measured says whether a correct kernel could",
}

# -- colours: (light theme, dark theme) for text and stripes on the theme's own background ------------
# Each has a contrast ratio of at least 4.5 against JupyterLab's backgrounds of its theme
# (light: white, #eee; dark: #111, #212121, #424242); tests/test_contrast.py checks it.
PALETTE = {
    "match": ("#2a712e", "#81c784"),
    "diverged": ("#a84300", "#ffb74d"),
    "first": ("#c62828", "#ffa4a4"),
    "only_a": ("#616161", "#bdbdbd"),
    "no_data": ("#616161", "#bdbdbd"),
    "unresolved": ("#8a5a00", "#ffd54f"),
    "scale": ("#6a1b9a", "#d7a8e0"),  # a jump of scale: not a status, so not a status colour
    "bad": ("#c62828", "#ffa4a4"),  # NaN/inf, errors
}
#: solid backgrounds that carry white text in either theme (badges): contrast >= 4.5 with white
BADGE_COLOURS = {
    "match": "#2a712e",
    "diverged": "#a84300",
    "first": "#c62828",
    "only_a": "#616161",
    "no_data": "#616161",
    "unresolved": "#8a5a00",
    "scale": "#6a1b9a",
    "bad": "#c62828",
}
#: how strongly a row is tinted with its status colour (a background both themes' text stays readable on)
TINT_ALPHA = 0.16
STATUS_COLOURS = {name: light for name, (light, _) in PALETTE.items() if name in STATUS_WORDS}
GOOD, WARN, BAD, MUTED = (PALETTE[name][0] for name in ("match", "diverged", "first", "only_a"))

# -- verdicts of a comparison (``diff.verdict.evidence.VERDICTS``) ---------------------------------------------
VERDICT_WORDS = {"agree": "agree", "diverge": "diverge", "unresolved": "unresolved"}
VERDICT_MARKS = {"agree": "✓", "diverge": "✗", "unresolved": "?"}
#: whose colour a verdict wears
VERDICT_COLOURS = {"agree": "match", "diverge": "first", "unresolved": "diverged"}
AGREE_SENTENCE = "every compared tensor is within tolerance"
#: the noise-aware agreement: no call adds more than rounding in the coarsest dtype compared
AGREE_ROUNDING_SENTENCE = "no call adds a difference beyond {dtype} rounding"
#: the twins' agreement: the two functions are the same at every call compared
AGREE_TWIN_SENTENCE = ("the two functions agree: run in float64 from the same inputs, no call's twin differs beyond the "
                       "twins' own measured float64 precision")
#: where the port's run lost what the reference's kept (``Comparison.precision``)
PRECISION_LABEL = "precision"
NOTHING_COMPARED = "nothing could be compared (no aligned tensors with data on both sides)"
CONFIDENCE_WORDS = {"certain": "certain", "likely": "likely"}
#: calls the verdict found close to a flag without reaching it (``Comparison.suspects``)
SUSPECTS_WORDS = "close to a flag"
# -- which rule decided a verdict (``Comparison.decided_by``), and what each run computed with ------------
DECIDED_BY_LABEL = "decided by"
DECIDED_BY_WORDS = {
    "float64 twins": "float64 twins (each side run again in float64 from the same inputs, fingerprinted at every "
                     "call; k = 2 times the twins' own measured float64 precision)",
    "both live": "both live (each aligned pair run in float64 on the reference's inputs; k = 2)",
    "replayed": "replayed (the port run on the reference's inputs, against its float64 result; k = 3, or 2 where "
                "the reference measured its rounding)",
    "measured rounding": "measured rounding (both traces measured their rounding against float64; k = 2)",
    "files, unmeasured": "files, unmeasured (no rounding measured: a module is named only on evidence no correct "
                         "kernel produces)",
}
NUMERICS_LABEL = "numerics"
#: the final outputs' difference, beside the module verdict (``Comparison.end_to_end``)
END_TO_END_LABEL = "end to end"
END_TO_END_WORDS = "{arg} of {path}: max |Δ| {max_abs} ({max_rel} relative; {basis})"
TOP_K_WORDS = "top-1 token agrees at {top1}/{positions} positions, top-5 set at {top5}/{positions}"
UNRESOLVED_AT = "unresolved at {path}"

# -- one call's difference (``diff.verdict.evidence.CallDifference``) and the evidence of a verdict ---------
UNIT = "u"
UNIT_MEANING = "u is the unit roundoff of the dtype compared (2⁻²⁴ for float32, 2⁻⁸ for bfloat16)"
DIFFERENCE_WORDS = {
    "own": "own",
    "inherited": "inherited",
    "out": "out",
    "score": "score",
    "relative": "largest relative difference",
}
DIFFERENCE_MEANINGS = {
    "own": "what this call's own code added to the difference",
    "inherited": "the difference it was handed (its inputs)",
    "out": "the difference of its outputs",
    "score": "its strongest test against its threshold (1 or more: the difference is born here)",
    "relative": "max |a − b| / max |a| over this call's own tensors",
}
TENSOR_VERDICT_WORDS = {True: "ok", False: "differs", None: "not compared"}
SOURCE_WORDS = {"files": "the two traces", "replay": "the port run on a's inputs", "weights": "the weights"}


def format_number(value: float | None, missing: str = "-") -> str:
    """A compact number with three significant digits: ``1.23e-03``, ``0.512``, ``1.00``, ``nan``.

    ``missing`` (default ``-``) stands for a value that does not exist.
    """
    if value is None:
        return missing
    if not math.isfinite(value):
        return str(value)
    if value == 0:
        return "0"
    size = abs(value)
    if 100 <= size < 1e4:
        return f"{value:.0f}"
    if 1 <= size < 100:
        return f"{value:#.3g}".rstrip(".")  # keeps trailing zeros: 1.00, 12.0
    if 1e-3 <= size < 1:
        return f"{value:.3f}"
    return f"{value:.2e}"


def format_units(value: float | None, missing: str = "-") -> str:
    """A difference in units of the dtype's unit roundoff: ``3.20 u``, ``1.52e+04 u``."""
    return missing if value is None else f"{format_number(value)} {UNIT}"


def format_score(value: float | None, missing: str = "-") -> str:
    """A test's score (its statistic over its threshold): ``73.7×``. A statistic below zero (less than
    rounding predicts) is no evidence at all and reads ``0×``: a score is never negative."""
    return missing if value is None else f"{format_number(max(value, 0.0))}×"


def difference_level(value: float | None, units: bool) -> int:
    """How long a difference's bar is (0–100), on a log scale: relative differences from 1e-9 to 1,
    differences in units of u from 0.1 to 1e7."""
    if value is None or value != value:
        return 0
    if value == math.inf:
        return 100
    low, high = (-1.0, 7.0) if units else (-9.0, 0.0)
    decade = math.log10(value) if value > 0 else low
    return round(100 * (min(high, max(low, decade)) - low) / (high - low))


def round_number(value: float | None) -> float | str | None:
    """A number rounded to what a row shows (three significant digits), for compact payloads;
    ``"nan"``/``"inf"``/``"-inf"`` as text (JSON has no such numbers)."""
    if value is None:
        return None
    if not math.isfinite(value):
        return str(value)
    number = float(f"{value:.{SIGNIFICANT_DIGITS}g}")
    return int(number) if number.is_integer() and abs(number) < 1e15 else number


def short_shape(shape: Sequence[int]) -> str:
    """``1×16×64``; ``scalar`` for a 0-d tensor."""
    return "×".join(str(d) for d in shape) if shape else "scalar"


def describe_tensor(tensor: TensorValue) -> str:
    """``[1, 16, 64] float32 mean=0.012 std=1.01``"""
    text = f"{list(tensor.shape)} {short_dtype(tensor.dtype)}"
    if tensor.mean is not None:
        text += f" mean={format_number(tensor.mean)} std={format_number(tensor.std)}"
    return text


def gap_label(prefix: str, first: int, last: int) -> str:
    """``layers 1–30 pruned`` (``layers 1 pruned`` for one layer)."""
    name = prefix.rsplit(".", 1)[-1]
    span = f"{first}" if first == last else f"{first}–{last}"
    return f"{name} {span} pruned"


# -- jumps of scale (the tree's ▲ ▼) -------------------------------------------------------------------
#: where plot_divergence draws a call's own difference (below it, own is not told apart from what it passes on)
OWN_SHOWN = "where more than inherited"


def read_at_words(inner: str) -> str:
    """Says that a plotted call's output was read at its last inner call (the format keeps no parent outputs)."""
    return f"read at its last call, {inner}"


JUMP_SMALL_FACTOR = 10.0
JUMP_BIG_FACTOR = 100.0
JUMP_LEGEND = (
    "▲ ▼ the output's scale (std or rms) grew or shrank 10× (100×: bold) against the same module one layer "
    "block earlier; outside a layer stack, and in the first layer, against the call's own input "
    "(not for a norm, whose job is to rescale, nor for an output of another shape)"
)


def jump_tooltip(grew: bool, factor: float, reference: str | None) -> str:
    """``scale grew 35× against layers.1.mlp (the same module, one layer block earlier)``."""
    against = f"{reference} (the same module, one layer block earlier)" if reference else "its own input"
    return f"scale {'grew' if grew else 'shrank'} {format_number(factor)}× against {against}"


def widget_vocabulary() -> dict[str, Any]:
    """What the widget's ES module needs to read like the other views.

    ``statuses`` lists the status names in the order of the payload's status codes (0: none);
    ``colours`` gives each status (and ``scale``, ``bad``) its light- and dark-theme colour.
    """
    from ..diff.verdict.report import STATUSES

    return {
        "statuses": ["", *STATUSES],
        "status_words": STATUS_WORDS,
        "status_meanings": STATUS_MEANINGS,
        "status_colours": STATUS_COLOURS,
        "colours": {name: {"light": light, "dark": dark} for name, (light, dark) in PALETTE.items()},
        "badges": BADGE_COLOURS,
        "verdict_words": VERDICT_WORDS,
        "verdict_marks": VERDICT_MARKS,
        "verdict_colours": VERDICT_COLOURS,
        "difference_words": DIFFERENCE_WORDS,
        "difference_meanings": DIFFERENCE_MEANINGS,
        "unit_meaning": UNIT_MEANING,
        "jump_legend": JUMP_LEGEND,
        "jump_factors": [JUMP_SMALL_FACTOR, JUMP_BIG_FACTOR],
        "words": WIDGET_WORDS,
    }


#: the widget's own labels (the ES module spells none of them)
WIDGET_WORDS = {
    "vs": "vs",
    "a": "a",
    "b": "b",
    "in_b": "in b",
    "no_counterpart": "(no counterpart in b)",
    "difference_column": "difference",
    "evidence": "evidence",
    "confidence": "confidence",
    "seen_at": "seen at",
    "tensors_of": "tensors of",
    "go_first": "go to",
    "legend": "legend",
    "nan_badge": "NaN/inf",
    "first_nan_badge": "first NaN/inf",
    "nan_inside": "NaN/inf inside",
    "tolerance": "tolerance",
    "suspects": SUSPECTS_WORDS,
    "end_to_end": END_TO_END_LABEL,
    "scale_mark": "▲▼ scale",
    "nan_legend": "a tensor of this call holds a NaN or an infinity",
    "scale_legend": "bar: the output's rms on a log scale, 10⁻³ to 10³",
    "loading": "loading details…",
    "no_kernel": "no kernel answers: a call's details need a running kernel (the verdict and the first divergence "
    "are shown without one)",
    "select": "Select a row to see every input and output of that call.",
    "weights": "weights that differ",
    "notes": "note",
    "hints": "also",
    "b_side": "b",
    "a_side": "a",
}
