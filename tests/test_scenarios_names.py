"""Adversarial scenarios: which function a handle differentiates. ``grad(h)`` follows the
*name* ``h`` (``grad(model.loss)`` follows ``model``, then ``.loss``); lambdas, ``fs[0]``
and locals are fixed objects, as with autograd. Rebinding, deleting, ``%reset`` and odd
callables must give what a fresh autograd computation of the current binding gives, or a
clear error where autograd would fail too.
"""

from __future__ import annotations

from typing import Any

import pytest

from .conftest import Shell
from .scenario_helpers import (
    PRELUDE,
    check,
    states,
    status_then_call,
)


@pytest.fixture(params=["with_extension", "without_extension"])
def anynb(request: pytest.FixtureRequest, bare_shell: Shell) -> Shell:
    if request.param == "with_extension":
        bare_shell.run("%load_ext ipyrefresh")
    bare_shell.run(PRELUDE)
    return bare_shell


@pytest.fixture
def nb(ip: Shell) -> Shell:
    ip.run(PRELUDE)
    return ip


def test_alias_is_followed_not_the_original(anynb: Shell) -> None:
    anynb.run("def g(x):\n    return x ** 2\ng2 = g\ndg2 = grad(g2)")
    check(anynb, "dg2(3.0)", "autograd.grad(g2)(3.0)")
    anynb.run("def g(x):\n    return x ** 3")  # g2 still means the old g
    check(anynb, "dg2(3.0)", "autograd.grad(g2)(3.0)", what="after redefining g:")
    anynb.run("g2 = np.sin")
    check(anynb, "dg2(3.0)", "autograd.grad(g2)(3.0)", what="after g2 = np.sin:")
    anynb.run("g2 = g")
    check(anynb, "dg2(3.0)", "autograd.grad(g2)(3.0)", what="after g2 = g:")


def test_loss_rebound_between_two_functions(anynb: Shell) -> None:
    anynb.run(
        """
def mse(r):
    return np.mean(r ** 2)
def huber(r, d=1.0):
    a = np.abs(r)
    return np.mean(np.where(a < d, 0.5 * r ** 2, d * (a - 0.5 * d)))
loss = mse
d = grad(loss)
r = np.array([0.5, -2.0, 3.0])
"""
    )
    check(anynb, "d(r)", "autograd.grad(loss)(r)")
    anynb.run("loss = huber")
    check(anynb, "d(r)", "autograd.grad(loss)(r)", what="after loss = huber:")
    anynb.run("loss = mse")
    check(anynb, "d(r)", "autograd.grad(loss)(r)", what="after loss = mse:")
    anynb.run("def huber(r, d=2.0):\n    return np.mean(np.abs(r)) * d\nloss = huber")
    check(anynb, "d(r)", "autograd.grad(loss)(r)", what="after a new huber:")


def test_rebinding_to_a_non_callable_gives_a_clear_error(anynb: Shell) -> None:
    anynb.run("def h(x):\n    return x ** 2\ndh = grad(h)\ndh(1.0); dh(1.0)")
    anynb.run("h = 3.0")
    err = anynb.run_error("dh(1.0)")
    assert isinstance(err, TypeError)
    assert "'h'" in str(err) and "not callable" in str(err), str(err)
    err = anynb.run_error("dh(1.0)")  # the second call too
    assert "'h'" in str(err) and "not callable" in str(err), str(err)
    anynb.run("def h(x):\n    return np.sin(x)")
    check(anynb, "dh(1.0)", "autograd.grad(h)(1.0)", what="after h is a function again:")


def test_rebinding_a_method_path_to_a_non_callable(anynb: Shell) -> None:
    anynb.run(
        "class M:\n    def loss(self, x):\n        return x ** 2\n"
        "model = M()\ndl = grad(model.loss)\ndl(1.0); dl(1.0)"
    )
    anynb.run("model.loss = 3.0")
    err = anynb.run_error("dl(1.0)")
    assert isinstance(err, TypeError) and "model.loss" in str(err), str(err)
    anynb.run("del model.loss")
    check(anynb, "dl(1.0)", "autograd.grad(model.loss)(1.0)", what="after del model.loss:")


