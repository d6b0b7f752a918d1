"""Core benchmarks: per-cell hook cost, cache-hit overhead, selective versus full refresh.

Every number is printed next to a baseline measured in the same run:
  1. hook cost per cell at 1k/10k/100k names, versus a bare cell, a naive full namespace
     diff, and IPython's ``%autoreload 2``;
  2. a cache hit when nothing changed, versus ``autograd.grad(f)(x)``, and the lookup
     overhead alone (a compiler whose artifact does nothing);
  3. refreshing after one leaf changes among 1,000 cached derivatives, versus rebuilding
     all 1,000 (a full refresh, what Zygote's ``refresh()`` or ``jax.clear_caches()`` do).

Run: ``python benchmarks/bench_core.py`` (about a minute).
"""

from __future__ import annotations

import functools
import importlib.metadata
import sys
import time
from collections.abc import Callable
from typing import Any

import autograd
import numpy as np
from IPython.core.interactiveshell import InteractiveShell
from timing import best

import ipyrefresh
from ipyrefresh._src import handles
from ipyrefresh._src.compilers import Built, register_compiler
from ipyrefresh._src.engine import Engine


def fmt(seconds: float) -> str:
    if seconds < 1e-6:
        return f"{seconds * 1e9:7.0f} ns"
    if seconds < 1e-3:
        return f"{seconds * 1e6:7.2f} µs"
    return f"{seconds * 1e3:7.2f} ms"


def fresh_shell() -> InteractiveShell:
    handles._engine = Engine()
    shell = InteractiveShell.instance()
    shell.run_line_magic("unload_ext", "ipyrefresh")
    shell.run_line_magic("unload_ext", "autoreload")
    shell.reset(new_session=False)
    return shell


def populate(shell: InteractiveShell, n: int) -> None:
    ns = shell.user_ns
    for i in range(n):
        kind = i % 4
        if kind == 0:
            ns[f"v{i}"] = float(i)
        elif kind == 1:
            ns[f"a{i}"] = np.arange(3.0)
        elif kind == 2:
            exec(f"def fn{i}(x):\n    return x * {i}", ns)
        else:
            ns[f"s{i}"] = [i, i + 1]


def naive_diff(ns: dict[str, Any]) -> Callable[[], None]:
    """The baseline the design notes measured: snapshot ids and code ids, then compare."""

    def snap() -> dict[str, tuple[int, int]]:
        return {k: (id(v), id(getattr(v, "__code__", None))) for k, v in ns.items()}

    state = {"old": snap()}

    def step() -> None:
        new = snap()
        _ = [k for k, v in new.items() if state["old"].get(k) != v]
        state["old"] = new

    return step


CELL = "x_bench = 1"


