"""Adversarial scenarios: changes *between checks* -- inside loops, made by calls, by
``%autoreload`` from files edited on disk, by other threads, by widget callbacks, by
``%load_ext`` in the middle of a cell, and by ipyrefresh's own eager mode.

The oracle is always a fresh autograd computation of the objects bound at that moment
(or, for effects, the same notebook run with plain autograd from the same seeds).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import numpy as onp
import pytest

from .conftest import Shell
from .scenario_helpers import (
    PRELUDE,
    assert_same,
    check,
    rewrite,
    status_then_call,
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


def triples(nb: Shell, name: str) -> None:
    """``name`` holds (handle answer, handle answer, oracle) triples; all must agree."""
    for i, (a, b, want) in enumerate(nb.ns[name]):
        assert_same(a, want, f"{name}[{i}] first call")
        assert_same(b, want, f"{name}[{i}] second call")


# -- loops and calls ----------------------------------------------------------------------


def test_loop_rebinds_callee(anynb: Shell) -> None:
    anynb.run(
        """
def h(x):
    return 2.0 * g(x)
def g(x):
    return x
dh = grad(h)
out = []
for g in [lambda x: x ** 2, np.sin, lambda x: np.exp(x) * x, np.tanh]:
    out.append((dh(0.7), dh(0.7), autograd.grad(h)(0.7)))
"""
    )
    triples(anynb, "out")


def test_loop_rebinds_data_global(anynb: Shell) -> None:
    anynb.run(
        """
def f(x):
    return a * np.sum(np.sin(x) * x)
x = np.array([0.1, 0.2, 0.3])
a = 1.0
dh = grad(f)
out = []
for a in [1.0, 2.0, -0.5, 2.0, 1.0]:
    out.append((dh(x), dh(x), autograd.grad(f)(x)))
"""
    )
    triples(anynb, "out")


def test_loop_walrus_in_comprehension(anynb: Shell) -> None:
    anynb.run(
        """
def f(x):
    return s * x ** 3
s = 1.0
dh = grad(f)
out = [((s := v), dh(2.0), dh(2.0), autograd.grad(f)(2.0))[1:] for v in [1.0, 3.0, 0.5]]
"""
    )
    triples(anynb, "out")


def test_training_loop_updates_global_weights_in_place(anynb: Shell) -> None:
    """f reads W; the loop updates W in place after every gradient."""
    code = """
W = np.array([0.5, -0.3, 0.8])
x = np.array([1.0, 2.0, -1.0])
def f(x):
    return np.sum(np.tanh(W * x) ** 2)
dh = grad(f)
trace = []
for step in range(12):
    g = {G}(x)
    trace.append(g)
    W -= 0.3 * g * x
final = W.copy()
"""
    anynb.run(code.replace("{G}", "dh"))
    mine, final = anynb.ns["trace"], anynb.ns["final"]
    anynb.run(code.replace("{G}", "autograd.grad(f)"))
    assert_same(mine, anynb.ns["trace"], "gradients along the loop")
    assert_same(final, anynb.ns["final"], "weights after the loop")


def test_change_made_by_called_functions(anynb: Shell) -> None:
    anynb.run(
        """
scale = 1.0
W = np.ones(3)
def set_scale(v):
    global scale
    scale = v
def reset_weights():
    W[:] = 0.25
def f(x):
    return scale * np.sum(W * x ** 2)
x = np.array([1.0, 2.0, 3.0])
dh = grad(f)
out = [(dh(x), dh(x), autograd.grad(f)(x))]
set_scale(3.0)
out.append((dh(x), dh(x), autograd.grad(f)(x)))
reset_weights()
out.append((dh(x), dh(x), autograd.grad(f)(x)))
"""
    )
    triples(anynb, "out")


def test_function_changes_what_it_reads(anynb: Shell) -> None:
    """f appends to a list it reads: every call must see the longer list, as autograd does."""
    code = """
seen = []
def f(x):
    seen.append(1.0)
    return len(seen) * x ** 2
answers = [{G}(1.5) for _ in range(5)]
"""
    anynb.run(code.replace("{G}", "dh").replace("answers", "dh = grad(f)\nanswers"))
    mine = anynb.ns["answers"]
    anynb.run(code.replace("{G}", "autograd.grad(f)"))
    assert_same(mine, anynb.ns["answers"], "answers of successive calls")


def test_function_bumps_an_attribute_it_reads(anynb: Shell) -> None:
    code = """
class Counter:
    n = 0
def f(x):
    Counter.n += 1
    return Counter.n * np.sin(x)
answers = [{G}(0.5) for _ in range(4)]
"""
    anynb.run(code.replace("{G}", "dh").replace("answers", "dh = grad(f)\nanswers"))
    mine = anynb.ns["answers"]
    anynb.run(code.replace("{G}", "autograd.grad(f)"))
    assert_same(mine, anynb.ns["answers"], "answers of successive calls")


def test_define_call_redefine_call_in_one_cell(anynb: Shell) -> None:
    anynb.run(
        """
def g(x):
    return np.sin(x)
def h(x):
    return 3.0 * g(x)
dh = grad(h)
out = [(dh(0.4), dh(0.4), autograd.grad(h)(0.4))]
def g(x):
    return x ** 5
out.append((dh(0.4), dh(0.4), autograd.grad(h)(0.4)))
def h(x):
    return g(x) - x
