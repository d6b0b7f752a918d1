"""A cached call of a handle versus ``autograd.grad(f)(x)``, measured in the same run.

All guards are on (the default configuration, the "tape" backend): every call of a
handle first checks the code and data its tape was built from, array contents included,
then replays the tape. Cases:

a. a 50-op scalar chain, at x = 0.3 (the ops are counted from the compiled tape);
b. a small MLP loss (params [W1 (10,32), b1 (32,), W2 (32,1), b2 (1,)], X (100,10),
   y (100,), tanh hidden layer, mean squared error), gradient with respect to params;
c. a function that reads a 30 MB global array through a value computed from it with
   plain numpy (the tape keeps that value, so only the guard's digest of ``A`` can
   notice that ``A`` changed in place): c1 ``A.mean(axis=0)`` (one pass over ``A``, as
   cheap as a derived value gets: the digest is a pass too), c2 ``scale(A)``, a user
   function returning the column means over the column standard deviations. After
   each of several in-place changes of ``A`` (an element, ``*=``, ``np.copyto``, writes
   through views) the handle's next two answers are compared bit for bit with a fresh
   autograd.

d. a handle made where it is called, in a loop of an IPython cell (``for x in xs:
   grad(f)(x)``, a one-line scalar ``f``), against the same loop with
   ``autograd.grad(f)(x)``: the handle reads the name it follows from the call site's
   source at every turn. Timed with the process's CPU time inside the cell.

e. the MLP loss of case b with a new minibatch (X, y) at every call, against
   ``autograd.grad`` on batches of the same shapes: each batch is met once, so the handle
   checks its path and runs autograd.

Cases a-c also show the cost of the first three calls in units of one autograd call,
with a fresh engine each time: plain autograd (a derivative is built at its second
call), the build (walk what the function reads, run autograd once while recording the
tape), and the replay's code generation and first run.
Candidates run in interleaved rounds; each keeps its best round.

Run: ``python benchmarks/bench_calls.py [--quick] [--results]`` (about a minute).
"""

from __future__ import annotations

import os

# One BLAS/OpenMP thread, set before numpy is imported (see timing.THREADS).
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

import sys
from collections.abc import Callable
from typing import Any

import autograd
import numpy as onp
from timing import Report, arguments, fmt, interleaved, now, parse, same_bits

from ipyrefresh._src.engine import Engine, using

SOURCE = """
import autograd.numpy as np
import numpy as onp
from ipyrefresh import grad

def chain(x):
    for _ in range(10):
        x = np.sin(x) * 0.9 + 0.1
        x = np.tanh(x) * 1.1
    return x

def mlp(params, X, y):
    W1, b1, W2, b2 = params
    h = np.tanh(np.dot(X, W1) + b1)
    out = np.dot(h, W2) + b2
    return np.mean((out[:, 0] - y) ** 2)

def big(w):
    return np.sum(np.tanh(w * A.mean(axis=0)))

def scale(M):
    return M.mean(axis=0) / M.std(axis=0)

def scaled(w):
    return np.sum(np.tanh(w * scale(A)))

rng = onp.random.default_rng(0)
X = rng.normal(size=(100, 10))
y = rng.normal(size=100)
params = [rng.normal(size=(10, 32)) * 0.3, onp.zeros(32), rng.normal(size=(32, 1)) * 0.3,
          onp.zeros(1)]
A = rng.normal(size=(1000, 3750))  # 30 MB of float64
w = onp.linspace(-1.0, 1.0, 3750)
ARGS = {"chain": (0.3,), "mlp": (params, X, y), "big": (w,), "scaled": (w,)}
"""

CASES = {
    "chain": ("a", "50-op scalar chain, x = 0.3", 20.0),
    "mlp": ("b", "small MLP loss, grad w.r.t. params", 5.0),
    "big": ("c1", "reads a 30 MB global A through `A.mean(axis=0)`", 2.0),
    "scaled": ("c2", "reads a 30 MB global A through `scale(A)` (column mean / std)", 2.0),
}

