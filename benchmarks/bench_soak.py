"""Soak: 10,000 cells of random redefinitions in a real IPython shell.

A long session redefines helpers and top-level functions, rebinds and mutates data,
adds new names (the namespace grows to thousands of names) and calls derivative
handles, some of which are checked against a fresh autograd computation. We report,
for the first and the last 1,000 cells:

* ipyrefresh's own time per cell: its pre/post-cell hooks and its AST transformer
  (what every cell pays, whether or not it touches a derivative), median and p99;
* the process's resident memory, and the peak;
* the sizes of ipyrefresh's tables (cache, watch table, world history, targets).

Flat is the goal: the end must cost what the start did. Usage::

    .venv/bin/python benchmarks/bench_soak.py [--cells 10000] [--seed 0]
"""

from __future__ import annotations

import argparse
import gc
import random
import resource
import statistics
import sys
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as onp
from IPython.core.interactiveshell import InteractiveShell

import ipyrefresh
from ipyrefresh._src import analysis
from ipyrefresh._src.compilers import reference
from ipyrefresh.ipython.extension import current_extension

BODIES = [
    "np.sin(x) * {c}",
    "np.cos(x) + {c} * x",
    "np.tanh(x) * W[0]",
    "x ** 2 * {c}",
    "np.exp(0.1 * x) * {c}",
    "g{j}(x) * {c}",  # helpers calling helpers (only lower-numbered: no cycles)
]
N_HELPERS = 10
SETUP = """
import autograd.numpy as np
from ipyrefresh import grad, hessian, value_and_grad
W = np.array([1.0, 2.0, 3.0])
""" + "".join(f"def g{k}(x):\n    return np.sin(x) * {k + 1}.0\n" for k in range(N_HELPERS))


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize()


def ipyrefresh_bytes(show: int = 0) -> int:
    """Bytes currently allocated by lines of ipyrefresh's own source files."""
    package = str(Path(ipyrefresh.__file__).parent)
    traces = tracemalloc.take_snapshot().filter_traces([tracemalloc.Filter(True, f"{package}/*")])
    for stat in traces.statistics("lineno")[:show]:
        print(f"    {stat}")
    return sum(stat.size for stat in traces.statistics("filename"))


def peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def top_source(rng: random.Random, j: int) -> str:
    used = rng.sample(range(N_HELPERS), 3)
    terms = " + ".join(f"g{k}(x)" for k in used)
    return f"def h{j}(x):\n    return {terms} + W[{j}] * x\n"


def helper_source(rng: random.Random, k: int) -> str:
    body = rng.choice(BODIES)
    if "g{j}" in body:
        body = "np.sin(x) * {c}" if k == 0 else body.replace("{j}", str(rng.randrange(k)))
    return f"def g{k}(x):\n    return " + body.format(c=round(rng.uniform(0.5, 2.0), 2)) + "\n"


class Timed:
    """Wraps a hook; adds its time to the running per-cell total."""

    def __init__(self, fn: Callable[..., Any], clock: list[float]) -> None:
        self.fn = fn
        self.clock = clock

    def __call__(self, *args: Any) -> Any:
        t = time.perf_counter()
        try:
            return self.fn(*args)
        finally:
            self.clock[0] += time.perf_counter() - t


class TimedTransformer:
    def __init__(self, inner: Any, clock: list[float]) -> None:
        self.inner = inner
        self.clock = clock

    def visit(self, node: Any) -> Any:
        t = time.perf_counter()
        try:
            return self.inner.visit(node)
        finally:
            self.clock[0] += time.perf_counter() - t