out.append((dh(0.4), dh(0.4), autograd.grad(h)(0.4)))
"""
    )
    triples(anynb, "out")


def test_redefinition_by_exec(anynb: Shell) -> None:
    anynb.run("def g(x):\n    return x ** 2\ndg = grad(g)\na = (dg(2.0), dg(2.0))")
    anynb.run("exec('def g(x):\\n    return x ** 4')")
    check(anynb, "dg(2.0)", "autograd.grad(g)(2.0)")


def test_failed_first_build_then_fixed(anynb: Shell) -> None:
    anynb.run("def f(x):\n    return np.sum(x) * missing_scale\ndh = grad(f)\nx = np.ones(2)")
    err = anynb.run_error("dh(x)")
    assert isinstance(err, NameError)
    anynb.run("missing_scale = 2.0")
    check(anynb, "dh(x)", "autograd.grad(f)(x)")
    anynb.run("def f(x):\n    return np.sum(x ** 2) * missing_scale")
    check(anynb, "dh(x)", "autograd.grad(f)(x)")


def test_build_that_raises_for_one_input_then_works(anynb: Shell) -> None:
    anynb.run(
        "def f(x):\n    if x > 1.0:\n        raise ValueError('too big')\n    return x ** 3\n"
        "dh = grad(f)\na = (dh(0.5), dh(0.5))"
    )
    err = anynb.run_error("dh(2.0)")
    assert isinstance(err, ValueError)
    check(anynb, "dh(0.5)", "autograd.grad(f)(0.5)")
    anynb.run("def f(x):\n    return x ** 3")
    check(anynb, "dh(2.0)", "autograd.grad(f)(2.0)")


def test_keyboard_interrupt_during_first_build(anynb: Shell) -> None:
    anynb.run(
        "interrupt = [True]\na = 2.0\n"
        "def f(x):\n    if interrupt[0]:\n        interrupt[0] = False\n"
        "        raise KeyboardInterrupt\n    return a * np.sin(x)\ndh = grad(f)"
    )
    err = anynb.run_error("dh(0.3)")
    assert isinstance(err, KeyboardInterrupt)
    check(anynb, "dh(0.3)", "autograd.grad(f)(0.3)")
    anynb.run("a = 3.0")
    check(anynb, "dh(0.3)", "autograd.grad(f)(0.3)")


def test_backend_switched_between_changes(nb: Shell) -> None:
    nb.run("a = 2.0\ndef f(x):\n    return a * np.sum(np.sin(x) * x)\ndh = grad(f)\nx = np.ones(2)")
    check(nb, "dh(x)", "autograd.grad(f)(x)")
    nb.run('%config IPyRefresh.backend = "autograd"\na = 3.0')
    check(nb, "dh(x)", "autograd.grad(f)(x)", what="autograd backend:")
    nb.run('%config IPyRefresh.backend = "tape"\na = 4.0')
    check(nb, "dh(x)", "autograd.grad(f)(x)", what="tape again:")


def test_timeit_then_change(anynb: Shell) -> None:
    anynb.run("a = 2.0\ndef f(x):\n    return a * x ** 2\ndh = grad(f)")
    anynb.run("%timeit -q -n 3 -r 1 dh(1.5)")
    anynb.run("a = 5.0")
    anynb.run("%timeit -q -n 3 -r 1 dh(1.5)")
    check(anynb, "dh(1.5)", "autograd.grad(f)(1.5)")


def test_eviction_with_changes(nb: Shell) -> None:
    nb.run("%config IPyRefresh.max_entries = 2")
    nb.run(
        """
a = 1.0
def f1(x): return a * x ** 2
def f2(x): return a * np.sin(x)
def f3(x): return a * np.exp(x)
def f4(x): return a * x ** 3
hs = [grad(f1), grad(f2), grad(f3), grad(f4)]
fs = [f1, f2, f3, f4]
first = [h(0.5) for h in hs]
"""
    )
    nb.run("a = 3.0")
    nb.run("out = [(h(0.5), h(0.5), autograd.grad(f)(0.5)) for h, f in zip(hs, fs)]")
    triples(nb, "out")


# -- nested handles --------------------------------------------------------------------------


def test_function_uses_another_cached_handle(anynb: Shell) -> None:
    """f multiplies by a slope computed by another handle that is already cached."""
    anynb.run(
        """
def g(x):
    return x ** 3
dg = grad(g)
slope = dg(2.0)
def f(x):
    return np.sin(x) * dg(2.0)
df = grad(f)
"""
    )
    check(anynb, "df(0.1)", "autograd.grad(f)(0.1)")
    anynb.run("def g(x):\n    return x ** 2")
    check(anynb, "df(0.1)", "autograd.grad(f)(0.1)", what="after redefining g:")


def test_grad_of_grad_handles_after_redefinitions(anynb: Shell) -> None:
    anynb.run(
        """
def inner(x):
    return np.sin(x) * 2.0
d1 = grad(inner)
d2 = grad(d1)
"""
    )
    check(anynb, "d2(0.3)", "autograd.grad(autograd.grad(inner))(0.3)")
    anynb.run("def inner(x):\n    return np.cos(x) * 3.0")
    check(anynb, "d2(0.3)", "autograd.grad(autograd.grad(inner))(0.3)")
    anynb.run("dd = grad(grad(inner))")
    check(anynb, "dd(0.3)", "autograd.grad(autograd.grad(inner))(0.3)")
    anynb.run("def inner(x):\n    return x ** 4")
    check(anynb, "dd(0.3)", "autograd.grad(autograd.grad(inner))(0.3)", what="dd:")
    check(anynb, "d2(0.3)", "autograd.grad(autograd.grad(inner))(0.3)", what="d2:")


def test_plain_autograd_of_a_handle(anynb: Shell) -> None:
    anynb.run("def f(x):\n    return np.sin(x) * x\ndf = grad(f)\ndf(0.2)")
    check(anynb, "autograd.grad(df)(0.2)", "autograd.grad(autograd.grad(f))(0.2)")
    anynb.run("def f(x):\n    return np.exp(x) * x")
    check(anynb, "autograd.grad(df)(0.2)", "autograd.grad(autograd.grad(f))(0.2)")


def test_ensemble_training_loop_with_equal_initial_weights(anynb: Shell) -> None:
    """Two models start from the same weights and are trained in turn through one handle
    that follows ``model``: a very ordinary ensemble loop."""
    anynb.run(
        """
class Model:
    def __init__(self, W):
        self.W = W
    def loss(self, x):
        return np.sum(np.tanh(x * self.W))
