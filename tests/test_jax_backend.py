"""The JAX backend in a real IPython shell: jitted derivatives that never go stale.

The oracle is a fresh, unjitted JAX transform (``jax.grad`` and friends) of the current
code; in the differential test, of code defined from scratch in a fresh namespace.

Ported to the engine that validates at the call: entries are keyed by the call
signature (one entry, and one ``jax.jit``, per shape and dtype of the arguments),
status reasons are dicts (``{"text": ...}``), a handle's ``backend`` is ``None`` when it
uses the configured one, and the engine is ``ipyrefresh._src.engine.current()``.
"""

from __future__ import annotations

import gc
import itertools
import os
import random
import subprocess
import sys
import weakref
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as onp
import pytest

os.environ.setdefault("JAX_PLATFORMS", "cpu")  # no accelerator probing in tests
from .conftest import require_jax

jax = require_jax(module_level=True)
import jax.numpy as jnp  # noqa: E402

import ipyrefresh  # noqa: E402
from ipyrefresh._src import compilers  # noqa: E402
from ipyrefresh._src.compilers.base import Request, Transform  # noqa: E402
from ipyrefresh._src.engine import Engine, current  # noqa: E402
from ipyrefresh._src.guard import Guard  # noqa: E402

from .conftest import Shell  # noqa: E402
from .jax_support import CompileCounter  # noqa: E402
from .notebook_model import N_DATA, N_FUNCS, NotebookModel  # noqa: E402

JAX_IMPORTS = (
    "import jax, jax.numpy as jnp\n"
    "from jax import lax\n"
    "import ipyrefresh.jax as rj\n"
    "import ipyrefresh\n"
)


@pytest.fixture
def jp(ip: Shell) -> Shell:
    """The shell with ipyrefresh loaded and jax imported."""
    ip.run(JAX_IMPORTS)
    ip.run("x = jnp.array([0.3, -1.2, 2.0])")
    return ip


@pytest.fixture
def x64() -> Iterator[None]:
    """Double precision, so that jitted and unjitted answers agree to 1e-9."""
    old = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", True)
    try:
        yield
    finally:
        jax.config.update("jax_enable_x64", old)


def entry(name: str) -> dict[str, Any]:
    """The one status entry called ``name`` (a handle called with one signature)."""
    matches = entries(name)
    assert len(matches) == 1, (name, ipyrefresh.status()["entries"])
    return matches[0]


def entries(name: str) -> list[dict[str, Any]]:
    """Every status entry called ``name``: one per call signature."""
    return [e for e in ipyrefresh.status()["entries"] if e["name"] == name]


def entry_for(jp: Shell, handle: str, args: str) -> dict[str, Any]:
    """The status of the entry that ``handle(args)`` uses."""
    ident = jp.run(f"{handle}.entry({args}).id")
    (found,) = [e for e in ipyrefresh.status()["entries"] if e["id"] == ident]
    return found


def texts(e: dict[str, Any]) -> list[str]:
    return [r["text"] for r in e["reasons"]]


def close(a: Any, b: Any, rtol: float = 1e-5, atol: float = 1e-6) -> bool:
    la, lb = jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)
    if len(la) != len(lb):
        return False
    return all(
        onp.allclose(onp.asarray(p), onp.asarray(q), rtol=rtol, atol=atol)
        for p, q in zip(la, lb, strict=True)
    )


# -- the problem, and its fix ------------------------------------------------------


def test_plain_jax_jit_goes_stale_and_ipyrefresh_jax_does_not(jp: Shell) -> None:
    jp.run("def g(x): return jnp.sin(x)")
    jp.run("def h(x): return jnp.sum(g(x) ** 2)")
    jp.run("plain = jax.jit(jax.grad(h))")
    jp.run("dh = rj.grad(h)")
    first = jp.run("dh(x)")
    assert close(first, jp.run("plain(x)"))
    assert close(first, jp.run("jax.grad(h)(x)"))
    jp.run("def g(x): return jnp.cos(x)")
    fresh = jp.run("jax.grad(h)(x)")
    stale = jp.run("plain(x)")
    # The problem (jax issue 28225): the jitted derivative still runs the old g.
    assert close(stale, first) and not close(stale, fresh)
    # The fix: the ipyrefresh handle rebuilt itself for the new g.
    assert entry("grad(h)")["state"] == "stale"
    assert any(t.startswith("g redefined") for t in texts(entry("grad(h)")))
    assert close(jp.run("dh(x)"), fresh)
    e = entry("grad(h)")
    assert (e["state"], e["compiler"], e["rebuilds"], e["fallback"]) == ("fresh", "jax", 1, "")
    assert "g" in e["deps"]
    assert type(jp.run("dh(x)")) is type(fresh)  # a jax Array, like jax.grad's


