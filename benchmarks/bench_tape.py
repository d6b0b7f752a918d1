"""Benchmark the "tape" compiler against plain ``autograd.grad(f)(x)``, measured in one run.

Cases (from the issue): a 50-op scalar chain, a small tanh MLP loss (X 100x10), and a
1000x1000 matmul loss. For each: the raw artifact replay, the public handle outside
IPython (which validates dependencies on every call), the handle inside a real
InteractiveShell with ``%load_ext ipyrefresh`` (a hit is an integer compare), and the
compile cost of a tape (trace + code generation + first replay).

    .venv/bin/python benchmarks/bench_tape.py [--quick] [--out benchmarks/results/tape.md]

Timings interleave the candidates round by round and keep each one's best round, so
that load from other processes hits all of them alike.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from collections.abc import Callable
from importlib import metadata
from typing import Any

# One BLAS thread for both sides: on a shared 2-core machine multithreaded matmuls swing
# with other processes' load far more than the difference being measured. Set before
# numpy is imported (main() imports it); set OPENBLAS_NUM_THREADS yourself to override.
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

CASES_SRC = """
import autograd.numpy as np
import numpy as onp

def chain(x):
    for _ in range(10):          # 5 primitives per round, 50 in all
        x = np.sin(x) * 0.9 + 0.1
        x = np.tanh(x) * 1.1
    return x

def mlp(params, X, y):
    W1, b1, W2, b2 = params
    h = np.tanh(np.dot(X, W1) + b1)
    out = np.dot(h, W2) + b2
    return np.mean((out[:, 0] - y) ** 2)

def big(W, X):
    return np.sum(np.tanh(np.dot(X, W)))

rng = onp.random.default_rng(0)
X = rng.normal(size=(100, 10))
y = rng.normal(size=100)
params = [rng.normal(size=(10, 32)) * 0.3, onp.zeros(32), rng.normal(size=(32, 1)) * 0.3,
          onp.zeros(1)]