models = [Model(np.ones(3)), Model(np.ones(3))]
model = models[0]
dl = grad(model.loss)
x = np.array([0.5, -0.2, 0.1])
out = []
for step in range(3):
    for i, m in enumerate(models):
        model = m
        g1 = dl(x); g2 = dl(x)
        out.append((g1, g2, autograd.grad(model.loss)(x)))
        m.W -= 0.1 * autograd.grad(model.loss)(x) * (i + 1)
"""
    )
    triples(anynb, "out")


# -- %autoreload ----------------------------------------------------------------------------


@pytest.fixture
def autoreload(nb: Shell, modules: Any) -> Iterator[Any]:
    nb.run("%load_ext autoreload\n%autoreload 2")
    try:
        yield modules
    finally:
        nb.shell.run_line_magic("autoreload", "0")


MOD_V1 = """
import autograd.numpy as np
SCALE = 2.0
def helper(x):
    return np.sin(x)
def f(x):
    return SCALE * helper(x) * x
class Model:
    bias = 0.5
    def __init__(self):
        self.w = 1.5
    def act(self, x):
        return np.tanh(x)
    def loss(self, x):
        return self.w * np.sum(self.act(x) ** 2) + self.bias * np.sum(x)
class Sub(Model):
    pass
"""


def _edit(src: str, old: str, new: str) -> str:
    assert old in src
    return src.replace(old, new)


AUTORELOAD_EDITS = {
    "function_body": ("return SCALE * helper(x) * x", "return SCALE * helper(x) * x ** 2"),
    "module_constant": ("SCALE = 2.0", "SCALE = 5.0"),
    "helper_body": ("return np.sin(x)\ndef f", "return np.cos(x) * 3.0\ndef f"),
    "method_body": ("return np.tanh(x)", "return np.sin(x)"),
    "class_attribute": ("bias = 0.5", "bias = -2.0"),
    "init_default_weight": ("self.w = 1.5", "self.w = 4.0"),
    "override_added_to_subclass": (
        "class Sub(Model):\n    pass",
        "class Sub(Model):\n    def act(self, x):\n        return x ** 3",
    ),
}
AUTORELOAD_HANDLES = {
    "from_import_f": ("from {m} import f\ndh = grad(f)", "dh(0.7)", "autograd.grad(f)(0.7)"),
    "module_attr_f": ("import {m}\ndh = grad({m}.f)", "dh(0.7)", "autograd.grad({m}.f)(0.7)"),
    "notebook_f_calls_module": (
        "import {m}\ndef nf(x):\n    return {m}.f(x) + {m}.helper(x)\ndh = grad(nf)",
        "dh(0.7)",
        "autograd.grad(nf)(0.7)",
    ),
    "bound_method": (
        "from {m} import Model\nm = Model()\ndh = grad(m.loss)\nxs = np.array([0.2, -0.4])",
        "dh(xs)",
        "autograd.grad(m.loss)(xs)",
    ),
    "subclass_method": (
        "from {m} import Sub\nm = Sub()\ndh = grad(m.loss)\nxs = np.array([0.2, -0.4])",
        "dh(xs)",
        "autograd.grad(m.loss)(xs)",
    ),
}


@pytest.mark.parametrize("edit", list(AUTORELOAD_EDITS))
@pytest.mark.parametrize("use", list(AUTORELOAD_HANDLES))
def test_autoreload_edit_on_disk(nb: Shell, autoreload: Any, use: str, edit: str) -> None:
    name = f"arm_{use}_{edit}"
    path = autoreload(name, MOD_V1)
    setup, call, oracle = (s.format(m=name) for s in AUTORELOAD_HANDLES[use])
    nb.run(setup)
    check(nb, call, oracle, what="before the edit:")
    old, new = AUTORELOAD_EDITS[edit]
    rewrite(path, _edit(MOD_V1, old, new))
    nb.run("pass")  # autoreload runs before each cell
    check(nb, call, oracle, what=f"after editing {edit} on disk:")
    rewrite(path, MOD_V1)
    nb.run("pass")
    check(nb, call, oracle, what="after reverting the file:")


# -- threads ----------------------------------------------------------------------------------


def test_thread_calls_after_main_changes(anynb: Shell) -> None:
    anynb.run(
        """
import threading
a = 2.0
def f(x):
    return a * np.sin(x)
dh = grad(f)
out = []
def worker():
    out.append((dh(0.3), dh(0.3), autograd.grad(f)(0.3)))
for a in [2.0, 3.0, 2.0]:
    t = threading.Thread(target=worker); t.start(); t.join()
"""
    )
    triples(anynb, "out")


def test_thread_builds_first_then_main_changes(anynb: Shell) -> None:
    anynb.run(
        """
import threading
W = np.ones(3)
def f(x):
    return np.sum(W * np.tanh(x))
dh = grad(f)
x = np.array([0.1, 0.2, 0.3])
t = threading.Thread(target=lambda: (dh(x), dh(x))); t.start(); t.join()
W[1] = 4.0
"""
    )
    check(anynb, "dh(x)", "autograd.grad(f)(x)")


def test_thread_changes_then_main_calls(anynb: Shell) -> None:
    anynb.run(
        """
import threading
a = 2.0
def f(x):
    return a * x ** 2
dh = grad(f)
dh(1.0); dh(1.0)
def change():
    global a
    a = 7.0
t = threading.Thread(target=change); t.start(); t.join()
"""
    )
    check(anynb, "dh(1.0)", "autograd.grad(f)(1.0)")


def test_concurrent_calls_from_threads_without_changes(anynb: Shell) -> None:
    anynb.run(
        """
import threading
def f(x):
    return np.sum(np.sin(x) * x ** 2)
dh = grad(f)
inputs = [np.linspace(-1, 1, n) for n in (1, 2, 3, 5)] + [0.5]
wants = [autograd.grad(f)(v) for v in inputs]
errors = []
def worker(k):
    for i in range(25):
        v = inputs[(k + i) % len(inputs)]
        got = dh(v)
        want = wants[(k + i) % len(inputs)]
        if type(got) is not type(want) or onp.asarray(got).tobytes() != onp.asarray(want).tobytes():
            errors.append((k, i))