def test_only_affected_entries_are_rebuilt(jp: Shell, compiles: CompileCounter) -> None:
    jp.run("def leaf(x): return jnp.tanh(x)")
    jp.run("def mid(x): return 2.0 * leaf(x)")
    for i in range(6):
        callee = "mid(x)" if i < 2 else "jnp.sin(x)"
        jp.run(f"def h{i}(x): return jnp.sum({callee} * {i + 1}.0 + x ** 2)")
        jp.run(f"d{i} = rj.grad(h{i})")
    for i in range(6):
        jp.run(f"d{i}(x)")
    assert compiles.count == 6
    jp.run("def leaf(x): return jnp.tanh(2.0 * x)")
    assert [entry(f"grad(h{i})")["state"] for i in range(6)] == ["stale"] * 2 + ["fresh"] * 4
    fresh = [jp.run(f"jax.grad(h{i})(x)") for i in range(6)]  # compiles op-by-op kernels
    before = compiles.count
    for i in range(6):
        assert close(jp.run(f"d{i}(x)"), fresh[i])
        assert close(jp.run(f"d{i}(x)"), fresh[i])
    assert compiles.count - before == 2  # one XLA compilation per affected entry, no more
    assert [entry(f"grad(h{i})")["rebuilds"] for i in range(6)] == [1, 1, 0, 0, 0, 0]
    assert [entry(f"grad(h{i})")["hits"] > 0 for i in range(6)] == [True] * 6
    # Something nobody calls changes: nothing is rebuilt or compiled.
    jp.run("def unrelated(x): return x")
    jp.run("def unrelated(x): return 2 * x")
    before = compiles.count
    for i in range(6):
        jp.run(f"d{i}(x)")
    assert compiles.count == before
    assert ipyrefresh.status()["rebuilds"] == 2


def test_compile_count_cache_hits_and_new_shapes(jp: Shell, compiles: CompileCounter) -> None:
    jp.run("def h(x): return jnp.sum(jnp.sin(x) * x)")
    jp.run("dh = rj.grad(h)")
    jp.run("dh(x)")
    assert compiles.count == 1
    args = ("x", "x + 1.0", "jnp.ones(3)", "x * 2")
    fresh = [jp.run(f"jax.grad(h)({v})") for v in (*args, "jnp.ones(5)")]
    before = compiles.count
    for v, want in zip(args, fresh[:-1], strict=True):
        assert close(jp.run(f"dh({v})"), want)
    assert compiles.count == before  # same shape and dtype: the cached executable answers
    assert close(jp.run("dh(jnp.ones(5))"), fresh[-1])
    assert compiles.count == before + 1  # a new shape is compiled once, as jax.jit does
    jp.run("y = jnp.ones(5) * 2.0")
    want = jp.run("jax.grad(h)(y)")
    before = compiles.count
    assert close(jp.run("dh(y)"), want)
    assert close(jp.run("dh(x)"), fresh[0])
    assert compiles.count == before  # both shapes stay compiled
    jp.run("import numpy as onp")  # numpy arrays and Python floats work too
    got = jp.run("dh(onp.array([0.3, -1.2, 2.0], dtype=onp.float32))")
    assert close(got, jp.run("jax.grad(h)(x)"))
    assert close(jp.run("dh(0.7)"), jp.run("jax.grad(h)(0.7)"))
    # One entry per call signature: a jax array of shape (3,) (1 build; 5 hits, and the
    # float32 numpy array of that shape, which its jax.jit takes as jax.jit does), of
    # shape (5,) (1 build, 1 hit), and a Python float; each built once.
    got = sorted((e["signature"], e["builds"], e["hits"]) for e in entries("grad(h)"))
    assert len(got) == 3, got
    assert all(b == 1 for _, b, _ in got), got
    assert sorted(h for _, _, h in got) == [0, 1, 6], got
    assert all(e["runs"] == ["jax.jit"] for e in entries("grad(h)"))
    # Calls again, of every kind: hits, nothing compiled.
    before = compiles.count
    assert close(jp.run("dh(onp.array([0.3, -1.2, 2.0], dtype=onp.float32))"), fresh[0])
    assert close(jp.run("dh(0.7)"), jp.run("jax.grad(h)(0.7)"))
    assert close(jp.run("dh(y)"), want)
    assert compiles.count == before


def test_a_new_shape_runs_the_current_code_and_records_what_it_calls(jp: Shell) -> None:
    """A shape no entry has seen builds a new entry from the current code, and what that
    run calls is a dependency of it. (The old engine had one entry for every shape, so
    this asserted that the retrace *added* the callee; and it hid the callee behind
    ``globals()``, which now makes the code run unjitted: see the second half.)"""
    jp.run("def small(x): return jnp.sin(x)")
    jp.run("def large(x): return jnp.cos(x)")
    jp.run("table = {'small': small, 'large': large}")
    jp.run("def h(x): return jnp.sum(table['small' if x.shape[0] < 4 else 'large'](x) ** 2)")
    jp.run("dh = rj.grad(h)")
    jp.run("y = jnp.linspace(-1.0, 1.0, 6)")
    assert close(jp.run("dh(x)"), jp.run("jax.grad(h)(x)"))
    assert close(jp.run("dh(x)"), jp.run("jax.grad(h)(x)"))  # the direct path
    assert close(jp.run("dh(y)"), jp.run("jax.grad(h)(y)"))  # a new entry, for shape 6
    assert close(jp.run("dh(y)"), jp.run("jax.grad(h)(y)"))
    assert len(entries("grad(h)")) == 2
    assert entry_for(jp, "dh", "y")["runs"] == ["jax.jit"]
    assert "table" in entry_for(jp, "dh", "y")["deps"]  # deps are top-level names now
    jp.run("def large(x): return jnp.tanh(3.0 * x)\ntable['large'] = large")
    assert entry_for(jp, "dh", "y")["state"] == "stale"
    for _ in range(2):
        assert close(jp.run("dh(y)"), jp.run("jax.grad(h)(y)"))
        assert close(jp.run("dh(x)"), jp.run("jax.grad(h)(x)"))
    # Dispatch by computed names (globals()): unjitted JAX on every call, still right.
    jp.run("def h2(x): return jnp.sum(globals()['small' if x.shape[0] < 4 else 'large'](x) ** 2)")
    jp.run("dh2 = rj.grad(h2)")
    for v in ("x", "y", "x", "y"):
        assert close(jp.run(f"dh2({v})"), jp.run(f"jax.grad(h2)({v})")), v
    jp.run("def large(x): return jnp.sin(2.0 * x)")
    for v in ("y", "x", "y"):
        assert close(jp.run(f"dh2({v})"), jp.run(f"jax.grad(h2)({v})")), v
    for e in entries("grad(h2)"):
        assert e["runs"] == ["unjitted JAX"] and "computed names" in e["fallback"], e


