"""Reading the expression a cell passed to ``grad``: the fast reading of the call's own
source span (Python 3.11+) against ``executing``'s reading of the whole cell, on the same
frames. Where the fast reading answers, both must name the same thing; in loops (where a
name may be rebound at each turn) and in functions it must leave the answer to
``executing``."""

from __future__ import annotations

import sys

import autograd
import autograd.numpy
import pytest

from ipyrefresh._src import callsite

from .conftest import Shell

PROBE = """
import sys as _sys
from ipyrefresh._src import callsite as _callsite, targets as _targets
probes = []
def probe(fun=None, argnum=0, **kw):
    frame = _sys._getframe(1)
    means = lambda path: _targets._follow(frame.f_globals, path, fun) is not None
    fast = _callsite._cell_call(frame)
    probes.append((
        None if fast is None else _callsite._read_site(fast),
        _callsite._executing_site(frame, means),
        _callsite._bytecode_site(frame),
        _callsite.passed_expression(frame, means),
    ))
    return lambda *a: probes
class M:
    def loss(self, x):
        return x
m = M()
def h(x):
    return x
def k(x):
    return x
c = True
fs = [h, h]
"""

#: cell -> whether the fast reading answers (on Python 3.11+).
CELLS = {
    "d = probe(h)": True,
    "d = probe(fun=h)": True,
    "d = probe(m.loss)": True,
    "d = probe(\n    h,\n    argnum=0,\n)": True,
    "é = 'ü'; d = probe(h)": True,  # (positions count bytes: wide characters before it)
    "a = probe(h); b = probe(m.loss)": True,
    "v = probe(h)(1.0)": True,
    "v = float(len(probe(h)(1.0)) * 0)": True,
    "d = probe(lambda x: x)": True,
    "d = probe(fs[0])": True,
    "d = probe(k if c else h)": True,
    "if True:\n    d = probe(h)": True,
    "import asyncio\nawait asyncio.sleep(0)\nd = probe(h)": True,
    "for j in range(2):\n    pass\nd = probe(h)": False,  # (a loop anywhere: executing)
    "for h in fs:\n    d = probe(h)": False,
    "for j in range(2):\n    d = probe(h)": False,
    "for fn in fs:\n    d = probe(fn)\n    break": False,  # (hunt 42: no backward jump)
    "while True:\n    d = probe(h)\n    break": False,
    "j = 0\nwhile j < 2:\n    d = probe(h)\n    j += 1": False,
    "ds = [probe(f) for f in fs]": False,
    "ds = list(probe(f) for f in fs)": False,
    "def mk():\n    return probe(h)\nd = mk()": False,
    "@probe\ndef dh(x):\n    return x": False,
    "ds = list(map(probe, (h, k)))": True,  # (hunt 42: the tuple is no name: fixed)
    "kw = {}\nd = probe(h, **kw)": True,  # (hunt 43: CALL_FUNCTION_EX)
    "kw = {'argnum': 0}\nd = probe(m.loss, **kw)": True,
    "args = (h,)\nd = probe(*args)": True,
    "d1, d2 = map(probe, (h, k))": False,
}


@pytest.mark.parametrize("cell", list(CELLS))
def test_the_fast_reading_names_what_executing_names(ip: Shell, cell: str) -> None:
    ip.run(PROBE)
    ip.run(cell)
    probes = ip.ns["probes"]
    assert probes, "the probe did not run"
    for fast, slow, code, used in probes:
        if sys.version_info >= (3, 11) and CELLS[cell]:
            assert fast is not None, "the fast reading did not answer"
            assert slow is not None
            assert fast.path == slow.path, (fast, slow)
            assert used == fast
        else:
            assert fast is None
            assert used == (slow if slow is not None else code)