ts = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
for t in ts: t.start()
for t in ts: t.join()
"""
    )
    assert anynb.ns["errors"] == []


def test_thread_changes_data_while_main_calls_in_a_loop(anynb: Shell) -> None:
    """Another thread rebinds a global between calls (synchronised with events): every
    answer must match a fresh computation made right after it, under the same value."""
    anynb.run(
        """
import threading
a = 1.0
def f(x):
    return a * np.sin(x)
dh = grad(f)
go, done = threading.Event(), threading.Event()
def changer():
    global a
    for v in [2.0, 3.0, 4.0, 5.0]:
        go.wait(); go.clear()
        a = v
        done.set()
t = threading.Thread(target=changer); t.start()
out = []
for _ in range(4):
    out.append((dh(0.4), dh(0.4), autograd.grad(f)(0.4)))
    go.set(); done.wait(); done.clear()
    out.append((dh(0.4), dh(0.4), autograd.grad(f)(0.4)))
t.join()
"""
    )
    triples(anynb, "out")


@pytest.mark.parametrize(
    "write",
    [
        "c = 3.0",
        "L[0] = 3.0",
        "W[0] = 3.0",
        "def g(x):\n    return 3.0 * x",
    ],
    ids=["global_rebound", "list_item", "array_item", "callee_redefined"],
)
def test_another_thread_changes_what_a_build_read_before_its_guard_is_made(
    anynb: Shell, monkeypatch: pytest.MonkeyPatch, write: str
) -> None:
    """A build runs the function, checks that what it read is as its first walk found
    it, then walks again for the guard. Another thread's write landing between those
    two (placed there deterministically: a real thread, started when the check returns)
    went into the guard while the tape kept the old value: stale for good, "fresh"."""
    from ipyrefresh._src.guard import Guard

    anynb.run(
        "import threading\nc = 2.0\nL = [2.0]\nW = onp.array([2.0, 2.0])\n"
        "def g(x):\n    return 2.0 * x\n"
        "def f(x):\n    return np.sum(g(x) * c * L[0] * W)\n"
        "dh = grad(f)\nx = onp.array([0.5, 1.5])"
    )
    check_first = Guard.check_interpreted
    pending = [lambda: exec(write, anynb.ns)]

    def check_then_write(self: Guard, *args: Any, **kwargs: Any) -> Any:
        verdict = check_first(self, *args, **kwargs)
        while pending:
            writer = threading.Thread(target=pending.pop())
            writer.start()
            writer.join()
        return verdict

    monkeypatch.setattr(Guard, "check_interpreted", check_then_write)
    anynb.run("dh(x)")  # builds; the write lands between its check and its guard
    assert not pending, "the build made no check for the write to follow"
    check(anynb, "dh(x)", "autograd.grad(f)(x)", times=3, what=f"after `{write}` mid-build:")


def test_a_raced_build_is_never_found_by_another_threads_call(
    anynb: Shell, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Hunt 53: a build whose data another thread rebound between its run and its guard
    ("raced") was installed, then dropped: a third thread's call in between (a call's
    path takes no lock) found its guard holding (it holds the new value) and replayed the
    old one. Every call made inside an install must answer for the values bound then."""
    from ipyrefresh._src.entry import Entry
    from ipyrefresh._src.guard import Guard

    anynb.run(
        "import threading\nc = 1.0\n"
        "def f(x):\n    return c * np.sum(np.tanh(x))\n"
        "dh = grad(f)\nx = onp.array([0.5, 1.5])"
    )
    check(anynb, "dh(x)", "autograd.grad(f)(x)", times=2)
    anynb.run("c = 2.0")
    check_first, install_first = Guard.check_interpreted, Entry.install
    writes = [lambda: anynb.ns.__setitem__("c", 3.0)]
    seen: list[tuple[Any, Any]] = []

    def check_then_write(self: Guard, *args: Any, **kwargs: Any) -> Any:
        verdict = check_first(self, *args, **kwargs)
        while writes:
            writer = threading.Thread(target=writes.pop())
            writer.start()
            writer.join()
        return verdict

    def install_then_call(self: Entry, *args: Any, **kwargs: Any) -> None:
        install_first(self, *args, **kwargs)
        ns = anynb.ns

        def other() -> None:
            seen.append((ns["dh"](ns["x"]), ns["autograd"].grad(ns["f"])(ns["x"])))

        caller = threading.Thread(target=other)
        caller.start()
        caller.join()

    monkeypatch.setattr(Guard, "check_interpreted", check_then_write)
    monkeypatch.setattr(Entry, "install", install_then_call)
    anynb.run("_a = dh(x)")
    check(anynb, "dh(x)", "autograd.grad(f)(x)", times=2, what="after the raced build:")
    assert seen, "no call was made inside an install"
    for got, want in seen:
        assert_same(got, want, "a call made inside an install")


#: What the pool's threads map, and its oracle: a handle not built yet (hunt 21), and one
#: made in the mapped function at each item (``grad(inner)(v)``).
_POOL_WORK = {
    "a handle not built": ("d_inner = grad(inner)", "d_inner", "autograd.grad(inner)(0.2)"),
    "handles made in the threads": (
        "def per_item(v):\n    return grad(inner)(v) + value_and_grad(inner)(v)[1]",
        "per_item",
        "2 * autograd.grad(inner)(0.2)",
    ),
}


