"""``%callgraph f``: what the cached derivatives of ``f`` depend on, and why they are stale.

Each derivative shows as a picture in a notebook (SVG: functions laid out in layers from
the differentiated function down, static calls drawn solid, calls only seen at run time
dashed, the changed binding in red and what it made stale in orange) and as a text tree
in a terminal. Both come from one display bundle, so the front end picks.

The picture needs the optional extra ``ipyrefresh[callgraph]`` (igraph lays the graph
out, matplotlib draws it, both from PyPI wheels). Without it the text form still works.
Only matplotlib's object API draws, never ``pyplot``: a pyplot figure would resolve
matplotlib's backend, and in a kernel the inline backend installs its hooks into the
user's shell. (igraph imports pyplot when it is itself first imported; that alone
resolves and installs nothing.)
"""

from __future__ import annotations

import builtins
import io
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from .._src.changes import Detection
from .._src.engine import Engine
from .._src.entry import Entry, State

INSTALL_HINT = "pip install 'ipyrefresh[callgraph]'"
_MAX_WATCHED_SHOWN = 24

# Colours (fill, edge) by node state.
_COLOURS = {
    "changed": ("#f8b4b4", "#c81e1e"),
    "stale": ("#fde2b8", "#d97706"),
    "fresh": ("#d1fae5", "#047857"),
    "error": ("#f8b4b4", "#c81e1e"),
    "watched": ("#f3f4f6", "#6b7280"),
}
_EDGE_STYLE = {"static": "solid", "dynamic": "dashed", "both": "solid"}
# The picture goes on a notebook's background, light or dark, and the front end shows it
# as an image (no theme CSS reaches inside). So: no background of its own; every text sits
# on a light chip of its own (nodes, title, legend) in dark ink; the call arrows are a
# mid grey that stands out from white and from a dark theme's near-black alike.
_INK = "#1f2937"
_LINE = "#8b93a1"
_CHIP = {"boxstyle": "round,pad=0.35", "fc": "#f9fafb", "ec": "#d1d5db", "lw": 1}


class CallgraphError(Exception):
    """A one-line, user-facing error about a ``%callgraph`` line."""


def picture_support() -> str:
    """Empty if the picture can be drawn, else why not (a one-line message)."""
    try:
        import igraph  # noqa: F401
        import matplotlib  # noqa: F401
    except ImportError as exc:
        return f"the picture needs {exc.name}: {INSTALL_HINT}"
    return ""


