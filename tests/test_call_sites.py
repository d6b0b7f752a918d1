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

from ipyrefresh._src import targets

from .conftest import Shell

PROBE = """
import sys as _sys
from ipyrefresh._src import targets as _targets
probes = []
def probe(fun=None, argnum=0, **kw):
    frame = _sys._getframe(1)
    fast = _targets._cell_call(frame)
    probes.append((
        None if fast is None else _targets._read_site(fast),
        _targets._executing_site(frame, fun),
        _targets.passed_expression(frame, fun),
        _targets._bytecode_site(frame),
    ))
    return lambda *a: probes
class M:
    def loss(self, x):
        return x
m = M()
def h(x):
    return x
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
    "if True:\n    d = probe(h)": True,
    "for k in range(2):\n    pass\nd = probe(h)": True,  # (a loop before it)
    "for h in fs:\n    d = probe(h)": False,
    "for k in range(2):\n    d = probe(h)": False,
    "k = 0\nwhile k < 2:\n    d = probe(h)\n    k += 1": False,
    "ds = [probe(f) for f in fs]": False,
    "ds = list(probe(f) for f in fs)": False,
    "def mk():\n    return probe(h)\nd = mk()": False,
    "@probe\ndef dh(x):\n    return x": False,
    "import asyncio\nawait asyncio.sleep(0)\nd = probe(h)": True,
}


@pytest.mark.parametrize("cell", list(CELLS))
def test_the_fast_reading_names_what_executing_names(ip: Shell, cell: str) -> None:
    ip.run(PROBE)
    ip.run(cell)
    probes = ip.ns["probes"]
    assert probes, "the probe did not run"
    for fast, slow, used, _ in probes:
        if sys.version_info >= (3, 11) and CELLS[cell]:
            assert fast is not None, "the fast reading did not answer"
            assert slow is not None
            assert fast.path == slow.path, (fast, slow)
            assert used == fast
        else:
            assert fast is None
            assert used == slow


#: A cell run without its source kept (``%%time``, ``exec``): (cell, the path its
#: instructions name, or None where they cannot tell).
SOURCELESS = {
    "%%time\nd = probe(h)": ("h",),
    "%%time\nd = probe(m.loss)": ("m", "loss"),
    "%%prun -q\nd = probe(h)": ("h",),
    "exec('d = probe(h)')": ("h",),
    "exec('d = probe(m.loss)(1.0)')": ("m", "loss"),
    "%%time\nd = probe(fun=h)": None,
    "%%time\nd = probe(h, 0)": None,
    "%%time\nd = probe(fs[0])": None,
    "%%time\nd = probe(lambda x: x)": None,
    "%%time\nfor h in fs:\n    d = probe(h)": None,
    "%%time\nd = [probe(f) for f in fs]": None,
}


@pytest.mark.parametrize("cell", list(SOURCELESS))
def test_a_cell_without_source_is_read_from_its_instructions(ip: Shell, cell: str) -> None:
    ip.run(PROBE)
    ip.run(cell)
    probes = ip.ns["probes"]
    assert probes, "the probe did not run"
    want = SOURCELESS[cell] if sys.version_info >= (3, 11) else None
    for fast, slow, used, code in probes:
        assert fast is None and slow is None  # (neither source reading has any source)
        assert (code.path if code is not None else None) == want
        assert used == code


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
    assert targets is not None