@pytest.mark.parametrize("work", list(_POOL_WORK))
def test_a_function_waiting_for_threads_that_use_handles(anynb: Shell, work: str) -> None:
    """The outer build holds the cache while ``f`` runs; ``f`` waits for pool threads that
    call a handle that must build, or make handles: they waited for the cache for ever.
    They now run plain autograd after a moment, and every answer is autograd's."""
    setup, mapped, oracle = _POOL_WORK[work]
    anynb.run(
        f"""
import concurrent.futures, threading
def inner(v):
    return np.sin(v) * 3.0
{setup}
pool = concurrent.futures.ThreadPoolExecutor(2)
def f(x):
    return x ** 2 * sum(pool.map({mapped}, [0.1, 0.2, 0.3]))
df = grad(f)
out = []
caller = threading.Thread(target=lambda: out.append(df(1.5)), daemon=True)
caller.start()
caller.join(60)
"""
    )
    assert anynb.ns["out"], "grad(f) never answered: its pool's threads waited for the cache"
    assert_same(anynb.ns["out"][0], anynb.run("autograd.grad(f)(1.5)"), "mid-build")
    check(anynb, "df(1.5)", "autograd.grad(f)(1.5)", times=2, what="after:")
    check(anynb, f"{mapped}(0.2)", oracle, times=2, what="inner:")
    anynb.run("pool.shutdown()")


# -- widget callbacks -------------------------------------------------------------------------


def test_widget_callback_sets_global_and_calls_handle(anynb: Shell) -> None:
    pytest.importorskip("ipywidgets")
    anynb.run(
        """
import ipywidgets as widgets
k = 1.0
def h(x):
    return k * x ** 2 + np.sin(x)
dh = grad(h)
res = []
def on_change(kk):
    global k
    k = kk
    res.append((dh(1.5), dh(1.5), autograd.grad(h)(1.5)))
w = widgets.interactive(on_change, kk=widgets.FloatSlider(value=1.0, min=0.0, max=10.0))
for v in [2.0, 3.0, 2.0, 7.5]:
    w.children[0].value = v
"""
    )
    assert len(anynb.ns["res"]) >= 4
    triples(anynb, "res")


def test_widget_value_as_argument(anynb: Shell) -> None:
    pytest.importorskip("ipywidgets")
    anynb.run(
        """
import ipywidgets as widgets
def h(x, lam):
    return np.sum(x ** 2) * lam + np.sum(np.abs(x)) * (1 - lam)
dh = grad(h)
x = np.array([0.3, -1.2])
res = []
slider = widgets.FloatSlider(value=0.1, min=0.0, max=1.0, step=0.05)
slider.observe(lambda ch: res.append((dh(x, ch['new']), dh(x, ch['new']),
                                      autograd.grad(h)(x, ch['new']))), names='value')
for v in [0.2, 0.35, 0.2, 0.9, 0.0, 1.0, 0.55, 0.6, 0.65, 0.7]:
    slider.value = v
"""
    )
    triples(anynb, "res")


def test_widget_dropdown_swaps_activation(anynb: Shell) -> None:
    pytest.importorskip("ipywidgets")
    anynb.run(
        """
import ipywidgets as widgets
acts = {'tanh': np.tanh, 'sin': np.sin, 'square': lambda v: v ** 2}
act = np.tanh
def h(x):
    return np.sum(act(x) * x)
dh = grad(h)
x = np.array([0.3, -1.2])
res = []
def pick(change):
    global act
    act = acts[change['new']]
    res.append((dh(x), dh(x), autograd.grad(h)(x)))
dd = widgets.Dropdown(options=list(acts), value='tanh')
dd.observe(pick, names='value')
for v in ['sin', 'square', 'tanh', 'square']:
    dd.value = v
"""
    )
    triples(anynb, "res")


# -- %load_ext in the middle of things ---------------------------------------------------------


def test_load_ext_in_the_cell_that_redefines_and_calls(bare_shell: Shell) -> None:
    bare_shell.run(PRELUDE)
    bare_shell.run("def g(x):\n    return x ** 2\ndg = grad(g)\na = (dg(3.0), dg(3.0))")
    bare_shell.run(
        "%load_ext ipyrefresh\ndef g(x):\n    return x ** 3\n"
        "out = [(dg(3.0), dg(3.0), autograd.grad(g)(3.0))]\n"
        "def g(x):\n    return np.sin(x)\nout.append((dg(3.0), dg(3.0), autograd.grad(g)(3.0)))"
    )
    triples(bare_shell, "out")
    bare_shell.run("def g(x):\n    return np.exp(x)")
    check(bare_shell, "dg(3.0)", "autograd.grad(g)(3.0)")


def test_unload_and_reload_ext_between_changes(nb: Shell) -> None:
    nb.run("a = 2.0\ndef g(x):\n    return a * x ** 2\ndg = grad(g)\ndg(3.0); dg(3.0)")
    nb.run("%unload_ext ipyrefresh\na = 3.0")
    check(nb, "dg(3.0)", "autograd.grad(g)(3.0)", what="unloaded:")
    nb.run("%load_ext ipyrefresh\ndef g(x):\n    return a * x ** 3")
    check(nb, "dg(3.0)", "autograd.grad(g)(3.0)", what="loaded again:")
    nb.run("%reload_ext ipyrefresh")
    nb.run("a = -1.0")
    check(nb, "dg(3.0)", "autograd.grad(g)(3.0)", what="reloaded:")
    status_then_call(nb, "dg", "dg(3.0)", "autograd.grad(g)(3.0)")


# -- eager mode: rebuilding after cells must not change what the notebook computes -------------


def test_eager_mode_basic(nb: Shell) -> None:
    nb.run('%config IPyRefresh.mode = "eager"')
    nb.run("a = 2.0\ndef g(x):\n    return a * np.sin(x)\ndg = grad(g)\ndg(0.3); dg(0.3)")
    nb.run("a = 3.0")
    status_then_call(nb, "dg", "dg(0.3)", "autograd.grad(g)(0.3)", "eager, after a = 3.0")
    nb.run("def g(x):\n    return a * np.cos(x)")
    status_then_call(nb, "dg", "dg(0.3)", "autograd.grad(g)(0.3)", "eager, after redefining")
    check(nb, "dg(0.3)", "autograd.grad(g)(0.3)")