#: A cell run without its source kept (``%%time``, ``exec``): (cell, the path its
#: instructions name (``None``: a fixed object), or ``...`` where they cannot tell).
SOURCELESS: dict[str, tuple[str, ...] | type[Ellipsis] | None] = {
    "%%time\nd = probe(h)": ("h",),
    "%%time\nd = probe(m.loss)": ("m", "loss"),
    "%%prun -q\nd = probe(h)": ("h",),
    "exec('d = probe(h)')": ("h",),
    "exec('d = probe(m.loss)(1.0)')": ("m", "loss"),
    "%%time\nd = probe(fun=h)": ("h",),  # (hunt 42: keywords and more arguments)
    "%%time\nd = probe(h, 0)": ("h",),
    "%%time\nd = probe(argnum=0, fun=m.loss)": ("m", "loss"),
    "%%time\nd = probe(fs[0])": None,
    "%%time\nd = probe(lambda x: x)": None,
    "%%time\nd = probe(k if c else h)": None,  # (hunt 42: the else branch is no argument)
    "%%time\nd = probe(c or h)": None,
    "%%time\nd = probe(f2 := h)": None,
    "%%time\nd = list(map(probe, (h, k)))": None,
    "%%time\nd1, d2 = map(probe, (h, k))": None,  # (no call: unpacking calls it)
    "%%time\nfor d in map(probe, (h, k)):\n    pass": None,
    "%%time\nfor h in fs:\n    d = probe(h)": None,  # (hunt 43: a loop variable is fixed)
    "%%time\nfor fn in [h, k]:\n    d = probe(fn)": None,
    "%%time\nfor fn in fs:\n    d = probe(fn)\n    break": None,
    "%%time\nd = [probe(f) for f in fs]": None,
    "%%time\nfor j in range(2):\n    d = probe(h)": ("h",),  # (not what the loop binds)
    "exec('def mk():\\n    return probe(h)\\nd = mk()')": ("h",),  # (hunt 43: in a def)
    "%%time\n" + "".join(f"a{i} = {i}\n" for i in range(300)) + "d = probe(h)": ("h",),
    "%%time\nkw = {}\nd = probe(h, **kw)": ("h",),
}


@pytest.mark.parametrize("cell", list(SOURCELESS))
def test_a_cell_without_source_is_read_from_its_instructions(ip: Shell, cell: str) -> None:
    ip.run(PROBE)
    ip.run(cell)
    probes = ip.ns["probes"]
    assert probes, "the probe did not run"
    want = SOURCELESS[cell] if sys.version_info >= (3, 11) else ...
    for fast, slow, code, used in probes:
        assert fast is None and slow is None  # (neither source reading has any source)
        if want is ...:
            assert code is None
        else:
            assert code is not None and code.path == want
        assert used == code


@pytest.mark.parametrize(
    "breaks",
    ["\u2028", "\x0c", "\x1c", "\x85"],
    ids=["U+2028", "form feed", "file separator", "next line"],
)
def test_a_cell_whose_lines_ipython_splits_otherwise_is_read_from_instructions(
    ip: Shell, breaks: str
) -> None:
    """IPython keeps a cell's lines split by ``str.splitlines``, which also breaks at a
    form feed or U+2028 where Python does not: the kept lines are one off from the code's
    (hunt 42: ``grad(h)`` was read from the line before, or ``executing`` failed and
    killed the cell). Such a cell's sources are not read; its instructions are."""
    ip.run(PROBE)
    ip.run(f"# a comment{breaks}with a break\nd1 = probe(k)\nd2 = probe(h)")
    (_, _, _, first), (_, _, _, second) = ip.ns["probes"]
    if sys.version_info >= (3, 11):
        assert (first.path, second.path) == (("k",), ("h",))
    ip.run(PROBE)
    ip.run(f"# {breaks}\n(\n1); d = probe(h)")  # (its kept text no longer parses)


def test_a_cell_name_every_cell_shares_is_not_read_as_the_cells_source(
    ip: Shell, monkeypatch: pytest.MonkeyPatch
) -> None:
    """nbclient runs ipykernel with ``IPYKERNEL_CELL_NAME``: every cell's code has that
    file name, and the line cache holds the last cell compiled under it (hunt 42: a cell
    that ran another first read its call from the other's text)."""
    ip.run(PROBE)
    ip.run("d = probe(h)")
    (_, _, _, used), *_ = ip.ns["probes"]
    name = ip.run("probe.__code__.co_filename")
    monkeypatch.setenv("IPYKERNEL_CELL_NAME", name)
    ip.run("probes.clear()")
    ip.run("d = probe(m.loss)")  # (a cell of its own name: still read from its source)
    (fast, _, _, _), *_ = ip.ns["probes"]
    assert fast is not None or sys.version_info < (3, 11)
    assert used is not None