def test_a_new_shape_does_not_reuse_old_traces_of_jitted_callees(jp: Shell) -> None:
    """A retrace for a new shape after the notebook changed a global of a ``jax.jit``
    callee no handle depends on yet must not reuse JAX's trace of that callee."""
    jp.run("a = 2.0")
    jp.run("@jax.jit\ndef scaled(x): return a * jnp.sin(x)")
    jp.run(
        "def h(x):\n"
        "    if x.shape[0] > 4:\n"  # a callee static analysis cannot see
        "        return jnp.sum(globals()['scaled'](x) ** 2)\n"
        "    return jnp.sum(x ** 2)"
    )
    jp.run("dh = rj.grad(h)")
    jp.run("y = jnp.linspace(-1.0, 1.0, 6)")
    jp.run("dh(x)")
    # Plain JAX traces scaled with a = 2.0 and caches the trace (after dh's build).
    jp.run("jax.jit(jax.grad(lambda v: jnp.sum(scaled(v) ** 2)))(y)")
    jp.run("a = 5.0")
    # (The old engine asserted here that dh's entry stayed fresh: the callee hidden
    # behind globals() was no dependency yet. globals() now makes h run unjitted JAX on
    # every call, so only the answers are asserted; they must not come from JAX's trace
    # of scaled cached with a = 2.0.)
    for _ in range(2):
        with jax.disable_jit():
            want = jp.run("jax.grad(h)(y)")
        assert close(jp.run("dh(y)"), want)
    jp.run("a = 7.0")
    for _ in range(2):
        with jax.disable_jit():
            want = jp.run("jax.grad(h)(y)")
        assert close(jp.run("dh(y)"), want)


def test_a_new_shape_does_not_reuse_old_traces_of_a_static_jitted_callee(jp: Shell) -> None:
    """The same, with the callee called directly (jitted, under the new engine): the entry
    for a new shape is traced after plain JAX cached its own trace of the callee."""
    jp.run("a = 2.0")
    jp.run("@jax.jit\ndef scaled(x): return a * jnp.sin(x)")
    jp.run(
        "def h(x):\n"
        "    if x.shape[0] > 4:\n"
        "        return jnp.sum(scaled(x) ** 2)\n"
        "    return jnp.sum(x ** 2)"
    )
    jp.run("dh = rj.grad(h)")
    jp.run("y = jnp.linspace(-1.0, 1.0, 6)")
    jp.run("dh(x)")
    jp.run("a = 5.0")
    jp.run("jax.jit(jax.grad(lambda v: jnp.sum(scaled(v) ** 2)))(y)")  # caches a = 5.0
    jp.run("a = 6.0")
    for _ in range(2):
        with jax.disable_jit():
            want = jp.run("jax.grad(h)(y)")
        assert close(jp.run("dh(y)"), want)
    assert entry_for(jp, "dh", "y")["runs"] == ["jax.jit"]
    jp.run("a = 7.0")
    assert entry_for(jp, "dh", "y")["state"] == "stale"
    for _ in range(2):
        with jax.disable_jit():
            want = jp.run("jax.grad(h)(y)")
        assert close(jp.run("dh(y)"), want)


def test_values_keyed_by_value_never_take_the_direct_path(jp: Shell) -> None:
    """An entry built for arrays must not answer for an ``int`` or a tuple of ints, which
    ``jax.grad`` passes to the code as Python values; those get entries of their own."""
    jp.run(
        "def p(x, n):\n"
        "    m = n[0] if type(n) is tuple else n\n"
        "    return jnp.sum(x ** 2 * (m if isinstance(m, int) else 10.0 * m))"
    )
    jp.run("dp = rj.grad(p)")
    jp.run("z = jnp.array([0.5, 1.0, -2.0])")
    calls = ("dp(z, z)", "dp(z, z)", "dp(z, 3)", "dp(z, (3,))", "dp(z, (z,))", "dp(z, 2)")
    for call in (*calls, *calls):
        assert close(jp.run(call), jp.run(call.replace("dp(", "jax.grad(p)("))), call


