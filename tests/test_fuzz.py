"""Fuzzing (hypothesis): ``%grad`` lines and the namespace diff.

* Any ``%grad`` line either answers exactly what autograd answers or fails with one
  line (an IPython ``UsageError``, shown without a traceback); the user's namespace is
  never changed either way.
* Any sequence of namespace edits — ``def``, rebinding, ``del``, ``globals()[...] =``,
  ``exec``, in-place changes of data, several in one cell — leaves every derivative
  equal to a fresh autograd computation of the current code (or failing as it does).
"""

from __future__ import annotations

from typing import Any

import autograd
import numpy as onp
import pytest
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st
from IPython.core.error import UsageError

from ipyrefresh.ipython.gradline import parse_call
from ipyrefresh.ipython.magics import parse_grad_line

TRANSFORM_FLAGS = ["--hessian", "--jacobian", "--value", "--elementwise"]


def reference(fn: Any, transform: str, argnum: Any, args: Any, kwargs: Any) -> Any:
    return getattr(autograd, transform)(fn, argnum)(*args, **kwargs)


NS_SETUP = """
import autograd.numpy as np
from ipyrefresh import grad

def f(x):
    return np.sum(np.sin(x) * x)

def g(x, y):
    return np.sum(x * y) ** 2

def vec(x):
    return np.sin(x) * 2.0

def boom(x):
    raise ValueError("boom\\nsecond line")

def gen(x):
    yield x

arr = np.array([0.5, -1.0])
ints = np.array([1, 2])
n = 3
s = "text"
lst = [1.0, 2.0]
kw = {"y": 2.0}
notfn = 3.0
"""

# (No numpy ufuncs with random arguments: np.sin(0.5, arr) writes into arr by itself.)
CALLEES = ["f", "g", "vec", "boom", "gen", "notfn", "nosuch", "lambda x: x * x", "1"]
ARGS = [
    "0.5",
    "arr",
    "ints",
    "n",
    "s",
    "lst",
    "*lst",
    "**kw",
    "y=2.0",
    "*n",
    "**lst",
    "nosuch",
    "1/0",
    "(z := 1.0)",
    "[t := 2.0 for _ in lst]",
    "np.ones(2)",
    "-arr",
    "arr[0]",
    "(1.0, 2.0)",
]
OPTIONS = [
    *TRANSFORM_FLAGS,
    "-a",
    "-a 1",
    "-a1",
    "-a 0,1",
    "-a=1",
    "--argnum 2",
    "-a -1",
    "-a x",
    "-a ()",
    "-v",
    "--verbose",
    "--backend autograd",
    "--backend nope",
    "--backend",
    "--nope",
    "-",
    "--",
]


@st.composite
def grad_lines(draw: Any) -> str:
    options = draw(st.lists(st.sampled_from(OPTIONS), max_size=3))
    callee = draw(st.sampled_from(CALLEES))
    args = draw(st.lists(st.sampled_from(ARGS), max_size=3))
    call = f"{callee}({', '.join(args)})" if not callee.startswith("lambda") else callee
    if callee.startswith("lambda"):
        call = f"({callee})({', '.join(args)})"
    tail = draw(st.sampled_from(["", "", " ", ")", "(", " extra", "[", "'", "#c"]))
    return " ".join([*options, call]) + tail


VALID_CALLS = {
    "f": ["0.5", "arr", "-arr", "np.ones(2)", "arr[0]", "0.5 * arr"],
    "g": ["arr, arr", "0.5, 2.0", "arr, y=arr", "*lst", "arr, **kw", "0.5, y=-1.0"],
    "vec": ["arr", "np.ones(3)", "0.5"],
    "(lambda x: x * x)": ["0.5", "arr[1]"],
    "np.sin": ["0.5"],
}
VALID_OPTIONS = ["", "", "-v", "--hessian", "--jacobian", "--value", "--elementwise", "-a 1"]


@st.composite
def valid_grad_lines(draw: Any) -> str:
    callee = draw(st.sampled_from(sorted(VALID_CALLS)))
    args = draw(st.sampled_from(VALID_CALLS[callee]))
    option = draw(st.sampled_from(VALID_OPTIONS))
    return f"{option} {callee}({args})".strip()


def snapshot(ns: dict[str, Any]) -> dict[str, Any]:
    """Names, identities, and the contents of arrays and lists (ignoring IPython's own)."""
    out: dict[str, Any] = {}
    for k, v in ns.items():
        if k.startswith("_") or k in ("In", "Out", "exit", "quit", "get_ipython"):
            continue
        content = None
        if isinstance(v, onp.ndarray):
            content = v.tobytes()
        elif type(v) in (list, dict):
            content = repr(v)
        out[k] = (id(v), content)
    return out


def _no_event(name: str) -> None:
    pass


