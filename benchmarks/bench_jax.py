"""JAX benchmark: 100 jitted derivatives in a notebook, one leaf redefined.

Measured in one run, in a real IPython shell with ``%load_ext ipyrefresh``:
  1. time to correct answers from all 100 derivatives after one leaf is redefined:
     ipyrefresh (``ipyrefresh.jax.grad`` handles: only the affected entries are traced
     and compiled again) versus what plain JAX offers, ``jax.clear_caches()`` and
     recompiling all 100 ``jax.jit(jax.grad(h))``; for a leaf one derivative reaches and
     for one that ten reach;
  2. a cached call of a handle versus a bare ``jax.jit(jax.grad(h))`` call, for a tiny
     function and for MLP losses, next to a class whose ``__call__`` only forwards to the
     bare call (what any handle written in Python costs at least);
  3. one rebuild versus one first call of a bare ``jax.jit(jax.grad(h))`` (what the
     dependency recording and the staging-cache clearing add to a compile).

Every answer is checked against a fresh, unjitted ``jax.grad`` of the current code.
Run: ``python benchmarks/bench_jax.py [--rounds N] [--out FILE]`` (a minute or two).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from typing import Any

# Modest XLA threading: the machines this runs on have two cores shared by others.
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault(
    "XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
)
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("JAX_ENABLE_COMPILATION_CACHE", "false")  # every compile is a compile

import importlib.util

if importlib.util.find_spec("jax") is None:
    print("bench_jax: skipped, jax is not installed (pip install ipyrefresh[jax])")
    sys.exit(0)

import jax
import numpy as np
from IPython.core.interactiveshell import InteractiveShell
from timing import best

import ipyrefresh
from ipyrefresh._src import handles
from ipyrefresh._src.engine import Engine

N = 100
GROUPS = 10  # group{k} is reached by the ten functions h{i} with i % 10 == k

NOTEBOOK = [
    "import jax, jax.numpy as jnp\nimport ipyrefresh.jax as rj",
    "x = jnp.linspace(-1.0, 1.0, 16)",
    "def act(z):\n    return jnp.tanh(z) + 0.1 * z",
    *[f"def leaf{i}(z):\n    return jnp.sin({1 + i / N} * z) * z" for i in range(N)],
    *[f"def group{k}(z):\n    return jnp.cos(z) * {k + 1}.0" for k in range(GROUPS)],
    *[
        f"def h{i}(z):\n"
        f"    u = act(leaf{i}(z) + group{i % GROUPS}(z))\n"
        f"    return jnp.sum(u * u) + jnp.sum(jnp.exp(-z * z) * {i}.0)"
        for i in range(N)
    ],
    f"plain = [jax.jit(jax.grad(h)) for h in [{', '.join(f'h{i}' for i in range(N))}]]",
    f"handles = [rj.grad(h) for h in [{', '.join(f'h{i}' for i in range(N))}]]",
]


def run(shell: InteractiveShell, code: str) -> Any:
    result = shell.run_cell(code, store_history=True)
    error = result.error_before_exec or result.error_in_exec
    if error is not None:
        raise RuntimeError(f"cell failed: {error!r}\n{code}")
    return result.result


def fmt(seconds: float) -> str:
    if seconds < 1e-3:
        return f"{seconds * 1e6:.2f} µs"
    if seconds < 1:
        return f"{seconds * 1e3:.1f} ms"
    return f"{seconds:.2f} s"


def check_all(shell: InteractiveShell, which: str) -> None:
    """Every derivative in ``which`` ("plain" or "handles") equals fresh jax.grad now."""
    ns = shell.user_ns
    x = ns["x"]
    for i in range(N):
        got = np.asarray(ns[which][i](x))
        with jax.disable_jit():  # the oracle: unjitted, on the current code
            want = np.asarray(jax.grad(ns[f"h{i}"])(x))
        if not np.allclose(got, want, rtol=1e-5, atol=1e-6):
            raise AssertionError(f"{which}[{i}] is stale: {got} != {want}")


def redefine(shell: InteractiveShell, name: str, version: int) -> None:
    """Run the cell a user would: a new body for ``name`` (a leaf or a group function)."""
    run(shell, f"def {name}(z):\n    return jnp.sin({2 + version / 7} * z) * z * z")


def call_all(shell: InteractiveShell, which: str) -> None:
    run(shell, f"_ = jax.block_until_ready([d(x) for d in {which}])")


def time_ipyrefresh(shell: InteractiveShell, name: str, version: int) -> float:
    t0 = time.perf_counter()
    redefine(shell, name, version)
    call_all(shell, "handles")
    return time.perf_counter() - t0


def time_clear_caches(shell: InteractiveShell, name: str, version: int) -> float:
    t0 = time.perf_counter()
    redefine(shell, name, version)
    run(shell, "jax.clear_caches()")
    call_all(shell, "plain")
    return time.perf_counter() - t0


def refresh_benchmark(shell: InteractiveShell, rounds: int, out: list[str]) -> None:
    """ipyrefresh's rounds first, then plain JAX's: ``jax.clear_caches()`` would also drop
    the handles' executables, and every plain recompilation leaves 100 fresh traces of
    user code in JAX's caches that the next ipyrefresh build evicts (a one-off cost a
    notebook pays for plain jitted functions it recompiled: the first round shows it)."""
    version = 0
    for name, reach in (("leaf0", 1), ("group0", N // GROUPS)):
        ours, theirs = [], []
        for _ in range(rounds):
            version += 1
            before = ipyrefresh.status()["rebuilds"]
            ours.append(time_ipyrefresh(shell, name, version))
            assert ipyrefresh.status()["rebuilds"] - before == reach
            check_all(shell, "handles")
        for _ in range(rounds):
            version += 1
            theirs.append(time_clear_caches(shell, name, version))
            check_all(shell, "plain")
        # jax.clear_caches() dropped the handles' executables too: warm them again,
        # untimed, so that the next measurement starts from a warm notebook.
        call_all(shell, "handles")
        o, t = statistics.median(ours), statistics.median(theirs)
        out.append(
            f"| `{name}` redefined ({reach} of {N} derivatives reach it) | {fmt(o)} "
            f"({', '.join(map(fmt, ours))}) | {fmt(t)} ({', '.join(map(fmt, theirs))}) "
            f"| **{t / o:.0f}x** | {reach} |"
        )
        print(out[-1], flush=True)


def call_overhead(shell: InteractiveShell, out: list[str]) -> None:
    run(
        shell,
        "def tiny(z):\n    return jnp.sum(jnp.sin(z) * z)\n"
        "key = jax.random.key(0)\n"
        "k1, k2, k3 = jax.random.split(key, 3)\n"
        "params = (jax.random.normal(k1, (64, 64)) * 0.1, jax.random.normal(k2, (64, 1)) * 0.1)\n"
        "batch = jax.random.normal(k3, (32, 64))\n"
        "big = (jax.random.normal(k1, (256, 256)) * 0.05, jax.random.normal(k2, (256, 1)) * 0.1)\n"
        "big_batch = jax.random.normal(k3, (128, 256))\n"
        "def mlp_loss(p, b):\n"
        "    w1, w2 = p\n"
        "    hidden = jnp.tanh(b @ w1)\n"
        "    return jnp.mean((hidden @ w2) ** 2)\n"
        "tiny_plain, tiny_ours = jax.jit(jax.grad(tiny)), rj.grad(tiny)\n"
        "mlp_plain, mlp_ours = jax.jit(jax.grad(mlp_loss)), rj.grad(mlp_loss)\n",
    )
    ns = shell.user_ns
    cases = [
        ("tiny `sum(sin(x) * x)`, x of 16", "tiny", (ns["x"],)),
        ("MLP loss, 64x64 + 64x1 params, batch 32", "mlp", (ns["params"], ns["batch"])),
        ("MLP loss, 256x256 + 256x1 params, batch 128", "mlp", (ns["big"], ns["big_batch"])),
    ]
    for label, name, args in cases:
        plain, ours = ns[f"{name}_plain"], ns[f"{name}_ours"]
        floor = _Forward(plain)
        jax.block_until_ready((plain(*args), ours(*args), floor(*args)))
        number, rounds = (2000, 30) if name == "tiny" else (300, 15)
        # Interleaved so that all three see the same machine load, in a rotating order
        # (whichever runs first in a round is measurably slower); the best of each.
        times: dict[str, list[float]] = {"plain": [], "ours": [], "floor": []}
        order = [("plain", plain), ("ours", ours), ("floor", floor)]
        for r in range(rounds):
            for key, fn in order[r % 3 :] + order[: r % 3]:
                times[key].append(best(lambda f=fn, a=args: f(*a), repeat=1, number=number))
        p, o, f = (min(times[k]) for k in ("plain", "ours", "floor"))
        out.append(f"| {label} | {fmt(p)} | {fmt(o)} | {o / p:.2f}x | {f / p:.2f}x |")
        print(out[-1], flush=True)


class _Forward:
    """The least any handle written in Python adds: a ``__call__`` that only forwards."""

    __slots__ = ("fn",)

    def __init__(self, fn: Any) -> None:
        self.fn = fn

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args)  # positional only, as the handle's direct path calls it


def build_cost(shell: InteractiveShell, out: list[str]) -> None:
    ns = shell.user_ns
    x = ns["x"]
    plain_first, ours_first = [], []
    for v in range(5):
        run(shell, f"def b{v}(z):\n    return jnp.sum(act(jnp.sin(z) * {v + 2}.0) ** 2)")
        fn = ns[f"b{v}"]
        t0 = time.perf_counter()
        jax.block_until_ready(jax.jit(jax.grad(fn))(x))
        plain_first.append(time.perf_counter() - t0)
        handle = ns["rj"].grad(fn)
        t0 = time.perf_counter()
        jax.block_until_ready(handle(x))
        ours_first.append(time.perf_counter() - t0)
    p, o = statistics.median(plain_first), statistics.median(ours_first)
    out.append(f"| first call (trace + XLA compile) | {fmt(p)} | {fmt(o)} | {o / p:.2f}x |")
    print(out[-1], flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", help="also write the Markdown tables to this file")
    args, _ = parser.parse_known_args()

    handles._engine = Engine()
    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "ipyrefresh")
    t0 = time.perf_counter()
    for cell in NOTEBOOK:
        run(shell, cell)
    call_all(shell, "plain")
    call_all(shell, "handles")
    check_all(shell, "plain")
    check_all(shell, "handles")
    print(f"setup: {2 * N} derivatives compiled in {fmt(time.perf_counter() - t0)}")

    out = [
        f"jax {jax.__version__}, Python {platform.python_version()}, "
        f"{os.cpu_count()} cores, XLA_FLAGS={os.environ.get('XLA_FLAGS', '')!r}",
        "",
        f"### Time to correct answers from all {N} derivatives after one redefinition",
        "",
        "| change | ipyrefresh.jax: median (each round) "
        "| jax.clear_caches() + recompile all: median (each round) | speed-up "
        "| entries rebuilt |",
        "| --- | --- | --- | --- | --- |",
    ]
    print("\n".join(out), flush=True)
    refresh_benchmark(shell, args.rounds, out)
    section = [
        "",
        "### A cached call (nothing changed)",
        "",
        "| function | bare `jax.jit(jax.grad(f))` | ipyrefresh.jax handle | ratio "
        "| a forwarding Python class (the floor) |",
        "| --- | --- | --- | --- | --- |",
    ]
    print("\n".join(section), flush=True)
    out += section
    call_overhead(shell, out)
    section = [
        "",
        "### One build",
        "",
        "| what | bare `jax.jit(jax.grad(f))` | ipyrefresh.jax handle | ratio |",
        "| --- | --- | --- | --- |",
    ]
    print("\n".join(section), flush=True)
    out += section
    build_cost(shell, out)
    if args.out:
        with open(args.out, "w") as f:
            f.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
