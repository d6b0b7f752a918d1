"""Adversarial scenarios for the user's own autograd primitives, the objects a replay's
operators meet, and subclasses of numpy's scalar types (hunt 32). Each asks ``status()``
first (it must never say fresh about a wrong answer), then the handle, against a fresh
autograd computation of the objects bound now, bit for bit."""

from __future__ import annotations

from typing import Any

import pytest

from .conftest import Shell
from .scenario_helpers import PRELUDE, assert_same, guards_agree, rewrite, status_then_call


@pytest.fixture
def nb(ip: Shell) -> Shell:
    ip.run(PRELUDE + "\nfrom autograd.extend import primitive, defvjp")
    return ip


def calls(ip: Shell, handle: str, call: str, oracle: str, what: str, times: int = 2) -> None:
    for k in range(times):
        guards_agree()
        status_then_call(ip, handle, call, oracle, f"{what} (call {k + 1})")


def test_implementation_swapped_in_the_wrappers_closure(nb: Shell) -> None:
    """autograd's wrapper calls the ``f_raw`` in its closure: swapping it is a new
    implementation, which the replay must not keep answering for."""
    nb.run(
        "def raw(x):\n    return x * x\n"
        "up = primitive(raw)\n"
        "defvjp(up, lambda ans, x: lambda g: g * 2 * x)\n"
        "def h(x):\n    return np.sum(up(x))\n"
        "dh = value_and_grad(h)\nx = np.array([0.1, 0.2, 0.3])"
    )
    oracle = "autograd.value_and_grad(h)(x)"
    calls(nb, "dh", "dh(x)", oracle, "built")
    nb.run(
        "def raw3(x):\n    return x * x * x\n"
        "[c for c in up.__closure__ if c.cell_contents is raw][0].cell_contents = raw3"
    )
    calls(nb, "dh", "dh(x)", oracle, "after the closure's implementation was swapped")


def test_fun_attribute_is_not_what_autograd_calls(nb: Shell) -> None:
    nb.run(
        "@primitive\ndef up2(x):\n    return onp.sin(x)\n"
        "defvjp(up2, lambda ans, x: lambda g: g * onp.cos(x))\n"
        "up2.fun = lambda x: onp.cos(x)  # a copy for readers: the wrapper never reads it\n"
        "def h2(x):\n    return np.sum(up2(x) * x)\n"
        "dh2 = value_and_grad(h2)\nx = np.array([0.1, 0.2, 0.3])"
    )
    calls(nb, "dh2", "dh2(x)", "autograd.value_and_grad(h2)(x)", "replayed", times=3)


def test_primitive_edited_on_disk_under_autoreload(nb: Shell, modules: Any) -> None:
    """``%autoreload 2`` patches the wrapper in place (IPython 9: autograd then finds no
    VJP for it and raises; IPython 8 keeps the rule): the handle must do what autograd
    does now, raise the same error or give the same answer, not the old body's numbers."""
    source = (
        "from autograd.extend import primitive, defvjp\n"
        "@primitive\ndef sq(x):\n    return x * x\n"
        "defvjp(sq, lambda ans, x: lambda g: g * 2 * x)\n"
    )
    path = modules("primmod", source)
    nb.run("%load_ext autoreload\n%autoreload 2")
    nb.run(
        "import primmod\n"
        "def h(x):\n    return np.sum(primmod.sq(x))\n"
        "dh = value_and_grad(h)\nx = np.array([0.1, 0.2, 0.3])\n"
        "def outcome(f):\n    try:\n        return ('answer', f())\n"
        "    except Exception as e:\n        return ('raised', type(e).__name__)"
    )
    calls(nb, "dh", "dh(x)", "autograd.value_and_grad(h)(x)", "built")
    rewrite(path, source.replace("return x * x", "return x * x * x"))
    nb.run("primmod.sq(x)")  # (autoreload patches it before this cell)
    for k in range(2):
        guards_agree()
        mine = nb.run("outcome(lambda: dh(x))")
        theirs = nb.run("outcome(lambda: autograd.value_and_grad(h)(x))")
        assert mine[0] == theirs[0], (k, mine, theirs)
        assert_same(mine[1], theirs[1], f"after the edit, call {k + 1}")