def instrument(shell: Any, clock: list[float]) -> None:
    """Time ipyrefresh's per-cell work in place (the hooks are swapped, not changed)."""
    ext = current_extension()
    assert ext is not None
    for event, hook in (("pre_run_cell", ext.pre_run_cell), ("post_run_cell", ext.post_run_cell)):
        callbacks = shell.events.callbacks[event]
        callbacks[callbacks.index(hook)] = Timed(hook, clock)
    i = shell.ast_transformers.index(ext.transformer)
    shell.ast_transformers[i] = TimedTransformer(ext.transformer, clock)
    sync = ipyrefresh._sync
    ipyrefresh._sync = Timed(sync, clock)  # type: ignore[assignment]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--no-extension",
        action="store_true",
        help="baseline: the same cells without %%load_ext ipyrefresh (handles still work, "
        "checking their dependencies on every call); compare memory with this",
    )
    parser.add_argument(
        "--trace-memory",
        action="store_true",
        help="also measure the bytes ipyrefresh's own code holds (tracemalloc; slower)",
    )
    opts, _ = parser.parse_known_args(argv)
    n, window = opts.cells, max(opts.cells // 10, 1)
    rng = random.Random(opts.seed)

    shell = InteractiveShell.instance()
    if not opts.no_extension:
        shell.run_cell("%load_ext ipyrefresh")
    setup = SETUP + "".join(top_source(rng, j) for j in range(3))
    setup += "dh0, dh1, d2h2, vg1 = grad(h0), grad(h1), hessian(h2), value_and_grad(h1)\n"
    assert shell.run_cell(setup).success
    clock = [0.0]
    if not opts.no_extension:
        instrument(shell, clock)
    engine = ipyrefresh.get_engine()
    per_cell: list[float] = []
    wall: list[float] = []
    checks = failures = 0
    rss_start = rss_end = 0
    handles = ["dh0", "dh1", "d2h2", "vg1"]
    kinds = {"dh0": ("h0", "grad"), "dh1": ("h1", "grad")}
    kinds.update({"d2h2": ("h2", "hessian"), "vg1": ("h1", "value_and_grad")})
    if opts.trace_memory:
        tracemalloc.start()
    held_start = held_end = 0
    t_start = time.perf_counter()
    for i in range(n):
        r = rng.random()
        if r < 0.30:
            cell = helper_source(rng, rng.randrange(N_HELPERS))
        elif r < 0.40:
            cell = top_source(rng, rng.randrange(3))
        elif r < 0.45:
            cell = f"W = np.array([{rng.uniform(0.5, 2):.2f}, 2.0, 3.0])"
        elif r < 0.50:
            cell = f"W[{rng.randrange(3)}] = {rng.uniform(0.5, 2):.2f}"
        elif r < 0.75:
            name = rng.choice(handles)
            cell = f"_r = {name}({rng.uniform(-1, 1):.3f})"
        elif r < 0.90:
            cell = f"v{i} = {i}\nlst{i % 50} = [v{i}] * 3"
        else:
            cell = f"def f{i}(x):\n    return x * {i}"
        clock[0] = 0.0
        t = time.perf_counter()
        result = shell.run_cell(cell, store_history=True)
        wall.append(time.perf_counter() - t)
        per_cell.append(clock[0])
        if not result.success:
            print(f"cell {i} failed: {result.error_in_exec!r}\n{cell}", file=sys.stderr)
            return 1
        if cell.startswith("_r = ") and rng.random() < 0.2:
            name = cell.split()[2].split("(")[0]
            x = float(cell.split("(")[1].rstrip(")"))
            fn, transform = kinds[name]
            # Without the extension a handle keeps the function it was made from (like
            # autograd's grad(f)); with it, the handle follows the name.
            target = shell.user_ns[name].fun if opts.no_extension else shell.user_ns[fn]
            want = reference(target, transform, 0, (x,), {})
            got = shell.user_ns["_r"]
            checks += 1
            if not all(
                onp.allclose(a, b)
                for a, b in zip(
                    got if type(got) is tuple else (got,),
                    want if type(want) is tuple else (want,),
                    strict=True,
                )
            ):
                failures += 1
        if i == window - 1:
            gc.collect()
            rss_start = rss_bytes()
            held_start = ipyrefresh_bytes() if opts.trace_memory else 0
    gc.collect()
    rss_end = rss_bytes()
    held_end = ipyrefresh_bytes(show=6) if opts.trace_memory else 0
    total = time.perf_counter() - t_start

    def summary(xs: list[float]) -> tuple[float, float]:
        xs = sorted(xs)
        return statistics.median(xs) * 1e6, xs[int(len(xs) * 0.99)] * 1e6

    (m0, p0), (m1, p1) = summary(per_cell[:window]), summary(per_cell[-window:])
    m0 = max(m0, 1e-3)
    (w0, _), (w1, _) = summary(wall[:window]), summary(wall[-window:])
    status = engine.status()
    mode = " (baseline: extension not loaded)" if opts.no_extension else ""
    version = sys.version.split()[0]
    print(f"soak: {n} cells, seed {opts.seed}, {total:.1f} s, python {version}{mode}")
    print(f"  namespace at the end: {len(shell.user_ns)} names")
    if not opts.no_extension:
        print(f"  ipyrefresh per cell, first {window}: median {m0:.0f} us, p99 {p0:.0f} us")
        print(f"  ipyrefresh per cell, last {window}:  median {m1:.0f} us, p99 {p1:.0f} us")
        print(f"  ratio last/first (median): {m1 / m0:.2f}")
    print(f"  whole cell (IPython included), median: first {w0:.0f} us, last {w1:.0f} us")
    print(
        f"  RSS after cell {window}: {rss_start / 2**20:.1f} MiB; "
        f"at the end {rss_end / 2**20:.1f} MiB"
    )
    print(f"  peak RSS: {peak_rss_bytes() / 2**20:.1f} MiB")
    if opts.trace_memory:
        print(
            f"  held by ipyrefresh's code (tracemalloc): after cell {window} "
            f"{held_start / 1024:.0f} KiB, at the end {held_end / 1024:.0f} KiB"
        )
    print(
        f"  tables: cache {len(engine.cache)}, watched {len(engine.table)}, "
        f"history {len(engine.world.history)}, targets {len(engine._targets)}, "
        f"file cache {len(analysis._is_user_file)}"
    )
    print(
        f"  builds {status['builds']}, rebuilds {status['rebuilds']}, "
        f"invalidations {status['invalidations']}, world {status['world']}"
    )
    print(f"  answers checked against fresh autograd: {checks}, wrong: {failures}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