#: In-place changes of A (case c), each followed by two checked calls.
CHANGES = [
    "A[3, 4] += 1.0",
    "A *= 1.0001",
    "onp.copyto(A, rng.normal(size=A.shape))",
    "A.reshape(-1)[7] = 0.0",
    "A[:, 5] = A[:, 6]",
    "A.T[9, 2] -= 3.0",
]


def namespace() -> dict[str, Any]:
    ns: dict[str, Any] = {"__name__": "__main__"}
    exec(compile(SOURCE, "<bench_calls>", "exec"), ns)
    return ns


def handle(ns: dict[str, Any], name: str) -> Any:
    """``grad(name)`` made in the namespace, so that it follows the name there."""
    exec(f"_d = grad({name})", ns)
    return ns.pop("_d")


def describe(d: Any) -> str:
    return "; ".join(v.describe() for e in d.entries for v in e.variants)


def compile_cost(name: str, repeat: int) -> tuple[float, float, float]:
    """Seconds of the first three calls, each set with a fresh engine: plain autograd
    (a derivative is built at its second call), the build (walk + autograd + record),
    the replay's code generation and first run."""
    best = [float("inf")] * 3
    for _ in range(repeat):
        ns = namespace()
        args = ns["ARGS"][name]
        with using(Engine()) as engine:
            if engine.config.build_at_call != 2:
                raise RuntimeError("the columns assume a build at the second call")
            d = handle(ns, name)
            for i in range(3):
                t0 = now()
                d(*args)
                best[i] = min(best[i], now() - t0)
    return best[0], best[1], best[2]


def check(report: Report, what: str, got: Any, want: Any) -> bool:
    if same_bits(got, want):
        return True
    report.wrong_answer(f"{what}: handle {got!r} != fresh autograd {want!r}")
    return False


def bench_case(report: Report, name: str, quick: bool) -> list[str]:
    letter, label, goal = CASES[name]
    ns = namespace()
    args, fn = ns["ARGS"][name], ns[name]
    d = handle(ns, name)
    ag = autograd.grad(fn)
    for call in ("first call (autograd)", "second (the build)", "third (compiled replay)"):
        check(report, f"{name}, {call}", d(*args), ag(*args))
    (entry,) = d.entries
    (variant,) = entry.variants
    desc = variant.describe()
    if not desc.startswith("tape"):
        report.say(f"note: {name} does not replay a tape: {desc} ({variant.note})")
    guard = variant.guard
    cands: dict[str, Callable[[], Any]] = {
        "autograd": lambda: ag(*args),
        "handle": lambda: d(*args),
        "guard": lambda: guard.check(fn, args, {}),
        "replay": lambda: variant.run(fn, args, {}),
    }
    number = {"chain": 200, "mlp": 200, "big": 5, "scaled": 3}[name]
    rounds = 3 if quick else 9
    t = interleaved(cands, number=number, rounds=rounds)
    builds_before = entry.builds
    check(report, f"{name}, after timing", d(*args), ag(*args))
    if entry.builds != builds_before or entry.state.value != "fresh":
        report.wrong_answer(f"{name}: rebuilt while nothing changed ({entry.last_event})")
    first, second, third = compile_cost(name, 3 if quick else 5)
    ratio = t["autograd"] / t["handle"]
    report.goal(
        f"2{letter} cached call vs autograd.grad: {label}",
        f">= {goal:g}x",
        f"{ratio:.1f}x ({fmt(t['handle'])} vs {fmt(t['autograd'])})",
        ratio >= goal,
    )
    a = t["autograd"]
    return [
        f"{letter}. {label} ({desc})",
        fmt(a),
        f"{fmt(t['handle'])} (**{ratio:.1f}x**)",
        f"{fmt(t['guard'])} + {fmt(t['replay'])}",
        f"{fmt(first)} ({first / a:.1f}x)",
        f"{fmt(second)} ({second / a:.1f}x)",
        f"{fmt(third)} ({third / a:.1f}x)",
        f">= {goal:g}x",
    ]


