"""``%callgraph``: the dependency picture and its text form, in a real IPython shell."""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from typing import Any

import pytest
from IPython.core.error import UsageError
from IPython.utils.capture import capture_output

from ipyrefresh.ipython import callgraph

SETUP = """
def leaf(x):
    return np.sin(x)

def mid(x):
    return leaf(x) * 2.0

def other(x):
    return x ** 2

fs = [other]

def h(x):
    f = fs[0]
    return mid(x) + f(x)

dh = grad(h)
dh(0.3)
"""


def outputs(ip: Any, line: str) -> list[dict[str, str]]:
    """The display bundles ``%callgraph line`` produced."""
    with capture_output() as cap:
        ip.shell.run_line_magic("callgraph", line)
    return [o.data for o in cap.outputs]


def usage_error(ip: Any, line: str) -> str:
    with pytest.raises(UsageError) as info:
        ip.shell.run_line_magic("callgraph", line)
    text = str(info.value)
    assert "\n" not in text and text.startswith("%callgraph: ")
    return text


def test_text_tree_fresh(ip: Any) -> None:
    ip.run(SETUP)
    (bundle,) = outputs(ip, "--text h")
    text = bundle["text/plain"]
    lines = text.splitlines()
    assert lines[0] == "grad(h): fresh"
    assert lines[1] == "h"
    # mid is called by name (seen statically and while tracing); f = fs[0] only at run time.
    assert "├── mid [static+dynamic]" in text
    assert "│   └── leaf [static+dynamic]" in text
    assert "other [dynamic]" in text
    assert "fs[0] [static]" in text
    assert "(stale)" not in text and "<-" not in text
    assert lines[-1].startswith("watches: ") and "np.sin" in lines[-1]


def test_text_marks_changed_binding_and_stale_callers(ip: Any) -> None:
    ip.run(SETUP)
    cell = ip.count
    ip.run("def leaf(x):\n    return np.cos(x)")
    (bundle,) = outputs(ip, "--text h")
    text = bundle["text/plain"]
    # The check after each cell saw the change in the cell that made it.
    assert text.splitlines()[0] == f"grad(h): stale (leaf redefined in cell [{cell}])"
    assert "h  (stale)" in text
    assert f"leaf [static+dynamic]  <- redefined in cell [{cell}]" in text
    assert "mid [static+dynamic]  (stale)" in text  # mid calls leaf
    assert "other [dynamic]\n" in text + "\n"  # not affected: no stale mark
    # After the next call the graph is fresh again and answers for the new code.
    ip.run("r = dh(0.3)")
    assert ip.ns["r"] == pytest.approx(-2.0 * __import__("math").sin(0.3) + 0.6)
    (bundle,) = outputs(ip, "--text h")
    assert bundle["text/plain"].splitlines()[0] == "grad(h): fresh"


def test_data_change_marks_watched_value(ip: Any) -> None:
    ip.run("W = np.ones(2)\ndef loss(w):\n    return np.sum((w * W) ** 2)\ndl = grad(loss)")
    ip.run("dl(np.array([1.0, 2.0]))")
    ip.run("W[0] = 5.0")
    (bundle,) = outputs(ip, "--text loss")
    text = bundle["text/plain"]
    assert "W <- changed in place" in text
    assert "loss  (stale)" in text


def test_recursion_and_mutual_recursion(ip: Any) -> None:
    ip.run(
        "def even(x, n):\n    return x if n == 0 else odd(x * 1.5, n - 1)\n"
        "def odd(x, n):\n    return x if n == 0 else even(np.sin(x), n - 1)\n"
        "def fact(x, n):\n    return x if n <= 1 else x * fact(x, n - 1)\n"
        "def top(x):\n    return even(x, 3) + fact(x, 3)\n"
        "grad(top)(0.5)"
    )
    (bundle,) = outputs(ip, "--text top")
    text = bundle["text/plain"]
    assert "even [static+dynamic]" in text
    assert "odd [static+dynamic]" in text
    assert "(recursive call)" in text
    svg = callgraph.views_for(__import__("ipyrefresh")._src.engine.current(), "top", ip.ns)[0].svg()
    ids = _ids(svg)
    assert "edge-both-fact->fact" in ids  # the self-loop is drawn
    assert "edge-both-odd->even" in ids


def _ids(svg: str) -> set[str]:
    root = ET.fromstring(svg)
    return {el.get("id", "") for el in root.iter()}


def test_svg_picture(ip: Any) -> None:
    ip.run(SETUP)
    ip.run("def leaf(x):\n    return np.cos(x)")
    (bundle,) = outputs(ip, "h")
    assert set(bundle) == {"text/plain", "image/svg+xml"}
    svg = bundle["image/svg+xml"]
    root = ET.fromstring(svg)  # well-formed
    assert root.tag.endswith("svg")
    ids = _ids(svg)
    for node in ("h", "mid", "leaf", "other", "fs[0]"):
        assert f"node-{node}" in ids
    assert "edge-both-h->mid" in ids
    assert "edge-dynamic-h->other" in ids
    assert "edge-static-h->fs[0]" in ids
    # Labels are real text; the changed node is red, its caller orange, the rest green.
    assert ">leaf<" in svg and ">mid<" in svg
    group = {el.get("id"): el for el in root.iter()}

    def fill(node: str) -> str:
        ET_el = group[f"node-{node}"]
        styles = [p.get("style", "") for p in ET_el.iter() if p.tag.endswith("path")]
        return " ".join(styles)

    assert "fill: #f8b4b4" in fill("leaf")
    assert "fill: #fde2b8" in fill("mid")
    assert "fill: #fde2b8" in fill("h")
    assert "fill: #d1fae5" in fill("other")
    # Dynamic edges are dashed, static ones are not.
    dyn = " ".join(p.get("style", "") for p in group["edge-dynamic-h->other"].iter())
    static = " ".join(p.get("style", "") for p in group["edge-static-h->fs[0]"].iter())
    assert "stroke-dasharray" in dyn
    assert "stroke-dasharray" not in static