def test_eager_mode_does_not_draw_random_numbers_behind_the_users_back(nb: Shell) -> None:
    """With plain autograd, the second call uses the second draw after seeding."""
    nb.run('%config IPyRefresh.mode = "eager"')
    nb.run(
        "def fr(x):\n    return x * np.random.randn()\ndr = grad(fr)\nonp.random.seed(0)\n"
        "a1 = dr(1.0)"
    )
    nb.run("def fr(x):\n    return 2.0 * x * np.random.randn()")  # a redefinition: eager rebuild
    nb.run("a2 = dr(1.0)")
    nb.run(
        "def fr(x):\n    return x * np.random.randn()\nonp.random.seed(0)\n"
        "b1 = autograd.grad(fr)(1.0)\n"
        "def fr(x):\n    return 2.0 * x * np.random.randn()\nb2 = autograd.grad(fr)(1.0)"
    )
    assert_same(nb.ns["a1"], nb.ns["b1"], "first draw")
    assert_same(nb.ns["a2"], nb.ns["b2"], "second draw (after an eager rebuild)")


def test_eager_mode_does_not_run_a_counter_twice(nb: Shell) -> None:
    nb.run('%config IPyRefresh.mode = "eager"')
    nb.run(
        """
def make():
    n = 0
    def f(x):
        nonlocal n
        n += 1
        return x * n
    return f
fc = make()
dc = grad(fc)
a = [dc(1.0), dc(1.0)]
"""
    )
    nb.run("b = dc(1.0)")
    nb.run("c = dc(1.0)")
    nb.run("fc2 = make()\nwant = [autograd.grad(fc2)(1.0) for _ in range(4)]")
    assert_same(nb.ns["a"] + [nb.ns["b"], nb.ns["c"]], nb.ns["want"], "counter answers")


def test_eager_mode_cell_that_only_changes_data_prints_nothing(nb: Shell, capsys: Any) -> None:
    nb.run('%config IPyRefresh.mode = "eager"')
    nb.run("k = 1.0\ndef fp(x):\n    print('fp ran')\n    return k * x\ndp = grad(fp)\n_ = dp(1.0)")
    capsys.readouterr()
    nb.run("k = 2.0")  # without ipyrefresh this cell prints nothing
    assert capsys.readouterr().out == ""
    capsys.readouterr()
    nb.run("_ = dp(1.0)")
    assert capsys.readouterr().out.count("fp ran") == 1
    check(nb, "dp(1.0)", "autograd.grad(fp)(1.0)")


def test_eager_mode_with_stale_example_arguments(nb: Shell) -> None:
    """Eager rebuilds use the last arguments; a function that now rejects them must not
    leave the handle unusable for good arguments."""
    nb.run('%config IPyRefresh.mode = "eager"')
    nb.run("def f(x):\n    return np.sum(x ** 2)\ndh = grad(f)\n_ = dh(np.ones(3))")
    nb.run("def f(x):\n    assert x.shape == (2,)\n    return np.sum(x ** 3)")
    check(nb, "dh(np.ones(2))", "autograd.grad(f)(np.ones(2))")
    check(nb, "dh(np.ones(2))", "autograd.grad(f)(np.ones(2))")


def test_refresh_magic_then_calls(nb: Shell) -> None:
    nb.run("a = 1.0\ndef f(x):\n    return a * np.sin(x)\ndh = grad(f)\ndh(0.4); dh(0.4)")
    nb.run("a = 2.0")
    nb.run("%refresh")
    check(nb, "dh(0.4)", "autograd.grad(f)(0.4)")
    nb.run("a = 3.0")
    nb.run("%refresh f --all")
    check(nb, "dh(0.4)", "autograd.grad(f)(0.4)")


def test_stale_magic_matches_calls(nb: Shell, capsys: Any) -> None:
    nb.run("a = 1.0\ndef f(x):\n    return a * np.sin(x)\ndh = grad(f)\ndh(0.4); dh(0.4)")
    nb.run("a = 2.0")
    capsys.readouterr()
    nb.run("%stale")
    out = capsys.readouterr().out
    assert "will be rebuilt" in out and "a" in out
    check(nb, "dh(0.4)", "autograd.grad(f)(0.4)")
    capsys.readouterr()
    nb.run("%stale")
    assert "fresh" in capsys.readouterr().out


# == An object the build read is collected, and its name rebound to None ===================

COLLECTED = {
    "slots object": (
        "class Tok:\n    __slots__ = ('__weakref__',)\nthing = Tok()",
        "2.0 if thing is None else 3.0",
    ),
    "module": (
        "import types\nthing = types.ModuleType('made_here')\nthing.S = 3.0",
        "thing.S if thing is not None else 2.0",
    ),
    "instance": (
        "class Cfg:\n    pass\nthing = Cfg()\nthing.s = 3.0",
        "thing.s if thing is not None else 2.0",
    ),
    "class": (
        "class Cfg:\n    s = 3.0\nthing = Cfg",
        "thing.s if thing is not None else 2.0",
    ),
    "function": (
        "def thing(v):\n    return 3.0 * v",
        "thing(1.0) if thing is not None else 2.0",
    ),
}


@pytest.mark.parametrize("kind", list(COLLECTED), ids=list(COLLECTED))
def test_a_collected_object_rebound_to_none(nb: Shell, kind: str) -> None:
    """The guard holds what it read weakly: once that object is collected, a name rebound
    to None must not pass for it (a dead weak reference gives None too)."""
    setup, read = COLLECTED[kind]
    nb.run(f"{setup}\ndef f(x):\n    return np.sum(x * ({read}))\ndf = grad(f)")
    x = "onp.array([1.0, 2.0])"
    check(nb, f"df({x})", f"autograd.grad(f)({x})")
    nb.run("thing = None\nimport gc\ngc.collect()")
    status_then_call(nb, "df", f"df({x})", f"autograd.grad(f)({x})", what="after thing = None:")
    check(nb, f"df({x})", f"autograd.grad(f)({x})", what="after thing = None:")


