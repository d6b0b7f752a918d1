"""Adversarial scenarios for the tape with *nothing* changed between calls: the replay must
give autograd's answer bit for bit (type, dtype, bytes), call after call, and functions
with effects (random draws, counters, printing, files) must behave exactly as they do
under plain autograd from the same seeds.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as onp
import pytest

from .conftest import Shell
from .scenario_helpers import (
    PRELUDE,
    assert_same,
    check,
)


@pytest.fixture
def nb(ip: Shell) -> Shell:
    ip.run(PRELUDE)
    return ip


@pytest.fixture(params=["with_extension", "without_extension"])
def anynb(request: pytest.FixtureRequest, bare_shell: Shell) -> Shell:
    if request.param == "with_extension":
        bare_shell.run("%load_ext ipyrefresh")
    bare_shell.run(PRELUDE)
    return bare_shell


def sequence(nb: Shell, setup: str, calls: str, n: int = 5) -> None:
    """Run ``setup`` then ``calls`` n times with ipyrefresh (``{D}`` = ipyrefresh's grad),
    then the same with plain autograd (``{D}`` = autograd.grad); compare the sequences."""
    nb.run(setup.replace("{D}", "grad") + "\n_seq = []")
    nb.run(f"for _ in range({n}):\n    _seq.append({calls})")
    mine = nb.ns["_seq"]
    nb.run(setup.replace("{D}", "autograd.grad") + "\n_seq = []")
    nb.run(f"for _ in range({n}):\n    _seq.append({calls})")
    assert_same(mine, nb.ns["_seq"], "the sequence of answers")


# -- non-differentiated arguments ------------------------------------------------------------


def test_isinstance_branch_on_scale(anynb: Shell) -> None:
    anynb.run(
        """
def f(x, scale):
    if isinstance(scale, float):
        return np.sum(np.sin(x) * scale)
    if isinstance(scale, bool):
        return np.sum(x) * 7.0
    return np.sum(x ** 2) * scale
df = grad(f)
x = np.array([0.5, 1.5])
scales = [2.0, 2, 2.0, 3, onp.float64(2.0), True, onp.float32(2.0), False, 2.5, 2]
out = [(df(x, s), df(x, s), autograd.grad(f)(x, s)) for s in scales]
"""
    )
    for i, (a, b, want) in enumerate(anynb.ns["out"]):
        assert_same(a, want, f"scale #{i}")
        assert_same(b, want, f"scale #{i} (again)")


def test_iteration_counter_argument_one_entry_and_branching(nb: Shell) -> None:
    nb.run(
        """
def f(x, i):
    if i % 5 == 0:
        return np.sum(x ** 2)
    return np.sum(np.sin(x) * (i % 3 + 1))
df = grad(f)
x = np.array([0.1, 0.2, 0.3])
bad = [i for i in range(50)
       if autograd.grad(f)(x, i).tobytes() != df(x, i).tobytes()
       or autograd.grad(f)(x, i).tobytes() != df(x, i).tobytes()]
entries = len(df.entries)
"""
    )
    assert nb.ns["bad"] == []
    assert nb.ns["entries"] == 1


def test_iteration_counter_unread_stays_compiled(nb: Shell) -> None:
    nb.run(
        """
def f(x, i):
    return np.sum(np.tanh(x) * x)
df = grad(f)
x = np.array([0.1, 0.2, 0.3])
bad = [i for i in range(50) if df(x, i).tobytes() != autograd.grad(f)(x, i).tobytes()]
st = [e for e in ipyrefresh.status()['entries'] if e['name'] == 'grad(f)']
"""
    )
    assert nb.ns["bad"] == []
    (entry,) = nb.ns["st"]
    assert entry["fallback"] == "" and entry["builds"] == 1, entry


def test_learning_rate_schedule_argument(anynb: Shell) -> None:
    anynb.run(
        """
def f(x, lr):
    return np.sum(x ** 2) * lr + np.sum(np.cos(x))
df = grad(f)
x = np.array([0.1, 0.2])
out = [(df(x, 1.0 / (1 + t)), df(x, 1.0 / (1 + t)), autograd.grad(f)(x, 1.0 / (1 + t)))
       for t in range(20)]
"""
    )
    for i, (a, b, want) in enumerate(anynb.ns["out"]):
        assert_same(a, want, f"step {i}")
        assert_same(b, want, f"step {i} (again)")


def test_keyword_and_string_and_none_arguments(anynb: Shell) -> None:
    anynb.run(
        """
def f(x, mode='sq', reg=None, *, w=1.0):
    out = np.sum(x ** 2) if mode == 'sq' else np.sum(np.abs(x))
    if reg is not None:
        out = out + reg * np.sum(x)
    return out * w
df = grad(f)
x = np.array([0.5, -1.5])
cases = [dict(), dict(mode='abs'), dict(reg=0.1), dict(w=3.0), dict(mode='abs', reg=2.0, w=-1.0),
         dict(), dict(w=3)]
out = [(df(x, **k), df(x, **k), autograd.grad(f)(x, **k)) for k in cases]
"""
    )
    for i, (a, b, want) in enumerate(anynb.ns["out"]):
        assert_same(a, want, f"case {i}")
        assert_same(b, want, f"case {i} (again)")


def test_negative_zero_argument(anynb: Shell) -> None:
    anynb.run(
        """
def f(x, z):
    return x * np.arctan2(z, -1.0)
df = grad(f)
out = [(df(1.0, z), df(1.0, z), autograd.grad(f)(1.0, z)) for z in [0.0, -0.0, 0.0]]
"""
    )
    for i, (a, b, want) in enumerate(anynb.ns["out"]):
        assert_same(a, want, f"z #{i}")
        assert_same(b, want, f"z #{i} (again)")


def test_data_argument_equal_copy_after_original_changed(anynb: Shell) -> None:
    """The batch passed now equals the one of the first call, but it is another array; the
    first one has since been normalised in place."""
    anynb.run(
        """
def f(w, data):
    return np.sum(np.sin(w) * data)
df = grad(f)
w = np.arange(3.0)
batch = np.array([1.0, 2.0, 3.0])
df(w, batch); df(w, batch)
raw_copy = batch.copy()
batch -= batch.mean()
"""
    )
    check(anynb, "df(w, raw_copy)", "autograd.grad(f)(w, raw_copy)")
    check(anynb, "df(w, batch)", "autograd.grad(f)(w, batch)")


def test_minibatch_buffer_reused(anynb: Shell) -> None:
    anynb.run(
        """
def f(w, xb, yb):
    return np.mean((np.dot(xb, w) - yb) ** 2)
df = grad(f)
rs = onp.random.RandomState(0)
X, Y = rs.randn(6, 3), rs.randn(6)
xb, yb = np.empty((2, 3)), np.empty(2)
w = np.zeros(3)
out = []
for epoch in range(2):
    for i in range(3):
        xb[:] = X[2 * i:2 * i + 2]; yb[:] = Y[2 * i:2 * i + 2]
        out.append((df(w, xb, yb), df(w, xb, yb), autograd.grad(f)(w, xb, yb)))
        w = w - 0.1 * out[-1][2]
"""
    )
    for i, (a, b, want) in enumerate(anynb.ns["out"]):
        assert_same(a, want, f"batch {i}")
        assert_same(b, want, f"batch {i} (again)")


def test_callback_argument(anynb: Shell) -> None:
    anynb.run(
        """
def f(x, act):
    return np.sum(act(x) * x)
df = grad(f)
x = np.array([0.3, -0.6])
acts = [np.tanh, np.sin, lambda v: v ** 2, np.tanh]
out = [(df(x, a), df(x, a), autograd.grad(f)(x, a)) for a in acts]
"""
    )
    for i, (a, b, want) in enumerate(anynb.ns["out"]):
        assert_same(a, want, f"act #{i}")
        assert_same(b, want, f"act #{i} (again)")


# -- dtypes and types ------------------------------------------------------------------------

FUNCTIONS = {
    "poly": "np.sum(x ** 3 - 2 * x ** 2 + x)",
    "reuse": "np.sum(x * x + x * np.exp(x) + np.tanh(x) * x)",
    "mean_sqrt": "np.mean(np.sqrt(x * x + 1.0))",
    "softmax_xent": "-np.log(np.exp(x[0]) / np.sum(np.exp(x)))",
    "logsumexp": "np.log(np.sum(np.exp(x - np.max(x)))) + np.max(x)",
    "abs_where": "np.sum(np.where(x > 0.5, x ** 2, np.abs(x)))",
    "maximum": "np.sum(np.maximum(x, 0.3) * x)",
    "pow_div": "np.sum(np.power(np.abs(x) + 1.0, x) / (1.0 + x ** 2))",
    "dot_self": "np.dot(x, x) * np.sum(x)",
    "int_consts": "np.sum(x * 3 + 2) ** 2",
    "mean_var": "np.var(x) + np.mean(x) ** 2",
    "cumsum_prod": "np.sum(np.cumsum(x) * np.prod(x + 2.0))",
    "sort_clip": "np.sum(np.sort(x) * np.clip(x, -0.5, 0.5))",
    "index_slices": "x[0] * x[1] + np.sum(x[1:] ** 2) - x[-1]",
    "float_literal_mix": "np.sum(0.1 * x + 1e-3) * 2.5",
}
INPUTS = {
    "float64": "np.array([0.1, 0.7, 1.3])",
    "float32": "np.array([0.1, 0.7, 1.3], dtype=np.float32)",
    "float16": "np.array([0.1, 0.7, 1.3], dtype=np.float16)",
    "float32_fortran_2d": (
        "np.asfortranarray(np.array([[0.1, 0.7], [1.3, -0.2]], dtype=np.float32)).ravel(order='F')"
    ),
}


@pytest.mark.parametrize("inp", list(INPUTS))
@pytest.mark.parametrize("fn", list(FUNCTIONS))
def test_bitwise_and_dtype(nb: Shell, fn: str, inp: str) -> None:
    nb.run(f"def f(x):\n    return {FUNCTIONS[fn]}\nx = {INPUTS[inp]}\ndh = grad(f)")
    check(nb, "dh(x)", "autograd.grad(f)(x)", 3)
    nb.run(f"x = {INPUTS[inp]} * 1.5")
    check(nb, "dh(x)", "autograd.grad(f)(x)", 2, what="new values:")


SCALARS = {
    "python_float": "0.7",
    "numpy_float64": "onp.float64(0.7)",
    "numpy_float32": "onp.float32(0.7)",
    "zero_d_array": "np.array(0.7)",
    "zero_d_float32": "np.array(0.7, dtype=np.float32)",
}


@pytest.mark.parametrize("inp", list(SCALARS))
@pytest.mark.parametrize(
    "body",
    ["x ** 2 * np.sin(x)", "x * x * x + 2.0 * x", "np.exp(-x) / (1.0 + x)", "np.abs(x - 1.0)"],
    ids=["sin", "reuse", "exp_div", "abs"],
)
def test_scalar_input_types(nb: Shell, inp: str, body: str) -> None:
    nb.run(f"def f(x):\n    return {body}\nx = {SCALARS[inp]}\ndh = grad(f)")
    check(nb, "dh(x)", "autograd.grad(f)(x)", 3)


TRANSFORMS = {
    "hessian": ("hessian", "np.sum(np.sin(x) * x ** 2) + x[0] * x[1]"),
    "jacobian": ("jacobian", "np.tanh(x) * x[::-1] + x[0]"),
    "value_and_grad": ("value_and_grad", "np.sum(np.exp(x) * x)"),
    "elementwise_grad": ("elementwise_grad", "np.sin(x) * x + x ** 3"),
    "grad": ("grad", "np.sum(x ** 2 * x)"),
}


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("name", list(TRANSFORMS))
def test_transforms_bitwise(nb: Shell, name: str, dtype: str) -> None:
    tr, body = TRANSFORMS[name]
    nb.run(
        f"def f(x):\n    return {body}\nx = np.array([0.3, -0.8, 1.1], dtype=np.{dtype})\n"
        f"dh = {tr}(f)"
    )
    check(nb, "dh(x)", f"autograd.{tr}(f)(x)", 3)
    nb.run("x = x[::-1].copy()")
    check(nb, "dh(x)", f"autograd.{tr}(f)(x)", 2, what="new values:")


def test_tuple_argnums(anynb: Shell) -> None:
    anynb.run(
        "def f(a, b, c):\n    return np.sum(a * b) + np.sum(np.sin(b) * c) + c ** 2\n"
        "dh = grad(f, (0, 2))\na, b, c = np.ones(2), np.arange(2.0), 3.0"
    )
    check(anynb, "dh(a, b, c)", "autograd.grad(f, (0, 2))(a, b, c)", 3)
    anynb.run("b = b + 1.0")
    check(anynb, "dh(a, b, c)", "autograd.grad(f, (0, 2))(a, b, c)", 2)
    anynb.run("def gv(a, b, c):\n    return np.sin(a * b) * c\ndj = jacobian(gv, 1)")
    check(anynb, "dj(a, b, c)", "autograd.jacobian(gv, 1)(a, b, c)", 2)
    # autograd cannot take a jacobian for a tuple of arguments: the handle fails the same way
    theirs = anynb.run_error("autograd.jacobian(f, (1, 2))(a, b, c)")
    mine = anynb.run_error("jacobian(f, (1, 2))(a, b, c)")
    assert type(mine) is type(theirs)


def test_dict_and_list_params(anynb: Shell) -> None:
    anynb.run(
        """
def loss(p, x):
    h = np.tanh(np.dot(x, p['W']) + p['b'])
    out = np.sum(h * p['layers'][0]) + p['layers'][1] * np.sum(h ** 2)
    return out + p['nested']['s'] ** 2
p = {'W': np.ones((2, 3)) * 0.1, 'b': np.zeros(3), 'layers': [np.ones(3), 0.5],
     'nested': {'s': 1.5}}
x = np.array([[1.0, 2.0], [0.5, -1.0]])
dh = grad(loss)
"""
    )
    check(anynb, "dh(p, x)", "autograd.grad(loss)(p, x)", 3)
    anynb.run("p['W'] = p['W'] * 2.0")
    check(anynb, "dh(p, x)", "autograd.grad(loss)(p, x)", 2)


def test_list_and_tuple_params_unused_entry(anynb: Shell) -> None:
    anynb.run(
        "def f(ps):\n    return np.sum(ps[0] ** 2) + ps[2] * 3.0\n"
        "dl, dt = grad(f), grad(f)\nl = [np.ones(2), np.ones(3), 2.0]\nt = tuple(l)"
    )
    check(anynb, "dl(l)", "autograd.grad(f)(l)", 3)
    check(anynb, "dt(t)", "autograd.grad(f)(t)", 3)


def test_output_independent_of_input(anynb: Shell) -> None:
    anynb.run(
        "import warnings\nwarnings.filterwarnings('ignore', message='Output seems independent')\n"
        "def f(x):\n    return 3.0 + 0.0 * np.sum(onp.asarray([1.0]))\ndh = grad(f)"
    )
    check(anynb, "dh(np.ones(2))", "autograd.grad(f)(np.ones(2))", 3)
    check(anynb, "dh(1.5)", "autograd.grad(f)(1.5)", 3)


@pytest.mark.parametrize(
    "call",
    [
        "grad(f)(2)",
        "grad(f)(np.ones(2), 3)",
        "grad(g)(np.ones(2))",
        "grad(f, 3)(1.0)",
        "hessian(f)('a')",
        "grad(f)([1.0, 'x'])",
        "grad(f)(x=1.0)",
    ],
    ids=[
        "int_input",
        "extra_argument",
        "vector_output",
        "bad_argnum",
        "str_input",
        "mixed_list",
        "keyword_input",
    ],
)
def test_errors_match_autograd(anynb: Shell, call: str) -> None:
    """Every cell that fails under autograd fails the same way with a handle (twice)."""
    anynb.run("def f(x):\n    return np.sum(x ** 2)\ndef g(x):\n    return x * 2.0")
    theirs = anynb.run_error("autograd." + call)
    for _ in range(2):
        mine = anynb.run_error(call)
        assert type(mine) is type(theirs), (mine, theirs)


# -- value-dependent control flow -----------------------------------------------------------


def test_branches_on_the_input_both_ways(anynb: Shell) -> None:
    anynb.run(
        """
def f(x):
    if np.sum(x) > 0:
        return np.sum(np.sin(x) * x)
    return np.sum(np.exp(x)) - np.sum(x ** 2)
dh = grad(f)
xs = [np.array([v, v / 2]) for v in (1.0, -1.0, 2.0, -3.0, 0.0, 0.5, -0.5, 1.0)]
out = [(dh(v), dh(v), autograd.grad(f)(v)) for v in xs]
"""
    )
    for i, (a, b, want) in enumerate(anynb.ns["out"]):
        assert_same(a, want, f"x #{i}")
        assert_same(b, want, f"x #{i} (again)")


def test_while_loop_count_depends_on_input(anynb: Shell) -> None:
    anynb.run(
        """
def f(x):
    n = 0
    while x > 1.0 and n < 50:
        x = x / 2.0 + np.sin(x) * 0.1
        n += 1
    return x * x
dh = grad(f)
xs = (0.5, 3.0, 17.0, 3.0, 1.5, 100.0, 0.9, 17.0, 2.2, 40.0)
out = [(dh(v), dh(v), autograd.grad(f)(v)) for v in xs]
"""
    )
    for i, (a, b, want) in enumerate(anynb.ns["out"]):
        assert_same(a, want, f"x #{i}")
        assert_same(b, want, f"x #{i} (again)")


def test_data_dependent_shapes(anynb: Shell) -> None:
    anynb.run(
        """
def f(x):
    pos = x[x > 0]
    return np.sum(pos ** 2) * len(np.unique(np.round(x))) + np.sum(x)
dh = grad(f)
xs = [np.array([1.0, -2.0, 3.0]), np.array([-1.0, -2.0, 3.0]), np.array([1.0, 2.0, 3.0]),
      np.array([1.2, 1.4, 1.1]), np.array([1.0, -2.0, 3.0])]
out = [(dh(v), dh(v), autograd.grad(f)(v)) for v in xs]
"""
    )
    for i, (a, b, want) in enumerate(anynb.ns["out"]):
        assert_same(a, want, f"x #{i}")
        assert_same(b, want, f"x #{i} (again)")


def test_integer_conversion_of_input(anynb: Shell) -> None:
    anynb.run(
        """
def f(x):
    n = int(np.floor(x * 3.0))
    out = x
    for _ in range(n):
        out = np.tanh(out) * 1.5
    return out
dh = grad(f)
out = [(dh(v), dh(v), autograd.grad(f)(v)) for v in (0.2, 0.5, 1.0, 0.5, 2.1, 0.2)]
"""
    )
    for i, (a, b, want) in enumerate(anynb.ns["out"]):
        assert_same(a, want, f"x #{i}")
        assert_same(b, want, f"x #{i} (again)")


def test_stop_gradient_with_getval(anynb: Shell) -> None:
    """``getval`` is autograd's stop-gradient: the normaliser is a constant for the
    derivative but must be recomputed from each new input."""
    anynb.run(
        """
from autograd.tracer import getval
def f(x):
    n = np.sqrt(np.sum(x ** 2))
    return np.sum(x ** 3) / getval(n)
dh = grad(f)
"""
    )
    for v in ("[1.0, 2.0]", "[3.0, 1.0]", "[-0.5, 0.25]"):
        anynb.run(f"x = np.array({v})")
        check(anynb, "dh(x)", "autograd.grad(f)(x)", 2, what=f"x = {v}:")


def test_gradient_clipping_with_getval_branch(anynb: Shell) -> None:
    anynb.run(
        """
from autograd.tracer import getval
def f(x):
    if getval(np.max(np.abs(x))) > 1.0:
        x = x / 2.0
    return np.sum(np.sin(x) * x)
dh = grad(f)
"""
    )
    for v in ("[0.5, 0.2]", "[3.0, 1.0]", "[0.5, 0.2]"):
        anynb.run(f"x = np.array({v})")
        check(anynb, "dh(x)", "autograd.grad(f)(x)", 2, what=f"x = {v}:")


def test_recursion_with_depth_argument(anynb: Shell) -> None:
    anynb.run(
        "def f(x, n):\n    return x if n == 0 else f(np.sin(x) * 1.1, n - 1) + x * 0.1\n"
        "dh = grad(f)"
    )
    for n in (0, 3, 5, 3, 1):
        check(anynb, f"dh(0.4, {n})", f"autograd.grad(f)(0.4, {n})", 2, what=f"n={n}:")


def test_integer_dtype_constructor_on_traced_value(anynb: Shell) -> None:
    anynb.run("def f(x):\n    k = np.int64(x * 2)\n    return x ** 2 * k\ndh = grad(f)")
    for v in ("0.6", "1.7", "0.6"):
        check(anynb, f"dh({v})", f"autograd.grad(f)({v})", 2)


# -- custom gradient rules --------------------------------------------------------------------


def test_defvjp_on_library_primitive_after_handle_exists(anynb: Shell) -> None:
    anynb.run(
        """
from autograd.extend import defvjp
import autograd.core
_orig_sin_rule = autograd.core.primitive_vjps[np.sin]
def f(x):
    return np.sum(np.sin(x) * 2.0)
dh = grad(f)
x = np.array([0.3, 0.9])
"""
    )
    try:
        check(anynb, "dh(x)", "autograd.grad(f)(x)")
        anynb.run("defvjp(np.sin, lambda ans, x: lambda g: g * 10.0)")
        check(anynb, "dh(x)", "autograd.grad(f)(x)", what="after defvjp:")
        anynb.run("defvjp(np.sin, lambda ans, x: lambda g: -g * np.cos(x))")
        check(anynb, "dh(x)", "autograd.grad(f)(x)", what="after a second defvjp:")
    finally:
        anynb.run("autograd.core.primitive_vjps[np.sin] = _orig_sin_rule")
    check(anynb, "dh(x)", "autograd.grad(f)(x)", what="after restoring autograd's rule:")


def test_defvjp_on_a_primitive_reached_only_through_an_operator(anynb: Shell) -> None:
    """``x @ W`` and ``x * c`` reach ``np.matmul`` and ``np.multiply`` through the box's
    operators, not through any name the code reads: only the guard on the rules of the
    primitives the tape replays sees ``defvjp`` replace one."""
    anynb.run(
        """
from autograd.extend import defvjp
import autograd.core
_orig_rules = {p: autograd.core.primitive_vjps[p] for p in (np.matmul, np.multiply)}
W = np.array([[1.0, 2.0], [3.0, 4.0]])
def f(x):
    return np.sum((x @ W) * x)
dh = grad(f)
x = np.array([0.3, 0.9])
"""
    )
    try:
        check(anynb, "dh(x)", "autograd.grad(f)(x)")
        anynb.run(
            "defvjp(np.matmul, lambda ans, A, B: lambda g: 3.0 * np.matmul(g, B.T),\n"
            "       lambda ans, A, B: lambda g: np.outer(A, g))"
        )
        check(anynb, "dh(x)", "autograd.grad(f)(x)", what="after defvjp(np.matmul):")
        anynb.run(
            "defvjp(np.multiply, lambda ans, a, b: lambda g: g * b * 0.5,\n"
            "       lambda ans, a, b: lambda g: g * a * 0.25)"
        )
        check(anynb, "dh(x)", "autograd.grad(f)(x)", what="after defvjp(np.multiply):")
    finally:
        anynb.run("autograd.core.primitive_vjps.update(_orig_rules)")
    check(anynb, "dh(x)", "autograd.grad(f)(x)", what="after restoring autograd's rules:")


def test_defvjp_marks_library_primitive_non_differentiable(anynb: Shell) -> None:
    """``defvjp(f, None)`` declares a zero gradient (autograd's own zero rule)."""
    anynb.run(
        """
from autograd.extend import defvjp
import autograd.core
_orig_sin_rule = autograd.core.primitive_vjps[np.sin]
def f(x):
    return np.sin(x) * 2.0 + x
dh = grad(f)
"""
    )
    try:
        check(anynb, "dh(0.3)", "autograd.grad(f)(0.3)")
        anynb.run("defvjp(np.sin, None)")
        check(anynb, "dh(0.3)", "autograd.grad(f)(0.3)", what="after defvjp(np.sin, None):")
    finally:
        anynb.run("autograd.core.primitive_vjps[np.sin] = _orig_sin_rule")


def test_defvjp_before_the_handle_exists(anynb: Shell) -> None:
    anynb.run(
        """
from autograd.extend import defvjp
import autograd.core
_orig_tanh_rule = autograd.core.primitive_vjps[np.tanh]
defvjp(np.tanh, lambda ans, x: lambda g: g * (1.0 - ans ** 2) * 0.5)
def f(x):
    return np.sum(np.tanh(x) * x)
dh = grad(f)
x = np.array([0.3, 0.9])
"""
    )
    try:
        check(anynb, "dh(x)", "autograd.grad(f)(x)", 3)
    finally:
        anynb.run("autograd.core.primitive_vjps[np.tanh] = _orig_tanh_rule")
    check(anynb, "dh(x)", "autograd.grad(f)(x)", 2, what="after restoring:")


def test_safe_sqrt_primitive_rule_changed(anynb: Shell) -> None:
    anynb.run(
        """
from autograd.extend import primitive, defvjp
EPS = 1e-12
@primitive
def safe_sqrt(x):
    return onp.sqrt(onp.maximum(x, 0.0))
defvjp(safe_sqrt, lambda ans, x: lambda g: g * 0.5 / onp.maximum(ans, EPS))
def f(x):
    return np.sum(safe_sqrt(x ** 2 + x))
dh = grad(f)
x = np.array([0.0, 1.0, 4.0])
"""
    )
    check(anynb, "dh(x)", "autograd.grad(f)(x)", 3)
    anynb.run("EPS = 1e-3")
    check(anynb, "dh(x)", "autograd.grad(f)(x)", 2, what="after EPS changed:")
    anynb.run("defvjp(safe_sqrt, lambda ans, x: lambda g: g * 0.5 / (ans + 1.0))")
    check(anynb, "dh(x)", "autograd.grad(f)(x)", 2, what="after a new rule:")


# -- randomness ------------------------------------------------------------------------------

RANDOM_CASES = {
    "np_random_global": (
        "def f(x):\n    return np.sum(x * np.random.randn(3))\nx = np.ones(3)\ndh = {D}(f)\n"
        "onp.random.seed(0)",
        "dh(x)",
    ),
    "np_random_dropout_mask": (
        "def f(x):\n    m = np.random.rand(3) > 0.5\n    return np.sum((x * m) ** 2)\n"
        "x = np.array([1.0, 2.0, 3.0])\ndh = {D}(f)\nonp.random.seed(1)",
        "dh(x)",
    ),
    "random_state_global": (
        "rs = onp.random.RandomState(0)\ndef f(x):\n    return np.sum(x * rs.randn(3))\n"
        "x = np.ones(3)\ndh = {D}(f)",
        "dh(x)",
    ),
    "default_rng_global": (
        "gen = onp.random.default_rng(0)\ndef f(x):\n    return np.sum(x * gen.normal(size=3))\n"
        "x = np.ones(3)\ndh = {D}(f)",
        "dh(x)",
    ),
    "default_rng_as_argument": (
        "gen = onp.random.default_rng(0)\ndef f(x, g):\n    return np.sum(x * g.normal(size=3))\n"
        "x = np.ones(3)\ndh = {D}(f)",
        "dh(x, gen)",
    ),
    "rng_on_an_object": (
        "class Noisy:\n    def __init__(self):\n        self.rng = onp.random.RandomState(5)\n"
        "    def loss(self, x):\n        return np.sum(x * self.rng.randn(3))\nnz = Noisy()\n"
        "x = np.ones(3)\ndh = {D}(nz.loss)",
        "dh(x)",
    ),
    "python_random_global": (
        "import random\ndef f(x):\n    return x * random.gauss(0, 1)\ndh = {D}(f)\nrandom.seed(0)",
        "dh(1.5)",
    ),
    "python_random_private": (
        "import random\nprng = random.Random(0)\ndef f(x):\n    return x * prng.random()\n"
        "dh = {D}(f)",
        "dh(1.5)",
    ),
    "seeded_generator_made_inside": (
        "def f(x):\n    r = onp.random.RandomState(42)\n    return np.sum(x * r.randn(3))\n"
        "x = np.ones(3)\ndh = {D}(f)",
        "dh(x)",
    ),
    "draw_in_helper": (
        "def noise():\n    return onp.random.randn()\ndef f(x):\n    return x * noise()\n"
        "dh = {D}(f)\nonp.random.seed(3)",
        "dh(2.0)",
    ),
    "draw_only_on_some_inputs": (
        "def f(x, i):\n    if i % 2:\n        return x * onp.random.randn()\n    return x * 2.0\n"
        "dh = {D}(f)\nonp.random.seed(4)\n_it = iter(range(100))",
        "dh(1.0, next(_it))",
    ),
}


@pytest.mark.parametrize("case", list(RANDOM_CASES))
def test_random_sequences_match_autograd(anynb: Shell, case: str) -> None:
    setup, call = RANDOM_CASES[case]
    sequence(anynb, setup, call, n=6)


def test_random_draws_through_import_module(anynb: Shell, modules: Any) -> None:
    modules(
        "noise_plugin",
        "import numpy\n_rng = numpy.random.RandomState(0)\ndef noise():\n    return _rng.randn()\n",
    )
    anynb.run("import importlib")
    sequence(
        anynb,
        "import noise_plugin\nnoise_plugin._rng = onp.random.RandomState(0)\n"
        "def f(x):\n    return x * importlib.import_module('noise_plugin').noise()\ndh = {D}(f)",
        "dh(1.0)",
        n=4,
    )


#: Reading a generator's state is reading data that any draw, anywhere, changes.
STATE_READS = {
    "RandomState.get_state": "RS.get_state()[2]",
    "Generator.bit_generator.state": "RNG.bit_generator.state['state']['state']",
    "BitGenerator.state": "BG.state['state']['state']",
    "numpy.random.get_state": "onp.random.get_state()[2]",  # (the global generator's)
}


@pytest.mark.parametrize("read", list(STATE_READS))
def test_a_generators_state_read_without_a_draw(anynb: Shell, read: str) -> None:
    """f draws nothing, so its tape is compiled; the generator advances outside f (in a
    cell, in a function, in a loop between calls) and the next answer must follow."""
    anynb.run(
        "RS = onp.random.RandomState(0)\nRNG = onp.random.default_rng(3)\n"
        "BG = onp.random.PCG64(1)\n"
        f"def f(x):\n    return np.sum(x * ({STATE_READS[read]} % 7))\n"
        "dh = grad(f)\nx = np.array([1.0, 2.0])\n"
        "def advance():\n    RS.rand(); RNG.random(); BG.random_raw(); onp.random.rand()"
    )
    check(anynb, "dh(x)", "autograd.grad(f)(x)", 3)
    anynb.run("RS.rand(); RNG.random(); BG.random_raw(); onp.random.rand()")
    check(anynb, "dh(x)", "autograd.grad(f)(x)", 2, what="after draws in a cell:")
    anynb.run(
        "pairs = []\nfor _ in range(4):\n    advance()\n"
        "    pairs.append((dh(x), autograd.grad(f)(x)))"
    )
    for k, (got, want) in enumerate(anynb.ns["pairs"]):
        assert_same(got, want, f"after draws in a loop, turn {k + 1}")
    assert len({w.tobytes() for _, w in anynb.ns["pairs"]}) > 1  # (the state did matter)


def test_a_generator_drawn_from_between_calls_costs_a_bounded_number_of_builds(
    nb: Shell,
) -> None:
    """f names a generator in a branch it does not take; the loop draws from it between
    calls. Its state is checked (f could have read it), so the first draw sends the
    entry to a build; from then on it runs plain autograd rather than build at every
    call. Answers equal autograd's all along."""
    nb.run(
        "RS = onp.random.RandomState(0)\n"
        "def f(x, noisy=False):\n"
        "    if noisy:\n        x = x + RS.randn(2)\n"
        "    return np.sum(np.sin(x) * x)\n"
        "dh = grad(f)\nx = np.array([0.3, -0.7])\npairs = []\n"
        "for _ in range(20):\n    RS.rand()\n"
        "    pairs.append((dh(x), autograd.grad(f)(x)))"
    )
    for k, (got, want) in enumerate(nb.ns["pairs"]):
        assert_same(got, want, f"call {k + 1}")
    (entry,) = nb.ns["dh"].entries
    assert entry.builds <= 3, (entry.builds, entry.last_event)
    assert "drawn from between its calls (RS)" in entry.info.note, entry.info.note


def test_unseeded_generator_inside_differs_every_call(anynb: Shell) -> None:
    """A fresh autograd computation draws new OS entropy every call: answers differ."""
    anynb.run(
        "def f(x):\n    return np.sum(x * onp.random.default_rng().normal(size=3))\n"
        "dh = grad(f)\nx = np.ones(3)\nans = [dh(x).tobytes() for _ in range(4)]"
    )
    assert len(set(anynb.ns["ans"])) == 4


def test_clock_inside_changes_every_call(anynb: Shell) -> None:
    anynb.run(
        "import time\n"
        "def f(x):\n    return x * (time.perf_counter_ns() % 1_000_003)\n"
        "dh = grad(f)\nans = []\nfor _ in range(4):\n    ans.append(dh(1.0))\n    time.sleep(0.001)"
    )
    assert len(set(anynb.ns["ans"])) == 4


# -- effects -----------------------------------------------------------------------------------


def test_nonlocal_counter(anynb: Shell) -> None:
    code = """
def make():
    n = 0
    def f(x):
        nonlocal n
        n += 1
        return x * n + np.sin(x)
    return f
fc = make()
dh = {D}(fc)
"""
    sequence(anynb, code, "dh(0.5)", n=5)


def test_global_counter(anynb: Shell) -> None:
    code = """
calls = 0
def f(x):
    global calls
    calls += 1
    return x ** 2 * calls
dh = {D}(f)
"""
    sequence(anynb, code, "dh(0.5)", n=5)


def test_counter_on_a_handle_attribute_like_object(anynb: Shell) -> None:
    code = """
state = {'step': 0}
def f(x):
    state['step'] += 1
    return x ** 2 * state['step']
dh = {D}(f)
"""
    sequence(anynb, code, "dh(0.5)", n=5)


@pytest.mark.parametrize(
    "changes",
    [
        "global calls\n    calls += 1",
        "log.append(1)",
        "defvjp(sq, lambda ans, x: lambda g: g * 2 * x)",
    ],
    ids=["global_counter", "list_append", "defvjp_inside"],
)
def test_what_the_function_changes_itself_does_not_rebuild_it(nb: Shell, changes: str) -> None:
    """A function that changes what it reads runs plain autograd at every call; that
    change, its own doing, must not send it to a new build at every call (a recording
    costs several autograd calls), nor make status() call it stale."""
    nb.run(
        "from autograd.extend import primitive, defvjp\n"
        "calls, log = 0, []\n"
        "@primitive\ndef sq(x):\n    return x * x\n"
        "defvjp(sq, lambda ans, x: lambda g: g * 2 * x)\n"
        f"def f(x):\n    {changes}\n    return sq(x) * (calls + len(log) + 1.0)\n"
        "df = grad(f)"
    )
    for k in range(4):  # a call per cell (the check after each cell sees the change)
        if k:
            assert nb.run("ipyrefresh.status()['entries'][0]['state']") == "fresh"
        nb.run("_before = (calls, len(log))")
        got = nb.run("df(0.5)")
        # The oracle from the same state: what the handle's run changed, put back.
        want = nb.run("calls = _before[0]\ndel log[_before[1]:]\nautograd.grad(f)(0.5)")
        assert_same(got, want, f"call {k}")
    nb.run("for _ in range(4):\n    _ = df(0.5)")
    assert nb.run("ipyrefresh.status()['rebuilds']") == 0


@pytest.mark.parametrize("tr", ["grad", "hessian", "value_and_grad"])
def test_print_runs_every_call(anynb: Shell, capsys: Any, tr: str) -> None:
    anynb.run(
        f"def f(x):\n    print('f ran')\n    return np.sum(x ** 3)\ndh = {tr}(f)\nx = np.ones(2)"
    )
    capsys.readouterr()
    anynb.run("for _ in range(4):\n    _ = dh(x)")
    mine = capsys.readouterr().out.count("f ran")
    anynb.run(f"for _ in range(4):\n    _ = autograd.{tr}(f)(x)")
    assert mine == capsys.readouterr().out.count("f ran")


@pytest.mark.parametrize("start", ["threading.Thread", "ThreadPoolExecutor"])
def test_effects_in_a_thread_the_function_starts_run_every_call(
    anynb: Shell, capsys: Any, start: str
) -> None:
    """What runs in another thread is not recorded: starting one (or handing work to a
    pool's thread) makes the derivative run plain autograd, so its print (or clock
    reading, or anything else a replay would skip) happens at every call."""
    body = {
        "threading.Thread": "    t = threading.Thread(target=say)\n    t.start()\n    t.join()\n",
        "ThreadPoolExecutor": (
            "    with ThreadPoolExecutor(1) as pool:\n        pool.submit(say).result()\n"
        ),
    }[start]
    anynb.run(
        "import threading\nfrom concurrent.futures import ThreadPoolExecutor\n"
        "def say():\n    print('f ran')\n"
        f"def f(x):\n{body}    return np.sum(x ** 3)\n"
        "dh = grad(f)\nx = np.ones(2)"
    )
    capsys.readouterr()
    anynb.run("for _ in range(4):\n    _ = dh(x)")
    assert capsys.readouterr().out.count("f ran") == 4
    check(anynb, "dh(x)", "autograd.grad(f)(x)")


@pytest.mark.parametrize(
    "tr, body",
    [
        ("grad", "x ** 1.5"),
        ("grad", "x ** -0.5 + x ** 2"),
        ("grad", "np.power(x, 0.3)"),
        ("value_and_grad", "x ** 2.5"),
        ("hessian", "np.sqrt(x)"),
        ("elementwise_grad", "x ** 1.5"),
    ],
)
def test_a_negative_python_float_to_a_fractional_power(nb: Shell, tr: str, body: str) -> None:
    """The adjoint of ``x ** y`` raises ``x`` to ``y - 1``: for a negative Python float and
    a fractional ``y`` that is complex, and autograd's ``unbroadcast`` keeps its real part.
    A tape built at a positive ``x`` left that out: at ``x = -1.0`` it answered complex."""
    nb.run(f"def f(x):\n    return {body}\ndh = {tr}(f)")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # (nan of the forward power)
        for point in ["4.0", "-1.0", "-1.0", "-2.5", "9.0"]:
            check(nb, f"dh({point})", f"autograd.{tr}(f)({point})", times=1, what=point)


@pytest.mark.parametrize(
    "source",
    [
        "functools.partial(time.perf_counter_ns)()",
        "int.from_bytes(next(map(os.urandom, [8])), 'little')",
        "next(iter(time.perf_counter_ns, None))",
        "next(itertools.starmap(time.perf_counter_ns, [()]))",
        "int.from_bytes(functools.partial(os.urandom, 8)(), 'little')",
        "uuid.uuid1().time",
    ],
)
def test_clock_and_entropy_called_from_c_run_every_call(nb: Shell, source: str) -> None:
    """``partial(time.time)()``, ``map(os.urandom, ...)``: C code makes the call, where no
    hook sees it, and the tape repeated the first number at every call (hunt 21). Holding
    such a function as a value is now what the guard's walk sees."""
    nb.run(
        "import functools, itertools, os, time, uuid\n"
        f"def f(x):\n    return x ** 2 * float({source} % 1000003)\n"
        "dh = grad(f)"
    )
    answers = [float(nb.run("dh(1.5)")) for _ in range(4)]
    assert len(set(answers)) == len(answers), answers  # (a repeat: a vanishing chance)
    entries = [e for e in nb.run("ipyrefresh.status()")["entries"] if e["name"] == "grad(f)"]
    assert [e["runs"] for e in entries] == [["plain autograd"]], entries


_DTYPE_BY_VALUE = {
    "eig": "ev = np.linalg.eig(A + np.diag(x))[0]\n    return np.sum(np.abs(ev + x))",
    "eig, squared": "ev = np.linalg.eig(A + np.diag(x))[0]\n    return np.sum(np.abs(ev * ev) * x)",
    "real_if_close": (
        "w = np.real_if_close(x + 1j * np.maximum(x - 1.0, 0.0))\n    return np.sum(np.abs(w * x))"
    ),
    "a primitive of yours": "return np.sum(np.abs(csqrt(x - 1.0) + x))",
}


@pytest.mark.parametrize("tr", ["grad", "value_and_grad", "jacobian"])
@pytest.mark.parametrize("case", list(_DTYPE_BY_VALUE))
def test_an_op_whose_result_dtype_depends_on_the_values(nb: Shell, case: str, tr: str) -> None:
    """``eig`` of a non-symmetric matrix, ``real_if_close`` and a primitive of the user's
    answer real or complex as the values say. A tape built at a real result replayed a
    complex gradient at a complex one, where autograd's ``unbroadcast`` keeps the real
    part (hunt 22), with status fresh."""
    nb.run(
        "import numpy as onp\n"
        "from autograd.extend import primitive, defvjp\n"
        "@primitive\n"
        "def csqrt(x):\n"
        "    return onp.emath.sqrt(x)\n"
        "defvjp(csqrt, lambda ans, x: lambda g: g * 0.5 / ans)\n"
        "A = onp.array([[0.0, 1.0], [-1.0, 0.0]])\n"
    )
    points = ["[3.0, -3.0]", "[0.0, 0.0]", "[0.2, 0.1]", "[3.0, 2.5]", "[0.5, 0.3]", "[1.5, 0.3]"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # (complex to real in some oracles)
        for first in range(len(points)):  # each point once the one the tape is built at
            nb.run(f"def f(x):\n    {_DTYPE_BY_VALUE[case]}\ndh = {tr}(f)")
            for p in points[first:] + points[:first]:
                x = f"onp.array({p})"
                check(nb, f"dh({x})", f"autograd.{tr}(f)({x})", times=2, what=p)


_ODD_SHAPED_RULES = {
    "an extra axis": (
        "lambda ans, y: lambda g: onp.stack([g, 2 * g])",
        "np.sum(odd(x * W))",
    ),
    "an axis fewer": ("lambda ans, y: lambda g: g[0]", "np.sum(odd(x + W2))"),
    "a complex one": ("lambda ans, y: lambda g: g * (1 + 1j)", "np.sum(odd(x * W) * x)"),
}


@pytest.mark.parametrize("tr", ["grad", "value_and_grad", "jacobian"])
@pytest.mark.parametrize("case", list(_ODD_SHAPED_RULES))
def test_a_users_rule_returns_a_cotangent_of_another_shape(nb: Shell, case: str, tr: str) -> None:
    """autograd's binary ops sum a cotangent's extra axes by the shape it has, and keep its
    real part: a tape that unrolled that from the value's shape answered a (2, 3) gradient
    for a (3,) argument after a user's rule (hunt 23)."""
    rule, body = _ODD_SHAPED_RULES[case]
    nb.run(
        "import numpy as onp\n"
        "from autograd.extend import primitive, defvjp\n"
        "W = onp.array([1.0, 2.0, -1.0])\n"
        "W2 = onp.ones((2, 3))\n"
        "@primitive\n"
        "def odd(y):\n"
        "    return y * 1.0\n"
        f"defvjp(odd, {rule})\n"
        f"def f(x):\n    return {body}\n"
        f"dh = {tr}(f)"
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # (complex to real in the oracle)
        for p in ["[0.5, 1.5, -2.0]", "[-1.0, 0.0, 2.0]", "[0.5, 1.5, -2.0]"]:
            x = f"onp.array({p})"
            check(nb, f"dh({x})", f"autograd.{tr}(f)({x})", times=2, what=p)


@pytest.mark.parametrize(
    "prim, rule",
    [("np.sum", "numpy_vjps.grad_np_mean"), ("np.tanh", "primitive_vjps[np.sinh]")],
)
def test_another_primitives_rule_of_autograds(nb: Shell, prim: str, rule: str) -> None:
    """A rule of autograd's own, registered for another primitive, is the user's rule: the
    replay kept the direct adjoint of the primitive's own rule (hunt 23)."""
    nb.run(
        "import numpy as onp\n"
        "from autograd.extend import defvjp\n"
        "from autograd.core import primitive_vjps\n"
        "from autograd.numpy import numpy_vjps\n"
        "def f(x):\n    return np.sum(np.tanh(x) * x)\n"
        "dh = grad(f)\n"
        "x1 = onp.arange(6.0).reshape(2, 3) / 7\n"
        "x2 = onp.ones((2, 3)) * -0.5"
    )
    check(nb, "dh(x1)", "autograd.grad(f)(x1)", times=2, what="before:")
    # (autograd's table is the process's: put the rule back for the tests after this one.)
    nb.run(f"_kept_rule = primitive_vjps[{prim}]")
    try:
        if rule.startswith("primitive_vjps"):
            nb.run(f"primitive_vjps[{prim}] = {rule}")
        else:
            nb.run(f"defvjp({prim}, {rule})")
        for x in ["x1", "x2", "x1"]:
            check(nb, f"dh({x})", f"autograd.grad(f)({x})", times=2, what=f"after: {x}")
    finally:
        nb.run(f"primitive_vjps[{prim}] = _kept_rule")
    assert nb.run(f"primitive_vjps[{prim}] is _kept_rule")


def test_a_users_rule_for_taking_from_a_list(nb: Shell) -> None:
    """``params[0]`` of a list argument is autograd.builtins' ``container_take``; its rule
    is trusted only while it is autograd's own: a user's rule for it (or another rule of
    autograd.builtins') must reach the replay."""
    nb.run(
        "import numpy as onp\n"
        "from autograd.extend import defvjp\n"
        "from autograd.core import primitive_vjps\n"
        "from autograd.builtins import container_take, container_untake\n"
        "from autograd.extend import vspace\n"
        "def f(params, x):\n    return np.sum(np.tanh(params[0] * x) * params[1])\n"
        "dh = grad(f)\n"
        "p1 = [onp.arange(3.0) / 5, onp.ones(3) * 0.5]\n"
        "x = onp.array([1.0, -2.0, 0.5])"
    )
    check(nb, "dh(p1, x)", "autograd.grad(f)(p1, x)", times=2, what="before:")
    nb.run("_kept_rule = primitive_vjps[container_take]")
    try:
        nb.run(
            "defvjp(container_take,\n"
            "       lambda ans, A, idx: lambda g: container_untake(3 * g, idx, vspace(A)))"
        )
        check(nb, "dh(p1, x)", "autograd.grad(f)(p1, x)", times=2, what="a user's rule:")
    finally:
        nb.run("primitive_vjps[container_take] = _kept_rule")
    assert nb.run("primitive_vjps[container_take] is _kept_rule")
    check(nb, "dh(p1, x)", "autograd.grad(f)(p1, x)", times=2, what="autograd's again:")


def test_a_folded_constant_of_a_rule_raises_as_autograd_does(nb: Shell) -> None:
    """``(-2.0) ** x``'s rule takes ``log(-2.0)``, a constant the tape computed once, at the
    build: after ``np.seterr(all='raise')`` autograd raises at every call, the replay
    answered nan (hunt 22)."""
    nb.run("import numpy as onp\ndef f(x):\n    return np.sum((-2.0) ** x)\ndh = grad(f)")
    nb.run("x = onp.array([2.0, 3.0, 1.0])")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        check(nb, "dh(x)", "autograd.grad(f)(x)", times=2, what="before:")
    nb.run("_old_err = onp.seterr(all='raise')")
    try:
        for _ in range(2):
            want = nb.run_error("autograd.grad(f)(x)")
            got = nb.run_error("dh(x)")
            assert (type(got), str(got)) == (type(want), str(want)), (got, want)
            # (hunt 51: autograd's error, raised while the replay's was handled, was
            # chained to it; the user's traceback showed both)
            assert (got.__context__, got.__cause__) == (want.__context__, want.__cause__)
    finally:
        nb.run("onp.seterr(**_old_err)")


def test_reads_a_file_that_changes_on_disk(anynb: Shell, tmp_path: Any) -> None:
    path = tmp_path / "w.npy"
    anynb.run(
        f"onp.save({str(path)!r}, onp.array([1.0, 2.0]))\n"
        f"def f(x):\n    return np.sum(np.load({str(path)!r}) * x ** 2)\n"
        "dh = grad(f)\nx = np.array([1.0, 1.0])"
    )
    check(anynb, "dh(x)", "autograd.grad(f)(x)")
    anynb.run(f"onp.save({str(path)!r}, onp.array([5.0, -2.0]))")
    check(anynb, "dh(x)", "autograd.grad(f)(x)", what="after the file changed:")


def test_logging_inside_function(anynb: Shell) -> None:
    code = """
import logging
log_records = []
class ListHandler(logging.Handler):
    def emit(self, record):
        log_records.append(record.getMessage())
lg = logging.getLogger('ipyrefresh-scenario')
lg.handlers[:] = [ListHandler()]
lg.setLevel(logging.INFO)
def f(x):
    lg.info('loss evaluated')
    return x ** 2
dh = {D}(f)
"""
    anynb.run(code.replace("{D}", "grad"))
    anynb.run("for _ in range(3):\n    dh(1.0)")
    assert len(anynb.ns["log_records"]) == 3


def test_values_used_many_times_accumulate_like_autograd(anynb: Shell) -> None:
    anynb.run(
        """
def f(x):
    y = x * 1.1
    s = 0.0
    for k in range(17):
        s = s + np.sin(y * (k + 1)) * y + y ** 2 / (k + 2)
    return np.sum(s * x) + np.sum(y)
dh = grad(f)
x = np.array([0.1, 0.37, -2.3], dtype=np.float32)
"""
    )
    check(anynb, "dh(x)", "autograd.grad(f)(x)", 3)
    anynb.run("x = x.astype(np.float64)")
    check(anynb, "dh(x)", "autograd.grad(f)(x)", 3)


# -- errors inside primitives, caught by the function ----------------------------------------

CAUGHT = {
    "cholesky": (
        "def f(x):\n    try:\n        return np.sum(np.linalg.cholesky(np.diag(x)))\n"
        "    except onp.linalg.LinAlgError:\n        return np.sum(x * 3.0)",
        "onp.array([-1.0, 2.0])",
        "onp.array([1.0, 2.0])",
    ),
    "inverse_of_a_singular_matrix": (
        "def f(x):\n    try:\n        return np.sum(np.linalg.inv(np.diag(x)))\n"
        "    except onp.linalg.LinAlgError:\n        return np.sum(x ** 2)",
        "onp.array([0.0, 2.0])",
        "onp.array([1.0, 2.0])",
    ),
    "index_out_of_range_by_the_values": (
        "def f(x):\n    i = int(np.argmax(x))\n    try:\n        return x[i + 1] * 2.0\n"
        "    except IndexError:\n        return np.sum(x ** 2)",
        "onp.array([1.0, 3.0])",
        "onp.array([3.0, 1.0])",
    ),
    "errstate_raise": (
        "def f(x):\n    try:\n        with onp.errstate(divide='raise'):\n"
        "            return np.sum(np.log(x))\n"
        "    except FloatingPointError:\n        return np.sum(x * 3.0)",
        "onp.array([0.0, 2.0])",
        "onp.array([1.0, 2.0])",
    ),
    "warnings_recorded": (
        "import warnings\n"
        "def f(x):\n    with warnings.catch_warnings(record=True) as w:\n"
        "        warnings.simplefilter('always')\n        y = np.sum(np.sqrt(x))\n"
        "    return np.sum(x * 3.0) if w else y",
        "onp.array([-1.0, 2.0])",
        "onp.array([1.0, 2.0])",
    ),
}


@pytest.mark.parametrize("first", ["failing_input_first", "working_input_first"])
@pytest.mark.parametrize("case", list(CAUGHT), ids=list(CAUGHT))
def test_an_error_the_function_catches(anynb: Shell, case: str, first: str) -> None:
    """What raises inside a primitive depends on the input (and on numpy's error and
    warning settings, which the function may change as it runs): a replay of one run
    cannot stand for the other branch, nor raise where autograd's run catches."""
    source, failing, working = CAUGHT[case]
    anynb.run(source + "\ndh = grad(f)")
    order = [failing, working] if first == "failing_input_first" else [working, failing]
    for x in order * 2:
        check(anynb, f"dh({x})", f"autograd.grad(f)({x})", 2, f"at {x}:")


STRUCTURAL = {
    "unpacking_a_list_of_parameters": (
        "def f(p, X):\n    W, b = p\n    return np.sum(np.tanh(np.dot(X, W) + b))",
        "[onp.ones((3, 2)), onp.zeros(2)], onp.arange(6.0).reshape(2, 3)",
    ),
    "iterating_over_an_array": (
        "def f(x, X):\n    s = 0.0\n    for row in x:\n        s = s + np.sum(row * X)\n"
        "    return s",
        "onp.ones((3, 2)), onp.arange(2.0)",
    ),
    "a_missing_key_caught": (
        "def f(p, X):\n    try:\n        s = p['scale']\n    except KeyError:\n        s = 1.0\n"
        "    return np.sum(p['w'] * X) * s",
        "{'w': onp.ones(2)}, onp.arange(2.0)",
    ),
}


@pytest.mark.parametrize("case", list(STRUCTURAL), ids=list(STRUCTURAL))
def test_errors_that_end_an_iteration_keep_the_tape(nb: Shell, case: str) -> None:
    """Unpacking and iterating boxes ends with an IndexError inside a primitive, and a
    missing key with a KeyError: what the cache key fixes decides them, so the tape
    replays (and answers as autograd)."""
    source, args = STRUCTURAL[case]
    nb.run(source + f"\n_args = ({args})\ndh = grad(f)")
    check(nb, "dh(*_args)", "autograd.grad(f)(*_args)", 3)
    entries = [e for e in nb.run("ipyrefresh.status()['entries']") if e["name"] == "grad(f)"]
    assert [e["fallback"] for e in entries] == [""], entries
    assert entries[0]["runs"][0].startswith("tape"), entries


def test_checking_a_caught_error_warns_nothing_of_its_own(nb: Shell) -> None:
    """Telling a caught error from the end of an iteration calls the primitive again;
    the user must not see that call's warnings (log(0) here)."""
    source, failing, _ = CAUGHT["errstate_raise"]
    nb.run(source + "\ndh = grad(f)\nimport warnings")
    nb.run(
        "with warnings.catch_warnings(record=True) as _w:\n"
        "    warnings.simplefilter('always')\n"
        f"    _got = dh({failing})\n"
        "_from = [w.filename for w in _w]"
    )
    assert not [f for f in nb.run("_from") if "ipyrefresh" in f], nb.run("_from")
    check(nb, f"dh({failing})", f"autograd.grad(f)({failing})")


def test_a_handle_made_inside_a_function_reuses_its_build(nb: Shell) -> None:
    """``grad(loglike)(r, p(r))`` inside a lambda (autograd's negative binomial example)
    makes and drops a handle on the same function at every call: the build is kept for
    the cell, stays right when the data it closes over changes, and Newton's next float
    runs the code rather than tracing a path used once."""
    nb.run(
        """
def fit(data, use):
    loglike = lambda r, p: np.sum(np.sin(r * data) * p + r ** 2)
    rprime = lambda r: use(loglike)(r, 0.5 + r / 10.0)
    out = [rprime(r) for r in np.linspace(0.1, 1.0, 12)]
    data[0] += 1.0  # in place, between two calls of the kept build
    out += [rprime(r) for r in np.linspace(0.1, 1.0, 4)]
    return out
before = ipyrefresh.status(check=False)['builds']
mine = fit(np.arange(5.0), grad)
builds = ipyrefresh.status(check=False)['builds'] - before
want = fit(np.arange(5.0), autograd.grad)
"""
    )
    assert_same(nb.ns["mine"], nb.ns["want"], "the answers")
    assert nb.ns["builds"] == 2  # the first call, and the first after the change in place


# -- dict keys equal but not alike (hunt 16) -------------------------------------------------


@pytest.mark.parametrize(
    "first, second",
    [
        ("{1: a, 'b': b}", "{True: a, 'b': b}"),
        ("{1.0: a}", "{1: a}"),
        ("{onp.int64(1): a}", "{1: a}"),
        ("{k: a for k in onp.arange(1)}", "{0: a}"),
        ("{0.0: a}", "{-0.0: a}"),
        ("{(1, 2): a}", "{(True, 2): a}"),
    ],
)
def test_differentiated_dict_keys_equal_but_not_alike(nb: Shell, first: str, second: str) -> None:
    """``1``, ``True``, ``1.0`` and ``np.int64(1)`` (or ``0.0`` and ``-0.0``) are equal
    dict keys: a replay recorded for one answered the other, with status() fresh, though
    code may branch on the key and autograd's gradient is keyed by the caller's key."""
    nb.run(
        """
def f(p):
    total = 0.0
    for k, v in p.items():
        sign = onp.copysign(1.0, k) if isinstance(k, float) else 1.0
        total = total + np.sum(v ** 2) * len(repr(k)) * sign * (2.0 if type(k) is int else 3.0)
    return total
df = grad(f)
a = onp.array([0.1, 0.2]); b = onp.array([0.3, 0.4])
"""
    )
    for call in [first] * 3 + [second] * 3 + [first]:
        got, want = nb.run(f"df({call}), autograd.grad(f)({call})")
        assert_same(got, want, call)
        assert [type(k) for k in got] == [type(k) for k in want], call
        assert [repr(k) for k in got] == [repr(k) for k in want], call


@pytest.mark.parametrize("backend", ["tape", "jax"])
def test_differentiated_dict_keys_equal_by_name_but_read_for_more(nb: Shell, backend: str) -> None:
    """Keys of a user's class equal by name (its ``__eq__``, ``__hash__``) whose weight the
    code reads: a new key with another weight, the same key changed in place, the class's
    attribute changed, and a key with a lock (state without a print) must all answer as
    a fresh computation does (found probing what hunt 16's fix left out)."""
    if backend == "jax":
        pytest.importorskip("jax")
        nb.run("import jax, jax.numpy as xp\nfrom ipyrefresh.jax import grad as jgrad")
    else:
        nb.run("xp = np")
    nb.run(
        """
import threading
class Layer:
    scale = 1.0
    def __init__(self, name, w):
        self.name, self.w = name, w
    def __eq__(self, other):
        return isinstance(other, Layer) and other.name == self.name
    def __hash__(self):
        return hash(self.name)
    def __lt__(self, other):
        return self.name < other.name
def f(p):
    return sum(xp.sum(v ** 2) * k.w * k.scale for k, v in p.items())
a = xp.asarray(onp.array([0.1, 0.2]))
k = Layer('dense', 1.0)
"""
    )
    if backend == "jax":
        nb.run("df = jgrad(f)\noracle = jax.grad(f)")
    else:
        nb.run("df = grad(f)\noracle = autograd.grad(f)")
    steps = [
        "pass",
        "pass",
        "k = Layer('dense', 2.0)",
        "k.w = 3.0",
        "pass",
        "Layer.scale = 5.0",
        "k = Layer('dense', 1.0); k.lock = threading.Lock()",
        "k.w = 4.0",
    ]
    for step in steps:
        nb.run(step)
        got, want = nb.run("df({k: a})[k], oracle({k: a})[k]")
        if backend == "jax":  # (XLA's fused float32 against unjitted JAX: last bits)
            assert onp.allclose(onp.asarray(got), onp.asarray(want), rtol=1e-6), step
        else:
            assert_same(got, want, step)


@pytest.mark.parametrize("kind", ["slots", "identity"])
def test_differentiated_dict_keys_with_slots_or_plain_identity(nb: Shell, kind: str) -> None:
    """The same with keys whose state is in ``__slots__`` (no instance dict to print) and
    keys of a class without ``__eq__`` (hashed by identity): their class's attributes, read
    through the key, were seen only when one of the class's methods ran during the build,
    which on Python 3.10 the recorder could not tie to the class (CI caught it there)."""
    body = "__slots__ = ('name', 'w')\n    " if kind == "slots" else ""
    eq = (
        "    def __eq__(self, other):\n        return other.name == self.name\n"
        "    def __hash__(self):\n        return hash(self.name)\n"
        if kind == "slots"
        else ""
    )
    nb.run(
        f"class Key:\n    {body}scale = 1.0\n"
        "    def __init__(self, name, w):\n        self.name, self.w = name, w\n"
        f"{eq}"
        "def f(p):\n    return sum(np.sum(v ** 2) * k.w * k.scale for k, v in p.items())\n"
        "a = onp.array([0.1, 0.2])\nk = Key('dense', 1.0)\ndf = grad(f)"
    )
    for step in ["pass", "pass", "Key.scale = 5.0", "k.w = 3.0", "pass", "k = Key('dense', 2.0)"]:
        nb.run(step)
        got, want = nb.run("df({k: a})[k], autograd.grad(f)({k: a})[k]")
        assert_same(got, want, step)


def test_differentiated_dict_keys_equal_with_state_in_c_slots(nb: Shell) -> None:
    """``range(0, 3, 2) == range(0, 4, 2)`` (both are ``[0, 2]``) and they hash alike, but
    code may read ``k.stop``: state a builtin keeps in member slots, like a user's
    ``__slots__`` class, so such a key matches no other call's."""
    nb.run(
        "def f(p):\n    return sum(np.sum(v ** 2) * k.stop for k, v in p.items())\n"
        "a = onp.array([0.1, 0.2])\ndf = grad(f)"
    )
    for key in ["range(0, 3, 2)"] * 2 + ["range(0, 4, 2)"] * 2 + ["range(0, 3, 2)"]:
        got, want = nb.run(f"df({{{key}: a}}), autograd.grad(f)({{{key}: a}})")
        assert_same(got, want, key)
        assert [k.stop for k in got] == [k.stop for k in want], key


@pytest.mark.parametrize("tr", ["grad", "hessian", "value_and_grad", "jacobian"])
def test_a_print_mid_run_then_branches_and_caught_errors(nb: Shell, capsys: Any, tr: str) -> None:
    """The tape stops recording at a run's first effect (the build runs plain autograd for
    it): what follows — a branch on a traced value, a comparison, indexing that raises and
    is caught, a user primitive — must still compute autograd's answer, print for print."""
    nb.run(
        """
from autograd.extend import primitive, defvjp
@primitive
def cube(v):
    return v ** 3
defvjp(cube, lambda ans, v: lambda g: 3 * g * v ** 2)
def f(x):
    y = np.sin(x) * 2.0
    print('half way')
    if np.sum(y) > 0:
        y = cube(y) + np.where(x > 0.5, x, -x)
    try:
        y = y + x[10]
    except IndexError:
        y = y * 1.5
    return np.sum(y ** 2) if y.ndim else y
x = onp.array([0.2, 0.9, -0.4])
"""
    )
    for point in ["x", "-x", "x * 3.0", "x"]:
        capsys.readouterr()
        nb.run(f"_got = {tr}(f)({point})")
        mine = capsys.readouterr().out
        nb.run(f"_want = autograd.{tr}(f)({point})")
        assert mine.count("half way") == capsys.readouterr().out.count("half way") == 1
        assert_same(nb.ns["_got"], nb.ns["_want"], f"{tr}(f)({point})")
    (entry,) = [e for e in nb.run("ipyrefresh.status()")["entries"] if e["name"] == f"{tr}(f)"]
    assert entry["runs"] == ["plain autograd"] and "print" in entry["fallback"], entry


#: A user primitive with an effect that raises, caught by a function of 200 ops (after
#: ``first``).
_FUSSY = """
from autograd.extend import primitive, defvjp
@primitive
def fussy(v):
    {effect}
    raise ValueError('no')
defvjp(fussy, lambda ans, v: lambda g: g)
def f(x):
    {first}
    y = x
    for _ in range(200):
        y = np.sin(y) * 1.01 + x
    try:
        y = fussy(y)
    except ValueError:
        y = y * 2.0
    return np.sum(y ** 2)
x = onp.array([0.2, 0.9, -0.4])
"""


def test_after_an_effect_the_build_records_nothing_and_reruns_nothing(
    nb: Shell, capsys: Any
) -> None:
    """A run that prints first (fluidsim's ``Running simulation...``) then does thousands
    of ops: the build runs plain autograd for it, so its tape stops there. It kept every
    op's value, checked every constant (4x the run for fluidsim), and at the end ran
    again each primitive whose error the function caught: a user primitive that prints,
    then raises, printed twice in the build."""
    nb.run(_FUSSY.format(effect="print('fussy ran')", first="print('starting')"))
    for point in ["x", "x * 2.0", "x"]:
        capsys.readouterr()
        nb.run(f"_got = grad(f)({point})")
        mine = capsys.readouterr().out
        nb.run(f"_want = autograd.grad(f)({point})")
        theirs = capsys.readouterr().out
        assert mine == theirs == "starting\nfussy ran\n", (mine, theirs)
        assert_same(nb.ns["_got"], nb.ns["_want"], point)
    (entry,) = [e for e in nb.run("ipyrefresh.status()")["entries"] if e["name"] == "grad(f)"]
    assert entry["runs"] == ["plain autograd"] and "print" in entry["fallback"], entry
    # What the build's trace kept: the root and nothing past the print.
    from ipyrefresh._src.compilers.base import Request, Transform
    from ipyrefresh._src.compilers.tape.compiler import TapeCompiler
    from ipyrefresh._src.recorder import record

    with record() as log:
        traced = TapeCompiler().trace(nb.ns["f"], Request(Transform.GRAD, 0), (nb.ns["x"],), {})
    assert log.effects and traced.compile is None and traced.primitives == [], traced
    assert_same(traced.answer(), nb.run("autograd.grad(f)(x)"), "trace")
    # Without the print, the same function compiles and replays.
    nb.run(
        "def f(x):\n    y = x\n    for _ in range(200):\n"
        "        y = np.sin(y) * 1.01 + x\n    return np.sum(y ** 2)"
    )
    for point in ["x", "x", "x * 3.0"]:
        got, want = nb.run(f"grad(f)({point}), autograd.grad(f)({point})")
        assert_same(got, want, point)
    (entry,) = [e for e in nb.run("ipyrefresh.status()")["entries"] if e["name"] == "grad(f)"]
    assert entry["runs"] != ["plain autograd"], entry


def test_a_caught_error_of_a_user_primitive_runs_it_once(nb: Shell) -> None:
    """The build learnt which error a primitive raised (the function caught it) by
    running it again: a user primitive that appends to a log, then raises, appended twice
    in the build's run, where autograd appends once."""
    nb.run("log = []\n" + _FUSSY.format(effect="log.append(1)", first="pass"))
    for point in ["x", "x * 2.0", "x"]:
        nb.run("log.clear()")
        got = nb.run(f"grad(f)({point})")
        assert nb.ns["log"] == [1], point
        assert_same(got, nb.run(f"autograd.grad(f)({point})"), point)


def test_the_recursion_limit_read_by_a_library_keeps_the_tape(nb: Shell) -> None:
    """``inspect.signature`` reads the recursion limit (``inspect.unwrap`` bounds its walk
    by it): a bound, not data, so the tape replays. The function's own read of it is data
    that no guard sees: that runs plain autograd (the change itself is tested with the
    reads scenarios)."""
    nb.run(
        "import inspect, sys\n"
        "def helper(a, b=2.0):\n    return a * b\n"
        "def f(x):\n"
        "    n = len(inspect.signature(helper).parameters)\n"
        "    return np.sum(helper(x) ** 2) * n\n"
        "def g(x):\n    return np.sum(x ** 2) * sys.getrecursionlimit()\n"
        "x = onp.array([0.5, -1.5])"
    )
    for name in ("f", "g"):
        check(nb, f"grad({name})(x)", f"autograd.grad({name})(x)", times=3)
    entries = {e["name"]: e for e in nb.run("ipyrefresh.status()")["entries"]}
    assert entries["grad(f)"]["runs"][0].startswith("tape"), entries["grad(f)"]
    assert entries["grad(g)"]["runs"] == ["plain autograd"], entries["grad(g)"]
    assert "sys.getrecursionlimit" in entries["grad(g)"]["fallback"], entries["grad(g)"]


# -- objects with nothing but their identity (3.13's typing.NamedTuple holds one) ----------


def test_sentinels_are_guarded_by_identity_and_compiled(nb: Shell) -> None:
    """``MISSING = object()`` and instances of a class with ``__slots__ = ()`` hold no
    state: the guard checks which object it is (they made the derivative run plain
    autograd before, as objects whose state it cannot read)."""
    nb.run(
        """
class Flag:
    __slots__ = ()
MISSING, ON = object(), Flag()
MODE = ON
def f(x, k=MISSING):
    scale = 2.0 if k is MISSING else 5.0
    return np.sum(x ** 2) * scale * (3.0 if MODE is ON else 7.0)
df = grad(f)
x = onp.array([0.5, -1.5])
"""
    )
    check(nb, "df(x)", "autograd.grad(f)(x)", times=3)
    (entry,) = [e for e in nb.run("ipyrefresh.status()")["entries"] if e["name"] == "grad(f)"]
    assert entry["runs"][0].startswith("tape"), entry
    nb.run("f.__defaults__ = (object(),)")
    check(nb, "df(x)", "autograd.grad(f)(x)", times=2, what="another default object:")
    nb.run("MODE = Flag()")
    check(nb, "df(x)", "autograd.grad(f)(x)", times=2, what="another Flag:")


# -- state in C that no guard reads (hunt 37) -------------------------------------------------
C_STATE = {
    "a_bit_generator_through_its_ctypes_interface": (
        "BG = onp.random.PCG64(1)\nCT = BG.ctypes\n"
        "def f(x):\n    return np.sum(x * CT.next_double(CT.state))\n",
        "df(x)",
    ),
    "libc_rand_through_ctypes": (
        "import ctypes\nLIBC = ctypes.CDLL(None)\nLIBC.srand(3)\n"
        "def f(x):\n    return np.sum(x * float(LIBC.rand() % 1000))\n",
        "df(x)",
    ),
    "a_library_loaded_with_ctypes_as_it_runs": (
        "import ctypes\nctypes.CDLL(None).srand(3)\n"
        "def f(x):\n    return np.sum(x * float(ctypes.CDLL(None).rand() % 1000))\n",
        "df(x)",
    ),
    "objects_counted_by_the_garbage_collector": (
        "import gc\nclass Particle:\n    pass\nPS = []\n"
        "def f(x):\n"
        "    return np.sum(x * float(sum(type(o) is Particle for o in gc.get_objects())))\n",
        "(PS.append(Particle()), df(x))[1]",
    ),
    "an_argument_read_from_the_callers_frame": (
        "import inspect, sys, threading, traceback\n"
        "def caller_arg(name):\n"
        "    here = sys._current_frames()[threading.get_ident()]\n"
        "    for frame, _ in traceback.walk_stack(here):\n"
        "        found = inspect.getargvalues(frame)[3]\n"
        "        if name in found:\n"
        "            return found[name]\n"
        "def f(x, scale):\n    return np.sum(x * caller_arg('scale'))\n"
        "SCALES = iter([2.0, 2.0, 2.0, 5.0, 5.0, 5.0])\n",
        "df(x, next(SCALES))",
    ),
}


@pytest.mark.parametrize("case", sorted(C_STATE))
def test_state_no_guard_reads_gives_autograds_answers(nb: Shell, case: str) -> None:
    """Calls into C through ctypes (a generator's state, libc's), the garbage collector's
    view of the heap, and a caller's arguments read through its frame: the tape replayed
    the first answer, with status fresh, where autograd answers anew at each call."""
    setup, call = C_STATE[case]
    sequence(nb, setup + "x = np.array([0.3, -0.7, 1.1])\ndf = {D}(f)", call, n=6)


@pytest.mark.parametrize("action", ["error", "ignore"])
def test_a_warnings_filter_by_autograds_module_acts_on_the_replay(nb: Shell, action: str) -> None:
    """numpy's floating-point warnings name the module whose Python frame ran the ufunc:
    autograd's under autograd, the generated replay's under ipyrefresh. A filter naming
    autograd's module made autograd raise (or stay silent) where the replay answered
    (or warned) (hunt 37)."""
    nb.run(
        "import warnings\n"
        "def f(x):\n    return np.sum(np.log(x) * 2.0)\n"
        "x = np.array([0.3, -0.7, 1.1])\n"
        "df = grad(f)\n"
        "with warnings.catch_warnings():\n"
        "    warnings.simplefilter('ignore')\n"
        "    for _ in range(4):\n        df(x)\n"
        "def outcome(d):\n"
        "    with warnings.catch_warnings(record=True) as caught:\n"
        "        warnings.resetwarnings()\n"
        f"        warnings.filterwarnings({action!r}, category=RuntimeWarning, module='autograd')\n"
        "        try:\n"
        "            answer = repr(d(x))\n"
        "        except RuntimeWarning as exc:\n"
        "            answer = f'raised {exc}'\n"
        "    return answer, [str(w.message) for w in caught]\n"
        "ours, theirs = outcome(df), outcome(autograd.grad(f))"
    )
    assert nb.ns["ours"] == nb.ns["theirs"]
    runs = nb.run("ipyrefresh.status()")["entries"][0]["runs"]
    assert runs[0].startswith("tape:"), runs  # (the replay answered)
    assert nb.ns["ours"][0].startswith("raised") == (action == "error")


def test_a_dict_gradient_holds_the_callers_own_key_objects(nb: Shell) -> None:
    """Hunt 56: a replay wrote a dict gradient's keys by their repr, so a key of the
    user's str subclass came back a plain str (a case-insensitive key's lookup then
    failed), with status fresh. autograd gives back the caller's own key objects."""
    nb.run(
        "class Name(str):\n    pass\n"
        "class CI(str):\n"
        "    def __eq__(self, o):\n        return str.lower(self) == str.lower(o)\n"
        "    def __hash__(self):\n        return hash(str.lower(self))\n"
        "def f(p):\n    return np.sum(p['w'] ** 2)\n"
        "def args():\n    return {'w': onp.ones(2), Name('b'): onp.ones(2) * 2, CI('Tau'): 3.0}\n"
        "df = grad(f)"
    )
    for k in range(4):
        nb.run("p = args()")
        got, want = nb.run("df(p), autograd.grad(f)(p)")
        assert_same(got, want, f"call {k + 1}")
        assert all(a is b for a, b in zip(got, nb.ns["p"], strict=True)), f"call {k + 1}"
        assert nb.run("df(p)[CI('tau')] == 0.0")


@pytest.mark.parametrize("kind", ["float64", "int64"])
def test_a_numpy_scalar_subclass_is_not_its_base_type(nb: Shell, kind: str) -> None:
    """Hunt 56: a subclass of a numpy scalar type keyed as the type itself, so a replay
    built for ``np.float64`` answered for it where autograd raises (no vector space for
    the subclass), with status fresh."""
    nb.run(
        f"class F(onp.{kind}):\n    pass\n"
        "def f(x):\n    return x * x * 3.0\ndf = grad(f)\n"
        f"for _ in range(3):\n    df(onp.float64(2.0))"
    )
    want = nb.run_error("autograd.grad(f)(F(3))")
    got = nb.run_error("df(F(3))")
    assert type(got) is type(want) and str(got) == str(want), (got, want)
    check(nb, "df(onp.float64(2.5))", "autograd.grad(f)(onp.float64(2.5))", times=1)


@pytest.mark.parametrize(
    "setup",
    [
        "cfg = [2.0]\ncfg.append(cfg)",
        "cfg = {0: 2.0}\ncfg['s'] = cfg",
        "cfg = [2.0]\nfor _ in range(5000):\n    cfg = [cfg[0], cfg]",
    ],
    ids=["list in itself", "dict in itself", "5000 deep"],
)
def test_an_argument_that_contains_itself_or_nests_deep(nb: Shell, setup: str) -> None:
    """Hunt 56: the cache key followed an argument's lists and dicts without end: a list
    that contains itself made every call raise RecursionError (no internal error
    counted). Past a depth the call makes no key, and runs the code as autograd does."""
    nb.run(f"{setup}\ndef f(x, cfg):\n    return np.sum(x) * cfg[0]\ndf = grad(f)")
    check(nb, "df(onp.ones(2), cfg)", "autograd.grad(f)(onp.ones(2), cfg)", times=3)
    check(nb, "df(onp.ones(2), [3.0])", "autograd.grad(f)(onp.ones(2), [3.0])", times=3)
    assert nb.run("import ipyrefresh\nipyrefresh.status()['internal_errors']") == 0


def test_a_simple_namespace_is_read_like_an_object(nb: Shell) -> None:
    """Hunt 58: a ``types.SimpleNamespace`` keeps its ``__dict__`` behind a member
    descriptor, so its state was called unreadable and its readers ran plain autograd
    for good. It is guarded as any object is: its attributes changed in place, added,
    deleted, and the object rebound are all seen."""
    nb.run(
        "import types\nhp = types.SimpleNamespace(lr=0.5, wd=0.1)\n"
        "def f(x):\n    return hp.lr * np.sum(np.sin(x)) + getattr(hp, 'extra', 0.0) * np.sum(x)\n"
        "dh = grad(f)\nx = onp.array([0.3, -0.5])"
    )
    for step in [
        "pass",
        "hp.lr = 2.0",
        "hp.extra = 3.0",
        "del hp.extra",
        "hp = types.SimpleNamespace(lr=-1.0)",
    ]:
        nb.run(step)
        check(nb, "dh(x)", "autograd.grad(f)(x)", 3, what=step)
    entries = [e for e in nb.run("ipyrefresh.status()['entries']") if e["name"] == "grad(f)"]
    assert [e["fallback"] for e in entries] == [""], entries
    assert entries[0]["runs"][0].startswith("tape"), entries