@dataclass
class GraphView:
    """One derivative's dependency graph, ready to print or draw (no user objects held)."""

    name: str
    root: str
    state: str  # "fresh" | "stale" | "error" | "unbuilt"
    reasons: list[str]
    edges: dict[tuple[str, str], str]
    watched: list[str]
    changed: dict[str, str] = field(default_factory=dict)  # label -> what happened
    stale_nodes: set[str] = field(default_factory=set)
    error: str = ""
    note: str = ""
    side_effects: list[str] = field(default_factory=list)
    picture_hint: str = ""

    # -- structure -------------------------------------------------------------------------
    @property
    def functions(self) -> list[str]:
        """Function nodes: the root and every edge endpoint, root first."""
        seen = {self.root: None}
        for a, b in self.edges:
            seen.setdefault(a, None)
            seen.setdefault(b, None)
        return list(seen)

    def children(self, node: str) -> list[tuple[str, str]]:
        return sorted((b, kind) for (a, b), kind in self.edges.items() if a == node)

    def node_state(self, node: str) -> str:
        if node in self.changed:
            return "changed"
        if node in self.stale_nodes:
            return "error" if self.state == "error" else "stale"
        if node in self.functions:
            return "fresh"  # unaffected by the change (it is rebuilt with the rest)
        return "watched"

    def headline(self) -> str:
        if self.state == "fresh":
            return f"{self.name}: fresh"
        if self.state == "unbuilt":
            return f"{self.name}: not built yet" + (f" ({self.error})" if self.error else "")
        if self.state == "error":
            return f"{self.name}: failed to build ({self.error})"
        why = "; ".join(self.reasons) if self.reasons else "stale"
        return f"{self.name}: stale ({why})"

    # -- text ------------------------------------------------------------------------------
    def text(self) -> str:
        lines = [self.headline()]
        if self.state == "unbuilt":
            return lines[0]
        shown: set[str] = set()

        def mark(node: str) -> str:
            state = self.node_state(node)
            if state == "changed":
                return f"  <- {self.changed[node]}"
            return "  (stale)" if state in ("stale", "error") and self.state != "fresh" else ""

        def walk(node: str, prefix: str, path: tuple[str, ...]) -> None:
            kids = self.children(node)
            for i, (child, kind) in enumerate(kids):
                last = i == len(kids) - 1
                branch = "└── " if last else "├── "
                how = "static+dynamic" if kind == "both" else kind
                if child in path:
                    lines.append(f"{prefix}{branch}{child} [{how}] (recursive call)")
                    continue
                if child in shown:
                    lines.append(f"{prefix}{branch}{child} [{how}] (see above){mark(child)}")
                    continue
                shown.add(child)
                lines.append(f"{prefix}{branch}{child} [{how}]{mark(child)}")
                walk(child, prefix + ("    " if last else "│   "), (*path, child))

        shown.add(self.root)
        lines.append(f"{self.root}{mark(self.root)}")
        walk(self.root, "", (self.root,))
        rest = [f for f in self.functions if f not in shown]
        for node in rest:  # reached only from code outside the tree (rare)
            for child, kind in self.children(node):
                lines.append(f"{node} -> {child} [{kind}]{mark(child)}")
        if self.watched:
            shown_w = [
                f"{w} <- {self.changed[w]}" if w in self.changed else w
                for w in self.watched[:_MAX_WATCHED_SHOWN]
            ]
            more = len(self.watched) - len(shown_w)
            tail = f", and {more} more" if more > 0 else ""
            lines.append("watches: " + ", ".join(shown_w) + tail)
        lines.extend(f"note: {s}" for s in self.side_effects)
        if self.note:
            lines.append(f"note: {self.note}")
        return "\n".join(lines)

    # -- picture ---------------------------------------------------------------------------
    def svg(self) -> str:
        """The graph as an SVG document (needs ``ipyrefresh[callgraph]``)."""
        why = picture_support()
        if why:
            raise CallgraphError(why)
        return _draw(self)

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, str]:
        text = self.text()
        bundle = {"text/plain": text}
        if self.state != "unbuilt" and not picture_support():
            bundle["image/svg+xml"] = self.svg()
        elif self.picture_hint:
            bundle["text/plain"] = f"{text}\n({self.picture_hint})"
        return bundle

    def __repr__(self) -> str:
        return self.text()


# -- building views from the engine ------------------------------------------------------------
def _changed_labels(entry: Entry, nodes: set[str]) -> dict[str, str]:
    """Nodes whose change made ``entry`` stale, with what happened to them."""
    changed: dict[str, str] = {}
    for change in entry.reasons:
        for label in (change.subject, change.root_name):
            if label in nodes:
                changed[label] = change.kind.value + change.when()
                break
    return changed


def _ancestors(edges: Iterable[tuple[str, str]], targets: Iterable[str]) -> set[str]:
    callers: dict[str, set[str]] = {}
    for a, b in edges:
        callers.setdefault(b, set()).add(a)
    seen: set[str] = set()
    todo = deque(targets)
    while todo:
        node = todo.popleft()
        for caller in callers.get(node, ()):
            if caller not in seen:
                seen.add(caller)
                todo.append(caller)
    return seen


def view_of(entry: Entry, engine: Engine) -> GraphView:
    """A :class:`GraphView` of one cache entry."""
    info = entry.info
    name = entry.name
    root = entry.target.label
    reasons = [c.describe() for c in entry.reasons]
    if entry.builds == 0:
        return GraphView(name, root, "unbuilt", reasons, {}, [], error=entry.error)
    edges = dict(info.edges)
    view = GraphView(name, root, "fresh", [], edges, [], note=info.note, side_effects=info.notes)
    functions = set(view.functions)
    view.watched = [d for d in info.reads if d not in functions]
    if entry.state is not State.FRESH:
        view.state = "error" if entry.state is State.FAILED else "stale"
        view.error = entry.error
        view.reasons = reasons
        view.changed = _changed_labels(entry, functions | set(info.reads))
        stale = _ancestors(edges, view.changed) | {root}
        view.stale_nodes = stale | (functions if not view.changed else set())
    return view