def test_transforms_argnums_kwargs_and_static_args(jp: Shell) -> None:
    jp.run("import numpy as onp")
    jp.run(
        "def f(a, b, n, scale=1.0, mode='sin'):\n"
        "    acc = 0.0\n"
        "    for i in range(n):\n"  # n is a Python int: the loop unrolls, as in jax.grad
        "        acc = acc + (jnp.sin(a * b) if mode == 'sin' else jnp.cos(a)) * (i + 1)\n"
        "    return jnp.sum(acc * scale)\n"
    )
    jp.run("b = jnp.array([1.0, 0.5, -2.0])")
    cases = [
        ("rj.grad(f)(x, b, 3)", "jax.grad(f)(x, b, 3)"),
        ("rj.grad(f, 1)(x, b, 2, scale=2.0)", "jax.grad(f, 1)(x, b, 2, scale=2.0)"),
        ("rj.grad(f, (0, 1))(x, b, 2)", "jax.grad(f, (0, 1))(x, b, 2)"),
        ("rj.grad(f)(x, b, 2, mode='cos')", "jax.grad(f)(x, b, 2, mode='cos')"),
        ("rj.value_and_grad(f)(x, b, 1)", "jax.value_and_grad(f)(x, b, 1)"),
        ("rj.hessian(f)(x, b, 2)", "jax.hessian(f)(x, b, 2)"),
        ("rj.jacobian(jnp.sin)(x)", "jax.jacobian(jnp.sin)(x)"),
        ("rj.elementwise_grad(jnp.tanh)(x)", "jax.vmap(jax.grad(jnp.tanh))(x)"),
        ("rj.grad(f)(0.5, 2.0, 2)", "jax.grad(f)(0.5, 2.0, 2)"),
    ]
    for ours, theirs in cases:
        assert close(jp.run(ours), jp.run(theirs)), ours
    statuses = ipyrefresh.status()["entries"]
    assert statuses and all(e["compiler"] == "jax" for e in statuses)
    assert not [e for e in statuses if e["fallback"]]
    # static ints are part of the key: n=2 and n=3 are different compiled entries
    jp.run("def f(a, b, n, scale=1.0, mode='sin'): return jnp.sum(jnp.cos(a) * b) * n")
    for ours, theirs in cases:
        assert close(jp.run(ours), jp.run(theirs)), ours


def test_value_dependent_python_code_falls_back_to_plain_jax(jp: Shell) -> None:
    jp.run(
        "def f(x, t):\n"
        "    if t > 0:\n"  # t is not differentiated: a Python float for jax.grad
        "        return jnp.sum(jnp.sin(x) * t)\n"
        "    return jnp.sum(x ** 2)\n"
    )
    jp.run("df = rj.grad(f)")
    for t in (0.5, -0.5, 0.5, -0.5):
        assert close(jp.run(f"df(x, {t})"), jp.run(f"jax.grad(f)(x, {t})"))
    # t is a Python float, static under jax.jit (the old engine traced it and fell back
    # to unjitted JAX): one entry, jitted, one variant per value of t.
    e = entry("grad(f)")
    assert e["fallback"] == "" and e["runs"] == ["jax.jit", "jax.jit"], e
    jp.run("class Box: pass")
    jp.run("def k(x, box): return jnp.sum(x * 2.0)")  # box is never read: not passed in
    assert close(jp.run("rj.grad(k)(x, Box())"), jp.run("jax.grad(k)(x, Box())"))
    assert entry("grad(k)")["runs"] == ["jax.jit"]
    # An object that is no JAX type, read by the function: jax.grad takes it.
    jp.run("class Scale:\n    def __init__(self, s): self.s = s")
    jp.run("def k2(x, box): return jnp.sum(x * box.s)")
    jp.run("dk2 = rj.grad(k2)")
    for s in (2.0, 3.0, 2.0):
        assert close(jp.run(f"dk2(x, Scale({s}))"), jp.run(f"jax.grad(k2)(x, Scale({s}))")), s
    jp.run("%stale")
    # jax.grad lets Python branch on the differentiated value; jax.jit does not
    jp.run("def branchy(x): return jnp.sum(x ** 3) if jnp.sum(x) > 0 else jnp.sum(x)")
    for v in ("x", "-x", "x"):
        assert close(jp.run(f"rj.grad(branchy)({v})"), jp.run(f"jax.grad(branchy)({v})"))
    e = entry("grad(branchy)")
    assert e["fallback"].startswith("jax.jit rejects it (TracerBoolConversionError)"), e
    assert e["runs"] == ["unjitted JAX"]
    # Code that needs concrete values only at some shapes: jitted where it does not,
    # unjitted JAX where it does (one entry per shape now; the old engine had one entry
    # that went unjitted for every shape), and both recording what they call. (The old
    # test called wide through globals(), which now makes every shape unjitted.)
    jp.run("def wide(x): return jnp.sum(x)")
    jp.run(
        "def shapey(x):\n"
        "    if x.shape[0] > 3:\n"
        "        return (jnp.sum(x ** 2) if x[0] > 0 else jnp.sum(x)) + wide(x)\n"
        "    return jnp.sum(jnp.sin(x)) + wide(x)\n"
    )
    jp.run("ds = rj.grad(shapey)")
    jp.run("y = jnp.array([0.5, -1.0, 2.0, 0.25])")
    for v in ("x", "x", "y", "x", "y"):
        assert close(jp.run(f"ds({v})"), jp.run(f"jax.grad(shapey)({v})")), v
    e = entry_for(jp, "ds", "y")
    assert e["fallback"].startswith("jax.jit rejects it"), e
    assert e["runs"] == ["unjitted JAX"]
    assert entry_for(jp, "ds", "x")["runs"] == ["jax.jit"]
    assert "wide" in e["deps"] and "wide" in entry_for(jp, "ds", "x")["deps"]
    jp.run("def wide(x): return jnp.sum(3.0 * x)")
    assert entry_for(jp, "ds", "y")["state"] == "stale"
    assert entry_for(jp, "ds", "x")["state"] == "stale"
    for v in ("y", "x"):
        assert close(jp.run(f"ds({v})"), jp.run(f"jax.grad(shapey)({v})")), v
    # what fresh jax.grad rejects, the handle rejects too, with the same error
    jp.run("def vec(x): return x * 2.0")
    theirs = jp.run_error("jax.grad(vec)(x)")
    ours = jp.run_error("rj.grad(vec)(x)")
    assert type(ours) is type(theirs) is TypeError
    assert str(ours) == str(theirs)