Wb = rng.normal(size=(1000, 1000)) * 0.03
Xb = rng.normal(size=(1000, 1000))
ARGS = {"chain": (0.3,), "mlp": (params, X, y), "big": (Wb, Xb)}
"""

NAMES = {
    "chain": "50-op scalar chain",
    "mlp": "tanh MLP loss, X 100x10",
    "big": "1000x1000 matmul loss",
}
GOALS = {"chain": ">= 10x", "mlp": ">= 3x", "big": ">= 1/1.05 (no slower)"}


def best(cands: dict[str, Callable[[], Any]], number: int, rounds: int) -> dict[str, float]:
    """Seconds per call, best round of each candidate, rounds interleaved."""
    out = dict.fromkeys(cands, float("inf"))
    for _ in range(rounds):
        for name, fn in cands.items():
            t0 = time.perf_counter()
            for _ in range(number):
                fn()
            out[name] = min(out[name], (time.perf_counter() - t0) / number)
    return out


def in_ipython(number: dict[str, int], rounds: int) -> dict[str, dict[str, float]]:
    """Time autograd and the handle inside a real shell with the extension loaded."""
    import autograd
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "ipyrefresh")
    shell.run_line_magic("config", "IPyRefresh.compiler = 'tape'")
    shell.run_cell(CASES_SRC + "\nimport autograd\nfrom ipyrefresh import grad\n")
    shell.run_cell("dchain, dmlp, dbig = grad(chain), grad(mlp), grad(big)")
    results: dict[str, dict[str, float]] = {}
    for case in NAMES:
        shell.run_cell(f"_built = d{case}(*ARGS[{case!r}])")  # build
        ns = shell.user_ns
        handle, fn, args = ns[f"d{case}"], ns[case], ns["ARGS"][case]
        ag = autograd.grad(fn)
        cands = {"autograd": lambda ag=ag, a=args: ag(*a), "handle": lambda h=handle, a=args: h(*a)}
        results[case] = best(cands, number[case], rounds * (3 if case == "big" else 1))
        entry = next(iter(handle._entries.values()))
        assert entry.compiler == "tape" and not entry.fallback, entry.fallback
    shell.run_line_magic("unload_ext", "ipyrefresh")
    return results


def main() -> None:
    import autograd
    import numpy as onp

    import ipyrefresh
    from ipyrefresh._src import handles
    from ipyrefresh._src.engine import Engine
    from ipyrefresh._src.tape.compiler import TapeCompiler

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds (noisier)")
    parser.add_argument("--out", help="also write a markdown report to this path")
    opts = parser.parse_args()
    rounds = 3 if opts.quick else 7
    number = {"chain": 200, "mlp": 100, "big": 2}
    ns: dict[str, Any] = {}
    exec(CASES_SRC, ns)
    handles._engine = Engine()
    handles._engine.config.compiler = "tape"
    rows = []
    for case in NAMES:
        fn, args = ns[case], ns["ARGS"][case]
        ag = autograd.grad(fn)
        built = TapeCompiler().build(fn, "grad", 0, args, {})
        assert not built.fallback, built.fallback
        art = built.artifact
        got, want = art(fn, args, {}), ag(*args)
        pairs = zip(got, want, strict=True) if case == "mlp" else [(got, want)]
        for g, w in pairs:
            onp.testing.assert_allclose(g, w, rtol=1e-9)
        handle = ipyrefresh.grad(fn)
        handle(*args)
        cands = {
            "autograd": lambda ag=ag, a=args: ag(*a),
            "replay": lambda art=art, f=fn, a=args: art(f, a, {}),
            "handle": lambda h=handle, a=args: h(*a),
            "compile": lambda f=fn, a=args: TapeCompiler().build(f, "grad", 0, a, {}),
        }
        # one large call is ~0.1 s and swings with the machine's load: more rounds
        t = best(cands, number[case] if case != "big" else 1, rounds * (3 if case == "big" else 1))
        rows.append((case, t, art.describe()))
    ipy = in_ipython({"chain": 200, "mlp": 100, "big": 1}, rounds)

    lines = [
        "| case | autograd.grad | tape replay (artifact) | handle, plain Python | "
        "handle in IPython (autograd there) | compile (trace+codegen+run) | goal |",
        "|---|---|---|---|---|---|---|",
    ]
    for case, t, desc in rows:
        a = t["autograd"]
        i = ipy[case]

        def fmt(sec: float, base: float) -> str:
            return f"{sec * 1e6:,.0f} µs ({base / sec:.1f}x)"

        lines.append(
            f"| {NAMES[case]} ({desc}) | {a * 1e6:,.0f} µs | {fmt(t['replay'], a)} | "
            f"{fmt(t['handle'], a)} | {fmt(i['handle'], i['autograd'])} "
            f"({i['autograd'] * 1e6:,.0f} µs) | {t['compile'] * 1e6:,.0f} µs "
            f"({t['compile'] / a:.2f}x one autograd call) | {GOALS[case]} |"
        )
    table = "\n".join(lines)
    print(table)
    if opts.out:
        cmd = "    .venv/bin/python benchmarks/bench_tape.py" + (" --quick" if opts.quick else "")
        header = (
            "# Tape compiler benchmarks\n\n"
            "Speed-ups are autograd time / candidate time, both measured in the same run "
            "(rounds interleaved, best round kept). Compile is a fresh `TapeCompiler().build` "
            "(trace, code generation, first replay) in units of one `autograd.grad(f)(x)` call."
            f"\n\nCommand:\n\n{cmd} --out benchmarks/results/tape.md\n\n"
            f"Machine: {platform.machine()}, {os.cpu_count()} cores, Python "
            f"{sys.version.split()[0]}, numpy {onp.__version__}, autograd "
            f"{metadata.version('autograd')}; load average {os.getloadavg()[0]:.1f} "
            f"(the machine is shared); BLAS threads {os.environ['OPENBLAS_NUM_THREADS']}; "
            f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}"
            "\n\n"
        )
        notes = (
            "\n\nColumns: *tape replay* calls the compiled artifact directly; *handle, plain "
            "Python* is `ipyrefresh.grad(f)(x)` outside IPython, where every call also "
            "re-validates the entry's dependencies; *handle in IPython* is the same handle "
            "inside a real `InteractiveShell` with `%load_ext ipyrefresh`, where a cache hit "
            "is one integer compare (its baseline, in parentheses, is autograd timed in that "
            "same process). The ops column counts the tape's differentiable primitives and "
            "how many use a specialized adjoint (the rest call autograd's VJP makers).\n"
        )
        with open(opts.out, "w") as fh:
            fh.write(header + table + notes)


if __name__ == "__main__":
    main()
