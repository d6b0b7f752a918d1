"""Reading the expression a cell passed to ``grad``: the fast reading of the call's own
source span (Python 3.11+) against ``executing``'s reading of the whole cell, on the same
frames. Where the fast reading answers, both must name the same thing; in loops (where a
name may be rebound at each turn) and in functions it must leave the answer to
``executing``."""

from __future__ import annotations

import sys

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
    for fast, slow, used in probes:
        if sys.version_info >= (3, 11) and CELLS[cell]:
            assert fast is not None, "the fast reading did not answer"
            assert slow is not None
            assert fast.path == slow.path, (fast, slow)
            assert used == fast
        else:
            assert fast is None
            assert used == slow


def test_a_cell_whose_source_is_not_kept_is_read_by_executing(ip: Shell) -> None:
    """``exec`` of a string: no source for the fast reading (nor for ``executing``)."""
    ip.run(PROBE)
    ip.run("exec('d = probe(h)')")
    (fast, slow, used), *_ = ip.ns["probes"]
    assert fast is None and used == slow


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