def test_jitted_callees_and_scan_bodies_are_retraced(jp: Shell) -> None:
    """JAX caches the trace of a jax.jit-wrapped callee or a lax.scan body on the function
    object: after a leaf changes, a rebuild must not reuse that stale trace."""
    jp.run("def leaf(x): return jnp.sin(x)")
    jp.run("@jax.jit\ndef inner(x): return leaf(x) * 2.0")
    jp.run("def body(c, v): return c + leaf(v), c")
    jp.run("def h(x):\n    c, _ = lax.scan(body, 0.0, x)\n    return jnp.sum(inner(x)) + c")
    jp.run("dh = rj.grad(h)")
    assert close(jp.run("dh(x)"), jp.run("jax.grad(h)(x)"))
    deps = entry("grad(h)")["deps"]
    assert "leaf" in deps and "body" in deps and "inner" in deps
    jp.run("def leaf(x): return jnp.cos(3.0 * x)")
    assert entry("grad(h)")["state"] == "stale"
    want = -3.0 * jnp.sin(3.0 * jp.ns["x"]) * 3.0  # from inner (2x) and the scan (1x)
    got = jp.run("dh(x)")
    assert close(got, want), (got, want)
    # Plain jax.grad still answers from the traces JAX cached on `inner` and `body` (stale,
    # as without ipyrefresh: its builds trace under a cache key of their own, and leave
    # the user's caches alone).
    assert not close(jp.run("jax.grad(h)(x)"), want)


def test_globals_rebinding_and_in_place_numpy_changes(jp: Shell) -> None:
    jp.run("import numpy as onp")
    jp.run("w = jnp.array([1.0, 2.0, 3.0])\nv = onp.array([1.0, 1.0, 1.0])\nk = 2.0")
    jp.run("def h(x): return jnp.sum(w * jnp.sin(x) * v) * k")
    jp.run("dh = rj.grad(h)")
    assert close(jp.run("dh(x)"), jp.run("jax.grad(h)(x)"))
    for change in ("w = w * 2.0", "v[1] = 5.0", "k = -1.0"):
        jp.run(change)
        assert entry("grad(h)")["state"] == "stale", change
        assert close(jp.run("dh(x)"), jp.run("jax.grad(h)(x)")), change
    assert entry("grad(h)")["rebuilds"] == 3


def test_backend_config_and_grad_magic(jp: Shell, caplog: pytest.LogCaptureFixture) -> None:
    jp.run("def h(x): return jnp.sum(jnp.sin(x) ** 2)")
    got = jp.run("%grad --backend jax h(x)")
    assert close(got, jp.run("jax.grad(h)(x)"))
    assert entry("grad(h)")["compiler"] == "jax"
    jp.run("%config IPyRefresh.backend = 'jax'")
    jp.run("d = ipyrefresh.grad(h)")
    # A handle made without a backend uses the configured one at each call (the old
    # handle had a `compiler` attribute fixed when it was made).
    assert jp.run("d.backend") is None
    assert close(jp.run("d(x)"), jp.run("jax.grad(h)(x)"))
    assert close(jp.run("%grad h(x)"), jp.run("jax.grad(h)(x)"))
    assert {e["compiler"] for e in ipyrefresh.status()["entries"]} == {"jax"}
    assert ipyrefresh.status()["backend"] == "jax"
    jp.run("%config IPyRefresh.backend = 'torch'")
    assert "unknown backend 'torch'" in caplog.text
    assert current().config.backend == "jax"
    jp.run("%config IPyRefresh.backend = 'autograd'")
    assert jp.run("ipyrefresh.grad(h).backend") is None
    assert jp.run("rj.grad(h).backend") == "jax"  # rj handles are JAX whatever the config
    assert close(jp.run("rj.grad(h)(x)"), jp.run("jax.grad(h)(x)"))


def test_refresh_and_eager_mode_rebuild_jax_entries(jp: Shell, compiles: CompileCounter) -> None:
    jp.run("def g(x): return jnp.sin(x)")
    jp.run("def h(x): return jnp.sum(g(x) ** 2)")
    jp.run("dh = rj.grad(h)")
    jp.run("dh(x)")
    jp.run("def g(x): return jnp.cos(x)")
    before = compiles.count
    jp.run("%refresh")  # jax arrays are immutable: the last arguments are kept by reference
    assert compiles.count == before + 1
    assert entry("grad(h)")["state"] == "fresh"
    fresh = jp.run("jax.grad(h)(x)")
    before = compiles.count
    assert close(jp.run("dh(x)"), fresh)
    assert compiles.count == before  # already rebuilt: a cache hit
    jp.run("%config IPyRefresh.mode = 'eager'")
    jp.run("def g(x): return jnp.tanh(x)")
    assert entry("grad(h)")["state"] == "fresh"  # rebuilt right after the cell
    assert entry("grad(h)")["rebuilds"] == 2
    assert close(jp.run("dh(x)"), jp.run("jax.grad(h)(x)"))


