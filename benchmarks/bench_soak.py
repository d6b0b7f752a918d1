"""Soak: a long random notebook session in a real IPython shell with ipyrefresh loaded.

The session redefines helpers and top-level functions (also in the same cell as a call),
rebinds and mutates data in place (a small vector, a 2 MB matrix read through a value
computed from it, a dict of settings), grows the namespace to thousands of names, makes
new handles, and calls handles (``grad``, ``hessian``, ``value_and_grad``,
``elementwise_grad``). Every answer is compared bit for bit with a fresh autograd
computation of the current code. Reported for the first and the last tenth of the cells:

* ipyrefresh's own per-cell time: its ``pre_run_cell``/``post_run_cell`` hooks and the
  status channel's (the callables are wrapped in place, not changed), median and p99;
* the time of a cached handle call (cells where nothing was rebuilt), median;
* the whole cell (IPython included), median;
* memory: the process's RSS, and with tracemalloc the bytes allocated by lines of
  ipyrefresh's own files that are still held;
* the sizes of the engine's tables and of ipyrefresh's module-level caches.

Flat is the goal: the end must cost what the start did, and no answer may be wrong.

    .venv/bin/python benchmarks/bench_soak.py [--cells 5000] [--seed 0] [--no-tracemalloc]
"""

from __future__ import annotations

import os

# One BLAS/OpenMP thread, set before numpy is imported (see timing.THREADS).
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

import gc
import random
import resource
import statistics
import sys
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import autograd
import numpy as onp
from IPython.core.interactiveshell import InteractiveShell
from timing import Report, arguments, fmt, now, parse, same_bits

import ipyrefresh
from ipyrefresh._src import code as codefacts
from ipyrefresh._src import keys, nodes
from ipyrefresh._src.engine import Engine, using
from ipyrefresh.ipython.extension import current_extension

N_HELPERS = 10
N_TOPS = 4
BODIES = [
    "np.sin(x) * {c}",
    "np.cos(x) + {c} * x",
    "np.tanh(x) * W[{k}]",
    "x ** 2 * {c}",
    "np.exp(0.1 * x) * {c}",
    "x * cfg['scale'] + {c}",
    "np.sin(x) * D.mean() * {c}",  # a 2 MB matrix, read through a value computed from it
    "g{j}(x) * {c}",  # helpers calling helpers (only lower-numbered: no cycles)
]
SETUP = """
import autograd.numpy as np
import numpy as onp
from ipyrefresh import grad, hessian, value_and_grad, elementwise_grad
W = np.array([1.0, 2.0, 3.0, 4.0])
D = onp.random.default_rng(0).normal(size=(500, 500))
cfg = {"scale": 1.5}
PW = np.array([0.5, 1.5])  # read only by probe_f, which the session never changes
def probe_f(x):
    return np.sin(x) * PW[0] + np.cos(x) * PW[1]
dprobe = grad(probe_f)
""" + "".join(f"def g{k}(x):\n    return np.sin(x) * {k + 1}.0\n" for k in range(N_HELPERS))

#: handle name -> (function it follows, autograd transform)
HANDLES = {
    "dh0": ("h0", "grad"),
    "dh1": ("h1", "grad"),
    "d2h2": ("h2", "hessian"),
    "vg1": ("h1", "value_and_grad"),
    "eg3": ("h3", "elementwise_grad"),
}


def top_source(rng: random.Random, j: int) -> str:
    used = rng.sample(range(N_HELPERS), 3)
    terms = " + ".join(f"g{k}(x)" for k in used)
    return f"def h{j}(x):\n    return {terms} + W[{j}] * x\n"


def helper_source(rng: random.Random, k: int) -> str:
    body = rng.choice(BODIES)
    if "g{j}" in body:
        body = "np.sin(x) * {c}" if k == 0 else body.replace("{j}", str(rng.randrange(k)))
    c = round(rng.uniform(0.5, 2.0), 2)
    return f"def g{k}(x):\n    return " + body.format(c=c, k=rng.randrange(4)) + "\n"


def rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize()


def held_by_ipyrefresh() -> int:
    """Bytes still held that were allocated by lines of ipyrefresh's own files."""
    package = str(Path(ipyrefresh.__file__).parent)
    snap = tracemalloc.take_snapshot().filter_traces([tracemalloc.Filter(True, f"{package}/*")])
    return sum(stat.size for stat in snap.statistics("filename"))


