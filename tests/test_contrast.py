"""Colours keep their contrast in JupyterLab's light and dark themes: the vocabulary's palette, and every
coloured thing the static HTML draws (it cannot know the theme it lands in).

Contrast ratio as WCAG 2 defines it: (L1 + 0.05) / (L2 + 0.05) of the relative luminances; 4.5 is the
minimum for text. The themes' colours are JupyterLab 4's (theme-light-extension, theme-dark-extension).
"""

from __future__ import annotations

import re

import pytest
from tests.models.contract import porter_comparison
from tests.models.widget_models import NanNet, record

from nbtrace.render.vocabulary import BADGE_COLOURS, PALETTE, TINT_ALPHA

LIGHT_BACKGROUNDS = ("#ffffff", "#eeeeee")  # --jp-layout-color0/1, --jp-layout-color2
DARK_BACKGROUNDS = ("#111111", "#212121", "#424242")  # --jp-layout-color0, 1, 2
THEMES = {"light": ((0, 0, 0, 0.87), (255, 255, 255)), "dark": ((255, 255, 255, 1.0), (17, 17, 17))}  # text, page
MINIMUM = 4.5


def rgb(colour: str) -> tuple[float, float, float]:
    colour = colour.lstrip("#")
    if len(colour) == 3:
        colour = "".join(c * 2 for c in colour)
    return tuple(int(colour[k : k + 2], 16) for k in (0, 2, 4))  # type: ignore[return-value]


def luminance(colour) -> float:
    red, green, blue = rgb(colour) if isinstance(colour, str) else colour[:3]

    def channel(c: float) -> float:
        c /= 255
        return c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4

    return 0.2126 * channel(red) + 0.7152 * channel(green) + 0.0722 * channel(blue)


def contrast(a, b) -> float:
    high, low = sorted((luminance(a), luminance(b)), reverse=True)
    return (high + 0.05) / (low + 0.05)


def over(top: tuple[float, float, float, float], under: tuple[float, float, float]) -> tuple[float, float, float]:
    """``top`` (rgba) painted over the opaque ``under``."""
    alpha = top[3]
    return tuple(alpha * t + (1 - alpha) * u for t, u in zip(top[:3], under))  # type: ignore[return-value]


def test_the_formula_is_wcag_s():
    assert contrast("#000000", "#ffffff") == pytest.approx(21.0)
    assert contrast("#777777", "#ffffff") == pytest.approx(4.48, abs=0.01)


@pytest.mark.parametrize("name", sorted(PALETTE))
def test_palette_reads_on_each_theme_s_backgrounds(name):
    light, dark = PALETTE[name]
    assert min(contrast(light, bg) for bg in LIGHT_BACKGROUNDS) >= MINIMUM, (name, light)
    assert min(contrast(dark, bg) for bg in DARK_BACKGROUNDS) >= MINIMUM, (name, dark)


@pytest.mark.parametrize("name", sorted(BADGE_COLOURS))
def test_badges_carry_white_text(name):
    assert contrast("#ffffff", BADGE_COLOURS[name]) >= MINIMUM, name


def styles(markup: str) -> list[dict[str, str]]:
    """Each element's inline style as a dict of declarations."""
    found = []
    for style in re.findall(r'style="([^"]*)"', markup):
        declarations = {}
        for item in style.split(";"):
            if ":" in item:
                key, value = item.split(":", 1)
                declarations[key.strip()] = value.strip()
        found.append(declarations)
    return found


def check_static_html(markup: str) -> int:
    """Assert every coloured thing keeps its contrast in both themes; returns how many were checked."""
    checked = 0
    for style in styles(markup):
        if "color" in style:  # coloured text must bring its own background
            assert "background" in style, f"text coloured {style['color']} on the theme's background: {style}"
            assert contrast(style["color"], style["background"]) >= MINIMUM, style
            checked += 1
        tint = re.match(r"rgba\((\d+),(\d+),(\d+),([\d.]+)\)", style.get("background", ""))
        if tint:  # the theme's own text over a faint tint of a status colour
            colour = tuple(float(v) for v in tint.groups())
            for text, page in THEMES.values():
                assert contrast(over(text, over(colour, page)), over(colour, page)) >= MINIMUM, style
            checked += 1
        if "opacity" in style:  # fainter theme text
            for text, page in THEMES.values():
                faded = (*text[:3], text[3] * float(style["opacity"]))
                assert contrast(over(faded, page), page) >= MINIMUM, style
            checked += 1
    return checked


@pytest.fixture(scope="module")
def porter(tmp_path_factory):
    return porter_comparison(tmp_path_factory.mktemp("porter"))


def test_a_comparison_s_static_html_keeps_contrast_in_both_themes(porter):
    markup = porter._repr_html_()
    assert check_static_html(markup) > 40  # badges, tinted rows, muted text: many things, all readable


def test_a_trace_with_nan_keeps_contrast_in_both_themes(tmp_path):
    import torch

    trace = record(NanNet(), -torch.ones(2, 6) * 5, folder=tmp_path)
    markup = trace._repr_html_()
    assert "NaN/inf" in markup
    assert check_static_html(markup) >= 2


def test_the_check_fails_text_coloured_on_the_theme_s_background():
    with pytest.raises(AssertionError, match="on the theme's background"):
        check_static_html('<span style="color:#c62828">first divergence</span>')
    with pytest.raises(AssertionError):  # a tint too strong for light text on dark
        check_static_html('<td style="background:rgba(198,40,40,0.9)">x</td>')


def test_the_tint_is_faint():
    assert TINT_ALPHA <= 0.2
