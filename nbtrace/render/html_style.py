"""Inline styles of the static HTML views, readable in light and dark themes alike.

The static HTML (``_repr_html_``, nbconvert, GitHub) cannot know the theme it lands in, so it
never colours text on the theme's background: a colour is either a badge (white text on a solid
background from ``vocabulary.BADGE_COLOURS``, contrast >= 4.5 in any theme), a faint tint behind
text in the theme's own colour, or a stripe beside it. Muted text is the theme's colour made
fainter (``opacity``), so it keeps its contrast too. ``tests/test_contrast.py`` checks all three.
"""

from __future__ import annotations

from html import escape

from .vocabulary import BADGE_COLOURS, PALETTE, TINT_ALPHA

CELL = "padding:1px 8px 1px 0;text-align:left;white-space:pre;vertical-align:top"
NUM = "padding:1px 8px 1px 0;text-align:right;white-space:pre;vertical-align:top"
MUTED = "opacity:0.75"
RULE = "border-bottom:1px solid rgba(128,128,128,0.6)"
TABLE = "border-collapse:collapse;font-size:inherit;font-family:monospace"


def badge(text: str, colour: str, title: str | None = None) -> str:
    """White bold text on a solid ``colour`` (a name of ``BADGE_COLOURS``)."""
    hover = f' title="{escape(title, quote=True)}"' if title else ""
    return (
        f'<span style="color:#fff;background:{BADGE_COLOURS[colour]};border-radius:3px;padding:0 4px;'
        f'font-weight:bold"{hover}>{escape(text)}</span>'
    )


def tint(colour: str) -> str:
    """A faint background of ``colour`` (a name of ``PALETTE``) and a stripe at its left."""
    light = PALETTE[colour][0]
    red, green, blue = (int(light[k : k + 2], 16) for k in (1, 3, 5))
    return f"background:rgba({red},{green},{blue},{TINT_ALPHA});box-shadow:inset 3px 0 0 {light}"


def muted(html: str) -> str:
    """``html`` in the theme's colour, fainter."""
    return f'<span style="{MUTED}">{html}</span>'


def bar(level: int, colour: str, inherited: int | None = None) -> str:
    """A small bar ``level``/100 long (a difference on a log scale); ``inherited`` draws what was handed in
    underneath, in grey."""
    if level <= 0 and not inherited:
        return ""
    grey = (f'<span style="display:block;height:3px;width:{inherited}%;background:#9e9e9e"></span>'
            if inherited is not None else "")
    return (f'<span style="display:inline-block;width:60px;vertical-align:middle">'
            f'<span style="display:block;height:6px;width:{max(level, 2)}%;background:{PALETTE[colour][0]}"></span>'
            f"{grey}</span>")
