"""Core benchmarks, in a real IPython shell: per-cell overhead, selective versus full refresh.

Every ratio is against a baseline measured in the same run:

1. Per-cell overhead. The time of a trivial cell (``y = 1``) with ``%load_ext
   ipyrefresh`` versus the same cell, in the same namespace with the same cached
   derivatives, with the extension not loaded (loaded and unloaded in alternate rounds).
   Two namespaces: a 30 MB global array read by one cached derivative, and 1,000 cached
   derivatives (1,000 functions, each with its own ``grad`` handle, called once). Also
   shown, for information: the same cell with a JupyterLab front end connected (a stub
   comm on the extension's status channel: the status item is then kept current after
   each cell), and the engine's ``sweep``/``status`` alone.
2. Selective versus full refresh at 1,000 entries: after one cell redefines the leaf
   that one of the 1,000 derivatives reaches, the time until all 1,000 handles have
   answered (only the affected entry rebuilds, at its call) versus the same cell then a
   full rebuild: ``engine.clear()`` (every entry rebuilt at its call, what
   ``jax.clear_caches()`` does), ``engine.refresh(force=True)`` (every entry rebuilt
   eagerly, then called), and no cache at all (1,000 fresh ``autograd.grad(f)(x)``).
   Every answer is compared bit for bit with a fresh ``autograd.grad`` of the current code.

Run: ``python benchmarks/bench_core.py [--quick] [--results]`` (about a minute).
"""

from __future__ import annotations

import os

# One BLAS/OpenMP thread, set before numpy is imported (see timing.THREADS).
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

import functools
import sys
from collections.abc import Callable
from typing import Any

import autograd
from IPython.core.interactiveshell import InteractiveShell
from timing import Report, Timed, arguments, best, fmt, now, parse, same_bits

from ipyrefresh._src.engine import Engine, using
from ipyrefresh.ipython.extension import current_extension

N = 1000
CELL = "y = 1"

ARRAY_SETUP = """
import autograd.numpy as np
import numpy as onp
from ipyrefresh import grad
A = onp.random.default_rng(0).normal(size=(1000, 3750))   # 30 MB of float64
def f(w):
    return np.sum(np.tanh(w * A.mean(axis=0)))
df = grad(f)
w = onp.linspace(-1.0, 1.0, 3750)
_ = df(w)
_ = df(w)  # (built at its second call: see build_at_call)
"""


def many_setup(n: int) -> str:
    src = ["import autograd.numpy as np\nimport autograd\nfrom ipyrefresh import grad"]
    for i in range(n):
        src.append(f"def leaf{i}(x):\n    return np.sin(x) * {i % 7 + 1}.0")
        src.append(f"def f{i}(x):\n    return leaf{i}(x) * np.cos(x)")
    src.append(f"ds = [{', '.join(f'grad(f{i})' for i in range(n))}]")
    src.append("_ = [d(0.3) for d in ds]")
    src.append("_ = [d(0.3) for d in ds]  # (built at their second call: see build_at_call)")
    return "\n".join(src)


class StubComm:
    """A connected front end, as far as the kernel side can tell: takes messages."""

    def __init__(self) -> None:
        self.sent = 0

    def send(self, data: Any) -> None:
        self.sent += 1

    def on_msg(self, callback: Any) -> None:
        pass

    def on_close(self, callback: Any) -> None:
        pass

    def close(self) -> None:
        pass


def run(shell: InteractiveShell, code: str) -> Any:
    result = shell.run_cell(code, store_history=True)
    error = result.error_before_exec or result.error_in_exec
    if error is not None:
        raise RuntimeError(f"cell failed: {error!r}\n{code[:300]}")
    return result.result


def unload(shell: InteractiveShell) -> None:
    if current_extension() is not None:
        shell.run_line_magic("unload_ext", "ipyrefresh")


def fresh_shell() -> InteractiveShell:
    shell = InteractiveShell.instance()
    unload(shell)
    shell.reset(new_session=False)
    return shell


def wrap_hooks(shell: InteractiveShell, clock: list[float]) -> Callable[[], None]:
    """Time the extension's per-cell callables in place; returns what puts them back
    (before ``%unload_ext``, which unregisters them by identity)."""
    ext = current_extension()
    assert ext is not None
    hooks = [("pre_run_cell", ext.pre_run_cell), ("post_run_cell", ext.post_run_cell)]
    hooks += [("post_run_cell", extra.post_run_cell) for extra in ext.extras]
    swapped = []
    for event, hook in hooks:
        callbacks = shell.events.callbacks[event]
        for i, cb in enumerate(callbacks):
            if cb == hook:
                callbacks[i] = Timed(hook, clock)
                swapped.append((callbacks, i, cb))

    def restore() -> None:
        for callbacks, i, cb in swapped:
            callbacks[i] = cb

    return restore