def test_followed_object_rebound_to_none(anynb: Shell) -> None:
    anynb.run(
        "class M:\n    def loss(self, x):\n        return x ** 2\n"
        "model = M()\ndl = grad(model.loss)\ndl(1.0); dl(1.0)"
    )
    anynb.run("model = None")
    err = anynb.run_error("dl(1.0)")
    assert "loss" in str(err), str(err)
    anynb.run("model = M()")
    check(anynb, "dl(1.0)", "autograd.grad(model.loss)(1.0)")


def test_status_does_not_call_an_entry_fresh_whose_target_is_gone(nb: Shell, capsys: Any) -> None:
    nb.run(
        "class M:\n    def loss(self, x):\n        return x ** 2\n"
        "model = M()\ndl = grad(model.loss)\ndl(1.0); dl(1.0)"
    )
    nb.run("model = None")
    capsys.readouterr()
    reported = states(nb, "dl")
    err = capsys.readouterr().err
    assert "fresh" not in reported, f"status() says {reported} but the next call raises"
    assert "internal error" not in err, err


def test_del_then_redefine(anynb: Shell) -> None:
    anynb.run("def h(x):\n    return x ** 2\ndh = grad(h)\ndh(2.0); dh(2.0)")
    anynb.run("del h")
    err = anynb.run_error("dh(2.0)")
    assert isinstance(err, NameError) and "h" in str(err), str(err)
    anynb.run("def h(x):\n    return x ** 5")
    check(anynb, "dh(2.0)", "autograd.grad(h)(2.0)")


def test_del_reported_by_status(nb: Shell) -> None:
    nb.run("def h(x):\n    return x ** 2\ndh = grad(h)\ndh(2.0); dh(2.0)")
    nb.run("del h")
    assert "fresh" not in states(nb, "dh")


def test_reset_then_same_names(nb: Shell) -> None:
    nb.run("a = 2.0\ndef h(x):\n    return a * x ** 2\ndh = grad(h)\ndh(3.0); dh(3.0)")
    nb.run("%reset -f")
    nb.run(PRELUDE)
    nb.run("a = 5.0\ndef h(x):\n    return a * x ** 3\ndh = grad(h)")
    check(nb, "dh(3.0)", "autograd.grad(h)(3.0)")
    status_then_call(nb, "dh", "dh(3.0)", "autograd.grad(h)(3.0)")


def test_reset_keeps_no_entry_fresh_for_names_that_are_gone(nb: Shell) -> None:
    nb.run(
        "a = 2.0\ndef h(x):\n    return a * x ** 2\ndh = grad(h)\ndh(3.0); dh(3.0)\n"
        "import ipyrefresh as _ir"
    )
    nb.run("%reset -f")
    nb.run("import ipyrefresh")
    entries = nb.run("[(e['name'], e['state']) for e in ipyrefresh.status()['entries']]")
    assert all(state != "fresh" for _, state in entries), entries


def test_reset_with_a_handle_kept_outside_the_namespace(nb: Shell) -> None:
    nb.run(
        "import sys\na = 2.0\ndef h(x):\n    return a * x ** 2\n"
        "sys._scenario_handle = grad(h)\nsys._scenario_handle(3.0); sys._scenario_handle(3.0)"
    )
    try:
        nb.run("%reset -f")
        nb.run(PRELUDE + "import sys\n")
        nb.run("a = 1.0\ndef h(x):\n    return a * np.sin(x)")
        check(nb, "sys._scenario_handle(3.0)", "autograd.grad(h)(3.0)")
    finally:
        nb.run("import sys\nsys.__dict__.pop('_scenario_handle', None)")


def test_module_attribute_target(anynb: Shell, modules: Any) -> None:
    modules("names_mod", "import autograd.numpy as np\ndef f(x):\n    return np.sin(x)\n")
    anynb.run("import names_mod\ndm = grad(names_mod.f)")
    check(anynb, "dm(0.5)", "autograd.grad(names_mod.f)(0.5)")
    anynb.run("names_mod.f = lambda x: x ** 3")
    check(anynb, "dm(0.5)", "autograd.grad(names_mod.f)(0.5)", what="after names_mod.f = ...:")