def check_line(ip: Any, line: str, note: Any = _no_event) -> None:
    before = snapshot(ip.ns)
    try:
        result = ip.shell.run_line_magic("grad", line)
    except UsageError as exc:
        note("usage error")
        message = str(exc)
        assert message.startswith("%grad: "), message
        assert "\n" not in message and "Traceback" not in message, message
        assert len(message) < 400, message
    else:
        note("answered")
        request = parse_grad_line(line)
        call = parse_call(request.expr, ip.ns)  # the same pieces the magic evaluated
        expected = reference(
            call.fn, request.transform.value, request.argnum, call.args, call.kwargs
        )
        for got, want in zip(_leaves(result), _leaves(expected), strict=True):
            assert onp.allclose(got, want, equal_nan=True), (line, got, want)
    assert snapshot(ip.ns) == before, line


def _leaves(x: Any) -> list[Any]:
    return [leaf for item in x for leaf in _leaves(item)] if type(x) is tuple else [x]


@pytest.fixture
def fuzz_ip(ip: Any) -> Any:
    ip.run(NS_SETUP)
    return ip


@settings(
    max_examples=400,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(line=grad_lines())
def test_grad_lines_structured(fuzz_ip: Any, line: str) -> None:
    check_line(fuzz_ip, line, event)


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(line=valid_grad_lines())
def test_grad_lines_mostly_valid(fuzz_ip: Any, line: str) -> None:
    check_line(fuzz_ip, line, event)


@settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(line=st.text(alphabet="fgarnsl()[]{},.:=*-+/ 0123456789'\"\\#\t\n_xyv", max_size=30))
@example(line="-\n'")  # an unclosed quote after an option (shlex raised ValueError)
def test_grad_lines_random_text(fuzz_ip: Any, line: str) -> None:
    check_line(fuzz_ip, line, event)


@pytest.mark.parametrize(
    "line",
    [
        "f((z := 1.0))",
        "g(arr, [y := 2.0 for _ in lst][0])",
        "f(arr) if (q := 1) else f(arr)",
    ],
)
def test_grad_never_assigns_to_the_namespace(fuzz_ip: Any, line: str) -> None:
    check_line(fuzz_ip, line)
    assert "z" not in fuzz_ip.ns and "y" not in fuzz_ip.ns and "q" not in fuzz_ip.ns


# -- the namespace diff ------------------------------------------------------------------------
EDITS = [
    "def g(x):\n    return np.sin(x) * {c}",
    "def g(x):\n    return x ** 2 * {c}",
    "def k(x):\n    return np.cos(x) * {c}",
    "def h(x):\n    return g(x) + W[0] * x",
    "def h(x):\n    return fs[0](x) * W[1]",
    "def h(x, scale=W):\n    return g(x) * scale[0]",
    "def h(x):\n    return table['a'](x) + g(x)",
    "W = np.array([{c}, 2.0])",
    "W[0] = {c}",
    "W[1] += 1.0",
    "fs[0] = k",
    "fs[0] = globals().get('g', k)",
    "fs.insert(0, np.tanh)",
    "table['a'] = k",
    "table['a'] = lambda x: x * {c}",
    "globals()['g'] = lambda x: x * {c}",
    "exec('def g(x):\\n    return np.tanh(x) * {c}')",
    "if 'g' in globals():\n    del g",
    "g = {c}",
    "from math import *",
    "pass",
]
SETUP_DIFF = """
import autograd.numpy as np
from ipyrefresh import grad
W = np.array([1.0, 2.0])
def g(x):
    return np.sin(x)
def k(x):
    return x * 3.0
fs = [g]
table = {'a': g}
def h(x):
    return g(x) + W[0] * x
dh = grad(h)
"""


def expected_grad(ns: dict[str, Any]) -> tuple[str, Any]:
    try:
        return "ok", reference(ns["h"], "grad", 0, (0.3,), {})
    except Exception as exc:
        return "error", type(exc)


def check_now(ip: Any, cell: str = "") -> None:
    """Run ``cell`` followed by a call of the handle in the same cell; compare with autograd."""
    result = ip.shell.run_cell(f"{cell}\n_fz = dh(0.3)" if cell else "_fz = dh(0.3)")
    want = expected_grad(ip.ns)
    error = result.error_in_exec
    event(f"expected {want[0]}")
    if want[0] == "ok":
        assert error is None, (cell, error)
        assert onp.allclose(ip.ns["_fz"], want[1]), (cell, ip.ns["_fz"], want[1])
    else:
        assert isinstance(error, want[1]), (cell, error, want[1])


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    cells=st.lists(
        st.lists(
            st.tuples(st.sampled_from(EDITS), st.sampled_from(["1.5", "2.0", "-0.5"])),
            min_size=1,
            max_size=3,
        ),
        min_size=1,
        max_size=8,
    ),
    call_inside=st.booleans(),
)
def test_namespace_edits_never_leave_a_stale_answer(
    ip: Any, cells: list[list[tuple[str, str]]], call_inside: bool
) -> None:
    ip.shell.run_cell("%reset -f")
    ip.run(SETUP_DIFF)
    check_now(ip)
    for cell in cells:
        source = "\n".join(edit.format(c=c) for edit, c in cell)
        if call_inside:  # the edits and a call in the same cell
            check_now(ip, source)
        else:
            ip.shell.run_cell(source)
        check_now(ip)