def views_for(engine: Engine, name: str, ns: dict[str, Any] | None) -> list[GraphView]:
    """Views of every cached derivative whose target is ``name`` (or that handle's target)."""
    from .._src.handles import Derivative

    value = ns.get(name) if ns is not None else None
    if type(value) is Derivative:  # a handle: just its own transform and argnum
        entries = [e for e in engine.cache if value.owns(e)]
        if not entries:
            raise CallgraphError(f"{name!r} has not been called yet; call it once first")
    else:
        entries = [e for e in engine.cache if e.target.label == name]
    if not entries:
        if ns is not None and name not in ns and not hasattr(builtins, name):
            raise CallgraphError(f"name {name!r} is not defined")
        raise CallgraphError(
            f"no derivative of {name!r} has been computed yet; call grad({name})(...) "
            f"or %grad {name}(...) first"
        )
    entries.sort(key=lambda e: e.id)
    return [view_of(e, engine) for e in entries]


def in_kernel(shell: Any) -> bool:
    """True in a Jupyter kernel (a front end that can show pictures)."""
    return getattr(shell, "kernel", None) is not None


def run(shell: Any, engine: Engine, name: str, form: str = "auto") -> None:
    """The body of ``%callgraph``; raises :class:`CallgraphError` for the user."""
    from IPython import display as ipython_display

    display: Callable[..., None] = ipython_display.display  # (IPython declares no types)

    if not name.isidentifier():
        raise CallgraphError(f"{name!r} is not a name: %callgraph NAME (a function or a handle)")
    engine.sweep(deep=True, detection=Detection.ON_REQUEST)
    if form == "svg" and picture_support():
        raise CallgraphError(picture_support())
    views = views_for(engine, name, shell.user_ns if shell is not None else None)
    if form == "auto" and type(shell).__name__ == "TerminalInteractiveShell":
        form = "text"  # a terminal cannot show the picture: don't draw it
    hint = ""
    if form == "auto" and in_kernel(shell) and picture_support():
        hint = f"text only: {picture_support()}"
    for view in views:
        view.picture_hint = hint
        if form == "text":
            display({"text/plain": view.text()}, raw=True)
        elif form == "svg":
            display({"image/svg+xml": view.svg(), "text/plain": view.headline()}, raw=True)
        else:
            display(view)


# -- drawing ---------------------------------------------------------------------------------
def _layout(view: GraphView) -> dict[str, tuple[float, float]]:
    """Positions of the functions: igraph's layered (Sugiyama) layout, with each node's
    layer its call depth from the root, so the differentiated function is on top and a
    recursive call points back up."""
    import igraph

    names = view.functions
    index = {name: i for i, name in enumerate(names)}
    g = igraph.Graph(n=len(names), edges=[(index[a], index[b]) for a, b in view.edges])
    g.vs["name"] = names
    depth = g.distances(source=index[view.root], mode="out")[0]
    finite = [int(d) for d in depth if d != float("inf")]
    bottom = max(finite, default=0) + 1
    layers = [int(d) if d != float("inf") else bottom for d in depth]
    coords = g.layout_sugiyama(layers=layers).coords
    xy = {name: (float(coords[i][0]), -float(coords[i][1])) for i, name in enumerate(names)}
    lo, hi = min(x for x, _ in xy.values()), max(x for x, _ in xy.values())
    return {name: (x - (lo + hi) / 2, y) for name, (x, y) in xy.items()}


