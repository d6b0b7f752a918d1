"""Shared by the benchmarks: timing, formatting, goals, and the results file.

Timing keeps the fastest of several batches (on a shared 2-core machine, noise only
ever adds time), and compares candidates in interleaved rounds in a rotating order, so
that load from other processes hits every candidate alike. Every goal is checked
against a baseline measured in the same run; a missed goal prints FAIL (it never
raises: a wrong *answer* is what makes a benchmark exit non-zero).

Each benchmark sets one BLAS/OpenMP thread before numpy is imported (the ``THREADS``
variables, at its top); set them yourself to override.

The clock (``--clock``) is the process's CPU time by default (``time.process_time``,
all its threads): on a shared machine whose load exceeds its cores, wall-clock time
mostly measures waiting for a core, and best-of-N cannot find quiet moments when there
are none. ``--clock wall`` uses ``time.perf_counter``. For single-threaded work on an
idle machine the two agree; the results files say which one was used.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

#: Environment variables each benchmark sets to "1" (unless already set) before numpy.
THREADS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")

RESULTS = Path(__file__).resolve().parent / "results"

CLOCKS: dict[str, Callable[[], float]] = {"cpu": time.process_time, "wall": time.perf_counter}
_clock: list[Callable[[], float]] = [time.process_time]
_clock_name = ["cpu"]


def use_clock(name: str) -> None:
    _clock[0] = CLOCKS[name]
    _clock_name[0] = name


def now() -> float:
    """Seconds on the benchmarks' clock (see the module docstring)."""
    return _clock[0]()


def clock_name() -> str:
    if _clock_name[0] == "cpu":
        return "process CPU time (time.process_time, all threads)"
    return "wall clock (time.perf_counter)"


def best(fn: Callable[[], Any], repeat: int = 7, number: int = 1) -> float:
    """Seconds per call: the fastest of ``repeat`` batches of ``number`` calls."""
    times = []
    for _ in range(repeat):
        t0 = now()
        for _ in range(number):
            fn()
        times.append((now() - t0) / number)
    return min(times)


def interleaved(
    cands: dict[str, Callable[[], Any]],
    number: int = 1,
    rounds: int = 7,
    clock: Callable[[], float] | None = None,
) -> dict[str, float]:
    """Seconds per call of each candidate: its best batch of ``number`` calls, over
    ``rounds`` rounds that run every candidate once, in a rotating order. ``clock``
    overrides the benchmarks' clock (``time.perf_counter`` for latencies of
    multi-threaded work, whose idle threads may spin and count as CPU time)."""
    tick = clock or now
    out = dict.fromkeys(cands, float("inf"))
    order = list(cands.items())
    for r in range(rounds):
        k = r % len(order)
        for name, fn in order[k:] + order[:k]:
            t0 = tick()
            for _ in range(number):
                fn()
            out[name] = min(out[name], (tick() - t0) / number)
    return out


def fmt(seconds: float) -> str:
    """A duration with a unit that keeps three or four significant digits."""
    if seconds < 1e-6:
        return f"{seconds * 1e9:.0f} ns"
    if seconds < 1e-3:
        return f"{seconds * 1e6:.2f} µs"
    if seconds < 1:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds:.2f} s"


def machine() -> str:
    """One line about where and when this ran (the machine is shared: load matters)."""
    versions = [f"Python {platform.python_version()}"]
    for dist in ("numpy", "autograd", "ipython", "jax"):
        if dist == "jax" and "jax" not in sys.modules:
            continue
        with contextlib.suppress(metadata.PackageNotFoundError):
            versions.append(f"{dist} {metadata.version(dist)}")
    threads = ", ".join(f"{v}={os.environ.get(v, 'unset')}" for v in THREADS)
    return (
        f"clock: {clock_name()}; "
        f"{platform.machine()}, {os.cpu_count()} cores (shared), "
        f"{', '.join(versions)}; {threads}; load average at the end "
        f"{os.getloadavg()[0]:.1f}; commit {commit()}; "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}"
    )


def commit() -> str:
    """The commit of the ipyrefresh being measured (``+`` if its tree has changes)."""
    import ipyrefresh

    root = Path(ipyrefresh.__file__).resolve().parent.parent
    try:
        head = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--", "ipyrefresh"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("+" if dirty else "")


def arguments(doc: str, **extra: Any) -> argparse.ArgumentParser:
    """The options every benchmark takes (``./dev bench`` passes its arguments to all):
    ``--quick`` (fewer rounds: a smoke test, noisier) and ``--results`` (also write
    ``benchmarks/results/<name>.md``)."""
    parser = argparse.ArgumentParser(description=doc.strip().splitlines()[0], **extra)
    parser.add_argument("--quick", action="store_true", help="fewer rounds (noisier)")
    parser.add_argument(
        "--results", action="store_true", help="also write benchmarks/results/<name>.md"
    )
    parser.add_argument(
        "--clock",
        choices=sorted(CLOCKS),
        default="cpu",
        help="cpu: process CPU time (default; robust to other processes' load); wall",
    )
    return parser