def in_place(report: Report, name: str) -> int:
    """Case c: every in-place change of A is noticed; answers equal fresh autograd's.
    Returns how many changes gave a wrong answer."""
    ns = namespace()
    args, fn = ns["ARGS"][name], ns[name]
    d = handle(ns, name)
    d(*args)
    d(*args)
    rows = []
    for change in CHANGES:
        entry = d.entries[0]
        builds = entry.builds
        digest_before = onp.asarray(ns["A"]).sum()
        exec(change, ns)
        changed = onp.asarray(ns["A"]).sum() != digest_before
        t0 = now()
        first = d(*args)
        t1 = now()
        second = d(*args)
        t2 = now()
        want = autograd.grad(fn)(*args)
        ok = check(report, f"{name} after `{change}`, first call", first, want)
        ok &= check(report, f"{name} after `{change}`, second call", second, want)
        entry = d.entries[0]
        rebuilt = entry.builds - builds
        if changed and rebuilt != 1:
            report.wrong_answer(f"`{change}`: {rebuilt} rebuilds (expected 1)")
        rows.append(
            [
                f"`{change}`",
                "yes" if ok else "**NO**",
                str(rebuilt),
                fmt(t1 - t0),
                fmt(t2 - t1),
            ]
        )
    report.table(
        [
            f"in-place change of A (`{name}`)",
            "both answers == fresh autograd (bitwise)",
            "rebuilds",
            "1st call (rebuild)",
            "2nd call",
        ],
        rows,
        "lllrr",
    )
    return sum(r[1] != "yes" for r in rows)


LOOP_CELL = """
import time
import autograd
import autograd.numpy as np
from ipyrefresh import grad

def f(x):
    return np.sin(x) * np.cos(x) + x

XS = [0.1 * k for k in range(50)]
"""

#: The loops are the cell's own statements, as a notebook writes them; each round times
#: both, the best round of each is kept (``interleaved`` needs callables, and a loop
#: inside a function is another case: the call site is found differently).
TIMED_CELL = """
ours, theirs, best = [], [], {{"handle": 1e9, "autograd": 1e9}}
for _round in range({rounds}):
    t0 = time.process_time()
    for _ in range(20):
        ours = []
        for x in XS:
            ours.append(grad(f)(x))
    t1 = time.process_time()
    for _ in range(20):
        theirs = []
        for x in XS:
            theirs.append(autograd.grad(f)(x))
    t2 = time.process_time()
    best["handle"] = min(best["handle"], (t1 - t0) / 20 / len(XS))
    best["autograd"] = min(best["autograd"], (t2 - t1) / 20 / len(XS))
"""


def made_in_a_loop(report: Report, quick: bool) -> None:
    """Case d: ``grad(f)(x)`` in a loop of a real IPython cell, against autograd's."""
    from IPython.core.interactiveshell import InteractiveShell
    from traitlets.config import Config

    config = Config()
    config.HistoryManager.enabled = False
    shell = InteractiveShell.instance(config=config)
    shell.run_line_magic("load_ext", "ipyrefresh")
    for cell in (LOOP_CELL, TIMED_CELL.format(rounds=3 if quick else 9)):
        shell.run_cell(cell).raise_error()
    ns = shell.user_ns
    if not same_bits(ns["ours"], ns["theirs"]):
        report.wrong_answer("d: grad(f)(x) in a loop differs from autograd.grad(f)(x)")
    a, h = ns["best"]["autograd"], ns["best"]["handle"]
    not_slower(
        report,
        "2d a handle made at each call",
        "d. A handle made at each call, in a loop of a cell",
        ["one turn of the loop", "`autograd.grad(f)(x)`", "`grad(f)(x)` (ipyrefresh)"],
        "`f(x) = sin(x) cos(x) + x`, scalar x",
        (a, h),
    )