def test_from_import_as_alias(anynb: Shell, modules: Any) -> None:
    modules("names_mod2", "import autograd.numpy as np\ndef f(x):\n    return np.sin(x)\n")
    anynb.run("from names_mod2 import f as h\ndh = grad(h)")
    check(anynb, "dh(0.5)", "autograd.grad(h)(0.5)")
    anynb.run("h = lambda x: np.exp(x)")
    check(anynb, "dh(0.5)", "autograd.grad(h)(0.5)")


def test_followed_object_rebound_to_other_class(anynb: Shell) -> None:
    anynb.run(
        """
class A:
    def loss(self, x):
        return np.sum(x ** 2)
class B:
    def __init__(self):
        self.k = 3.0
    def loss(self, x):
        return self.k * np.sum(np.sin(x))
model = A()
dl = grad(model.loss)
x = np.array([0.2, 0.4])
"""
    )
    check(anynb, "dl(x)", "autograd.grad(model.loss)(x)")
    anynb.run("model = B()")
    check(anynb, "dl(x)", "autograd.grad(model.loss)(x)", what="model = B():")
    anynb.run("model.k = -1.0")
    check(anynb, "dl(x)", "autograd.grad(model.loss)(x)", what="model.k = -1:")


def test_nested_attribute_chain_target(anynb: Shell) -> None:
    anynb.run(
        """
class Net:
    def __init__(self, s):
        self.s = s
    def loss(self, x):
        return self.s * np.sum(x ** 2)
class Trainer:
    def __init__(self):
        self.model = Net(1.0)
trainer = Trainer()
dl = grad(trainer.model.loss)
x = np.array([0.2, 0.4])
"""
    )
    check(anynb, "dl(x)", "autograd.grad(trainer.model.loss)(x)")
    anynb.run("trainer.model = Net(4.0)")
    check(anynb, "dl(x)", "autograd.grad(trainer.model.loss)(x)", what="new model:")
    anynb.run("trainer = Trainer()")
    check(anynb, "dl(x)", "autograd.grad(trainer.model.loss)(x)", what="new trainer:")


def test_lambda_target_reads_live_globals(anynb: Shell) -> None:
    anynb.run("a = 2.0\ndl = grad(lambda x: a * x ** 2)\nfl = dl.fun")
    check(anynb, "dl(1.5)", "autograd.grad(fl)(1.5)")
    anynb.run("a = 5.0")
    check(anynb, "dl(1.5)", "autograd.grad(fl)(1.5)")


def test_list_element_target_is_fixed(anynb: Shell) -> None:
    anynb.run(
        "def f1(x):\n    return x ** 2\ndef f2(x):\n    return x ** 3\nfs = [f1, f2]\n"
        "d0 = grad(fs[0])\nfirst = fs[0]"
    )
    check(anynb, "d0(2.0)", "autograd.grad(first)(2.0)")
    anynb.run("fs[0] = f2")  # like autograd.grad(fs[0]): the object it was given
    check(anynb, "d0(2.0)", "autograd.grad(first)(2.0)")