def cell_times(shell: InteractiveShell, rounds: int, number: int) -> dict[str, float]:
    """Seconds per ``y = 1`` cell: extension not loaded, loaded, loaded with a front end
    connected, and the extension's own callables in the last two; in rounds that
    alternate which goes first (loading and unloading, and the first cell after loading,
    are not timed)."""
    cell = functools.partial(shell.run_cell, CELL, store_history=False)
    clock = [0.0]

    def batch() -> tuple[float, float]:
        clock[0] = 0.0
        t0 = now()
        for _ in range(number):
            cell()
        return (now() - t0) / number, clock[0] / number

    out = dict.fromkeys(("bare", "loaded", "frontend", "hooks", "hooks_frontend"), float("inf"))

    def bare() -> None:
        unload(shell)
        out["bare"] = min(out["bare"], batch()[0])

    def loaded() -> None:
        if current_extension() is None:
            shell.run_line_magic("load_ext", "ipyrefresh")
            # Loading checks every kept derivative once, at the next cell (what changed
            # while unloaded): a cost of loading, not of each cell, so not timed here.
            cell()
        restore = wrap_hooks(shell, clock)
        t, hooks = batch()
        out["loaded"], out["hooks"] = min(out["loaded"], t), min(out["hooks"], hooks)
        ext = current_extension()
        assert ext is not None
        channel = ext.extras[0]
        channel.comms.append(StubComm())
        t, hooks = batch()
        out["frontend"] = min(out["frontend"], t)
        out["hooks_frontend"] = min(out["hooks_frontend"], hooks)
        channel.comms.clear()
        restore()

    for r in range(rounds):
        for step in (bare, loaded) if r % 2 == 0 else (loaded, bare):
            step()
    unload(shell)
    return out


def per_cell(report: Report, quick: bool) -> None:
    report.say("", "## 1. Per-cell overhead of the extension", "")
    rounds, number = (6, 25) if quick else (40, 25)
    rows = []
    for label, setup, goal_label in (
        ("one 30 MB array read by a cached derivative", ARRAY_SETUP, "30 MB array"),
        (f"{N:,} cached derivatives", many_setup(N), f"{N:,} cached derivatives"),
    ):
        with using(Engine()) as engine:
            shell = fresh_shell()
            run(shell, setup)
            assert len(engine.cache) == (1 if "30 MB" in label else N), len(engine.cache)
            t = cell_times(shell, rounds, number)
            ratio = t["loaded"] / t["bare"]
            sweep = best(lambda e=engine: e.sweep(deep=True), repeat=5)
            status = best(lambda e=engine: e.status(check=False), repeat=5)
            rows.append(
                [
                    label,
                    fmt(t["bare"]),
                    f"{fmt(t['loaded'])} ({ratio:.2f}x)",
                    fmt(t["hooks"]),
                    f"{fmt(t['frontend'])} ({t['frontend'] / t['bare']:.2f}x)",
                    fmt(t["hooks_frontend"]),
                    f"{fmt(sweep)} + {fmt(status)}",
                ]
            )
            report.goal(
                f"1a per-cell overhead, {goal_label}",
                "<= 1.5x a bare cell",
                f"{ratio:.2f}x ({fmt(t['loaded'])} vs {fmt(t['bare'])}; hooks {fmt(t['hooks'])})",
                ratio <= 1.5,
            )
            report.goal(
                f"1a (info) same, JupyterLab front end connected, {goal_label}",
                "(no goal; 1.5x if it were the same goal)",
                f"{t['frontend'] / t['bare']:.2f}x ({fmt(t['frontend'])})",
                None,
            )
            unload(shell)
            shell.reset(new_session=False)
    report.table(
        [
            "namespace",
            "bare cell (not loaded)",
            "cell, ipyrefresh loaded",
            "of which ipyrefresh's hooks",
            "loaded, front end connected",
            "of which ipyrefresh's hooks",
            "`sweep()` + `status()` alone",
        ],
        rows,
    )
    report.say(
        f"The cell is `{CELL}`, run with `shell.run_cell(..., store_history=False)`; best of "
        f"{rounds} rounds of {number} cells each, alternating which goes first. The hooks "
        "columns are the time spent in the extension's own per-cell callables (wrapped in "
        "place), best batch. With a front end connected "
        "(a stub comm on the status channel, as JupyterLab's status item opens one), the "
        "extension sweeps every entry's guard (without array contents) and recomputes the "
        "status after each cell; the last column is those two engine calls alone."
    )


def check_all(shell: InteractiveShell, answers: list[Any], what: str, report: Report) -> int:
    """Compare ``answers`` (one per f{i}) with fresh autograd of the current code."""
    ns = shell.user_ns
    bad = 0
    for i, got in enumerate(answers):
        want = autograd.grad(ns[f"f{i}"])(0.3)
        if not same_bits(got, want):
            bad += 1
            report.wrong_answer(f"{what}: ds[{i}] gave {got!r}, fresh autograd {want!r}")
    return bad