def bench_hook() -> list[str]:
    rows = [
        "| names | bare cell | cell + ipyrefresh | sweep alone | naive full diff | "
        "%autoreload 2 cost |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for n in (1_000, 10_000, 100_000):
        shell = fresh_shell()
        populate(shell, n)
        run = functools.partial(shell.run_cell, CELL, store_history=False)
        bare = best(run, repeat=9, number=20)
        shell.run_line_magic("load_ext", "ipyrefresh")
        shell.run_cell(
            "import autograd.numpy as np\nfrom ipyrefresh import grad\n"
            "def helper(x): return np.sin(x) * v0\n"
            + "".join(f"def t{i}(x): return helper(x) * {i}.0 + fn2(x)\n" for i in range(20))
            + "for i in range(20): grad(globals()[f't{i}'])(0.5)"
        )
        assert ipyrefresh.status()["entries_total"] == 20
        with_ext = best(run, repeat=9, number=20)
        engine = handles.get_engine()
        hook = best(functools.partial(engine.after_cell, None), repeat=9, number=50)
        naive = best(naive_diff(shell.user_ns), repeat=5, number=3)
        shell.run_line_magic("unload_ext", "ipyrefresh")
        shell.run_line_magic("load_ext", "autoreload")
        shell.run_line_magic("autoreload", "2")
        autoreload = best(run, repeat=9, number=20) - bare
        shell.run_line_magic("autoreload", "0")
        overhead = max(with_ext - bare, 0.0)
        rows.append(
            f"| {n:,} | {fmt(bare)} | {fmt(with_ext)} (+{fmt(overhead).strip()}) | "
            f"{fmt(hook)} | {fmt(naive)} | {fmt(max(autoreload, 0.0))} |"
        )
    return rows


def bench_hit() -> list[str]:
    shell = fresh_shell()
    shell.run_line_magic("load_ext", "ipyrefresh")

    def null_build(fn: Any, transform: str, argnum: Any, args: Any, kwargs: Any) -> Built:
        def artifact(fn: Any, args: Any, kwargs: Any) -> float:
            return 0.0

        return Built(artifact, 0.0)

    class Null:
        name = "null"
        build = staticmethod(null_build)

    register_compiler("null", Null)
    shell.run_cell(
        "import autograd.numpy as np\nfrom ipyrefresh import grad\nimport ipyrefresh\n"
        "def g(x): return np.sin(x) * 2.0\ndef f(x): return g(x) * x\n"
        "df = grad(f)\ndf(0.5)\n"
        "dnull = ipyrefresh.Derivative('grad', f, 0, compiler='null')\ndnull(0.5)"
    )
    ns = shell.user_ns
    df, dnull, f = ns["df"], ns["dnull"], ns["f"]
    x = 0.5
    plain = best(lambda: autograd.grad(f)(x), number=2000)
    hit = best(lambda: df(x), number=2000)
    overhead = best(lambda: dnull(x), number=20000)
    empty = best(lambda: None, number=20000)
    return [
        "| call | time | ratio |",
        "|---|---:|---:|",
        f"| `autograd.grad(f)(x)` (baseline) | {fmt(plain)} | 1.00x |",
        f"| ipyrefresh cache hit ({handles.get_engine().config.compiler} compiler) | "
        f"{fmt(hit)} | {hit / plain:.2f}x |",
        f"| lookup overhead alone (no-op artifact) | {fmt(overhead - empty)} | "
        f"{(overhead - empty) / plain:.3f}x |",
    ]


def bench_refresh(n: int = 1000) -> list[str]:
    shell = fresh_shell()
    shell.run_line_magic("load_ext", "ipyrefresh")
    src = ["import autograd.numpy as np\nfrom ipyrefresh import grad"]
    for i in range(n):
        src.append(f"def leaf{i}(x): return np.sin(x) * {i % 7 + 1}.0")
        src.append(f"def f{i}(x): return leaf{i}(x) * np.cos(x)")
    shell.run_cell("\n".join(src))
    shell.run_cell(f"ds = [grad(globals()[f'f{{i}}']) for i in range({n})]")
    shell.run_cell("for d in ds: d(0.3)")
    engine = handles.get_engine()
    assert engine.status()["fresh"] == n
    results = []
    for k in range(5):
        # Both sides run the same cell (the redefinition); then either ipyrefresh's
        # selective refresh or a full one.
        t0 = time.perf_counter()
        shell.run_cell(f"def leaf0(x): return np.sin(x) * {11 + k}.0", store_history=False)
        report = engine.refresh(quiet=True)
        selective = time.perf_counter() - t0
        assert len(report["rebuilt"]) == 1, report
        t0 = time.perf_counter()
        shell.run_cell(f"def leaf0(x): return np.sin(x) * {21 + k}.0", store_history=False)
        full = engine.refresh(force=True, quiet=True)
        full_time = time.perf_counter() - t0
        assert len(full["rebuilt"]) == n
        results.append((selective, full_time))
    selective = min(r[0] for r in results)
    full_time = min(r[1] for r in results)
    sweep = best(lambda: engine.after_cell(None), number=5)
    return [
        "| after one leaf changes among 1,000 cached derivatives | time | ratio |",
        "|---|---:|---:|",
        f"| cell + full refresh: rebuild all {n:,} | {fmt(full_time)} | 1x |",
        f"| cell + ipyrefresh: sweep {len(engine.table):,} watched deps, rebuild the 1 "
        f"affected | {fmt(selective)} | {full_time / selective:.0f}x cheaper |",
        f"| (the sweep alone) | {fmt(sweep)} | |",
    ]


def main() -> None:
    print(
        f"python {sys.version.split()[0]}, numpy {np.__version__}, "
        f"autograd {importlib.metadata.version('autograd')}"
    )
    for title, bench in (
        ("Per-cell hook cost (20 cached derivatives watched)", bench_hook),
        ("Cache hit when nothing changed", bench_hit),
        ("Selective versus full refresh", bench_refresh),
    ):
        print(f"\n### {title}\n")
        for row in bench():
            print(row)


if __name__ == "__main__":
    main()