COMPREHENSIONS = {
    "list": "ds = [grad(fn) for fn in fs]",
    "nested list": "ds = [grad(fn) for k in [0] for fn in fs]",
    "filtered list": "ds = [grad(fn) for fn in fs if fn is not None]",
    "set of pairs": "ds = [d for i, d in sorted({(i, grad(fn)) for i, fn in enumerate(fs)},"
    " key=lambda p: p[0])]",
    "dict": "ds = list({i: grad(fn) for i, fn in enumerate(fs)}.values())",
    "generator": "ds = list(grad(fn) for fn in fs)",
    "unpacking": "ds = [grad(fn) for _, fn in enumerate(fs)]",
    "for loop": "ds = []\nfor fn in fs:\n    ds.append(grad(fn))",
    "for loop with a global of that name": "fn = f1\nds = []\nfor fn in fs:\n"
    "    ds.append(grad(fn))",
    "list with a global of that name": "fn = f1\nds = [grad(fn) for fn in fs]",
    "while loop rebinding the name": "ds, it = [], iter(fs)\nwhile len(ds) < 2:\n"
    "    fn = next(it)\n    ds.append(grad(fn))",
    "for loop rebinding another name": "ds = []\nfor i in range(2):\n    fn = fs[i]\n"
    "    if fn is not None:\n        ds.append(grad(fn))",
    "match capture in a loop": "ds = []\nfor i in range(2):\n    match fs[i]:\n"
    "        case fn:\n            ds.append(grad(fn))",
    "walrus in a while condition": "it = iter(fs)\nds = []\n"
    "while (fn := next(it, None)) is not None:\n    ds.append(grad(fn))",
    "walrus in a comprehension": "ds = [grad(fn) for f in fs if (fn := f)]",
    "walrus in a comprehension's element": "ds = [(fn := f, grad(fn))[1] for f in fs]",
    "a loop rebinding an attribute": "import types\nobj = types.SimpleNamespace()\nds = []\n"
    "for i in range(2):\n    obj.fn = fs[i]\n    ds.append(grad(obj.fn))",
    "exec'd for loop (no source)": "ds = []\nexec('for fn in fs:\\n    ds.append(grad(fn))')",
    "with and try inside a loop": "import contextlib\nds = []\nfor i in range(2):\n"
    "    with contextlib.nullcontext(fs[i]) as fn:\n        try:\n"
    "            ds.append(grad(fn))\n        finally:\n            pass",
}


@pytest.mark.parametrize("making", list(COMPREHENSIONS), ids=list(COMPREHENSIONS))
def test_handles_made_by_a_comprehension_keep_their_functions(anynb: Shell, making: str) -> None:
    """A loop or comprehension variable is not a name a handle can follow: each handle
    keeps the object it was made from, as autograd's would. (On Python 3.12+ the
    comprehension runs in the cell's own frame, PEP 709, so this is read from the syntax.)"""
    anynb.run(
        "def f1(x):\n    return x ** 2\ndef f2(x):\n    return np.sin(x)\nfs = (f1, f2)\n"
        + COMPREHENSIONS[making]
        + "\nold1, old2 = f1, f2"
    )
    assert anynb.run("len(ds)") == 2
    for i, old in ((0, "old1"), (1, "old2")):
        check(anynb, f"ds[{i}](0.7)", f"autograd.grad({old})(0.7)")
    anynb.run("def f1(x):\n    return x ** 5\ndef f2(x):\n    return np.cos(x)\nfn = f2")
    for i, old in ((0, "old1"), (1, "old2")):
        status_then_call(anynb, f"ds[{i}]", f"ds[{i}](0.7)", f"autograd.grad({old})(0.7)")
        check(anynb, f"ds[{i}](0.7)", f"autograd.grad({old})(0.7)", what="after redefining:")


def test_functions_defined_in_a_loop_keep_their_own_handles(anynb: Shell) -> None:
    """``def f`` inside a loop rebinds ``f`` each turn: each handle keeps its own f."""
    anynb.run(
        "ds, olds = [], []\nfor k in range(3):\n    def f(x):\n        return x ** (k + 2)\n"
        "    ds.append(grad(f))\n    olds.append(f)"
    )
    anynb.run("def f(x):\n    return np.sin(x)")
    for i in range(3):
        check(anynb, f"ds[{i}](0.7)", f"autograd.grad(olds[{i}])(0.7)", what=f"handle {i}:")


def test_a_loop_that_only_calls_still_follows_the_name(anynb: Shell) -> None:
    """A handle made in a loop from a name the loop does not rebind follows that name."""
    anynb.run("def h(x):\n    return x ** 2\nds = []\nfor k in range(2):\n    ds.append(grad(h))")
    anynb.run("def h(x):\n    return x ** 4")
    for i in range(2):
        check(anynb, f"ds[{i}](0.7)", "autograd.grad(h)(0.7)", what="after redefining h:")