class Timed:
    """Wraps a hook; adds its time to the running per-cell total."""

    def __init__(self, fn: Callable[..., Any], clock: list[float]) -> None:
        self.fn = fn
        self.clock = clock

    def __call__(self, *args: Any) -> Any:
        t = now()
        try:
            return self.fn(*args)
        finally:
            self.clock[0] += now() - t


def instrument(shell: Any, clock: list[float]) -> int:
    """Time ipyrefresh's per-cell callables in place; returns how many were wrapped."""
    ext = current_extension()
    assert ext is not None
    wrapped = 0
    ours = [("pre_run_cell", ext.pre_run_cell), ("post_run_cell", ext.post_run_cell)]
    ours += [("post_run_cell", extra.post_run_cell) for extra in ext.extras]
    for event, hook in ours:
        callbacks = shell.events.callbacks[event]
        for i, cb in enumerate(callbacks):
            if cb == hook:
                callbacks[i] = Timed(hook, clock)
                wrapped += 1
    return wrapped


def oracle(ns: dict[str, Any], handle: str, x: float) -> Any:
    fn_name, transform = HANDLES[handle]
    return getattr(autograd, transform)(ns[fn_name])(x)


def probe(shell: Any, clock: list[float], ns: dict[str, Any]) -> tuple[float, float, float]:
    """Best-of-30 timings at a checkpoint, robust to the machine's load: ipyrefresh's
    hooks around a trivial cell, that whole cell, and a cached call of ``dprobe`` (a
    handle whose function and data the session never changes)."""
    hooks = cell = call = float("inf")
    handle = ns["dprobe"]
    handle(0.3)
    for _ in range(30):
        clock[0] = 0.0
        t = now()
        shell.run_cell("y = 1", store_history=False)
        cell = min(cell, now() - t)
        hooks = min(hooks, clock[0])
        t = now()
        handle(0.3)
        call = min(call, now() - t)
    return hooks, cell, call


def tables(engine: Engine, ns: dict[str, Any]) -> dict[str, int]:
    entries = list(engine.cache)
    ext = current_extension()
    channel = ext.extras[0] if ext is not None and ext.extras else None
    return {
        "cache entries": len(engine.cache),
        "targets": len(engine._targets),
        "change log": len(engine.changes),
        "variants (all entries)": sum(len(e.variants) for e in entries),
        "guard nodes (all variants)": sum(v.guard.size for e in entries for v in e.variants),
        "handle entry maps (all handles)": sum(
            len(v._entries) for v in ns.values() if isinstance(v, ipyrefresh.Derivative)
        ),
        "code facts cache": len(codefacts._cache),
        "user-file cache": len(codefacts._is_user_file),
        "attribute-part cache": len(nodes._PARTS),
        "jax type cache": len(keys._JAX_TYPES),
        "status channel cell ids": len(channel.cells._ids) if channel is not None else -1,
    }