@pytest.mark.parametrize(
    ("make", "change"),
    [
        (
            "class Model:\n    def __init__(self):\n        self.s = 2.0\n"
            "    def f(self, c):\n        return c * self.s\n"
            "obj = Model()\nup3 = primitive(obj.f)",
            "obj.s = 7.0",
        ),
        (
            "class Impl:\n    def __init__(self):\n        self.k = 2.0\n"
            "    def __call__(self, c):\n        return c * self.k\n"
            "obj = Impl()\nup3 = primitive(obj)",
            "obj.k = 5.0",
        ),
        (
            "import functools\nKARR = onp.array([1.0, 1.0, 1.0])\n"
            "def impl(c, k):\n    return c * k\n"
            "up3 = primitive(functools.partial(impl, k=KARR))",
            "KARR[0] = 9.0",
        ),
    ],
    ids=["bound_method", "callable_instance", "partial_with_array"],
)
def test_implementations_that_are_not_functions(nb: Shell, make: str, change: str) -> None:
    nb.run(
        make + "\ndefvjp(up3, lambda ans, c, **kw: lambda g: g)\n"
        "C = onp.array([1.0, 2.0, 3.0])\n"
        "def h3(x):\n    return np.sum(x * up3(C))\n"
        "dh3 = grad(h3)\nx = np.array([0.1, 0.2, 0.3])"
    )
    calls(nb, "dh3", "dh3(x)", "autograd.grad(h3)(x)", "built")
    nb.run(change)
    calls(nb, "dh3", "dh3(x)", "autograd.grad(h3)(x)", f"after {change}")


@pytest.mark.parametrize("first", [False, True], ids=["array_first", "object_first"])
def test_operands_with_their_own_operators(nb: Shell, first: bool) -> None:
    """``np.add(x, P)`` is the ufunc, whatever P's ``__radd__`` or ``__add__`` would do
    with ``x + P``: the replay must not turn it into the operator."""
    nb.run(
        "class Pri:\n    __array_priority__ = 100.0\n"
        "    def __init__(self, a):\n        self.a = a\n"
        "    def __array__(self, dtype=None, copy=None):\n        return self.a\n"
        "    def __radd__(self, other):\n        return other + 2 * self.a\n"
        "    def __add__(self, other):\n        return other + 3 * self.a\n"
        "P = Pri(onp.array([1.0, 2.0]))\n"
        f"def h(x):\n    return np.sum(np.exp(np.add({'P, x' if first else 'x, P'})))\n"
        "dh = value_and_grad(h)\nx = np.array([0.1, 0.2])"
    )
    calls(nb, "dh", "dh(x)", "autograd.value_and_grad(h)(x)", "replayed", times=3)


def test_subclass_of_a_numpy_scalar_is_an_object(nb: Shell) -> None:
    """A subclass of np.float64 has a ``__dict__``, class attributes, methods and an
    ``__eq__`` of its own: it is checked as an object, not by its value."""
    nb.run(
        "class MyNF(onp.float64):\n    unit = 1.0\n"
        "    def factor(self):\n        return 1.0\n"
        "NF = MyNF(2.0)\nNF.w = 2.0\n"
        "def h(x):\n    return np.sum(x * NF.w * NF.unit * NF.factor())\n"
        "dh = grad(h)\nx = np.array([0.1, 0.2, 0.3])"
    )
    oracle = "autograd.grad(h)(x)"
    calls(nb, "dh", "dh(x)", oracle, "built")
    for change in ("NF.w = 9.0", "MyNF.unit = 10.0", "MyNF.factor = lambda self: -1.0"):
        nb.run(change)
        calls(nb, "dh", "dh(x)", oracle, f"after {change}")
    nb.run(
        "class Tol(onp.float64):\n"
        "    def __eq__(self, o):\n        return abs(float(self) - float(o)) < 10.0\n"
        "    __hash__ = onp.float64.__hash__\n"
        "K = Tol(2.0)\n"
        "def h2(x, k=None):\n    return np.sum(x * (K if k is None else k))\n"
        "dh2 = grad(h2)"
    )
    calls(nb, "dh2", "dh2(x)", "autograd.grad(h2)(x)", "built")
    nb.run("K = Tol(5.0)  # equal, says Tol's __eq__")
    calls(nb, "dh2", "dh2(x)", "autograd.grad(h2)(x)", "after K = Tol(5.0)")
    for value in ("Tol(2.0)", "Tol(2.0)", "Tol(5.0)"):
        calls(nb, "dh2", f"dh2(x, {value})", f"autograd.grad(h2)(x, {value})", value)