def test_handles_made_under_time_magics(nb: Shell) -> None:
    """``%%time`` and ``%time`` run code IPython compiled without a source file: a loop
    variable, or ``fs[0]`` of a ``def``, is still kept as the object; a plain name is
    still followed."""
    nb.run("def f1(x):\n    return x ** 2\ndef f2(x):\n    return np.sin(x)\nfs = (f1, f2)")
    nb.run("%%time\nds = []\nfor fn in fs:\n    ds.append(grad(fn))")
    nb.run("%time d0 = [grad(fs[0])]")
    nb.run("def h(x):\n    return x ** 3")
    nb.run("%time dh = grad(h)")
    nb.run("old1, old2 = f1, f2")
    nb.run("def f1(x):\n    return x ** 5\ndef h(x):\n    return np.cos(x)\nfn = f2")
    for call, oracle in (
        ("ds[0](0.7)", "autograd.grad(old1)(0.7)"),
        ("ds[1](0.7)", "autograd.grad(old2)(0.7)"),
        ("d0[0](0.7)", "autograd.grad(old1)(0.7)"),
        ("dh(0.7)", "autograd.grad(h)(0.7)"),
    ):
        check(nb, call, oracle, what="after redefining:")


def test_class_body_handle_follows_a_global_and_keeps_a_class_local(anynb: Shell) -> None:
    anynb.run(
        "def g(x):\n    return x ** 2\n"
        "class C:\n    dg = grad(g)\n    def m(x):\n        return x ** 3\n    dm = grad(m)\n"
        "old_m = C.m"
    )
    anynb.run("def g(x):\n    return x ** 4\ndef m(x):\n    return np.sin(x)")
    check(anynb, "C.dg(0.7)", "autograd.grad(g)(0.7)", what="after redefining g:")
    check(anynb, "C.dm(0.7)", "autograd.grad(old_m)(0.7)", what="after a global m:")


@pytest.mark.parametrize(
    "making",
    ["ds = [grad(h) for _ in range(2)]", "exec('ds = [grad(h) for _ in range(2)]')"],
    ids=["source", "exec'd"],
)
def test_comprehension_over_names_still_follows_a_global_it_names(
    anynb: Shell, making: str
) -> None:
    """Only the comprehension's own variable is fixed: a global named inside it is followed."""
    anynb.run("def h(x):\n    return x ** 2\n" + making)
    anynb.run("def h(x):\n    return x ** 4")
    for i in range(2):
        check(anynb, f"ds[{i}](0.7)", "autograd.grad(h)(0.7)", what="after redefining h:")


def test_comprehension_in_a_class_body_follows_the_global_it_names(anynb: Shell) -> None:
    """A class body's comprehension sees globals, not the class's names (and on 3.12 an
    inlined comprehension's f_locals is a snapshot holding both)."""
    anynb.run(
        "def h(x):\n    return x ** 2\n"
        "class C:\n    def h(x):\n        return x ** 3\n    ds = [grad(h) for _ in range(2)]"
    )
    anynb.run("def h(x):\n    return x ** 4")
    for i in range(2):
        check(anynb, f"C.ds[{i}](0.7)", "autograd.grad(h)(0.7)", what="after redefining h:")


def test_handle_made_inside_a_function_follows_global(anynb: Shell) -> None:
    anynb.run(
        "def h(x):\n    return x ** 2\n"
        "def make():\n    return grad(h)\n"
        "def make_local():\n    f = lambda x: x ** 4\n    return grad(f), f\n"
        "dh = make()\ndl, fl = make_local()"
    )
    check(anynb, "dh(2.0)", "autograd.grad(h)(2.0)")
    check(anynb, "dl(2.0)", "autograd.grad(fl)(2.0)")
    anynb.run("def h(x):\n    return np.sin(x)")
    check(anynb, "dh(2.0)", "autograd.grad(h)(2.0)", what="after redefining h:")


