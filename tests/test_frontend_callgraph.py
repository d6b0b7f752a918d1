"""%callgraph's picture in a notebook: sized to what it draws, no background of its own
(it sits on light and dark themes alike), dark text on light chips, mid-grey arrows."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from typing import Any

import pytest

pytest.importorskip("igraph")
pytest.importorskip("matplotlib")

from ipyrefresh.ipython import callgraph

WHITE, DARK = (255, 255, 255), (17, 17, 17)  # JupyterLab light and dark backgrounds
SVG = "{http://www.w3.org/2000/svg}"


def _luminance(rgb: tuple[int, int, int]) -> float:
    def channel(c: int) -> float:
        x = c / 255
        return x / 12.92 if x <= 0.03928 else ((x + 0.055) / 1.055) ** 2.4

    r, g, b = (channel(c) for c in rgb)
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def _contrast(a: tuple[int, int, int], b: tuple[int, int, int]) -> float:
    la, lb = sorted((_luminance(a), _luminance(b)), reverse=True)
    return (la + 0.05) / (lb + 0.05)


def _rgb(hex_colour: str) -> tuple[int, int, int]:
    h = hex_colour.lstrip("#")
    return int(h[0:2], 16), int(h[2:4], 16), int(h[4:6], 16)


def _style(el: ET.Element, prop: str) -> str | None:
    m = re.search(rf"(?:^|;)\s*{prop}:\s*([^;]+)", el.get("style", ""))
    return m.group(1).strip() if m else None


@pytest.fixture
def two_nodes(ip: Any) -> str:
    ip.run("def g(x):\n    return np.sin(x)\ndef h(x):\n    return 2 * g(x)\ndh = grad(h)\ndh(1.0)")
    ip.run("def g(x):\n    return np.cos(x)")
    [view] = callgraph.views_for(__import__("ipyrefresh")._src.engine.current(), "h", ip.ns)
    assert view.functions == ["h", "g"]
    return view.svg()


def test_a_small_graph_makes_a_small_picture(two_nodes: str) -> None:
    root = ET.fromstring(two_nodes)
    width, height = (float(root.get(k, "0").removesuffix("pt")) for k in ("width", "height"))
    # It was 468 x 354 pt, mostly empty; the content needs about 280 x 230.
    assert width <= 320 and height <= 260, (width, height)


def test_no_background_of_its_own(two_nodes: str) -> None:
    root = ET.fromstring(two_nodes)
    [figure_patch] = [g for g in root.iter(f"{SVG}g") if g.get("id") == "patch_1"]
    for path in figure_patch.iter(f"{SVG}path"):
        assert _style(path, "fill") == "none", path.get("style")
    assert "#ffffff" not in two_nodes.lower()


def test_readable_on_light_and_dark_themes(two_nodes: str) -> None:
    root = ET.fromstring(two_nodes)
    texts = list(root.iter(f"{SVG}text"))
    assert texts
    chips = [
        _style(p, "fill")
        for p in root.iter(f"{SVG}path")
        if (_style(p, "fill") or "none") not in ("none",) and _style(p, "stroke")
    ]
    for text in texts:
        ink = _rgb(_style(text, "fill") or "#000000")
        # Dark ink, drawn on the light chips (node boxes, title, legend): AA on them.
        assert _contrast(ink, _rgb("#f9fafb")) >= 4.5
        assert _luminance(ink) < 0.05, text.get("style")
    assert "#f9fafb" in chips  # the title's and the legend's chip
    edges = [g for g in root.iter(f"{SVG}g") if g.get("id", "").startswith("edge-")]
    assert edges
    for edge in edges:
        for path in edge.iter(f"{SVG}path"):
            stroke = _rgb(_style(path, "stroke") or "#000000")
            # Lines are not text: 3:1 against both backgrounds (WCAG 1.4.11).
            assert _contrast(stroke, WHITE) >= 3 and _contrast(stroke, DARK) >= 3, stroke