def parse(parser: argparse.ArgumentParser, name: str) -> argparse.Namespace:
    """Parse the command line (ignoring, with a note, options meant for other benchmarks:
    ``./dev bench`` passes the same ones to all); select the clock."""
    opts, rest = parser.parse_known_args()
    if rest:
        print(f"{name}: ignoring {rest}")
    use_clock(opts.clock)
    print(f"{name}: clock: {clock_name()}; load average {os.getloadavg()[0]:.1f}", flush=True)
    return opts


@dataclass
class Goal:
    what: str
    goal: str
    measured: str
    ok: bool | None  # None: informational, no goal

    @property
    def verdict(self) -> str:
        return "info" if self.ok is None else ("PASS" if self.ok else "FAIL")


@dataclass
class Report:
    """Markdown printed as it is produced, and written to ``results/<name>.md`` on request."""

    name: str
    title: str
    command: str
    lines: list[str] = field(default_factory=list)
    goals: list[Goal] = field(default_factory=list)
    wrong: list[str] = field(default_factory=list)

    def say(self, *lines: str) -> None:
        for line in lines:
            print(line, flush=True)
            self.lines.append(line)

    def table(self, header: list[str], rows: list[list[str]], align: str = "") -> None:
        align = align or "l" + "r" * (len(header) - 1)
        marks = ["---:" if a == "r" else "---" for a in align]
        self.say(
            "",
            "| " + " | ".join(header) + " |",
            "|" + "|".join(marks) + "|",
            *("| " + " | ".join(r) + " |" for r in rows),
            "",
        )

    def goal(self, what: str, goal: str, measured: str, ok: bool | None) -> None:
        g = Goal(what, goal, measured, ok)
        self.goals.append(g)
        print(f"[{g.verdict}] {what}: {measured} (goal {goal})", flush=True)

    def wrong_answer(self, what: str) -> None:
        """A derivative disagreed with the fresh computation: always reported, exit 1."""
        self.wrong.append(what)
        print(f"WRONG ANSWER: {what}", file=sys.stderr, flush=True)

    def summary(self) -> list[str]:
        rows = [[g.what, g.goal, g.measured, f"**{g.verdict}**"] for g in self.goals]
        out = [
            "| goal | target | measured | verdict |",
            "|---|---|---:|---|",
            *("| " + " | ".join(r) + " |" for r in rows),
        ]
        out.append("")
        if self.wrong:
            out.append(f"**{len(self.wrong)} wrong answers**: " + "; ".join(self.wrong[:10]))
        else:
            out.append("Wrong answers: none (every answer checked is listed above).")
        return out

    def finish(self, write: bool) -> int:
        """Print the goals; write the results file if asked; the exit status."""
        print("\n## Goals\n")
        summary = self.summary()
        print("\n".join(summary), flush=True)
        if write:
            RESULTS.mkdir(exist_ok=True)
            text = [
                f"# {self.title}",
                "",
                "Command (from the repository root):",
                "",
                f"    {self.command}",
                "",
                f"Machine: {machine()}.",
                "",
                "## Goals",
                "",
                *summary,
                "",
                "## Details",
                *self.lines,
            ]
            path = RESULTS / f"{self.name}.md"
            path.write_text("\n".join(text).rstrip() + "\n")
            print(f"\nwrote {path}")
        return 1 if self.wrong else 0


def same_bits(got: Any, want: Any) -> bool:
    """The same types, shapes, dtypes and bits as ``want`` (NaN where it has NaN)."""
    import numpy as np

    if isinstance(want, dict):
        return (
            type(got) is dict
            and list(got) == list(want)
            and all(same_bits(got[k], want[k]) for k in want)
        )
    if isinstance(want, (tuple, list)):
        return (
            type(got) is type(want)
            and len(got) == len(want)
            and all(same_bits(g, w) for g, w in zip(got, want, strict=True))
        )
    if type(got) is not type(want) or np.shape(got) != np.shape(want):
        return False
    if np.result_type(got) != np.result_type(want):
        return False
    return bool(np.array_equal(got, want, equal_nan=True))


class Timed:
    """Wraps one of the extension's per-cell callables; adds its time to ``clock``."""

    def __init__(self, fn: Callable[..., Any], clock: list[float]) -> None:
        self.fn = fn
        self.clock = clock

    def __call__(self, *args: Any) -> Any:
        t = now()
        try:
            return self.fn(*args)
        finally:
            self.clock[0] += now() - t