def not_slower(
    report: Report,
    goal: str,
    title: str,
    header: list[str],
    case: str,
    times: tuple[float, float],
) -> None:
    """A section with one row, autograd's time against the handle's, and its goal."""
    a, h = times
    report.say("", f"## {title}", "")
    report.table(header, [[case, fmt(a), f"{fmt(h)} (**{a / h:.2f}x**)"]], "lrr")
    report.goal(
        f"{goal} is not slower than autograd.grad",
        ">= 1x",
        f"{a / h:.2f}x ({fmt(h)} vs {fmt(a)} a call)",
        a / h >= 1,
    )


def new_batches(report: Report, quick: bool) -> None:
    """Case e: the MLP loss of case b called with a new minibatch at every call (a
    training loop's first epoch), against ``autograd.grad`` on batches of the same
    shapes. Each batch is met once: the handle checks its path, which fails on the batch,
    and runs autograd (README, known limits)."""
    ns = namespace()
    params, mlp = ns["params"], ns["mlp"]
    rng = onp.random.default_rng(1)
    rounds, number = (3, 50) if quick else (9, 100)

    def batch() -> tuple[Any, Any]:
        return rng.normal(size=(100, 10)), rng.normal(size=100)

    def batches() -> Any:
        return iter([batch() for _ in range(number)])

    d = handle(ns, "mlp")
    ag = autograd.grad(mlp)
    met = batch()
    for _ in range(3):  # built on a batch met twice; then a replay
        check(report, "e, a batch met again", d(params, *met), ag(params, *met))
    for _ in range(5):
        X, y = batch()
        check(report, "e, a new batch", d(params, X, y), ag(params, X, y))
    turn = {name: iter([batches() for _ in range(rounds)]) for name in ("autograd", "handle")}

    def epoch(name: str, f: Any) -> Callable[[], None]:
        def run() -> None:
            for X, y in next(turn[name]):
                f(params, X, y)

        return run

    t = interleaved({"autograd": epoch("autograd", ag), "handle": epoch("handle", d)}, 1, rounds)
    not_slower(
        report,
        "2e a new minibatch at every call",
        "e. A new minibatch at every call",
        ["one call", "`autograd.grad(mlp)`", "handle (ipyrefresh)"],
        "small MLP loss of case b, a new (X, y) each call",
        (t["autograd"] / number, t["handle"] / number),
    )


def main() -> int:
    parser = arguments(__doc__ or "")
    opts = parse(parser, "bench_calls")
    cmd = "PYTHONPATH=. .venv/bin/python benchmarks/bench_calls.py --results"
    report = Report("calls", "A cached call versus autograd.grad", cmd)
    report.say("", "## Cached calls (nothing changed)", "")
    rows = [bench_case(report, name, opts.quick) for name in CASES]
    report.table(
        [
            "case (what the handle runs)",
            "`autograd.grad(f)(x)`",
            "handle, cached call",
            "guard check + replay alone",
            "1st call (plain autograd)",
            "2nd call (walk + autograd + record)",
            "3rd call (codegen + replay)",
            "goal",
        ],
        rows,
        "lrrrrrrl",
    )
    report.say(
        "Speed-up = autograd time / handle time, both in the same run (interleaved rounds, "
        "best round each, one BLAS thread). `autograd.grad(f)` is made once and called; "
        "its time is the baseline. The first three calls are timed with a fresh "
        "engine each (best of several), in units of one autograd call: a derivative runs "
        "plain autograd at its first call and is built at its second "
        "(`IPyRefresh.build_at_call`), its replay generated at the third.",
        "",
        "## Case c: in-place changes of the 30 MB array",
    )
    wrong = sum(in_place(report, name) for name in ("big", "scaled"))
    made_in_a_loop(report, opts.quick)
    new_batches(report, opts.quick)
    total = 2 * len(CHANGES)
    report.goal(
        "2c answers after in-place changes of A equal fresh autograd (array_equal)",
        "all",
        f"{total - wrong} of {total} changes (c1 and c2), 2 calls each",
        wrong == 0,
    )
    return report.finish(opts.results)


if __name__ == "__main__":
    sys.exit(main())
