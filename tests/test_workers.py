"""Handles sent to other processes: process pools (fork and spawn), joblib's loky backend,
a Dask ``LocalCluster``. A real IPython shell defines the code; each answer a worker
sends back must equal a fresh autograd computation of the shell's *current* code and
data, made in this process, bit for bit; after a redefinition (or an in-place change of
a global array) the next tasks sent must answer for the new code.

The pools and the cluster are made once per module (two cores are shared by all).
"""

from __future__ import annotations

import copy
import gc
import multiprocessing
import os
import pickle
import sys
import threading
import warnings
from collections.abc import Callable, Iterator
from concurrent import futures
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import autograd
import autograd.numpy as anp
import numpy as onp
import pytest
from autograd.core import primitive_vjps

import ipyrefresh
from ipyrefresh._src.engine import Engine
from ipyrefresh._src.targets import FixedTarget

from .conftest import PRISTINE_RULES, Shell, require_jax
from .oracle import same_result

os.environ.setdefault("JAX_PLATFORMS", "cpu")  # no accelerator probing, here or in workers

# Forking a process that runs threads (Dask's client, JAX) warns on Python 3.12+; the
# forked workers here only unpickle handles and run autograd.
pytestmark = pytest.mark.filterwarnings(
    "ignore:.*fork.*:DeprecationWarning", "ignore:.*fork.*:RuntimeWarning"
)

Send = Callable[[Any, list[Any]], list[Any]]

SHELL_CODE = """\
import numpy as onp
def g(x): return np.sin(x) * 3.0
a = onp.array([1.5, -0.5])
def h(x): return 2 * g(x) * a[0] + a[1] * x ** 2
dh = grad(h)
"""
XS = [0.0, 0.5, 1.0, 1.5]


def module_loss(x: Any) -> Any:
    """A plain function of this module: workers import it by reference."""
    return anp.sum(anp.tanh(x) ** 2 * anp.arange(1.0, 1.0 + anp.size(x)))


# -- the pools, one per module -----------------------------------------------------------


@pytest.fixture(autouse=True)
def _rule_tables_of_a_fresh_session() -> Iterator[None]:
    """A task's token pickles every rule of the user's that autograd holds; rules other
    tests registered stay in autograd's global tables (some cannot be pickled, which gives
    every task a token of its own). Each test here runs with the tables of a fresh
    session, and gives back those it found."""
    found = [(table, dict(table)) for table, _ in PRISTINE_RULES]
    for table, pristine in PRISTINE_RULES:
        table.clear()
        table.update(pristine)
    try:
        yield
    finally:
        for table, before in found:
            table.clear()
            table.update(before)


@pytest.fixture(autouse=True)
def _main_has_a_spec(ip: Shell) -> None:
    """IPython's reset (the shell fixture resets; so does %reset) empties the namespace of
    the shell's ``__main__`` module, ``__spec__`` included, and multiprocessing's spawn
    needs ``__main__.__spec__``. A fresh shell has it (None): put it back."""
    ip.ns.setdefault("__spec__", None)


@pytest.fixture(scope="module")
def pools() -> Iterator[Callable[[str], ProcessPoolExecutor]]:
    made: dict[str, ProcessPoolExecutor] = {}

    def pool(method: str) -> ProcessPoolExecutor:
        if method not in made:
            made[method] = ProcessPoolExecutor(2, mp_context=multiprocessing.get_context(method))
        return made[method]

    yield pool
    for executor in made.values():
        executor.shutdown(wait=True, cancel_futures=True)


@pytest.fixture(scope="module")
def loky() -> Iterator[Send]:
    joblib = pytest.importorskip("joblib")

    def send(dh: Any, xs: list[Any]) -> list[Any]:
        return joblib.Parallel(n_jobs=2, backend="loky")(joblib.delayed(dh)(x) for x in xs)

    yield send
    from joblib.externals.loky import get_reusable_executor

    get_reusable_executor().shutdown(wait=True)