@pytest.mark.parametrize(
    "rebind",
    [
        "h = np.sin",
        "from functools import partial\ndef _g(x, s):\n    return s * x ** 2\n"
        "h = partial(_g, s=3.0)",
        "class Poly:\n    def __init__(self):\n        self.c = 2.0\n    def __call__(self, x):\n"
        "        return self.c * x ** 3\nh = Poly()",
        "h = lambda x: np.exp(-x)",
        "class K:\n    @staticmethod\n    def f(x):\n        return x ** 4\nh = K.f",
        "class K2:\n    c = 1.5\n    @classmethod\n    def f(cls, x):\n"
        "        return cls.c * x ** 4\nh = K2.f",
        "exec('def h(x):\\n    return np.tanh(x)')",
        "globals()['h'] = lambda x: x * np.cos(x)",
        "_other = lambda x: x ** 5\nh = grad(_other)",
    ],
    ids=[
        "primitive",
        "partial",
        "callable_instance",
        "lambda",
        "staticmethod",
        "classmethod",
        "exec",
        "globals_dict",
        "another_handle",
    ],
)
def test_rebinding_to_other_kinds_of_callables(anynb: Shell, rebind: str) -> None:
    anynb.run("def h(x):\n    return x ** 2\ndh = grad(h)")
    check(anynb, "dh(0.7)", "autograd.grad(h)(0.7)")
    anynb.run(rebind)
    check(anynb, "dh(0.7)", "autograd.grad(h)(0.7)", what=f"after `{rebind}`:")


def test_callable_instance_state_changes(anynb: Shell) -> None:
    anynb.run(
        "class Poly:\n    def __init__(self):\n        self.c = np.array([1.0, 2.0])\n"
        "    def __call__(self, x):\n        return self.c[0] * x + self.c[1] * x ** 2\n"
        "h = Poly()\ndh = grad(h)"
    )
    check(anynb, "dh(0.7)", "autograd.grad(h)(0.7)")
    anynb.run("h.c[1] = -5.0")
    check(anynb, "dh(0.7)", "autograd.grad(h)(0.7)")
    anynb.run("Poly.__call__ = lambda self, x: self.c[0] * np.sin(x)")
    check(anynb, "dh(0.7)", "autograd.grad(h)(0.7)")


def test_rebinding_to_a_generator_function_is_a_clear_error(anynb: Shell) -> None:
    anynb.run("def h(x):\n    return x ** 2\ndh = grad(h)\ndh(1.0)")
    anynb.run("def h(x):\n    yield x")
    err = anynb.run_error("dh(1.0)")
    assert isinstance(err, TypeError) and "generator" in str(err), str(err)


def test_keyword_fun_argument_follows_name(anynb: Shell) -> None:
    anynb.run("def h(x):\n    return x ** 2\ndh = grad(fun=h)")
    check(anynb, "dh(2.0)", "autograd.grad(h)(2.0)")
    anynb.run("def h(x):\n    return x ** 3")
    check(anynb, "dh(2.0)", "autograd.grad(h)(2.0)")


def test_two_handles_on_one_name(anynb: Shell) -> None:
    anynb.run(
        "def h(x):\n    return np.sum(np.sin(x) * x)\n"
        "dh, vh, hh = grad(h), value_and_grad(h), hessian(h)\nx = np.array([0.1, 0.5])"
    )
    for expr, oracle in (
        ("dh(x)", "autograd.grad(h)(x)"),
        ("vh(x)", "autograd.value_and_grad(h)(x)"),
        ("hh(x)", "autograd.hessian(h)(x)"),
    ):
        check(anynb, expr, oracle)
    anynb.run("def h(x):\n    return np.sum(np.exp(x) * x)")
    for expr, oracle in (
        ("hh(x)", "autograd.hessian(h)(x)"),
        ("vh(x)", "autograd.value_and_grad(h)(x)"),
        ("dh(x)", "autograd.grad(h)(x)"),
    ):
        check(anynb, expr, oracle, what="after redefining h:")