def test_every_transform_of_the_target_and_handles(ip: Any) -> None:
    ip.run(SETUP)
    ip.run("from ipyrefresh import hessian\nhessian(h)(0.3)")
    bundles = outputs(ip, "--text h")
    heads = [b["text/plain"].splitlines()[0] for b in bundles]
    assert heads == ["grad(h): fresh", "hessian(h): fresh"]
    # A handle's name works too.
    (bundle,) = outputs(ip, "--text dh")
    assert bundle["text/plain"].startswith("grad(h): fresh")


def test_errors_are_one_line(ip: Any) -> None:
    assert usage_error(ip, "nosuch") == "%callgraph: name 'nosuch' is not defined"
    ip.run("def g(x):\n    return x * 2.0")
    assert "no derivative of 'g' has been computed yet" in usage_error(ip, "g")
    ip.run("dg = grad(g)")
    assert "'dg' has not been called yet" in usage_error(ip, "dg")
    assert "required: name" in usage_error(ip, "")
    assert "unrecognized arguments: b" in usage_error(ip, "a b")
    assert "unrecognized arguments: --png" in usage_error(ip, "--png g")
    assert "is not a name" in usage_error(ip, "g(1)")
    ip.run("x = 1")
    assert ip.ns["x"] == 1


@pytest.fixture
def without_picture_libs() -> Iterator[None]:
    """Make ``import igraph`` fail, as on a machine without the callgraph extra."""
    saved = {m: sys.modules.get(m) for m in ("igraph",)}
    sys.modules["igraph"] = None  # type: ignore[assignment]
    try:
        yield
    finally:
        for name, mod in saved.items():
            if mod is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = mod


def test_text_works_without_the_extra(ip: Any, without_picture_libs: None) -> None:
    assert "ipyrefresh[callgraph]" in callgraph.picture_support()
    ip.run(SETUP)
    (bundle,) = outputs(ip, "h")
    assert set(bundle) == {"text/plain"}  # a terminal: just the tree, no nagging
    assert bundle["text/plain"].splitlines()[:2] == ["grad(h): fresh", "h"]
    message = usage_error(ip, "--svg h")
    assert "pip install 'ipyrefresh[callgraph]'" in message


def test_kernel_without_extra_says_how_to_get_the_picture(
    ip: Any, without_picture_libs: None
) -> None:
    ip.run(SETUP)
    view = callgraph.views_for(__import__("ipyrefresh")._src.engine.current(), "h", ip.ns)[0]
    view.picture_hint = "text only: " + callgraph.picture_support()
    bundle = view._repr_mimebundle_()
    assert set(bundle) == {"text/plain"}
    assert bundle["text/plain"].endswith(
        "(text only: the picture needs igraph: pip install 'ipyrefresh[callgraph]')"
    )


def test_unload_removes_the_magic(ip: Any) -> None:
    assert "callgraph" in ip.shell.magics_manager.magics["line"]
    ip.run("%unload_ext ipyrefresh")
    assert "callgraph" not in ip.shell.magics_manager.magics["line"]
    ip.run("%load_ext ipyrefresh")
    assert "callgraph" in ip.shell.magics_manager.magics["line"]


def test_picture_leaves_the_shell_and_matplotlib_as_they_were(ip: Any) -> None:
    """No event hooks, no display formatters, no pyplot figure, matplotlib's backend not
    resolved: what a pyplot drawing would do. (igraph's import brings pyplot in, so
    whether ``matplotlib.pyplot`` is in ``sys.modules`` depends on the tests before.)"""
    import matplotlib

    def formatters() -> dict[str, Any]:
        return {
            mime: (dict(f.type_printers), dict(f.deferred_printers), f.enabled)
            for mime, f in ip.shell.display_formatter.formatters.items()
        }

    backend = dict.__getitem__(matplotlib.rcParams, "backend")
    before = {k: list(v) for k, v in ip.shell.events.callbacks.items()}
    shown = formatters()
    ip.run(SETUP)
    assert any("svg" in mime for bundle in outputs(ip, "h") for mime in bundle)
    assert {k: list(v) for k, v in ip.shell.events.callbacks.items()} == before
    assert formatters() == shown
    assert dict.__getitem__(matplotlib.rcParams, "backend") is backend
    pyplot = sys.modules.get("matplotlib.pyplot")
    assert pyplot is None or pyplot.get_fignums() == []


def test_in_a_real_terminal_ipython_it_prints_the_tree() -> None:
    import subprocess
    from pathlib import Path

    lines = [
        "%load_ext ipyrefresh",
        "import autograd.numpy as np",
        "from ipyrefresh import grad",
        "def g(x): return np.sin(x)",
        "def h(x): return g(x) * 2",
        "r = grad(h)(0.3)",
        "def g(x): return np.cos(x)",
        "%callgraph h",
        "import sys; print('pictures drawn:', 'matplotlib.figure' in sys.modules)",
    ]
    ipython = Path(sys.executable).with_name("ipython")
    out = subprocess.run(
        [str(ipython), "--simple-prompt", "--no-banner", "--colors=NoColor", "--no-confirm-exit"],
        input="\n".join(lines) + "\nexit\n",
        capture_output=True,
        text=True,
        timeout=120,
    ).stdout
    assert "grad(h): stale (g redefined in cell [7])\nh  (stale)\n" in out
    assert "└── g [static+dynamic]  <- redefined in cell [7]" in out
    assert "pictures drawn: False" in out