def test_a_handle_made_in_a_timed_cell_follows_its_name(ip: Shell) -> None:
    """``%%time`` keeps no source: ``def f`` and ``grad(f)`` in one such cell made a fixed
    target (the name is bound by the cell itself, so no guess could take it), and ``g2 =
    g; grad(g2)`` followed ``g`` (hunt 40)."""
    if sys.version_info < (3, 11):
        pytest.skip("the instructions are read on Python 3.11+")
    ip.run("import autograd, autograd.numpy as np\nfrom ipyrefresh import grad")
    ip.run("%%time\ndef f(x):\n    return np.sin(x)\ndf = grad(f)\nr1 = df(0.3)")
    ip.run("%%time\ndef g(x):\n    return x ** 2\ng2 = g\ndg = grad(g2)\ns1 = dg(0.3)")
    ip.run("def f(x):\n    return x ** 3")
    ip.run("def g2(x):\n    return x ** 4")
    ip.run("r2, s2 = df(0.3), dg(0.3)")
    ns = ip.ns
    assert ns["r1"] == autograd.grad(lambda x: autograd.numpy.sin(x))(0.3)
    assert ns["r2"] == autograd.grad(ns["f"])(0.3)
    assert ns["s1"] == autograd.grad(lambda x: x**2)(0.3)
    assert ns["s2"] == autograd.grad(ns["g2"])(0.3)


def test_handles_made_by_the_fast_reading_follow_their_names(ip: Shell) -> None:
    """End to end: a handle made in a long straight-line cell follows the name passed."""
    lines = "\n".join(f"v{i} = {i} * 2.0" for i in range(300))
    ip.run("import autograd.numpy as np\nfrom ipyrefresh import grad")
    ip.run(f"{lines}\ndef g(x):\n    return np.sin(x)\nalias = g\ndg = grad(alias)\nr1 = dg(0.3)")
    ip.run("def alias(x):\n    return x ** 3")
    ip.run("r2 = dg(0.3)")
    assert ip.ns["r1"] == pytest.approx(float(__import__("numpy").cos(0.3)))
    assert ip.ns["r2"] == pytest.approx(3 * 0.3**2)
    assert callsite is not None


@pytest.mark.parametrize(
    "cell",
    [
        "h = grad(h)",
        "%%time\nh = grad(h)",
        "exec('h = grad(h)')",
        "if True:\n    h = grad(h)",
    ],
)
def test_a_handle_stored_under_the_name_it_was_given_holds_the_function(
    ip: Shell, cell: str
) -> None:
    """``h = grad(h)`` (and JAX's ``step = rj.jit(step)``): the name then means the handle
    itself; following it, every call recursed into the handle (hunt 44). The handle holds
    the function the name meant, and still follows what that function reads."""
    ip.run("import autograd, autograd.numpy as np\nfrom ipyrefresh import grad\nS = 2.0")
    ip.run("def h(x):\n    return np.sin(x) * S\norig = h")
    ip.run(cell)
    ip.run("r1 = h(0.3)")
    ip.run("S = 3.0")
    ip.run("r2 = h(0.3)")
    assert ip.ns["r1"] == autograd.grad(lambda x: autograd.numpy.sin(x) * 2.0)(0.3)
    assert ip.ns["r2"] == autograd.grad(ip.ns["orig"])(0.3)


def test_a_name_rebound_to_its_own_handle_by_unpacking_says_so(ip: Shell) -> None:
    """``h, k = grad(h), grad(k)`` is not read as a store into ``h``: the handle follows
    ``h``, which then means the handle. Its call says what happened, rather than recurse
    until Python's limit."""
    ip.run("import autograd.numpy as np\nfrom ipyrefresh import grad")
    ip.run("def h(x):\n    return np.sin(x)\ndef k(x):\n    return np.cos(x)")
    ip.run("h, k = grad(h), grad(k)")
    error = ip.run_error("h(0.3)")
    assert isinstance(error, TypeError) and "now means this derivative itself" in str(error)


def test_an_attribute_stored_with_its_own_handle_holds_the_function(ip: Shell) -> None:
    """``N.f = grad(N.f)`` (and ``t.step = rj.jit(t.step)``): as ``h = grad(h)``, the
    attribute then means the handle (hunt 45)."""
    ip.run("import autograd, autograd.numpy as np, types\nfrom ipyrefresh import grad\nS = 2.0")
    ip.run("N = types.SimpleNamespace()\ndef f(x):\n    return np.sin(x) * S\nN.f = f\norig = f")
    ip.run("N.f = grad(N.f)")
    ip.run("r1 = N.f(0.3)\nS = 3.0\nr2 = N.f(0.3)")
    assert ip.ns["r1"] == autograd.grad(lambda x: autograd.numpy.sin(x) * 2.0)(0.3)
    assert ip.ns["r2"] == autograd.grad(ip.ns["orig"])(0.3)
