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
  ipyrefresh's own files that are still held, and how many versions of the session's
  functions are still alive (old versions held by anything would pile up);
* the sizes of the engine's tables and of ipyrefresh's module-level caches.

The main session runs without tracemalloc (which slows every allocation and inflates
the RSS several times over). The same session (same seed) runs twice more in child
processes: without ``%load_ext ipyrefresh`` (the handles work there too), the RSS
baseline for how much of the growth is IPython's own (its history keeps every cell);
and with the extension and tracemalloc, for the bytes held by ipyrefresh's lines.

Flat is the goal: the end must cost what the start did, and no answer may be wrong.

    .venv/bin/python benchmarks/bench_soak.py [--cells 5000] [--seed 0] [--quick]
        [--no-tracemalloc] [--no-baseline] [--results]
"""

from __future__ import annotations

import os

# One BLAS/OpenMP thread, set before numpy is imported (see timing.THREADS).
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

import argparse
import gc
import json
import random
import resource
import statistics
import subprocess
import sys
import tracemalloc
from pathlib import Path
from types import FunctionType
from typing import Any

import autograd
import numpy as onp
from IPython.core.interactiveshell import InteractiveShell
from timing import Report, Timed, arguments, fmt, now, parse, same_bits

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


def live_versions() -> int:
    """Function objects of the session's own helpers and top-level functions alive now
    (each redefinition makes a new one; the namespace holds one of each)."""
    return sum(
        1
        for o in gc.get_objects()
        if type(o) is FunctionType
        and o.__name__[:1] in ("g", "h")
        and o.__name__[1:].isdigit()
        and o.__code__.co_filename.startswith("<ipython-input")
    )


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
        f"live versions of g0..g{N_HELPERS - 1}, h0..h{N_TOPS - 1} (namespace: "
        f"{N_HELPERS + N_TOPS})": live_versions(),
    }


class Session:
    """One random session; what was measured."""

    def __init__(self, n: int, seed: int, extension: bool, trace: bool, report: Report) -> None:
        self.n, self.seed, self.extension, self.trace = n, seed, extension, trace
        self.window = max(n // 10, 1)
        self.report = report
        self.per_cell: list[float] = []  # ipyrefresh's hooks, per cell
        self.wall: list[float] = []  # whole cells
        self.hits: list[tuple[int, float]] = []  # (cell index, seconds of a cached call)
        self.checks = self.not_bitwise = self.not_close = self.extra_handles = 0
        #: (cells run, RSS, held bytes, (hooks, trivial cell, cached dprobe call))
        self.checkpoints: list[tuple[int, int, int, tuple[float, float, float]]] = []
        self.start_tables: dict[str, int] = {}
        self.end_tables: dict[str, int] = {}
        self.status: dict[str, Any] = {}
        self.hooks = self.names = 0
        self.total = 0.0

    def cell(self, rng: random.Random, i: int) -> tuple[str, tuple[str, float] | None]:
        r = rng.random()
        if r < 0.25:
            return helper_source(rng, rng.randrange(N_HELPERS)), None
        if r < 0.33:
            return top_source(rng, rng.randrange(N_TOPS)), None
        if r < 0.37:
            return f"W = np.array([{rng.uniform(0.5, 2):.2f}, 2.0, 3.0, 4.0])", None
        if r < 0.41:
            return f"W[{rng.randrange(4)}] = {rng.uniform(0.5, 2):.2f}", None
        if r < 0.43:
            a, b = rng.randrange(500), rng.randrange(500)
            return rng.choice([f"D[{a}, {b}] += 1.0", "D *= 1.001", f"D.T[{a}, {b}] = 0.5"]), None
        if r < 0.45:
            return f"cfg['scale'] = {rng.uniform(0.5, 2):.2f}", None
        if r < 0.70:
            call = (rng.choice(list(HANDLES)), round(rng.uniform(-1, 1), 3))
            cell = f"_r = {call[0]}({call[1]})"
            if rng.random() < 0.1:  # a redefinition and a call in one cell
                cell = helper_source(rng, rng.randrange(N_HELPERS)) + cell
            return cell, call
        if r < 0.72:
            self.extra_handles += 1
            return f"_extra = grad(h{rng.randrange(N_TOPS)})\n_ = _extra(0.25)", None
        if r < 0.87:
            return f"v{i} = {i}\nlst{i % 50} = [v{i}] * 3", None
        return f"def f{i}(x):\n    return x * {i}", None

    def check(self, i: int, cell: str, ns: dict[str, Any], call: tuple[str, float]) -> None:
        """The cell's answer and the next call's (a cache hit: the compiled replay, where
        a stale answer would hide) against fresh autograd; two more calls timed."""
        handle, x = ns[call[0]], call[1]
        want = oracle(ns, call[0], x)
        answers = [ns["_r"]]
        for _ in range(3):
            t = now()
            answers.append(handle(x))
            self.hits.append((i, now() - t))
        for k, got in enumerate(answers[:2]):
            self.checks += 1
            if same_bits(got, want):
                continue
            self.not_bitwise += 1
            self.not_close += not all(
                onp.allclose(a, b)
                for a, b in zip(
                    got if type(got) is tuple else (got,),
                    want if type(want) is tuple else (want,),
                    strict=True,
                )
            )
            which = "the cell's call" if k == 0 else "the next call"
            self.report.wrong_answer(f"cell {i} ({which}): {cell!r}: {got!r} != {want!r}")

    def run(self) -> None:
        rng = random.Random(self.seed)
        with using(Engine()) as engine:
            shell = InteractiveShell.instance()
            if current_extension() is not None:
                shell.run_line_magic("unload_ext", "ipyrefresh")
            shell.reset(new_session=False)
            if self.extension:
                shell.run_line_magic("load_ext", "ipyrefresh")
            setup = SETUP + "".join(top_source(rng, j) for j in range(N_TOPS))
            setup += "".join(f"{h} = {t}({f})\n" for h, (f, t) in HANDLES.items())
            assert shell.run_cell(setup).success
            ns = shell.user_ns
            clock = [0.0]
            self.hooks = instrument(shell, clock) if self.extension else 0
            if self.trace:
                tracemalloc.start()
            t_start = now()
            for i in range(self.n):
                cell, call = self.cell(rng, i)
                clock[0] = 0.0
                t = now()
                result = shell.run_cell(cell, store_history=True)
                self.wall.append(now() - t)
                self.per_cell.append(clock[0])
                if not result.success:
                    self.report.wrong_answer(f"cell {i} failed: {result.error_in_exec!r}: {cell}")
                    break
                if call is not None:
                    self.check(i, cell, ns, call)
                if (i + 1) % self.window == 0:
                    gc.collect()
                    held = held_by_ipyrefresh() if self.trace else 0
                    self.checkpoints.append((i + 1, rss(), held, probe(shell, clock, ns)))
                    if i + 1 == self.window:
                        self.start_tables = tables(engine, ns)
            self.total = now() - t_start
            self.end_tables = tables(engine, ns)
            self.status = engine.status(check=False)
            self.names = len(ns)
            if self.extension:
                shell.run_line_magic("unload_ext", "ipyrefresh")
            if self.trace:
                tracemalloc.stop()


def child(kind: str, n: int, seed: int) -> dict[str, Any] | None:
    """The same session in a child process: ``baseline`` (no extension, no tracemalloc:
    the RSS to compare with) or ``traced`` (extension and tracemalloc: the bytes held by
    ipyrefresh's own lines; tracemalloc slows every allocation and inflates the RSS,
    so the main session runs without it)."""
    cmd = [sys.executable, __file__, "--child", kind, "--cells", str(n), "--seed", str(seed)]
    print(f"running the same session in a child process ({kind})...", flush=True)
    out = subprocess.run(cmd, capture_output=True, text=True, check=False)
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    if not lines:
        print(f"the {kind} child failed ({out.returncode}): {out.stderr[-2000:]}", file=sys.stderr)
        return None
    found: dict[str, Any] = json.loads(lines[-1])
    return found


def med(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def p99(xs: list[float]) -> float:
    return sorted(xs)[int(len(xs) * 0.99)] if xs else float("nan")


def main() -> int:
    parser = arguments(__doc__ or "")
    parser.add_argument("--cells", type=int, default=5000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--no-tracemalloc", action="store_true", help="skip the traced child session"
    )
    parser.add_argument(
        "--no-baseline", action="store_true", help="skip the child session without the extension"
    )
    parser.add_argument("--child", choices=("baseline", "traced"), help=argparse.SUPPRESS)
    opts = parse(parser, "bench_soak")
    n = min(opts.cells, 1000) if opts.quick else opts.cells
    cmd = "PYTHONPATH=. .venv/bin/python benchmarks/bench_soak.py --results"
    report = Report("soak", f"Soak: {n:,} random cells in a real IPython shell", cmd)
    if opts.child:
        traced = opts.child == "traced"
        c = Session(n, opts.seed, extension=traced, trace=traced, report=report)
        c.run()
        points = [(cells, r, h) for cells, r, h, _ in c.checkpoints]
        print(json.dumps({"points": points, "wrong": len(report.wrong), "checks": c.checks}))
        return 0

    s = Session(n, opts.seed, extension=True, trace=False, report=report)
    s.run()
    base = None if opts.no_baseline else child("baseline", n, opts.seed)
    traced = None if opts.no_tracemalloc else child("traced", n, opts.seed)
    for found, kind in ((base, "baseline"), (traced, "traced")):
        if found is not None and found["wrong"]:
            report.wrong_answer(f"the {kind} child session: {found['wrong']} wrong answers")
    window = s.window
    first, last = s.per_cell[:window], s.per_cell[-window:]
    hit_first = [t for i, t in s.hits if i < window]
    hit_last = [t for i, t in s.hits if i >= n - window]
    report.say(
        f"{n:,} cells, seed {opts.seed}, {s.total:.1f} s on the clock; "
        f"{s.hooks} per-cell callables of ipyrefresh timed; namespace at the end: "
        f"{s.names:,} names",
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
                fmt(med(s.wall[:window])),
                fmt(med(s.wall[-window:])),
                f"{med(s.wall[-window:]) / med(s.wall[:window]):.2f}x",
            ],
        ],
    )
    base_rss = {c: r for c, r, _ in (base or {"points": []})["points"]}
    held = {c: h for c, _, h in (traced or {"points": []})["points"]}
    report.table(
        [
            "after cell",
            "ipyrefresh's hooks, `y = 1` (best of 30)",
            "whole `y = 1` cell (best of 30)",
            "cached `dprobe(0.3)` (best of 30)",
            "RSS (after gc)",
            "RSS, baseline without the extension",
            "held by ipyrefresh's own lines (tracemalloc)",
        ],
        [
            [
                f"{c:,}",
                fmt(p[0]),
                fmt(p[1]),
                fmt(p[2]),
                f"{r / 2**20:.1f} MiB",
                f"{base_rss[c] / 2**20:.1f} MiB" if c in base_rss else "-",
                f"{held[c] / 1024:.0f} KiB" if c in held else "-",
            ]
            for c, r, _, p in s.checkpoints
        ],
    )
    report.table(
        ["table", f"after cell {window:,}", f"after cell {n:,}"],
        [[k, f"{s.start_tables.get(k, 0):,}", f"{v:,}"] for k, v in s.end_tables.items()],
    )
    st = s.status
    report.say(
        f"Builds {st['builds']:,}, rebuilds {st['rebuilds']:,}, extra variants "
        f"{st['variants']:,}, evictions {st['evictions']:,}, internal errors "
        f"{st['internal_errors']}; {s.extra_handles} extra handles made (`_extra`, rebound "
        f"each time). Answers checked against fresh autograd: {s.checks:,}; not "
        f"bit-identical: {s.not_bitwise} (of which not even allclose: {s.not_close})."
    )
    one, end_ = s.checkpoints[0][3], s.checkpoints[-1][3]
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
    half, fin = s.checkpoints[len(s.checkpoints) // 2 - 1], s.checkpoints[-1]
    if held.get(half[0]) and held.get(fin[0]):  # (from halfway: the change log's cap fills)
        report.goal(
            "4 memory held by ipyrefresh's own lines (tracemalloc), end vs halfway",
            "flat (<= 1.25x)",
            f"{held[half[0]] / 1024:.0f} KiB -> {held[fin[0]] / 1024:.0f} KiB",
            held[fin[0]] <= 1.25 * held[half[0]],
        )
    grew = (fin[1] - half[1]) / 2**20
    if base_rss.get(fin[0]) and base_rss.get(half[0]):
        base_grew = (base_rss[fin[0]] - base_rss[half[0]]) / 2**20
        report.goal(
            "4 RSS growth over the second half, with vs without the extension",
            "<= baseline + 2 MiB",
            f"{grew:+.1f} MiB vs {base_grew:+.1f} MiB",
            grew <= base_grew + 2,
        )
    else:
        report.goal(
            "4 (info) RSS growth over the second half", "(no baseline)", f"{grew:+.1f} MiB", None
        )
    versions = s.end_tables[next(k for k in s.end_tables if k.startswith("live versions"))]
    report.goal(
        "4 old function versions kept alive at the end",
        f"<= {N_HELPERS + N_TOPS} (the namespace's own)",
        str(versions),
        versions <= N_HELPERS + N_TOPS,
    )
    report.goal(
        "4 wrong answers (bitwise vs fresh autograd)",
        "0",
        f"{s.not_bitwise} of {s.checks:,}",
        s.not_bitwise == 0,
    )
    return report.finish(opts.results)


if __name__ == "__main__":
    sys.exit(main())