def test_loop_variable_name_is_followed(anynb: Shell) -> None:
    """``for h in candidates`` rebinds the name the handle follows."""
    anynb.run(
        "def h(x):\n    return x\ndh = grad(h)\n"
        "out = [(dh(0.7), dh(0.7), autograd.grad(h)(0.7)) "
        "for _ in [0]]\n"
        "for h in [np.sin, np.cos, lambda x: x ** 3]:\n"
        "    out.append((dh(0.7), dh(0.7), autograd.grad(h)(0.7)))"
    )
    from .scenario_helpers import assert_same

    for i, (a, b, want) in enumerate(anynb.ns["out"]):
        assert_same(a, want, f"candidate {i}")
        assert_same(b, want, f"candidate {i} (again)")


def test_grad_magic_after_redefinition(nb: Shell) -> None:
    nb.run("def h(x):\n    return x ** 2")
    assert nb.run("%grad h(3.0)") == nb.run("autograd.grad(h)(3.0)")
    nb.run("def h(x):\n    return x ** 3")
    for _ in range(2):
        got, want = nb.run("%grad h(3.0)"), nb.run("autograd.grad(h)(3.0)")
        assert type(got) is type(want) and got == want
    nb.run("a = 2.0\ndef h(x, y):\n    return a * x * y ** 2")
    got, want = nb.run("%grad -a 1 h(1.0, 3.0)"), nb.run("autograd.grad(h, 1)(1.0, 3.0)")
    assert type(got) is type(want) and got == want
    nb.run("a = 5.0")
    got, want = nb.run("%grad -a 1 h(1.0, 3.0)"), nb.run("autograd.grad(h, 1)(1.0, 3.0)")
    assert type(got) is type(want) and got == want


def test_model_rebound_to_a_copy_while_the_old_one_trains(anynb: Shell) -> None:
    """Evaluate a snapshot: ``model`` is rebound to a deep copy, the original keeps
    training in place; the handle follows ``model``, the snapshot."""
    anynb.run(
        """
import copy
class Model:
    def __init__(self):
        self.W = np.array([0.5, -0.5, 1.0])
    def loss(self, x):
        return np.sum(np.tanh(self.W * x) ** 2)
live = Model()
model = live
dl = grad(model.loss)
x = np.array([1.0, 2.0, 3.0])
dl(x); dl(x)
model = copy.deepcopy(live)
live.W -= 0.5
"""
    )
    check(anynb, "dl(x)", "autograd.grad(model.loss)(x)")


@pytest.mark.parametrize(
    "making",
    [
        "hm = grad(b.m); pass",
        "if True: hm = grad(b.m)",
        "n = 1; hm = grad(b.m); hc = grad(B.cm)",
        "hf = grad(f); hg = grad(g)",
    ],
    ids=["semicolon", "one_line_if", "three_statements", "two_handles"],
)
def test_several_statements_on_one_line(anynb: Shell, making: str) -> None:
    """``executing`` cannot tell which call runs on a line of several statements: the
    one call there whose argument names the function now is the call site."""
    anynb.run(
        "class B:\n    k = 2.0\n    def m(self, x):\n        return np.sum(x ** 2)\n"
        "    @classmethod\n    def cm(cls, x):\n        return cls.k * np.sum(x ** 2)\n"
        "b = B()\ndef f(x):\n    return np.sum(np.sin(x))\ndef g(x):\n    return np.sum(x ** 3)\n"
        "x = onp.array([1.0, 2.0])"
    )
    anynb.run(making)
    handles = {"hm": "b.m", "hc": "B.cm", "hf": "f", "hg": "g"}
    made = {h: o for h, o in handles.items() if h in anynb.run("list(globals())")}
    for h, oracle in made.items():
        check(anynb, f"{h}(x)", f"autograd.grad({oracle})(x)", what="before the change:")
    anynb.run(
        "B.m = lambda self, x: np.sum(x ** 4)\nB.cm = classmethod(lambda cls, x: np.sum(x))\n"
        "def f(x):\n    return np.sum(np.cos(x))\ndef g(x):\n    return np.sum(x ** 5)"
    )
    for h, oracle in made.items():
        status_then_call(anynb, h, f"{h}(x)", f"autograd.grad({oracle})(x)")
        check(anynb, f"{h}(x)", f"autograd.grad({oracle})(x)", what="after the change:")