def _draw(view: GraphView) -> str:
    import matplotlib
    from matplotlib.backends.backend_svg import FigureCanvasSVG
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    xy = _layout(view)
    levels = len({y for _, y in xy.values()})
    span = max(x for x, _ in xy.values()) - min(x for x, _ in xy.values()) + 1
    watched = view.watched[:_MAX_WATCHED_SHOWN]
    wrow = [watched[i : i + 6] for i in range(0, len(watched), 6)]
    width = max([span, 2.0] + [float(len(r)) for r in wrow])
    # From the root's row (y = 0) down to the last row drawn: the canvas fits its content.
    last_row = -float(levels) - 0.2 - 0.7 * (len(wrow) - 1) if wrow else -float(levels - 1)
    y_lo, y_hi = last_row - 0.45, 0.55
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "ipyrefresh"}):
        fig_w, fig_h = max(1.2 * width + 0.5, 3.0), 0.6 * (y_hi - y_lo) + 1.2
        fig = Figure(figsize=(fig_w, fig_h))
        FigureCanvasSVG(fig)
        bottom = 0.7 / fig_h  # room for the legend (two rows)
        ax = fig.add_axes((0.01, bottom, 0.98, 1 - bottom - 0.5 / fig_h))
        inch_per_unit = 0.98 * fig_w / (width + 0.4)
        ax.set_axis_off()
        ax.set_xlim(-width / 2 - 0.2, width / 2 + 0.2)
        ax.set_ylim(y_lo, y_hi)
        boxes: dict[str, Any] = {}
        for node, (x, y) in xy.items():
            fill, edge = _COLOURS[view.node_state(node)]
            weight = "bold" if node == view.root else "normal"
            boxes[node] = ax.text(
                x,
                y,
                node,
                ha="center",
                va="center",
                fontsize=10,
                family="monospace",
                weight=weight,
                color=_INK,
                gid=f"node-{node}",
                bbox={"boxstyle": "round,pad=0.4", "fc": fill, "ec": edge, "lw": 1.5},
            )
        for (a, b), kind in sorted(view.edges.items()):
            (xa, ya), (xb, yb) = xy[a], xy[b]
            props: dict[str, Any] = {
                "arrowstyle": "-|>",
                "linestyle": _EDGE_STYLE.get(kind, "solid"),
                "lw": 2.4 if kind == "both" else 1.3,
                "color": _LINE,
                "shrinkA": 12,
                "shrinkB": 12,
            }
            if a == b:  # direct recursion: a loop on the right of the box
                half = (len(a) * 6.0 + 10) / 2 / 72 / inch_per_unit
                props.update(connectionstyle="arc3,rad=1.8", shrinkA=0, shrinkB=0)
                arrow = ax.annotate(
                    "", xy=(xa + half, ya + 0.1), xytext=(xa + half, ya - 0.1), arrowprops=props
                )
            else:
                if yb >= ya:  # a call back up (mutual recursion): curve it
                    props["connectionstyle"] = "arc3,rad=0.35"
                arrow = ax.annotate("", xy=(xb, yb), xytext=(xa, ya), arrowprops=props)
            assert arrow.arrow_patch is not None
            arrow.arrow_patch.set_gid(f"edge-{kind}-{a}->{b}")
        top = -float(levels) - 0.1
        if wrow:
            ax.text(-width / 2, top + 0.3, "also watches:", fontsize=9, color=_INK, bbox=_CHIP)
        for r, names in enumerate(wrow):
            for i, node in enumerate(names):
                fill, edge = _COLOURS["changed" if node in view.changed else "watched"]
                ax.text(
                    i - (len(names) - 1) / 2,
                    top - 0.1 - r * 0.7,
                    node,
                    ha="center",
                    va="center",
                    fontsize=9,
                    family="monospace",
                    color=_INK,
                    gid=f"watched-{node}",
                    bbox={"boxstyle": "square,pad=0.3", "fc": fill, "ec": edge, "lw": 1},
                )
        title = view.headline()
        if len(title) > 110:
            title = title[:107] + "..."
        fig.suptitle(title, fontsize=10, family="monospace", y=0.98, color=_INK, bbox=_CHIP)
        handles = [
            Line2D([], [], color=_INK, lw=1.3, label="static call"),
            Line2D([], [], color=_INK, lw=1.3, ls="dashed", label="dynamic call"),
            Line2D([], [], color=_INK, lw=2.4, label="static and dynamic"),
            Patch(fc=_COLOURS["fresh"][0], ec=_COLOURS["fresh"][1], label="fresh"),
            Patch(fc=_COLOURS["stale"][0], ec=_COLOURS["stale"][1], label="stale"),
            Patch(fc=_COLOURS["changed"][0], ec=_COLOURS["changed"][1], label="changed"),
        ]
        legend = fig.legend(
            handles=handles,
            loc="lower center",
            ncol=3,
            fontsize=8,
            frameon=True,
            facecolor=_CHIP["fc"],
            edgecolor=_CHIP["ec"],
            framealpha=1,
            labelcolor=_INK,
        )
        legend.set_gid("legend")
        out = io.StringIO()
        # Transparent, and cropped to what is drawn: two nodes make a small picture.
        fig.savefig(out, format="svg", transparent=True, bbox_inches="tight", pad_inches=0.06)
    return out.getvalue()