def test_stale_listing_shows_jax_entries(jp: Shell, capsys: pytest.CaptureFixture[str]) -> None:
    jp.run("def g(x): return jnp.sin(x)")
    jp.run("def h(x): return jnp.sum(g(x))")
    jp.run("rj.grad(h)(x)")
    jp.run("def g(x): return jnp.cos(x)")
    capsys.readouterr()
    jp.run("%stale")
    out = capsys.readouterr().out
    assert "grad(h)" in out and "g redefined" in out


def test_artifacts_do_not_keep_functions_alive() -> None:
    """The compiled variant (alive here) holds its function only weakly, and stays
    compiled. (Ported from the old ``make_compiler("jax").build(...).artifact`` to the
    compiler's ``trace`` and ``Traced.compile``; the assertions are the old ones.)"""
    ns: dict[str, Any] = {"jnp": jnp}
    exec("def h(x):\n    return jnp.sum(jnp.sin(x))\n", ns)
    h = ns.pop("h")
    compiler = compilers.get("jax")
    traced = compiler.trace(h, Request(Transform.GRAD, 0), (jnp.ones(3),), {})
    assert close(traced.answer(), jnp.cos(jnp.ones(3)))
    assert traced.compile is not None
    variant = traced.compile(Guard())
    assert close(variant.run(h, (jnp.zeros(3),), {}), jnp.ones(3))
    ref = weakref.ref(h)
    del h, traced
    gc.collect()
    assert ref() is None
    assert close(variant.run(None, (jnp.zeros(3),), {}), jnp.ones(3))  # still compiled


def _collect(jp: Shell) -> None:
    """Collect garbage, and drop what JAX itself caches (its caches keyed on library
    functions can hold user functions too: not ipyrefresh's to release)."""
    for _ in range(2):
        jp.run("import gc; gc.collect()")
        gc.collect()
    jax.clear_caches()
    gc.collect()


def test_redefinitions_keep_no_old_function_alive(jp: Shell) -> None:
    """The engine-level form: after h is redefined (and the handle called), and after a
    name and its handle are deleted, the old functions die (as with the tape backend)."""
    jp.run("def h(x): return jnp.sum(jnp.sin(x))")
    jp.run("dh = rj.grad(h)\ndh(x)")
    old = weakref.ref(jp.ns["h"])
    jp.run("def h(x): return jnp.sum(jnp.cos(x))")
    assert close(jp.run("dh(x)"), jp.run("jax.grad(h)(x)"))
    _collect(jp)
    assert old() is None
    jp.run("lam = lambda v: jnp.sum(v ** 3)")
    jp.run("dl = rj.grad(lam)\ndl(x)")
    lam = weakref.ref(jp.ns["lam"])
    jp.run("del lam, dl")
    _collect(jp)
    assert lam() is None


def test_outside_ipython_a_handle_checks_its_dependencies(engine: Engine) -> None:
    import ipyrefresh.jax as rj

    ns: dict[str, Any] = {"jnp": jnp}
    exec("def g(x): return jnp.sin(x)\ndef h(x): return jnp.sum(g(x))\n", ns)
    d = rj.grad(ns["h"])
    x = jnp.ones(3)
    assert close(d(x), jnp.cos(x))
    exec("def g(x): return 3.0 * x\n", ns)
    assert close(d(x), 3.0 * jnp.ones(3))