@pytest.fixture(scope="module")
def dask_client() -> Iterator[Any]:
    distributed = pytest.importorskip("distributed")
    with (
        distributed.LocalCluster(
            n_workers=2,
            threads_per_worker=1,
            processes=True,
            dashboard_address=None,
            worker_dashboard_address=None,
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        yield client


@pytest.fixture
def sender(request: pytest.FixtureRequest, pools: Any) -> Send:
    """How one kind of worker gets the tasks ``dh(x)`` for ``x`` in ``xs``."""
    kind = request.param
    if kind in ("fork", "spawn"):
        executor = pools(kind)
        return lambda dh, xs: list(executor.map(dh, xs))
    if kind == "loky":
        send: Send = request.getfixturevalue("loky")
        return send
    client = request.getfixturevalue("dask_client")
    held: list[Any] = []

    def send_to_dask(dh: Any, xs: list[Any]) -> list[Any]:
        futures = client.map(dh, xs)
        held.append(futures)  # earlier rounds' futures stay alive: no key may be reused
        return list(client.gather(futures))

    return send_to_dask


def fresh_grad(ip: Shell, xs: list[Any]) -> list[Any]:
    """autograd.grad of the shell's h as it is now, computed here."""
    return [autograd.grad(ip.ns["h"])(x) for x in xs]


# -- the scenario on every kind of worker ----------------------------------------


@pytest.mark.parametrize("sender", ["fork", "spawn", "loky", "dask"], indirect=True)
def test_workers_answer_for_the_code_current_when_sent(ip: Shell, sender: Send) -> None:
    ip.ns["send"] = sender
    ip.run(SHELL_CODE + "xs = " + repr(XS))

    def check() -> list[Any]:
        got = ip.run("send(dh, xs)")
        want = fresh_grad(ip, XS)
        assert len(got) == len(want)
        for g, w in zip(got, want, strict=True):
            same_result(g, w)
        return got

    first = check()
    ip.run("def g(x): return x ** 3 - x")  # a callee is redefined in the notebook
    second = check()
    assert not onp.array_equal(first, second)
    ip.run("a[0] = 4.0")  # a global array h reads changes in place
    third = check()
    assert not onp.array_equal(second, third)
    ip.run("def h(x): return np.cos(x) * a[1]")  # the name dh follows is rebound
    fourth = check()
    assert not onp.array_equal(third, fourth)


@pytest.mark.parametrize("sender", ["fork", "spawn", "loky", "dask"], indirect=True)
def test_a_notebook_class_set_back_to_an_earlier_state(ip: Shell, sender: Send) -> None:
    """cloudpickle keeps one copy of a notebook class per worker and sets its attributes
    from each payload it loads: a payload seen before (scale 1.0 again, after 2.0) must
    be applied again before the worker's kept handle answers (hunt 8)."""
    ip.ns["send"] = sender
    ip.run(
        "class Model:\n    scale = 1.0\n"
        "def h(x): return Model.scale * np.sum(np.sin(x))\n"
        "import numpy as onp\ndh = grad(h)\nxs = [onp.array([0.1, 0.2]), onp.array([0.3, -0.4])]"
    )
    for scale in (1.0, 2.0, 1.0, 2.0):
        ip.run(f"Model.scale = {scale}")
        got = ip.run("send(dh, xs * 2)")
        want = [autograd.grad(ip.ns["h"])(x) for x in ip.ns["xs"] * 2]
        for g, w in zip(got, want, strict=True):
            same_result(g, w)


@pytest.mark.parametrize("sender", ["spawn", "dask"], indirect=True)
def test_a_module_function_is_imported_by_the_worker(engine: Engine, sender: Send) -> None:
    dh = ipyrefresh.grad(module_loss)
    xs = [onp.linspace(-1.0, 1.0, 5), onp.linspace(0.25, 2.0, 5)]
    got = sender(dh, xs)
    for g, x in zip(got, xs, strict=True):
        same_result(g, autograd.grad(module_loss)(x))


def test_every_kind_of_handle_through_a_spawned_pool(ip: Shell, pools: Any) -> None:
    ip.run(
        "from ipyrefresh import value_and_grad, elementwise_grad, jacobian, hessian\n"
        "def f(x, y): return np.sum(np.sin(x) * y ** 2)\n"
        "def e(x): return np.tanh(x) * 2.0\n"
        "def v(x): return np.array([x[0] * x[1], np.exp(x[1])])\n"
        "handles = [value_and_grad(f, 1), elementwise_grad(e), jacobian(v), hessian(f),"
        " grad(f, (0, 1))]"
    )
    x, y = onp.array([0.3, -1.2, 2.0]), onp.array([1.0, 0.5, -2.0])
    cases = [
        ((x, y), autograd.value_and_grad(ip.ns["f"], 1)),
        ((x,), autograd.elementwise_grad(ip.ns["e"])),
        ((x[:2],), autograd.jacobian(ip.ns["v"])),
        ((x, y), autograd.hessian(ip.ns["f"])),
        ((x, y), autograd.grad(ip.ns["f"], (0, 1))),
    ]
    executor = pools("spawn")
    sent = [
        executor.submit(dh, *args) for dh, (args, _) in zip(ip.ns["handles"], cases, strict=True)
    ]
    for future, (args, oracle) in zip(sent, cases, strict=True):
        same_result(future.result(timeout=120), oracle(*args))


def test_a_pinned_handle_keeps_its_code_while_tasks_are_queued(ip: Shell, pools: Any) -> None:
    """A pool pickles queued tasks later, when a worker frees up: a handle pickled at
    submission (the README's idiom) keeps the code of that moment for all of them."""
    ip.run(SHELL_CODE + "import pickle\npinned = pickle.loads(pickle.dumps(dh))")
    want = fresh_grad(ip, XS)
    executor = pools("spawn")
    queued = [executor.submit(ip.ns["pinned"], x) for x in XS * 3]
    ip.run("def g(x): return x ** 3 - x\na[0] = 4.0")
    for future, w in zip(queued, want * 3, strict=True):
        same_result(future.result(timeout=120), w)


def test_a_jax_handle_through_a_spawned_pool(ip: Shell, pools: Any) -> None:
    jax = require_jax()
    ip.run(
        "import jax.numpy as jnp\nimport ipyrefresh.jax as rj\n"
        "def g(x): return jnp.sin(x) * 3.0\n"
        "def h(x): return jnp.sum(2.0 * g(x) * x)\n"
        "dh = rj.grad(h)\nx = jnp.array([0.3, -1.2, 2.0])"
    )
    executor = pools("spawn")
    for _ in range(2):
        got = executor.submit(ip.ns["dh"], ip.ns["x"]).result(timeout=300)
        want = jax.grad(ip.ns["h"])(ip.ns["x"])
        assert got.shape == want.shape and got.dtype == want.dtype == onp.float32
        onp.testing.assert_allclose(onp.asarray(got), onp.asarray(want), rtol=1e-6)
        ip.run("def g(x): return jnp.cos(x) ** 2")
    # A notebook in double precision: the worker (at JAX's default, float32) follows it.
    old = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", True)
    try:
        ip.run("x = jnp.array([0.3, -1.2, 2.0])")
        got = executor.submit(ip.ns["dh"], ip.ns["x"]).result(timeout=300)
        want = jax.grad(ip.ns["h"])(ip.ns["x"])
        assert got.dtype == want.dtype == onp.float64
        onp.testing.assert_allclose(onp.asarray(got), onp.asarray(want), rtol=1e-12)
    finally:
        jax.config.update("jax_enable_x64", old)


# -- what pickling gives, in this process ------------------------------------------------


def test_unpickled_handles_are_fixed_and_compute_the_code_of_the_moment(ip: Shell) -> None:
    ip.run(SHELL_CODE)
    old = pickle.loads(pickle.dumps(ip.ns["dh"]))
    assert isinstance(old.target, FixedTarget) and old.target.label == "h"
    assert old._engine is not ip.ns["dh"]._engine  # this process's engine for sent handles
    assert "fixed function" in repr(old) and "tape" in repr(old)
    same_result(old(0.5), fresh_grad(ip, [0.5])[0])
    # Tasks that carry the same code and data share one rebuilt handle (and its entry).
    assert pickle.loads(pickle.dumps(ip.ns["dh"])) is old
    before = old(0.5)
    ip.run("def g(x): return x ** 3 - x")
    new = pickle.loads(pickle.dumps(ip.ns["dh"]))
    assert new is not old
    same_result(new(0.5), fresh_grad(ip, [0.5])[0])
    same_result(old(0.5), before)  # a sent handle keeps the code it was sent with


def test_options_argnum_and_backend_travel(ip: Shell) -> None:
    ip.run("%config IPyRefresh.backend = 'autograd'")
    ip.run("def f(x, y): return np.sum(x * y ** 2)\ndf = grad(f, (0, 1))")
    sent = pickle.loads(pickle.dumps(ip.ns["df"]))
    assert (sent.argnum, sent.backend) == ((0, 1), "autograd")
    assert sent.transform is ip.ns["df"].transform
    jax = require_jax()
    ip.run(
        "import jax.numpy as jnp\nimport ipyrefresh.jax as rj\n"
        "def step(x, n): return x * n\nfast = rj.jit(step, static_argnums=1)"
    )
    fast = pickle.loads(pickle.dumps(ip.ns["fast"]))
    assert fast.backend == "jax" and fast.options == ip.ns["fast"].options
    x = jax.numpy.array([1.0, 2.0])
    onp.testing.assert_array_equal(fast(x, 3), x * 3)


def test_dask_names_tasks_by_the_code_they_carry(ip: Shell) -> None:
    tokenize = pytest.importorskip("dask.base").tokenize
    ip.run(SHELL_CODE)
    first = tokenize(ip.ns["dh"])
    assert tokenize(ip.ns["dh"]) == first  # the same code and data: the same tasks
    ip.run("a[1] = 7.0")
    assert tokenize(ip.ns["dh"]) != first


def test_dask_names_tasks_by_the_gradient_rules_too(ip: Shell) -> None:
    """A ``defvjp`` is not in the function's payload, but changes what its tasks compute
    (Dask's thread schedulers share autograd's rule table): the token must change."""
    dask = pytest.importorskip("dask")
    tokenize = dask.base.tokenize
    ip.run(SHELL_CODE + "from autograd.extend import defvjp")
    first = tokenize(ip.ns["dh"])
    saved = primitive_vjps[anp.sin]
    try:
        ip.run("defvjp(np.sin, lambda ans, x: lambda g: g * 10.0)")
        second = tokenize(ip.ns["dh"])
        assert second != first
        assert tokenize(ip.ns["dh"]) == second
        threaded = dask.compute(*[dask.delayed(ip.ns["dh"])(x) for x in XS], scheduler="threads")
        for got, w in zip(threaded, fresh_grad(ip, XS), strict=True):
            same_result(got, w)
    finally:  # (the rule itself: a lambda of the shell's would outlive its namespace)
        primitive_vjps[anp.sin] = saved


@pytest.mark.parametrize(
    "change",
    ["scale = 3.0", "S[0] = 5.0", "r.k = 4.0", "defjvp(q, lambda g, ans, x: g * 7.0)"],
    ids=["global_a_rule_reads", "partials_list", "bound_methods_object", "defjvp"],
)
def test_dask_names_tasks_by_what_the_gradient_rules_hold(ip: Shell, change: str) -> None:
    """Hunt 63: the token followed a new rule object only: a task made after the state
    a rule holds changed got the old task's name, and Dask handed back the result the
    old rule computed. The token now carries the user's rules as they are now."""
    dask = pytest.importorskip("dask")
    ip.run(
        "import functools, autograd\nfrom autograd.extend import primitive, defvjp, defjvp\n"
        "scale = 1.0\nS = [1.0]\n"
        "class R:\n    k = 2.0\n"
        "    def rule(self, ans, x):\n        return lambda g: g * self.k\nr = R()\n"
        "def f_rule(ans, x):\n    return lambda g: g * scale\n"
        "@primitive\ndef f(x):\n    return x * 2.0\ndefvjp(f, f_rule)\n"
        "@primitive\ndef q(x):\n    return x * 2.0\n"
        "defvjp(q, functools.partial(lambda ans, x, s: (lambda g: g * s[0]), s=S))\n"
        "defjvp(q, lambda g, ans, x: g * 2.0)\n"
        "@primitive\ndef m(x):\n    return x * 2.0\ndefvjp(m, r.rule)\n"
        "def h(x):\n    return np.sin(f(x)) + np.cos(q(x)) * m(x)"
        " + autograd.make_jvp(q)(x)(1.0)[1]\n"
        "dh = grad(h)\n_ = dh(0.5), dh(0.5)"  # (built: its payload is what it is now)
    )
    before = dask.delayed(ip.ns["dh"], pure=True)(0.5).persist(scheduler="threads")
    ip.run(change)
    after = dask.delayed(ip.ns["dh"], pure=True)(0.5)
    assert after.key != before.key
    got = dask.compute(before, after, scheduler="threads")[1]
    same_result(got, autograd.grad(ip.ns["h"])(0.5))


def test_dask_names_tasks_by_what_a_rule_of_a_users_module_reads(ip: Shell, modules) -> None:  # type: ignore[no-untyped-def]
    """Hunt 64: a rule from a module of the user's files pickles by reference, so its
    bytes do not say what it reads of its module: such a rule gives tasks names of their
    own (as a payload naming a user's module does)."""
    dask = pytest.importorskip("dask")
    modules(
        "ipyr_rules",
        "import autograd.numpy as np\nscale = 1.0\n"
        "def rule(ans, x):\n    return lambda g: g * np.cos(x) * scale\n",
    )
    ip.run(
        "import ipyr_rules\nfrom autograd.extend import primitive, defvjp\n"
        "@primitive\ndef f(x):\n    return np.sin(x)\ndefvjp(f, ipyr_rules.rule)\n"
        "def h(x):\n    return f(x) * 2.0\ndh = grad(h)\n_ = dh(0.5), dh(0.5)"
    )
    before = dask.delayed(ip.ns["dh"], pure=True)(0.5).persist(scheduler="threads")
    ip.run("ipyr_rules.scale = 3.0")
    after = dask.delayed(ip.ns["dh"], pure=True)(0.5)
    assert after.key != before.key
    same_result(dask.compute(before, after, scheduler="threads")[1], autograd.grad(ip.ns["h"])(0.5))


def test_dask_tokens_keep_no_replaced_rule_alive(ip: Shell) -> None:
    """Hunt 63: tokens kept every rule object they met (to keep its id from being
    reused), and with it all it held: 40 MB per rule replaced in this test's loop."""
    tokenize = pytest.importorskip("dask.base").tokenize
    ip.run(
        "import functools, weakref\nimport numpy as onp\n"
        "from autograd.extend import primitive, defvjp\n"
        "@primitive\ndef f(x):\n    return x * 2.0\n"
        "def f_rule(ans, x, M):\n    return lambda g: g * M[0]\n"
        "def h(x):\n    return np.sin(f(x))\ndh = grad(h)\nrefs = []"
    )
    tokens = set()
    for i in range(4):
        ip.run(
            f"M = onp.full(1_000_000, {i + 1}.0)\nrefs.append(weakref.ref(M))\n"
            "defvjp(f, functools.partial(f_rule, M=M))"
        )
        tokens.add(tokenize(ip.ns["dh"]))
        ip.run("del M")
    gc.collect()
    assert ip.run("[r() is None for r in refs]") == [True, True, True, False]
    assert len(tokens) == 4
    # (Hunt 64: a maker that cannot be held weakly, a __slots__ object, was held for good.)
    ip.run(
        "from autograd.extend import defvjp_argnums\nrefs = []\n"
        "class Maker:\n    __slots__ = ('M',)\n"
        "    def __init__(self, M):\n        self.M = M\n"
        "    def __call__(self, argnums, ans, args, kwargs):\n"
        "        return lambda g: (g * self.M[0],)"
    )
    for i in range(3):
        ip.run(
            f"M = onp.full(1_000_000, {i + 1}.0)\nrefs.append(weakref.ref(M))\n"
            "defvjp_argnums(f, Maker(M))\ndel M"
        )
        tokenize(ip.ns["dh"])
    gc.collect()
    assert ip.run("[r() is None for r in refs]") == [True, True, False]


#: A function that draws from a generator of the notebook's, and a handle on it.
ELBO = (
    "import numpy as onp\nrng = onp.random.default_rng(0)\n"
    "def elbo(m):\n"
    "    eps = rng.standard_normal(3)\n"
    "    return np.sum((m + eps) ** 2)\n"
    "dh = grad(elbo)"
)


def test_handles_unpickled_before_either_runs_are_not_shared(ip: Shell) -> None:
    """Hunt 63: Dask unpickles a batch of tasks before it runs them; a kept handle not
    built yet was handed to the second task too, whose generator the first call moved."""
    ip.run(ELBO)
    sent = [pickle.dumps(ip.ns["dh"]) for _ in range(2)]
    want = autograd.grad(pickle.loads(pickle.dumps(ip.ns["elbo"])))(onp.zeros(3))
    first, second = (pickle.loads(p) for p in sent)
    same_result(first(onp.zeros(3)), want)
    same_result(second(onp.zeros(3)), want)


def test_a_module_edited_and_reloaded_is_what_the_next_payload_means(ip: Shell, modules) -> None:  # type: ignore[no-untyped-def]
    """Hunt 49: a function of a module on disk goes by reference, so the payload's bytes
    stay the same when the module is edited and reloaded; the process that had loaded
    them kept a handle on the old function and answered with it."""
    modules("ipyr_sent", "import autograd.numpy as np\ndef f(x):\n    return np.sin(x) * 2.0\n")
    ip.run("import importlib, ipyr_sent\ndf = grad(ipyr_sent.f)")
    first = pickle.loads(pickle.dumps(ip.ns["df"]))
    same_result(first(0.5), autograd.grad(ip.ns["ipyr_sent"].f)(0.5))
    # (the same objects named, the same bytes: one handle, built once, as for the
    # notebook's own code; hunt 52 found every task built anew)
    assert pickle.loads(pickle.dumps(ip.ns["df"])) is first
    modules("ipyr_sent", "import autograd.numpy as np\ndef f(x):\n    return x ** 3\n")
    ip.run("importlib.reload(ipyr_sent)")
    again = pickle.loads(pickle.dumps(ip.ns["df"]))
    same_result(again(0.5), autograd.grad(ip.ns["ipyr_sent"].f)(0.5))
    same_result(first(0.5), autograd.grad(lambda x: anp.sin(x) * 2.0)(0.5))  # (as sent)


def test_dask_tokens_of_code_naming_a_users_module_change_with_it(ip: Shell, modules) -> None:  # type: ignore[no-untyped-def]
    """Hunt 49: a module of the user's goes by reference, so what the function reads of
    it (``mymod.scale``, a function edited under autoreload) is not in the payload: Dask
    found the old results under the old token. Such a handle's tasks are never named
    alike; a handle of the notebook's own code keeps one token while nothing changes
    (``test_dask_names_tasks_by_the_code_they_carry``)."""
    tokenize = pytest.importorskip("dask.base").tokenize
    modules("ipyr_tok", "scale = 1.0\n")
    ip.run("import ipyr_tok\ndef hm(x): return ipyr_tok.scale * np.sin(x)\ndhm = grad(hm)")
    first = tokenize(ip.ns["dhm"])
    ip.run("ipyr_tok.scale = 3.0")
    assert tokenize(ip.ns["dhm"]) != first


def test_a_handle_calling_a_handle_on_a_users_module_is_not_reused(ip: Shell, modules) -> None:  # type: ignore[no-untyped-def]
    """Hunt 50: the handle inside the function goes as a payload of its own (bytes in
    the outer one), which named the module: the outer payload seemed to name none."""
    tokenize = pytest.importorskip("dask.base").tokenize
    modules("ipyr_inner", "import autograd.numpy as np\ndef g(x):\n    return np.sin(x)\n")
    ip.run(
        "import importlib, ipyr_inner\ndg = grad(ipyr_inner.g)\n"
        "def k(x): return np.sum(np.sin(x)) * dg(0.5)\ndk = grad(k)"
    )
    first, token = pickle.loads(pickle.dumps(ip.ns["dk"])), tokenize(ip.ns["dk"])
    modules("ipyr_inner", "import autograd.numpy as np\ndef g(x):\n    return x ** 3\n")
    ip.run("importlib.reload(ipyr_inner)")
    again = pickle.loads(pickle.dumps(ip.ns["dk"]))
    assert again is not first and tokenize(ip.ns["dk"]) != token
    x = onp.array([0.3, 0.7])
    same_result(again(x), autograd.grad(ip.ns["k"])(x))


def test_a_name_like_a_users_module_keeps_one_handle_and_token(ip: Shell, modules) -> None:  # type: ignore[no-untyped-def]
    """Hunt 50: any string in the payload equal to a module's name (a local variable
    ``model`` beside ``import model``) counted as naming the module: no payload was
    reused, no token stayed. Only what cloudpickle sends by reference counts."""
    tokenize = pytest.importorskip("dask.base").tokenize
    modules("ipyr_model", "scale = 2.0\n")
    ip.run(
        "import ipyr_model as M\n"
        "def loss(x):\n    ipyr_model = np.sin(x)\n    return np.sum(ipyr_model ** 2)\n"
        "dl = grad(loss)"
    )
    first = pickle.loads(pickle.dumps(ip.ns["dl"]))
    first(onp.array([0.1, 0.2]))  # (built: only a build shows it may be shared, hunt 63)
    assert pickle.loads(pickle.dumps(ip.ns["dl"])) is first
    assert tokenize(ip.ns["dl"]) == tokenize(ip.ns["dl"])


def test_kept_handles_are_bounded_by_the_data_they_carry(ip: Shell) -> None:
    """Hunt 49: a process kept the handles of its last 16 payloads, each holding the
    data it carried (16 x 30 MB after del and gc.collect()). The bytes are bounded too."""
    from ipyrefresh._src import pickling

    ip.run(
        "import numpy as onp\nW = onp.ones(2_000_000)\n"
        "def hw(x): return x * W[0] + np.sum(W[:3]) * x\ndhw = grad(hw)"
    )
    for i in range(12):  # (16 MB a payload)
        ip.run(f"W[1] = {i}.0")
        pinned = pickle.loads(pickle.dumps(ip.ns["dhw"]))
        same_result(pinned(0.5), autograd.grad(ip.ns["hw"])(0.5))
    del pinned
    kept = sum(k.size for k in pickling._kept.values())
    assert kept <= pickling._KEEP_BYTES, (kept, len(pickling._kept))
    # (hunt 54: the newest was kept whatever its size; one too big is not kept)
    ip.run("W = onp.ones(5_000_000)")  # (40 MB a payload: twice that is held)
    big = pickle.loads(pickle.dumps(ip.ns["dhw"]))
    same_result(big(0.5), autograd.grad(ip.ns["hw"])(0.5))
    assert all(k.handle is not big for k in pickling._kept.values())


@pytest.mark.parametrize("start", ["fork", "spawn"])
def test_a_function_that_draws_random_numbers_starts_each_task_from_the_state_sent(
    ip: Shell, pools: Any, start: str
) -> None:
    """A worker keeps the handle of a payload it met before; the kept function's
    generator has moved on since, so a handle that runs its code must not be reused for
    a task that carries the generator's state as it was sent."""
    ip.run(ELBO)
    sent = [pickle.dumps(ip.ns["dh"]) for _ in range(3)]  # (all with the state of now)
    want = autograd.grad(pickle.loads(pickle.dumps(ip.ns["elbo"])))(onp.zeros(3))
    executor = pools(start)
    for got in executor.map(_call_pickled, sent, [onp.zeros(3)] * 3):
        same_result(got, want)


def _call_pickled(payload: bytes, x: Any) -> Any:
    return pickle.loads(payload)(x)


def test_copies_are_the_handle_itself(ip: Shell) -> None:
    ip.run(SHELL_CODE)
    dh = ip.ns["dh"]
    assert copy.copy(dh) is dh and copy.deepcopy([dh])[0] is dh


def test_what_cannot_be_pickled_is_named(ip: Shell) -> None:
    ip.run(
        "import threading\nlock = threading.Lock()\n"
        "def g(x):\n    with lock:\n        return 2 * x\n"
        "def h(x): return np.sin(g(x))\ndh = grad(h)"
    )
    with pytest.raises(pickle.PicklingError) as info:
        pickle.dumps(ip.ns["dh"])
    message = str(info.value)
    assert "grad(h)" in message
    assert "h -> global 'g' -> global 'lock' (a _thread.lock)" in message
    dask = pytest.importorskip("dask")
    assert dask.delayed(ip.ns["dh"], pure=True)(0.5).compute(scheduler="threads") == ip.ns["dh"](
        0.5
    )
    ip.run("del h")
    with pytest.raises(pickle.PicklingError, match=r"grad\(h\).*name 'h' is not defined"):
        pickle.dumps(ip.ns["dh"])
    # What the receiving process cannot import is named with the handle.
    ip.run("import types, sys\nmod = types.ModuleType('made_here')\nsys.modules['made_here'] = mod")
    ip.run("exec('def f(x):\\n    return x * 2.0', mod.__dict__)\ndf = grad(mod.f)")
    sent = pickle.dumps(ip.ns["df"])
    del sys.modules["made_here"]
    with pytest.raises(pickle.UnpicklingError, match=r"grad\(mod.f\) sent from.*made_here"):
        pickle.loads(sent)
    # A function that reads its own handle: an error at once, not a recursion without end.
    ip.run("def k(x):\n    return dk(x) if x > 10 else x ** 2\ndk = grad(k)")
    with pytest.raises(pickle.PicklingError, match=r"reads this handle itself"):
        pickle.dumps(ip.ns["dk"])


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_a_forked_worker_never_waits_for_the_notebooks_engine(ip: Shell) -> None:
    """The notebook's engine may be locked by another thread when a pool forks: the
    child has a copy of the lock, held by nobody. Sent handles use an engine of their own."""
    ip.run(SHELL_CODE)
    holding, done = threading.Event(), threading.Event()
    engine = ip.ns["dh"]._engine

    def hold() -> None:
        with engine.lock:
            holding.set()
            done.wait(60)

    thread = threading.Thread(target=hold)
    thread.start()
    holding.wait(10)
    executor = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("fork"))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            future = executor.submit(ip.ns["dh"], 0.5)
        try:
            got = future.result(timeout=60)
        except futures.TimeoutError:
            for process in list(getattr(executor, "_processes", {}).values()):
                process.kill()  # a deadlocked child must fail the test, not hang the run
            raise
    finally:
        done.set()
        thread.join()
        executor.shutdown(wait=False, cancel_futures=True)
    same_result(got, fresh_grad(ip, [0.5])[0])


def test_the_users_own_payloads_do_not_change_after_a_build(ip: Shell) -> None:
    """Hunt 63: a notebook primitive goes by value with autograd's ``notrace_primitives``
    dict, in which the tape kept a key of its own after its first build: the user's own
    cloudpickle payload of any function calling it named ipyrefresh from then on, and a
    worker without ipyrefresh could not load it."""
    cloudpickle = pytest.importorskip("cloudpickle")
    ip.run(
        "from autograd.extend import primitive, defvjp\n"
        "@primitive\ndef f(x):\n    return x * 2.0\n"
        "defvjp(f, lambda ans, x: lambda g: 2.0 * g)\n"
        "def loss(x):\n    return np.sin(f(x))\n"
        "def k(x):\n    return np.cos(x) * 3.0\n"
        "dk, dl = grad(k), grad(loss)"
    )
    before = cloudpickle.dumps(ip.ns["loss"])
    ip.run("for _ in range(3):\n    _ = dk(0.5), dl(0.5)")
    after = cloudpickle.dumps(ip.ns["loss"])
    assert b"ipyrefresh" not in after
    assert after == before
    same_result(ip.run("dl(0.5)"), autograd.grad(ip.ns["loss"])(0.5))
