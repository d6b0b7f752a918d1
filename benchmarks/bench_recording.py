"""What a build's recording costs, on the Python running it.

A build runs the user's function once under autograd while a hook watches every call it
makes (its effects: a print, a random draw, a file written). The hook is
``sys.setprofile`` on Python 3.10 and 3.11 and ``sys.monitoring`` on 3.12 and later,
where the callback of each call event is built so that it cannot raise into the user's
code (see the README's Known limits). Its cost grows with the calls the function makes,
so the cases here are call-heavy:

a. a 300-step loop that calls a small helper at each step (about 2,000 calls);
b. the small MLP loss of ``bench_calls.py`` (few calls, large arrays).

For each, in the same run: one plain ``autograd.grad`` call (the baseline), and the
build (a handle's second call, with a fresh engine: the walk of what the function
reads, autograd's run under the hook, the tape), both as the fastest of several rounds.
The ratio build / autograd call is what the recording makes a first use cost. Run it
with each Python to compare the hooks: the results file is named after the version.

Run: ``python benchmarks/bench_recording.py [--quick] [--results]`` (under a minute).
"""

from __future__ import annotations

import os

# One BLAS/OpenMP thread, set before numpy is imported (see timing.THREADS).
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

import platform
import sys
from typing import Any

import autograd
from bench_calls import handle
from timing import Report, arguments, fmt, now, parse, same_bits

from ipyrefresh._src.engine import Engine, using

SOURCE = """
import autograd.numpy as np
import numpy as onp
from ipyrefresh import grad

def helper(v, i):
    return np.sin(v * (1.0 + i * 1e-4)) + len([i]) * 0.0

def loop(x):
    s = 0.0
    for i in range(300):
        s = s + helper(x, i)
    return s

_rng = onp.random.default_rng(0)
params = [_rng.normal(size=(10, 32)) * 0.3, onp.zeros(32),
          _rng.normal(size=(32, 1)) * 0.3, onp.zeros(1)]
X, y = _rng.normal(size=(100, 10)), _rng.normal(size=100)

def mlp(p):
    w1, b1, w2, b2 = p
    h = np.tanh(np.dot(X, w1) + b1)
    return np.mean((np.dot(h, w2)[:, 0] + b2[0] - y) ** 2)

ARGS = {"loop": (0.3,), "mlp": (params,)}
"""

CASES = {
    "loop": "a. a 300-step loop calling a helper",
    "mlp": "b. small MLP loss",
}


def namespace() -> dict[str, Any]:
    ns: dict[str, Any] = {"__name__": "__main__"}
    exec(compile(SOURCE, "<bench_recording>", "exec"), ns)
    return ns


def measure(report: Report, name: str, rounds: int) -> list[str]:
    """The best autograd call and the best build of ``rounds`` (each build with a fresh
    engine and handle), every answer compared bit for bit with autograd's."""
    ns = namespace()
    args, fn = ns["ARGS"][name], ns[name]
    plain = autograd.grad(fn)
    want = plain(*args)
    best_plain = best_build = float("inf")
    describe = ""
    for _ in range(rounds):
        t0 = now()
        plain(*args)
        best_plain = min(best_plain, now() - t0)
        with using(Engine()) as engine:
            if engine.config.build_at_call != 2:
                raise RuntimeError("the build is timed at the second call")
            d = handle(ns, name)
            d(*args)  # the first call: plain autograd
            t0 = now()
            got = d(*args)  # the build
            best_build = min(best_build, now() - t0)
            (entry,) = d.entries
            describe = "; ".join(v.describe() for v in entry.variants)
            for answer in (got, d(*args)):
                if not same_bits(answer, want):
                    report.wrong_answer(f"{name}: handle {answer!r} != autograd {want!r}")
    if not describe.startswith("tape"):
        report.say(f"note: {name} does not replay a tape: {describe}")
    return [
        CASES[name],
        fmt(best_plain),
        fmt(best_build),
        f"**{best_build / best_plain:.1f}x**",
    ]


def main() -> int:
    parser = arguments(__doc__ or "")
    opts = parse(parser, "bench_recording")
    version = platform.python_version_tuple()
    short = f"{version[0]}.{version[1]}"
    hook = "sys.monitoring" if sys.version_info >= (3, 12) else "sys.setprofile"
    report = Report(
        f"recording-{short}",
        f"A build's recording on Python {short} ({hook})",
        f"PYTHONPATH=. python{short} benchmarks/bench_recording.py --results",
    )
    rounds = 3 if opts.quick else 12
    rows = [measure(report, name, rounds) for name in CASES]
    report.table(["function", "`autograd.grad` call", "build (second call)", "build / call"], rows)
    report.say(
        f"Python {platform.python_version()}, hook: {hook}. Best of {rounds} rounds each; "
        "a fresh engine and handle for every build."
    )
    return report.finish(opts.results)


if __name__ == "__main__":
    sys.exit(main())