def test_importing_ipyrefresh_does_not_import_jax() -> None:
    """``import ipyrefresh`` leaves jax alone; ``import ipyrefresh.jax`` sets the backend
    up at once (its JAX context must exist before the user's own jax.jit traces: see
    test_plain_jax_unharmed_by_rj_jit_of_the_same_function)."""
    code = (
        "import sys, ipyrefresh\n"
        "from ipyrefresh._src import compilers\n"
        "assert 'jax' in compilers.available()\n"
        "print('jax' in sys.modules)\n"
        "import ipyrefresh.jax\n"
        "print('jax' in sys.modules, 'jax' in compilers._made)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert out.stdout.split() == ["False", "True", "True"]


def test_without_jax_everything_else_works() -> None:
    """jax hidden from imports, as if not installed: ipyrefresh imports and runs on
    autograd, ipyrefresh.jax and the jax backend say what to install."""
    code = (
        "import importlib.abc, sys\n"
        "class Hide(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.partition('.')[0] in ('jax', 'jaxlib'):\n"
        "            raise ModuleNotFoundError(name)\n"
        "sys.meta_path.insert(0, Hide())\n"
        "import autograd.numpy as np, ipyrefresh\n"
        "from ipyrefresh._src import compilers\n"
        "assert 'jax' not in compilers.available()\n"
        "assert ipyrefresh.grad(lambda x: np.sin(x) * 2)(0.0) == 2.0\n"
        "try:\n"
        "    import ipyrefresh.jax\n"
        "except ImportError as e:\n"
        "    print(e)\n"
        "from ipyrefresh._src.engine import current\n"
        "cfg = current().config\n"
        "try:\n"
        "    cfg.backend = 'jax'\n"
        "except Exception as e:\n"
        "    print(e)\n"
        "print(cfg.backend, 'jax' in sys.modules)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert out.stdout.splitlines() == [
        "ipyrefresh.jax needs jax: pip install ipyrefresh[jax] (Python 3.11+)",
        "the 'jax' backend needs jax: pip install ipyrefresh[jax] (Python 3.11+)",
        "tape False",  # the default backend is the tape now (it was autograd)
    ]


# -- differential: random call graphs and redefinitions against fresh jax.grad -------------

STEPS = int(os.environ.get("IPYREFRESH_JAX_DIFF_STEPS", "200"))
SEEDS = [int(s) for s in os.environ.get("IPYREFRESH_JAX_DIFF_SEEDS", "7").split(",")]
PRIMS = ["jnp.sin(x)", "jnp.cos(x)", "jnp.tanh(x)", "x ** 2", "jnp.exp(0.1 * x)", "x * x * x"]
HEADER = "import jax, jax.numpy as jnp\nimport numpy as onp\nfrom jax import lax\n"
#: Chances of the model's change kinds (see NotebookModel.change): redefine, rebind,
#: in place, rule, delete, cfg['s'], cfg['inner']['v'][j], obj.scale, Obj.k, a loop of
#: in-place changes, n_loop. The rest of the time the cell changes nothing.
WEIGHTS = (0.3, 0.1, 0.07, 0.06, 0.06, 0.06, 0.06, 0.05, 0.05, 0.04, 0.05)


@dataclass
class Model(NotebookModel):
    """Array functions with jitted callees, ``lax.cond``, a ``custom_jvp`` rule ``p``,
    data in a nested dict (``cfg``), an instance and a class attribute read through a
    method (``obj.mul``), and Python loops whose trip count is a global (``n_loop``)."""

    rule_names: frozenset[str] = frozenset({"p", "p_jvp"})
    np_name: str = "onp"

    def term(self, i: int) -> tuple[str, set[str]]:
        r = self.rng
        c = round(r.uniform(-2, 2), 3)
        kind = r.random()
        if kind < 0.25 and i > 0:
            j = r.randrange(i)
            return f"{c} * f{j}(x)", {f"f{j}"}
        if kind < 0.33 and i > 1:  # a jitted callee: its trace is cached by JAX
            j = r.randrange(i)
            return f"{c} * jax.jit(f{j})(x)", {f"f{j}"}
        if kind < 0.4 and i > 1:  # lax.cond between two callees: both are traced
            j, k = r.randrange(i), r.randrange(i)
            cut = round(r.uniform(-0.5, 0.5), 2)
            return f"lax.cond(jnp.sum(x) > {cut}, f{j}, f{k}, x)", {f"f{j}", f"f{k}"}
        if kind < 0.5:
            k = r.randrange(N_DATA)
            return f"a{k} * {r.choice(PRIMS)}", {f"a{k}"}
        if kind < 0.57:
            return f"jnp.sum(w * x) * {r.choice(PRIMS)}", {"w"}
        if kind < 0.63:
            return f"{c} * p(x)", {"p", "p_jvp"}
        if kind < 0.7:  # a scalar in a dict
            return f"cfg['s'] * {r.choice(PRIMS)}", {"cfg"}
        if kind < 0.77:  # an array in a nested dict, changed in place
            return f"jnp.sum(cfg['inner']['v'] * x) * {r.choice(PRIMS)}", {"cfg"}
        if kind < 0.85:  # an instance and a class attribute, through self
            return f"{c} * obj.mul({r.choice(PRIMS)})", {"obj"}
        return f"{c} * {r.choice(PRIMS)}", set()

    def new_body(self, i: int) -> tuple[str, set[str]]:
        terms = [self.term(i) for _ in range(self.rng.randint(1, 3))]
        expr = " + ".join(t for t, _ in terms)
        uses: set[str] = set().union(*(u for _, u in terms))
        if self.rng.random() < 0.2:  # a Python loop, unrolled by the trace n_loop times
            src = (
                f"def f{i}(x):\n    acc = 0.0 * x\n    for _k in range(n_loop):\n"
                f"        acc = acc + ({expr}) * (_k + 1)\n    return acc\n"
            )
            return src, uses | {"n_loop"}
        return f"def f{i}(x):\n    return {expr}\n", uses

    def source(self) -> str:
        src = HEADER + self.rule_cell() + self.data_cells()
        src += "".join(f"{k} = {v!r}\n" for k, v in self.data.items())
        src += f"w = onp.array({self.w!r})\n" + "".join(self.funcs.values())
        return src

    def rule_cell(self) -> str:
        return (
            "@jax.custom_jvp\ndef p(x):\n    return x * x\n"
            "def p_jvp(primals, tangents):\n"
            "    (x,), (t,) = primals, tangents\n"
            f"    return x * x, {self.rule} * x * t\n"
            "p.defjvp(p_jvp)\n"
        )

    def oracle(self, x: onp.ndarray) -> dict[str, onp.ndarray | None]:
        """Fresh, unjitted jax.grad of code defined from scratch (None: it cannot run).

        ``jax.jit`` in the code is replaced by the identity, which it is on values:
        compiling every freshly defined callee would only make the oracle slow.
        (``jax.disable_jit()`` would not do: it also makes ``lax.cond`` trace only the
        branch taken, so a deleted callee in the other branch would go unnoticed.)
        """
        ns: dict[str, Any] = {"_no_jit": lambda f: f}
        exec(self.source().replace("jax.jit(", "_no_jit("), ns)
        answers: dict[str, onp.ndarray | None] = {}
        for i in range(N_FUNCS):
            name = f"s{i}"
            try:
                answers[name] = onp.asarray(jax.grad(ns[name])(x))
            except NameError:
                answers[name] = None
        return answers


@pytest.mark.slow
@pytest.mark.parametrize("precision", ["x64", "float32"])
@pytest.mark.parametrize("seed", SEEDS)
def test_random_redefinitions_match_fresh_jax_grad(
    jp: Shell, engine: Engine, seed: int, precision: str
) -> None:
    """Every handle equals fresh jax.grad after every cell; exactly the entries whose
    dependencies changed are rebuilt. Entries are per call signature now (the old
    engine had one per handle): the model counts one entry per (function, shape).
    In float32 (x64 off, the default), JAX converts the float64 numpy data to float32
    copies, which the arrays changed in place must not leave stale."""
    old_x64 = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", precision == "x64")
    try:
        _differential(jp, engine, seed, precision)
    finally:
        jax.config.update("jax_enable_x64", old_x64)


def _differential(jp: Shell, engine: Engine, seed: int, precision: str) -> None:
    rtol, atol = (1e-9, 1e-12) if precision == "x64" else (1e-5, 1e-6)
    rng = random.Random(seed)
    rng_np = onp.random.default_rng(seed)
    model = Model(rng)
    setup = ""

    def run_setup(cell: str) -> object:
        nonlocal setup
        setup += cell + "\n"
        return jp.run(cell)

    run_setup(HEADER)
    run_setup(model.rule_cell())
    run_setup(model.data_cells())
    run_setup(f"w = onp.array({model.w!r})")
    for k in range(N_DATA):
        model.data[f"a{k}"] = 1.0 + k
        run_setup(f"a{k} = {model.data[f'a{k}']!r}")
    for i in range(N_FUNCS):
        model.define(i, run_setup)
        model.funcs[f"s{i}"] = f"def s{i}(x):\n    return jnp.sum(f{i}(x))\n"
        model.calls[f"s{i}"] = {f"f{i}"}
        run_setup(model.funcs[f"s{i}"])
        run_setup(f"d{i} = rj.grad(s{i})")
    mismatches: list[str] = []
    seen: set[str] = set()
    played: list[str] = []  # the cells of each step, for the report

    def play(cell: str) -> object:
        played[-1] += cell + "\n"
        return jp.run(cell)

    def check_all(x: onp.ndarray) -> None:
        builds = engine.stats["builds"]
        expected = 0
        jp.ns["_x"] = x
        answers = model.oracle(x)
        rebuilt_now: list[str] = []
        for i in range(N_FUNCS):
            want = answers[f"s{i}"]
            key = f"s{i}@{x.shape}"
            if key not in seen:  # a new signature: a new entry, built at its first call
                seen.add(key)
                model.stale.add(key)
            rebuilt = model.rebuilds(f"s{i}", want is not None, key)
            jp.ns["_got"] = None
            jp.run(f"try:\n    _got = onp.asarray(d{i}(_x))\nexcept NameError:\n    pass")
            got = jp.ns["_got"]
            if (want is None) != (got is None) or (
                want is not None and not onp.allclose(got, want, rtol=rtol, atol=atol)
            ):
                last = "".join(
                    f"# step {len(played) - k}\n{c}" for k, c in enumerate(reversed(played[-3:]))
                )
                mismatches.append(
                    f"s{i} at x={x}: got {got}, want {want}\n{model.source()}"
                    f"# the last cells played, newest first:\n{last}"
                )
            expected += rebuilt
            if rebuilt:
                rebuilt_now.append(key)
        if engine.stats["builds"] - builds != expected:
            states = [
                (e["name"], e["signature"], e["state"], e["builds"], e["deps"])
                for e in engine.status()["entries"]
            ]
            raise AssertionError(
                f"expected builds of {rebuilt_now} ({expected}), engine made "
                f"{engine.stats['builds'] - builds}; engine: {states}\n"
                f"changes: {engine.status()['changes'][-3:]}\n{model.source()}"
            )

    check_all(onp.array([0.3, -0.7, 1.1]))
    kinds: set[int] = set()
    for _ in range(STEPS):
        # Mostly one shape; sometimes another, which is an entry of its own.
        shape = (2, 3) if rng.random() < 0.2 else (3,)
        x = onp.round(rng_np.uniform(-1, 1, size=shape), 3)
        action = rng.random()
        played.append("")
        changed = model.change(action, WEIGHTS, play)
        if changed is None:
            play("z = 1")
        else:
            kinds.add(sum(action >= e for e in itertools.accumulate(WEIGHTS)))
        model.invalidate(changed or set())
        played[-1] += f"# x = {x.tolist()!r}\n"
        check_all(x)
        if mismatches and os.environ.get("IPYREFRESH_JAX_DIFF_DUMP"):  # every cell, to replay
            with open(os.environ["IPYREFRESH_JAX_DIFF_DUMP"], "w") as out:
                out.write(setup + "".join(f"# step {k}\n{c}" for k, c in enumerate(played)))
        assert not mismatches, f"stale or wrong answer:\n{mismatches[0]}"
    assert len(kinds) == len(WEIGHTS) or STEPS < 100, kinds  # every kind of change played
    status = engine.status()
    assert status["rebuilds"] > STEPS // 4  # the run really exercised invalidation
    assert all(e["compiler"] == "jax" for e in status["entries"])