def test_primitive_registered_notrace_after_the_build(nb: Shell) -> None:
    """``register_notrace(VJPNode, p)`` (autograd.extend) makes reverse mode treat ``p`` as
    a constant: no gradient flows through it from then on."""
    nb.run(
        "from autograd.extend import register_notrace\nfrom autograd.core import VJPNode\n"
        "@primitive\ndef soft(x):\n    return onp.tanh(x)\n"
        "defvjp(soft, lambda ans, x: lambda g: g * (1 - ans ** 2))\n"
        "def h(x):\n    return np.sum(soft(x) + x * 0.5)\n"
        "dh = grad(h)\nx = np.array([0.3, -1.0])"
    )
    calls(nb, "dh", "dh(x)", "autograd.grad(h)(x)", "built")
    try:
        nb.run("register_notrace(VJPNode, soft)")
        calls(nb, "dh", "dh(x)", "autograd.grad(h)(x)", "after register_notrace", times=3)
    finally:
        nb.run(
            "from autograd.tracer import notrace_primitives\n"
            "notrace_primitives[VJPNode].discard(soft)"
        )
    calls(nb, "dh", "dh(x)", "autograd.grad(h)(x)", "traced again")


#: Gradient rules whose state changes (hunt 60): under a derivative of a derivative, or
#: forward mode inside the reverse trace, the tape holds the arithmetic a rule did, its
#: state as constants. (setup: defines ``p``'s rules and ``f``; the change; the handle.)
RULES_WITH_STATE = {
    "jvp_redefined": (
        "defjvp(p, lambda g, ans, x: g * np.cos(x))\n"
        "def f(x):\n    return np.sum(autograd.make_jvp(p)(x)(onp.ones(3))[1] * x)",
        "defjvp(p, lambda g, ans, x: g * 3.0 * np.cos(x))",
        "grad",
    ),
    "jvp_partial_keywords": (
        "def jrule(g, ans, x, s):\n    return g * s * np.cos(x)\n"
        "jp_ = functools.partial(jrule, s=2.0)\ndefjvp(p, jp_)\n"
        "def f(x):\n    return np.sum(autograd.make_jvp(p)(x)(onp.ones(3))[1] * x)",
        "jp_.keywords['s'] = 5.0",
        "grad",
    ),
    "vjp_partial_keywords": (
        "def rule(ans, x, s):\n    return lambda g: g * s * np.cos(x)\n"
        "rp = functools.partial(rule, s=2.0)\ndefvjp(p, rp)\n"
        "def f(x):\n    return np.sum(p(x) ** 2)",
        "rp.keywords['s'] = 5.0",
        "hessian",
    ),
    "vjp_bound_method": (
        "class R:\n    def __init__(self):\n        self.s = 2.0\n"
        "    def meth(self, ans, x):\n        return lambda g: g * self.s * np.cos(x)\n"
        "r = R()\ndefvjp(p, r.meth)\n"
        "def f(x):\n    return np.sum(p(x) ** 2)",
        "r.s = 11.0",
        "hessian",
    ),
    "vjp_callable_instance": (
        "class R:\n    def __init__(self):\n        self.s = 2.0\n"
        "    def __call__(self, ans, x):\n        return lambda g: g * self.s * np.cos(x)\n"
        "r = R()\ndefvjp(p, r)\n"
        "def f(x):\n    return np.sum(p(x) ** 2)",
        "r.s = 7.0",
        "hessian",
    ),
    "vjp_lambda_default_in_a_dict": (
        "M = [2.0]\nrules = {'a': lambda ans, x, m=M: lambda g: g * m[0] * np.cos(x)}\n"
        "defvjp(p, rules['a'])\n"
        "def f(x):\n    return np.sum(p(x) ** 2)",
        "M[0] = 5.0",
        "hessian",
    ),
    "vjp_closure_made_before": (
        "def make_rule(s):\n"
        "    def rule(ans, x):\n        return lambda g: g * s[0] * np.cos(x)\n"
        "    return rule\n"
        "S = [2.0]\ndefvjp(p, make_rule(S))\n"
        "def f(x):\n    return np.sum(p(x) ** 2)",
        "S[0] = 4.0",
        "hessian",
    ),
    "vjp_argnums_maker_of_the_users": (
        "class Maker:\n    s = 2.0\n"
        "    def __call__(self, argnums, ans, args, kwargs):\n"
        "        x = args[0]\n        return lambda g: (g * self.s * np.cos(x),)\n"
        "from autograd.extend import defvjp_argnums\ndefvjp_argnums(p, Maker())\n"
        "def f(x):\n    return np.sum(p(x) ** 2)",
        "Maker.s = 3.0",
        "hessian",
    ),
    # (Hunt 62: applied only on an inner trace, the primitive is never on the tape.)
    "vjp_applied_only_inside_an_inner_grad": (
        "class VRule:\n    k = 2.0\n"
        "    def __call__(self, ans, y):\n        return lambda g: g * self.k * y\n"
        "vr = VRule()\ndefvjp(p, vr)\n"
        "def f(x):\n    return autograd.grad(lambda y: p(y) * np.sum(x))(1.5)",
        "vr.k = 3.0",
        "grad",
    ),
    "jvp_applied_only_at_a_constant": (
        "class JRule:\n    k = 2.0\n"
        "    def __call__(self, g, ans, y):\n        return g * self.k * y\n"
        "jr = JRule()\ndefjvp(p, jr)\n"
        "def f(x):\n    return np.sum(autograd.make_jvp(p)(1.5)(x)[1])",
        "jr.k = 3.0",
        "grad",
    ),
}