def main() -> int:
    parser = arguments(__doc__ or "")
    parser.add_argument("--cells", type=int, default=5000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--no-tracemalloc", action="store_true", help="faster; no held-bytes measurement"
    )
    opts = parse(parser, "bench_soak")
    n = 1000 if opts.quick else opts.cells
    window = max(n // 10, 1)
    rng = random.Random(opts.seed)
    trace = not opts.no_tracemalloc
    cmd = "PYTHONPATH=. .venv/bin/python benchmarks/bench_soak.py --results"
    report = Report("soak", f"Soak: {n:,} random cells in a real IPython shell", cmd)

    with using(Engine()) as engine:
        shell = InteractiveShell.instance()
        if current_extension() is not None:
            shell.run_line_magic("unload_ext", "ipyrefresh")
        shell.reset(new_session=False)
        shell.run_line_magic("load_ext", "ipyrefresh")
        setup = SETUP + "".join(top_source(rng, j) for j in range(N_TOPS))
        setup += "".join(f"{h} = {t}({f})\n" for h, (f, t) in HANDLES.items())
        assert shell.run_cell(setup).success
        ns = shell.user_ns
        clock = [0.0]
        hooks = instrument(shell, clock)
        start_tables: dict[str, int] = {}
        per_cell: list[float] = []
        wall: list[float] = []
        hits: list[tuple[int, float]] = []  # (cell index, seconds of a cached call)
        checks = not_bitwise = not_close = extra_handles = 0
        #: (cells run, RSS, held bytes, (hooks, trivial cell, cached dprobe call))
        checkpoints: list[tuple[int, int, int, tuple[float, float, float]]] = []
        if trace:
            tracemalloc.start()
        t_start = now()
        for i in range(n):
            r = rng.random()
            call = None
            if r < 0.25:
                cell = helper_source(rng, rng.randrange(N_HELPERS))
            elif r < 0.33:
                cell = top_source(rng, rng.randrange(N_TOPS))
            elif r < 0.37:
                cell = f"W = np.array([{rng.uniform(0.5, 2):.2f}, 2.0, 3.0, 4.0])"
            elif r < 0.41:
                cell = f"W[{rng.randrange(4)}] = {rng.uniform(0.5, 2):.2f}"
            elif r < 0.43:
                a, b = rng.randrange(500), rng.randrange(500)
                cell = rng.choice([f"D[{a}, {b}] += 1.0", "D *= 1.001", f"D.T[{a}, {b}] = 0.5"])
            elif r < 0.45:
                cell = f"cfg['scale'] = {rng.uniform(0.5, 2):.2f}"
            elif r < 0.70:
                call = (rng.choice(list(HANDLES)), round(rng.uniform(-1, 1), 3))
                cell = f"_r = {call[0]}({call[1]})"
                if rng.random() < 0.1:  # a redefinition and a call in one cell
                    cell = helper_source(rng, rng.randrange(N_HELPERS)) + cell
            elif r < 0.72:
                extra_handles += 1
                cell = f"_extra = grad(h{rng.randrange(N_TOPS)})\n_ = _extra(0.25)"
            elif r < 0.87:
                cell = f"v{i} = {i}\nlst{i % 50} = [v{i}] * 3"
            else:
                cell = f"def f{i}(x):\n    return x * {i}"
            clock[0] = 0.0
            t = now()
            result = shell.run_cell(cell, store_history=True)
            elapsed = now() - t
            wall.append(elapsed)
            per_cell.append(clock[0])
            if not result.success:
                print(f"cell {i} failed: {result.error_in_exec!r}\n{cell}", file=sys.stderr)
                return 1
            if call is not None:
                handle, x = ns[call[0]], call[1]
                want = oracle(ns, call[0], x)
                # The cell's answer, then more calls (cache hits: the compiled replay, where
                # a stale answer would hide), timed from here.
                answers = [ns["_r"]]
                for _ in range(3):
                    t = now()
                    answers.append(handle(x))
                    hits.append((i, now() - t))
                for k, got in enumerate(answers[:2]):
                    checks += 1
                    if not same_bits(got, want):
                        not_bitwise += 1
                        not_close += not all(
                            onp.allclose(a, b)
                            for a, b in zip(
                                got if type(got) is tuple else (got,),
                                want if type(want) is tuple else (want,),
                                strict=True,
                            )
                        )
                        which = "the cell's call" if k == 0 else "the next call"
                        report.wrong_answer(f"cell {i} ({which}): {cell!r}: {got!r} != {want!r}")
            if (i + 1) % window == 0:
                gc.collect()
                held = held_by_ipyrefresh() if trace else 0
                checkpoints.append((i + 1, rss(), held, probe(shell, clock, ns)))
                if i + 1 == window:
                    start_tables = tables(engine, ns)
        total = now() - t_start
        end_tables = tables(engine, ns)
        status = engine.status(check=False)
        names = len(ns)
        shell.run_line_magic("unload_ext", "ipyrefresh")
        if trace:
            tracemalloc.stop()

    def med(xs: list[float]) -> float:
        return statistics.median(xs) if xs else float("nan")

    def p99(xs: list[float]) -> float:
        return sorted(xs)[int(len(xs) * 0.99)] if xs else float("nan")

    first, last = per_cell[:window], per_cell[-window:]
    hit_first = [s for i, s in hits if i < window]
    hit_last = [s for i, s in hits if i >= n - window]
    report.say(
        f"{n:,} cells, seed {opts.seed}, {total:.1f} s"
        f"{' (tracemalloc on: every allocation is slower)' if trace else ''}; "
        f"{hooks} per-cell callables of ipyrefresh timed; namespace at the end: {names:,} names",
    )
    report.table(
        ["per cell", f"first {window:,} cells", f"last {window:,} cells", "last / first"],
        [
            [
                "ipyrefresh's hooks, median",
                fmt(med(first)),
                fmt(med(last)),
                f"{med(last) / med(first):.2f}x",
            ],
            ["ipyrefresh's hooks, p99", fmt(p99(first)), fmt(p99(last)), ""],
            [
                "a cached handle call (after each calling cell), median",
                f"{fmt(med(hit_first))} ({len(hit_first)} calls)",
                f"{fmt(med(hit_last))} ({len(hit_last)} calls)",
                f"{med(hit_last) / med(hit_first):.2f}x",
            ],
            [
                "whole cell (IPython included), median",
                fmt(med(wall[:window])),
                fmt(med(wall[-window:])),
                f"{med(wall[-window:]) / med(wall[:window]):.2f}x",
            ],
        ],
    )
    report.table(
        [
            "after cell",
            "ipyrefresh's hooks, `y = 1` (best of 30)",
            "whole `y = 1` cell (best of 30)",
            "cached `dprobe(0.3)` (best of 30)",
            "process RSS (after gc)",
            "held by ipyrefresh's own lines (tracemalloc)",
        ],
        [
            [
                f"{c:,}",
                fmt(p[0]),
                fmt(p[1]),
                fmt(p[2]),
                f"{r / 2**20:.1f} MiB",
                f"{h / 1024:.0f} KiB" if trace else "off",
            ]
            for c, r, h, p in checkpoints
        ],
    )
    report.table(
        ["table", f"after cell {window:,}", f"after cell {n:,}"],
        [[k, f"{start_tables.get(k, 0):,}", f"{v:,}"] for k, v in end_tables.items()],
    )
    report.say(
        f"Builds {status['builds']:,}, rebuilds {status['rebuilds']:,}, extra variants "
        f"{status['variants']:,}, evictions {status['evictions']:,}, internal errors "
        f"{status['internal_errors']}; {extra_handles} extra handles made (`_extra`, rebound "
        f"each time). Answers checked against fresh autograd: {checks:,}; not bit-identical: "
        f"{not_bitwise} (of which not even allclose: {not_close})."
    )
    one, end_ = checkpoints[0][3], checkpoints[-1][3]
    report.goal(
        "4 per-cell ipyrefresh overhead (hooks, best of 30), last checkpoint vs first",
        "flat (<= 1.5x)",
        f"{end_[0] / one[0]:.2f}x ({fmt(one[0])} -> {fmt(end_[0])}); "
        f"in-session medians {fmt(med(first))} -> {fmt(med(last))}",
        end_[0] <= 1.5 * one[0],
    )
    report.goal(
        "4 cached call of a handle on unchanged code (best of 30), last checkpoint vs first",
        "flat (<= 1.5x)",
        f"{end_[2] / one[2]:.2f}x ({fmt(one[2])} -> {fmt(end_[2])})",
        end_[2] <= 1.5 * one[2],
    )
    if trace and len(checkpoints) >= 2:  # (the first checkpoint is before caps fill up)
        half, last_ = checkpoints[len(checkpoints) // 2 - 1], checkpoints[-1]
        report.goal(
            "4 memory held by ipyrefresh's own lines, end vs halfway (caps fill up early)",
            "flat (<= 1.25x)",
            f"{half[2] / 1024:.0f} KiB -> {last_[2] / 1024:.0f} KiB",
            last_[2] <= 1.25 * max(half[2], 1),
        )
    if len(checkpoints) >= 2:
        half, last_ = checkpoints[len(checkpoints) // 2 - 1], checkpoints[-1]
        report.goal(
            "4 (info) process RSS, end vs halfway (IPython's own history grows too)",
            "(no goal)",
            f"{half[1] / 2**20:.1f} MiB -> {last_[1] / 2**20:.1f} MiB",
            None,
        )
    report.goal(
        "4 wrong answers (bitwise vs fresh autograd)",
        "0",
        f"{not_bitwise} of {checks:,}",
        not_bitwise == 0,
    )
    return report.finish(opts.results)


if __name__ == "__main__":
    sys.exit(main())