def selective(report: Report, quick: bool) -> None:
    report.say("", f"## 1b. Selective versus full refresh at {N:,} entries", "")
    rounds = 2 if quick else 5
    with using(Engine()) as engine:
        shell = fresh_shell()
        shell.run_line_magic("load_ext", "ipyrefresh")
        run(shell, many_setup(N))
        run(shell, "_ = [d(0.3) for d in ds]")  # third calls: each tape compiled
        assert len(engine.cache) == N
        version = [0]

        def redefine() -> None:
            version[0] += 1
            run(shell, f"def leaf0(x):\n    return np.sin(x) * {10 + version[0]}.0")

        def call_all() -> list[Any]:
            run(shell, "_ans = [d(0.3) for d in ds]")
            return shell.user_ns["_ans"]

        def timed(prepare: Callable[[], None], answer: Callable[[], list[Any]]) -> Any:
            t0 = now()
            redefine()
            prepare()
            answers = answer()
            return now() - t0, answers

        def nothing() -> None:
            pass

        def clear() -> None:
            engine.clear()

        refreshed: list[int] = []

        def refresh_all() -> None:
            refreshed.append(len(engine.refresh(force=True)["rebuilt"]))

        def fresh_autograd() -> list[Any]:
            run(shell, f"_ans = [autograd.grad(globals()[f'f{{i}}'])(0.3) for i in range({N})]")
            return shell.user_ns["_ans"]

        times: dict[str, list[float]] = {"sel": [], "clear": [], "refresh": [], "autograd": []}
        rebuilds: list[int] = []
        hits = best(call_all, repeat=3)
        for _ in range(rounds):
            before = engine.stats["rebuilds"]
            t, answers = timed(nothing, call_all)
            rebuilds.append(engine.stats["rebuilds"] - before)
            check_all(shell, answers, "selective", report)
            times["sel"].append(t)
            call_all()  # untimed: the rebuilt entry's tape compiles at its second call

            t, answers = timed(clear, call_all)
            check_all(shell, answers, "after engine.clear()", report)
            times["clear"].append(t)
            call_all()  # untimed: every entry built again (its second call), the steady state

            t, answers = timed(refresh_all, call_all)
            check_all(shell, answers, "after refresh(force=True)", report)
            times["refresh"].append(t)

            t, answers = timed(nothing, fresh_autograd)
            check_all(shell, answers, "fresh autograd", report)
            times["autograd"].append(t)
            call_all()  # leaf0 changed: the affected entry rebuilds, untimed
            call_all()
        if any(r != 1 for r in rebuilds):
            report.wrong_answer(f"selective rounds rebuilt {rebuilds} entries (expected 1 each)")
        if any(r != N for r in refreshed):
            report.wrong_answer(f"refresh(force=True) rebuilt {refreshed} (expected {N})")
        sel = min(times["sel"])
        rows = [
            [
                f"ipyrefresh: the {N:,} handles, 1 rebuilds at its call",
                fmt(sel),
                "1x",
            ]
        ]
        baselines = (
            (
                "clear",
                f"`engine.clear()`, then the {N:,} handles (each runs plain autograd: a new "
                "derivative is built at its second call)",
                "`engine.clear()` (not a rebuild: each new derivative's first call runs "
                "plain autograd)",
                False,
            ),
            (
                "refresh",
                f"`engine.refresh(force=True)` (all {N:,} rebuilt), then the {N:,} handles",
                "full rebuild, `engine.refresh(force=True)`",
                True,
            ),
            (
                "autograd",
                f"no cache: {N:,} fresh `autograd.grad(f{{i}})(0.3)`",
                "no cache at all, fresh autograd (not a refresh; bounded by autograd/hit)",
                False,
            ),
        )
        for key, label, short, judged in baselines:
            full = min(times[key])
            rows.append([label, fmt(full), f"{full / sel:.1f}x slower"])
            report.goal(
                f"1b selective vs {short}",
                ">= 100x" if judged else "(info)",
                f"{full / sel:.1f}x ({fmt(full)} vs {fmt(sel)})",
                full / sel >= 100 if judged else None,
            )
    report.table(["after `def leaf0` is redefined: one cell, then", "time", "ratio"], rows)
    report.say(
        f"Each time includes the redefining cell. Best of {rounds} rounds; in every round "
        f"all {N:,} answers of each method were compared bit for bit with a fresh "
        f"`autograd.grad` of the current code, and the selective rounds rebuilt "
        f"{sorted(set(rebuilds))} entry each. For scale: calling the {N:,} handles when "
        f"nothing changed takes {fmt(hits)} ({fmt(hits / N)} per handle: each call checks "
        "its guard, then replays its tape)."
    )


def main() -> int:
    parser = arguments(__doc__ or "")
    opts = parse(parser, "bench_core")
    cmd = "PYTHONPATH=. .venv/bin/python benchmarks/bench_core.py --results"
    report = Report("core", "Core: per-cell overhead, selective versus full refresh", cmd)
    report.say(f"python {sys.version.split()[0]}, {N:,} entries")
    per_cell(report, opts.quick)
    selective(report, opts.quick)
    return report.finish(opts.results)


if __name__ == "__main__":
    sys.exit(main())