def test_a_followed_function_collected_and_rebound_to_none_is_a_clear_error(nb: Shell) -> None:
    nb.run("fs = [lambda x: np.sum(x * 1.0)]\nfn = fs[0]\ndh = grad(fn)\ndh(onp.array([1.0, 2.0]))")
    nb.run("fs = None\nfn = None\nimport gc\ngc.collect()")
    err = nb.run_error("dh(onp.array([1.0, 2.0]))")
    assert isinstance(err, TypeError) and "'fn' is not callable" in str(err), err


# -- state kept outside an object's __dict__, changed in place (hunt 20) -------------------

#: (setup defining ``f(x)`` and the objects it reads, the change). Each change keeps
#: every object's identity; only state a guard did not look at moves.
_OUTSIDE_DICT = {
    "structured array fields renamed": (
        "S = onp.array([(1.0, 5.0), (2.0, 7.0)], dtype=[('a', 'f8'), ('b', 'f8')])\n"
        "def f(x):\n    return np.sum(x * S['a'])",
        "S.dtype.names = ('b', 'a')",
    ),
    "record array read by attribute": (
        "R = onp.rec.array([(1.0, 5.0), (2.0, 7.0)], dtype=[('a', 'f8'), ('b', 'f8')])\n"
        "def f(x):\n    return np.sum(x * R.a)",
        "R.dtype.names = ('b', 'a')",
    ),
    "numpy record": (
        "V = onp.array([(1.0, 5.0)], dtype=[('a', 'f8'), ('b', 'f8')])[0]\n"
        "def f(x):\n    return np.sum(x * V['a'])",
        "V.dtype.names = ('b', 'a')",
    ),
    "function annotation read as data": (
        "def g(v: 2.0):\n    return v\ndef f(x):\n    return np.sum(x * g.__annotations__['v'])",
        "g.__annotations__['v'] = 3.0",
    ),
    "function renamed, name used as a key": (
        "def g(v):\n    return v\nW = {'g': 2.0, 'h3': 7.0}\n"
        "def f(x):\n    return np.sum(x * W[g.__name__])",
        "g.__name__ = 'h3'",
    ),
    "docstring length": (
        "def g(v):\n    'short'\n    return v\ndef f(x):\n    return np.sum(x * len(g.__doc__))",
        "g.__doc__ = 'a much longer docstring'",
    ),
    "class renamed, dispatch on type(a).__name__": (
        "class A:\n    pass\na = A()\nSC = {'A': 2.0, 'B': 5.0}\n"
        "def f(x):\n    return np.sum(x * SC[type(a).__name__])",
        "A.__name__ = 'B'",
    ),
    "module given a class with a property": (
        "import types\ncfg = types.ModuleType('cfg')\ncfg.K = 2.0\n"
        "class LiveConfig(types.ModuleType):\n    @property\n    def K(self):\n        return 5.0\n"
        "def f(x):\n    return np.sum(x * cfg.K)",
        "cfg.__class__ = LiveConfig",
    ),
    "a callable object patched into numpy, changed": (
        "class Act:\n    def __init__(self, k):\n        self.k = k\n"
        "    def __call__(self, v):\n        return self.k * np.tanh(v)\n"
        "np.ipyrefresh_test_act = Act(2.0)\n"
        "def f(x):\n    return np.sum(np.ipyrefresh_test_act(x))",
        "np.ipyrefresh_test_act.k = 3.0",
    ),
    "a partial patched into numpy, its keywords changed": (
        "import functools\ndef soft(v, beta=1.0):\n    return np.log1p(np.exp(beta * v)) / beta\n"
        "np.ipyrefresh_test_soft = functools.partial(soft, beta=1.0)\n"
        "def f(x):\n    return np.sum(np.ipyrefresh_test_soft(x))",
        "np.ipyrefresh_test_soft.keywords['beta'] = 2.0",
    ),
    "deque subclass that iterates sorted, rotated": (
        "import collections\nclass SortedView(collections.deque):\n"
        "    def __iter__(self):\n        return iter(sorted(collections.deque.__iter__(self)))\n"
        "Q = SortedView([1.0, 2.0, 3.0])\n"
        "def f(x):\n    return np.sum(x * Q[0])",
        "Q.rotate(1)",
    ),
    "deque re-initialised with another maxlen": (
        "import collections\nQ = collections.deque([2.0], maxlen=3)\n"
        "def f(x):\n    return np.sum(x * Q.maxlen)",
        "Q.__init__([2.0], maxlen=5)",
    ),
}


@pytest.mark.parametrize("case", sorted(_OUTSIDE_DICT))
def test_state_outside_the_dict_changed_in_place(nb: Shell, case: str) -> None:
    """Structured dtypes (renamed in the array's own dtype object), a function's name,
    doc and annotations, a class's name, a module's class, a user's callable in a
    library's namespace, a deque's order and maxlen: each changed in place answered for
    the old state on every call, with status() fresh."""
    setup, change = _OUTSIDE_DICT[case]
    nb.run(setup + "\nx = onp.array([0.3, 0.7])\ndf = grad(f)")
    try:
        check(nb, "df(x)", "autograd.grad(f)(x)", times=2, what=f"{case}, before")
        before = nb.run("autograd.grad(f)(x)")
        nb.run(change)
        assert not onp.array_equal(nb.run("autograd.grad(f)(x)"), before), "no change to see"
        status_then_call(nb, "df", "df(x)", "autograd.grad(f)(x)", case)
        check(nb, "df(x)", "autograd.grad(f)(x)", times=3, what=case)
    finally:
        nb.run(
            "np.__dict__.pop('ipyrefresh_test_act', None)\n"
            "np.__dict__.pop('ipyrefresh_test_soft', None)"
        )


