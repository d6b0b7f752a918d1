"""Draw the "Python 3 (ipyrefresh)" kernel's logo: a white ∂ on a blue rounded square,
with an orange dot (the status item's "stale" mark). Writes logo-svg.svg, logo-32x32.png
and logo-64x64.png next to kernel.json; the Launcher shows them.

    .venv/bin/python jupyter-config/make_logo.py
"""

from __future__ import annotations

from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.font_manager import FontProperties
from matplotlib.patches import Circle, FancyBboxPatch, PathPatch
from matplotlib.textpath import TextPath
from matplotlib.transforms import Affine2D

HERE = Path(__file__).resolve().parent / "kernels" / "python3-ipyrefresh"
BLUE, ORANGE, WHITE = "#1f5f9e", "#f57c00", "#ffffff"
FONT = FontProperties(family="DejaVu Sans", weight="bold")


def glyph() -> tuple[str, float, float]:
    """The ∂ as an SVG path in a 64-unit box (y down), centred; and its offset."""
    path = TextPath((0, 0), "∂", size=44, prop=FONT)
    verts = path.vertices
    (x0, y0), (x1, y1) = verts.min(axis=0), verts.max(axis=0)
    dx, dy = 30 - (x0 + x1) / 2, 34 + (y0 + y1) / 2
    parts: list[str] = []
    codes = path.codes if path.codes is not None else [1] + [2] * (len(verts) - 1)
    i = 0
    while i < len(verts):
        code = codes[i]
        x, y = verts[i]
        if code == 1:
            parts.append(f"M{x + dx:.2f} {dy - y:.2f}")
            i += 1
        elif code == 2:
            parts.append(f"L{x + dx:.2f} {dy - y:.2f}")
            i += 1
        elif code == 3:
            (cx, cy), (ex, ey) = verts[i], verts[i + 1]
            parts.append(f"Q{cx + dx:.2f} {dy - cy:.2f} {ex + dx:.2f} {dy - ey:.2f}")
            i += 2
        elif code == 4:
            (ax, ay), (bx, by), (ex, ey) = verts[i], verts[i + 1], verts[i + 2]
            parts.append(
                f"C{ax + dx:.2f} {dy - ay:.2f} {bx + dx:.2f} {dy - by:.2f} "
                f"{ex + dx:.2f} {dy - ey:.2f}"
            )
            i += 3
        else:  # CLOSEPOLY
            parts.append("Z")
            i += 1
    return " ".join(parts), dx, dy


def svg() -> str:
    d, _, _ = glyph()
    return (
        '<svg xmlns="http://www.w3.org/2000/svg" width="64" height="64" viewBox="0 0 64 64">\n'
        f'  <rect x="2" y="2" width="60" height="60" rx="12" fill="{BLUE}"/>\n'
        f'  <path d="{d}" fill="{WHITE}"/>\n'
        f'  <circle cx="50" cy="14" r="7" fill="{ORANGE}" stroke="{WHITE}" stroke-width="2"/>\n'
        "</svg>\n"
    )


def png(size: int) -> None:
    fig = Figure(figsize=(1, 1), dpi=size)
    FigureCanvasAgg(fig)
    ax = fig.add_axes((0, 0, 1, 1))
    ax.set_xlim(0, 64)
    ax.set_ylim(64, 0)
    ax.set_axis_off()
    ax.add_patch(
        FancyBboxPatch((2, 2), 60, 60, boxstyle="round,pad=0,rounding_size=12", fc=BLUE, ec="none")
    )
    _, dx, dy = glyph()
    path = TextPath((0, 0), "∂", size=44, prop=FONT)
    path = Affine2D().scale(1, -1).translate(dx, dy).transform_path(path)
    ax.add_patch(PathPatch(path, fc=WHITE, ec="none"))
    ax.add_patch(Circle((50, 14), 7, fc=ORANGE, ec=WHITE, lw=2 * size / 64 * 72 / 64))
    fig.savefig(HERE / f"logo-{size}x{size}.png", transparent=True)


if __name__ == "__main__":
    (HERE / "logo-svg.svg").write_text(svg())
    png(32)
    png(64)