@pytest.mark.parametrize("case", list(RULES_WITH_STATE))
def test_a_rules_state_changes(nb: Shell, case: str) -> None:
    setup, change, transform = RULES_WITH_STATE[case]
    nb.run(
        "import functools\nfrom autograd.extend import defjvp\n"
        "@primitive\ndef p(x):\n    return np.sin(x) * 1.0\n"
        "defvjp(p, lambda ans, x: lambda g: g * np.cos(x))\n"
        "defjvp(p, lambda g, ans, x: g * np.cos(x))\n" + setup
    )
    nb.run(f"df = {transform}(f)\nx = np.array([0.3, -0.7, 1.1])")
    oracle = f"autograd.{transform}(f)(x)"
    calls(nb, "df", "df(x)", oracle, "built")
    nb.run(change)
    calls(nb, "df", "df(x)", oracle, f"after {change}")
    nb.run(f"{change}\nresult = df(x)")  # (the same change again, in the cell of the call)
    calls(nb, "df", "df(x)", oracle, "after the cell")


def test_a_library_primitives_jvp_overridden_and_restored(nb: Shell) -> None:
    """``defjvp(np.sin, ...)`` replaces autograd's own forward rule; the handle must follow
    it, and follow its restoring."""
    nb.run(
        "from autograd.core import primitive_jvps\nfrom autograd.extend import defjvp\n"
        "saved = primitive_jvps[np.sin]\n"
        "def f(x):\n    return np.sum(autograd.make_jvp(np.sin)(x)(onp.ones(3))[1] * x)\n"
        "df = grad(f)\nx = np.array([0.3, -0.7, 1.1])"
    )
    oracle = "autograd.grad(f)(x)"
    try:
        calls(nb, "df", "df(x)", oracle, "built")
        nb.run("defjvp(np.sin, lambda g, ans, x: g * 2.0 * np.cos(x))")
        calls(nb, "df", "df(x)", oracle, "overridden")
    finally:
        nb.run("primitive_jvps[np.sin] = saved")
    calls(nb, "df", "df(x)", oracle, "restored")