@pytest.mark.parametrize(
    "case",
    [
        "function renamed, name used as a key",
        "class renamed, dispatch on type(a).__name__",
        "module given a class with a property",
        "deque re-initialised with another maxlen",
    ],
)
def test_state_outside_the_dict_changed_in_place_jax(nb: Shell, case: str) -> None:
    """The same guards serve JAX handles (``rj.grad`` answered stale for these too)."""
    pytest.importorskip("jax")
    import re

    setup, change = _OUTSIDE_DICT[case]
    nb.run("import jax, jax.numpy as jnp\nimport ipyrefresh.jax as rj")
    nb.run(re.sub(r"\bnp\.", "jnp.", setup) + "\nx = jnp.array([0.3, 0.7])\ndf = rj.grad(f)")
    for step in ["pass", "pass", change, "pass", "pass"]:
        nb.run(step)
        got, want = nb.run("df(x), jax.grad(f)(x)")
        assert onp.array_equal(onp.asarray(got), onp.asarray(want)), (case, step, got, want)


def test_a_cell_ends_while_another_threads_build_waits_for_the_next_cell(anynb: Shell) -> None:
    """Hunt 53: a thread's first call builds while holding the cache, and its function
    waits for the notebook's go (an event a later cell sets): the cell's own hooks waited
    for the cache, so the cell never ended and the next cell never ran (the kernel hung).
    The hooks only report: past a moment they let the cell end."""
    anynb.run(
        "import threading\ngo = threading.Event()\nby_watchdog = []\n"
        "def f(x):\n    go.wait()\n    return np.sum(np.sin(x) * 2.0)\n"
        "df = grad(f)\nx = onp.array([0.3, 0.7])\nout = []\n"
        "worker = threading.Thread(target=lambda: out.append(df(x)), daemon=True)\n"
        "def _watchdog():\n"
        "    if not go.wait(30):\n        by_watchdog.append(True)\n        go.set()\n"
        "threading.Thread(target=_watchdog, daemon=True).start()\n"
        "worker.start()"
    )
    anynb.run("go.set()")  # (a cell that could not run while the first one hung)
    anynb.run("worker.join(30)")
    assert not anynb.ns["by_watchdog"], "the cell ran only after the watchdog set the event"
    check(anynb, "out[0]", "autograd.grad(f)(x)", times=1, what="the thread's answer:")


def test_stale_and_refresh_say_busy_while_another_threads_build_waits(
    nb: Shell, capsys: Any
) -> None:
    """Hunt 54: ``%stale`` and ``%refresh`` waited for the cache for ever while another
    thread's build ran a function waiting for a later cell (the kernel hung). They say
    the cache is busy instead, and answer again once the build returns."""
    nb.run(
        "import threading\ngo, inside = threading.Event(), threading.Event()\n"
        "def f(x):\n    inside.set()\n    go.wait(30)\n    return np.sum(np.sin(x) * 2.0)\n"
        "df = grad(f)\nx = onp.array([0.3, 0.7])\n%config IPyRefresh.build_at_call = 1\n"
        "worker = threading.Thread(target=lambda: df(x), daemon=True)\n"
        "worker.start()\ninside.wait(30)"
    )
    capsys.readouterr()
    nb.run("%stale")
    nb.run("%refresh")
    out = capsys.readouterr().out
    assert out.count("another thread is building") == 2, out
    nb.run("go.set()\nworker.join(30)")
    capsys.readouterr()
    nb.run("%stale")
    assert "fresh" in capsys.readouterr().out
    check(nb, "df(x)", "autograd.grad(f)(x)", times=2, what="after the build returned:")


def test_requests_and_housekeeping_never_wait_for_another_threads_build(nb: Shell) -> None:
    """Hunt 54: ``status()``, ``refresh()``, ``%callgraph``, ``%config``, ``%unload_ext``,
    ``%load_ext`` and ``%reset`` waited for the cache for ever while another thread's
    build ran a function waiting for a later cell. Requests raise ``EngineBusy`` (a clear
    error); housekeeping is done by the first cell after the build returns."""
    from IPython.core.error import UsageError

    import ipyrefresh
    from ipyrefresh._src.handles import current

    nb.run(
        "import threading\ngo, inside = threading.Event(), threading.Event()\n"
        "timed_out = []\n"
        "def f(x):\n    inside.set()\n    if not go.wait(30):\n        timed_out.append(1)\n"
        "    import autograd.numpy as anp  # (the cell's names are gone by then: %reset)\n"
        "    return anp.sum(anp.sin(x) * 2.0)\n"
        "df = grad(f)\nx = onp.array([0.3, 0.7])\n%config IPyRefresh.build_at_call = 1\n"
        "worker = threading.Thread(target=lambda: df(x), daemon=True)\n"
        "worker.start()\ninside.wait(30)"
    )
    go, worker, timed_out = nb.ns["go"], nb.ns["worker"], nb.ns["timed_out"]
    for request in ["ipyrefresh.status()", "ipyrefresh.refresh()"]:
        exc = nb.run_error(f"import ipyrefresh\n{request}")
        assert isinstance(exc, ipyrefresh.EngineBusy), (request, exc)
    exc = nb.run_error("%callgraph f")
    assert isinstance(exc, UsageError) and "another thread is building" in str(exc), exc
    nb.run("%config IPyRefresh.max_entries = 3")
    nb.run("%unload_ext ipyrefresh")
    nb.run("%load_ext ipyrefresh")
    nb.run("%reset -f")
    assert not timed_out, "a request or a cell waited for the thread's build"
    go.set()
    worker.join(30)
    nb.run("pass")  # (the first cell that holds the cache does what %reset and %config asked)
    engine = current()
    assert engine.cache.max_entries == 3
    assert ipyrefresh.status()["entries_total"] == 0
    assert ipyrefresh.status()["busy_requests"] >= 3
    nb.run(PRELUDE)
    nb.run("def f(x):\n    return np.sum(np.cos(x) * 3.0)\ndf = grad(f)\nx = onp.array([0.3, 0.7])")
    check(nb, "df(x)", "autograd.grad(f)(x)", times=2, what="after the housekeeping:")
    assert ipyrefresh.status()["fresh"] == 1
