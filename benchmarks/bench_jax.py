"""JAX: ``ipyrefresh.jax`` (``rj``) after a redefinition versus ``jax.clear_caches()``.

Measured in one run, in a real IPython shell with ``%load_ext ipyrefresh``:

1. 20 MLP training steps under ``rj.jit`` (20 models, each with its own activation
   helper); one helper is redefined: the time until all 20 steps have answered (only
   the affected one is traced and compiled again) versus what plain JAX offers,
   ``jax.clear_caches()`` and recompiling all 20 ``jax.jit(step)``.
2. 100 jitted derivatives (``rj.grad`` handles); a leaf that one of them reaches is
   redefined (and, for information, a helper that ten of them reach): the same
   comparison against ``jax.clear_caches()`` and 100 ``jax.jit(jax.grad(h))``.
3. A cached call (nothing changed) of a handle or of ``rj.jit`` versus a bare
   ``jax.jit`` call, with ``jax.block_until_ready`` on each answer, next to a class whose
   ``__call__`` only forwards to the bare call (the least any Python wrapper costs).
4. One build versus one first call of a bare ``jax.jit(jax.grad(f))``.
5. For information: a cached call of a handle after the notebook itself ran
   ``jax.clear_caches()`` several times.

Order: all of ipyrefresh's timings (1, 2, 3, 4) run before plain JAX's rounds, because
``jax.clear_caches()`` also drops the handles' executables (see 5).

Every answer is compared with a fresh, unjitted computation of the current code
(``jax.grad`` under ``jax.disable_jit()``; for the steps, the step itself unjitted),
and the XLA compilations are counted with JAX's monitoring events.
Run: ``python benchmarks/bench_jax.py [--quick] [--results] [--rounds N]`` (2-4 minutes).
"""

from __future__ import annotations

import os

# One BLAS/OpenMP thread, set before numpy is imported (see timing.THREADS).
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")
# Modest XLA threading: the machines this runs on have two cores shared by others.
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault(
    "XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
)
os.environ.setdefault("JAX_ENABLE_COMPILATION_CACHE", "false")  # every compile is a compile

import importlib.util
import statistics
import sys
import time
import warnings
from collections.abc import Callable
from typing import Any

if importlib.util.find_spec("jax") is None:
    print("bench_jax: skipped, jax is not installed (pip install ipyrefresh[jax])")
    sys.exit(0)

import jax
import numpy as np
from IPython.core.interactiveshell import InteractiveShell
from timing import Report, arguments, best, fmt, interleaved, now, parse

import ipyrefresh
from ipyrefresh._src.engine import Engine, using

N = 100
GROUPS = 10  # group{k} is reached by the ten functions h{i} with i % 10 == k
STEPS = 20

NOTEBOOK = [
    "import jax, jax.numpy as jnp\nimport numpy as onp\nimport ipyrefresh.jax as rj",
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
    f"handles = [{', '.join(f'rj.grad(h{i})' for i in range(N))}]",
    # 20 models (a sweep over activations): MLP [W1 (10,32), b1, W2 (32,1), b2], batch 100
    "keys = jax.random.split(jax.random.key(0), 4)\n"
    "params = [jax.random.normal(keys[0], (10, 32)) * 0.3, jnp.zeros(32),\n"
    "          jax.random.normal(keys[1], (32, 1)) * 0.3, jnp.zeros(1)]\n"
    "xb = jax.random.normal(keys[2], (100, 10))\n"
    "yb = jax.random.normal(keys[3], (100, 1))",
    *[f"def sact{i}(z):\n    return jnp.tanh(z) + {i / 100} * z" for i in range(STEPS)],
    *[
        f"def sloss{i}(p, xb, yb):\n"
        f"    w1, b1, w2, b2 = p\n"
        f"    hidden = sact{i}(xb @ w1 + b1)\n"
        f"    return jnp.mean((hidden @ w2 + b2 - yb) ** 2)\n"
        f"def step{i}(p, xb, yb):\n"
        f"    g = jax.grad(sloss{i})(p, xb, yb)\n"
        f"    return [a - 0.1 * b for a, b in zip(p, g)]"
        for i in range(STEPS)
    ],
    f"plain_steps = [jax.jit(s) for s in [{', '.join(f'step{i}' for i in range(STEPS))}]]",
    f"rj_steps = [{', '.join(f'rj.jit(step{i})' for i in range(STEPS))}]",
]


class CompileCounter:
    """Counts XLA backend compilations through JAX's own monitoring events."""

    EVENT = "/jax/core/compile/backend_compile_duration"

    def __init__(self) -> None:
        self.count = 0
        jax.monitoring.register_event_duration_secs_listener(self._listen)

    def _listen(self, event: str, duration: float, **kwargs: Any) -> None:
        if event == self.EVENT:
            self.count += 1


def run(shell: InteractiveShell, code: str) -> None:
    result = shell.run_cell(code, store_history=True)
    error = result.error_before_exec or result.error_in_exec
    if error is not None:
        raise RuntimeError(f"cell failed: {error!r}\n{code}")


def close(a: Any, b: Any) -> bool:
    la, lb = jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)
    return len(la) == len(lb) and all(
        np.allclose(np.asarray(p), np.asarray(q), rtol=1e-5, atol=1e-6)
        for p, q in zip(la, lb, strict=True)
    )


class Bench:
    def __init__(self, shell: InteractiveShell, report: Report) -> None:
        self.shell = shell
        self.report = report
        self.ns = shell.user_ns
        self.version = 0
        self.compiles = CompileCounter()

    # -- what a user runs ----------------------------------------------------------------
    def redefine(self, name: str) -> None:
        """A cell with a new body for ``name`` (a leaf, a group helper or an activation)."""
        self.version += 1
        v = 2 + self.version / 7
        run(self.shell, f"def {name}(z):\n    return jnp.sin({v} * z) * z * z")

    def call_all(self, which: str) -> None:
        """A cell that calls every derivative (or step) in ``which``, answers kept."""
        args = "(params, xb, yb)" if "steps" in which else "(x)"
        run(self.shell, f"_ans = jax.block_until_ready([d{args} for d in {which}])")

    # -- the oracle ----------------------------------------------------------------------
    def check(self, which: str) -> None:
        """The answers of the last ``call_all(which)`` equal fresh unjitted computations."""
        ns = self.ns
        for i, got in enumerate(ns["_ans"]):
            with jax.disable_jit():
                if "steps" in which:
                    want = ns[f"step{i}"](ns["params"], ns["xb"], ns["yb"])
                else:
                    want = jax.grad(ns[f"h{i}"])(ns["x"])
            if not close(got, want):
                self.report.wrong_answer(f"{which}[{i}] after version {self.version}")

    # -- 1 and 2 -------------------------------------------------------------------------
    #: (collection of ipyrefresh handles, of plain jitted functions, what is redefined,
    #: how many of the collection reach it, judged)
    SCENARIOS = (
        ("rj_steps", "plain_steps", "sact0", 1, True),
        ("handles", "plain", "leaf0", 1, True),
        ("handles", "plain", "group0", N // GROUPS, False),
    )

    def timed(self, which: str, name: str, clear: bool) -> tuple[float, int]:
        before = self.compiles.count
        t0 = now()
        self.redefine(name)
        if clear:
            run(self.shell, "jax.clear_caches()")
        self.call_all(which)
        elapsed = now() - t0
        self.check(which)
        return elapsed, self.compiles.count - before

    def ours(self, rounds: int) -> None:
        """ipyrefresh's rounds, before any ``jax.clear_caches()`` (which would also drop
        the handles' executables)."""
        self.mine: dict[str, tuple[list[float], list[int]]] = {}
        for which, _, name, reach, judged in self.SCENARIOS:
            times, compiles = [], []
            for _ in range(rounds if judged else 1):
                before = ipyrefresh.status(check=False)["rebuilds"]
                t, c = self.timed(which, name, clear=False)
                rebuilt = ipyrefresh.status(check=False)["rebuilds"] - before
                if rebuilt != reach:
                    self.report.wrong_answer(f"{name}: {rebuilt} rebuilt, expected {reach}")
                times.append(t)
                compiles.append(c)
            self.mine[name] = (times, compiles)

    def theirs(self, rounds: int) -> None:
        """Plain JAX's rounds; then the table and the goals."""
        r = self.report
        rows = []
        for which, plain_which, name, reach, judged in self.SCENARIOS:
            times, compiles = [], []
            for _ in range(rounds if judged else 1):
                t, c = self.timed(plain_which, name, clear=True)
                times.append(t)
                compiles.append(c)
            mine, my_compiles = self.mine[name]
            o, p = statistics.median(mine), statistics.median(times)
            size = len(self.ns[which])
            rows.append(
                [
                    f"`{name}` redefined ({reach} of {size} reach it)",
                    f"{fmt(o)} ({', '.join(map(fmt, mine))}); {max(my_compiles)}",
                    f"{fmt(p)} ({', '.join(map(fmt, times))}); {max(compiles)}",
                    f"**{p / o:.1f}x**",
                ]
            )
            if which == "rj_steps":
                r.goal(
                    f"3a rj.jit MLP training step: 1 helper redefined among {size} jitted "
                    "functions, vs jax.clear_caches() + recompile all",
                    ">= 10x",
                    f"{p / o:.1f}x (medians: {fmt(o)} vs {fmt(p)})",
                    p / o >= 10,
                )
            elif judged:
                r.goal(
                    f"3b one leaf redefined among {size} rj.grad handles, vs "
                    "jax.clear_caches() + recompile all",
                    ">= 50x",
                    f"{p / o:.1f}x (medians: {fmt(o)} vs {fmt(p)})",
                    p / o >= 50,
                )
            else:
                r.goal(
                    f"3b (info) a helper {reach} of {size} handles reach",
                    f"(no goal; {size // reach}x at most)",
                    f"{p / o:.1f}x",
                    None,
                )
        r.say("", "## Time to correct answers from all, after one redefinition")
        r.table(
            [
                "change",
                "ipyrefresh.jax: median (each round); XLA compiles",
                "jax.clear_caches() + recompile all: median (each round); XLA compiles",
                "speed-up",
            ],
            rows,
            "llll",
        )
        r.say(
            "Each time is a cell that redefines the function plus a cell that calls all of "
            "them with `jax.block_until_ready`; for plain JAX, a `jax.clear_caches()` cell "
            "in between (JAX's only way to be right: its cache is keyed on the function, "
            "not on what it calls). After every timed step all answers were compared with "
            "a fresh unjitted computation of the current code, and the number of rebuilt "
            "entries with the number of functions that reach the change. All of "
            "ipyrefresh's rounds ran before the first `jax.clear_caches()` (see the last "
            "section for why). "
            "The helper reached by ten is measured once."
        )

    # -- 5 -------------------------------------------------------------------------------
    def clear_caches_section(self) -> None:
        """What the user's own ``jax.clear_caches()`` does to a cached handle."""
        r = self.report
        run(self.shell, "def cc(z):\n    return jnp.sum(jnp.sin(z) * z)\ncc_ours = rj.grad(cc)")
        ns = self.ns
        handle, x = ns["cc_ours"], ns["x"]
        rows = []
        caught: list[str] = []
        for k in range(10):
            if k:
                run(self.shell, "jax.clear_caches()")
            with warnings.catch_warnings(record=True) as seen:
                warnings.simplefilter("always")
                jax.block_until_ready(handle(x))
            caught += [f"after {k}: {w.message}" for w in seen]
            t = best(lambda: jax.block_until_ready(handle(x)), repeat=5, number=10)
            (entry,) = handle.entries
            kinds = [v.describe() for v in entry.variants]
            if k in (0, 1, 7, 8, 9):
                rows.append([str(k), fmt(t), str(len(kinds)), kinds[0]])
        r.say("", "## A handle after the notebook's own `jax.clear_caches()` (information)")
        r.table(["clear_caches() so far", "cached call", "variants", "first variant"], rows)
        r.say(
            "Each `jax.clear_caches()` drops the handle's executable; its next call misses "
            "(`jax.jit` would trace again) and the engine adds a new variant instead of "
            "replacing the dead one. Warnings: " + ("; ".join(caught) or "none") + "."
        )
        r.goal(
            "3 (info) rj.grad cached call after 9 jax.clear_caches()",
            "(no goal; a bare call is µs)",
            rows[-1][1] + f" ({rows[-1][3]})",
            None,
        )

    # -- 3 -------------------------------------------------------------------------------
    def call_section(self, rounds: int) -> None:
        r = self.report
        r.say("", "## A cached call (nothing changed)")
        run(
            self.shell,
            "def tiny(z):\n    return jnp.sum(jnp.sin(z) * z)\n"
            "k1, k2, k3 = jax.random.split(jax.random.key(1), 3)\n"
            "mp = (jax.random.normal(k1, (64, 64)) * 0.1, jax.random.normal(k2, (64, 1)) * 0.1)\n"
            "mb = jax.random.normal(k3, (32, 64))\n"
            "bp = (jax.random.normal(k1, (256, 256)) * 0.05, "
            "jax.random.normal(k2, (256, 1)) * 0.1)\n"
            "bb = jax.random.normal(k3, (128, 256))\n"
            "def mlp_loss(p, b):\n"
            "    w1, w2 = p\n"
            "    hidden = jnp.tanh(b @ w1)\n"
            "    return jnp.mean((hidden @ w2) ** 2)\n"
            "tiny_plain, tiny_ours = jax.jit(jax.grad(tiny)), rj.grad(tiny)\n"
            "mlp_plain, mlp_ours = jax.jit(jax.grad(mlp_loss)), rj.grad(mlp_loss)\n"
            "step_plain, step_ours = plain_steps[1], rj_steps[1]\n",
        )
        ns = self.ns
        # (label, name of the {name}_plain / {name}_ours pair, arguments, the oracle)
        cases: list[tuple[str, str, tuple[Any, ...], Any]] = [
            ("grad: tiny `sum(sin(x) * x)`, x of 16", "tiny", (ns["x"],), jax.grad(ns["tiny"])),
            (
                "grad: MLP loss, 64x64 + 64x1, batch 32",
                "mlp",
                (ns["mp"], ns["mb"]),
                jax.grad(ns["mlp_loss"]),
            ),
            (
                "grad: MLP loss, 256x256 + 256x1, batch 128",
                "mlp",
                (ns["bp"], ns["bb"]),
                jax.grad(ns["mlp_loss"]),
            ),
            (
                "rj.jit: MLP training step (10-32-1, batch 100)",
                "step",
                (ns["params"], ns["xb"], ns["yb"]),
                ns["step1"],
            ),
        ]
        rows = []
        for label, name, args, oracle in cases:
            plain, ours = ns[f"{name}_plain"], ns[f"{name}_ours"]
            floor = _Forward(plain)
            jax.block_until_ready((plain(*args), ours(*args), floor(*args)))
            with jax.disable_jit():
                want = oracle(*args)
            if not close(ours(*args), want):
                r.wrong_answer(f"cached call of {name}_ours")
            number = 100 if name == "tiny" else 20

            def blocking(f: Any, a: tuple[Any, ...] = args) -> Callable[[], Any]:
                return lambda: jax.block_until_ready(f(*a))

            def dispatch(f: Any, a: tuple[Any, ...] = args) -> Callable[[], Any]:
                return lambda: f(*a)

            # Wall clock here: JAX's worker threads may spin while idle, which CPU time
            # would count; many short rounds find the machine's quiet moments.
            t = interleaved(
                {"plain": blocking(plain), "ours": blocking(ours), "floor": blocking(floor)},
                number=number,
                rounds=rounds,
                clock=time.perf_counter,
            )
            d = interleaved(
                {"plain": dispatch(plain), "ours": dispatch(ours)},
                number=number,
                rounds=rounds,
                clock=time.perf_counter,
            )
            jax.block_until_ready(ours(*args))
            ratio = t["ours"] / t["plain"]
            rows.append(
                [
                    label,
                    fmt(t["plain"]),
                    f"{fmt(t['ours'])} (**{ratio:.2f}x**)",
                    f"{t['floor'] / t['plain']:.2f}x",
                    f"{fmt(d['plain'])} / {fmt(d['ours'])} ({d['ours'] / d['plain']:.2f}x)",
                ]
            )
            judged = t["plain"] >= 20e-6
            r.goal(
                f"3c cached call within 1.1x of bare jax.jit: {label}",
                "<= 1.1x (bare call >= 20 µs)" if judged else "(bare call < 20 µs: no goal)",
                f"{ratio:.2f}x ({fmt(t['ours'])} vs {fmt(t['plain'])})",
                ratio <= 1.1 if judged else None,
            )
        r.table(
            [
                "function",
                "bare `jax.jit` (answer ready)",
                "ipyrefresh.jax (answer ready)",
                "forwarding class (floor)",
                "dispatch only, no block: bare / ours",
            ],
            rows,
        )
        r.say(
            f"Wall clock, {rounds} interleaved rounds of short batches, best batch each, with "
            "`jax.block_until_ready` on every answer (the goal is judged on these). The "
            "last column is the time to return without waiting for the answer (JAX "
            "dispatches asynchronously: in a loop whose steps are cheaper than dispatch, this "
            "is what limits it)."
        )

    # -- 4 -------------------------------------------------------------------------------
    def build_section(self) -> None:
        r = self.report
        r.say("", "## One build")
        ns = self.ns
        x = ns["x"]
        plain_first, ours_first = [], []
        for v in range(5):
            run(self.shell, f"def b{v}(z):\n    return jnp.sum(act(jnp.sin(z) * {v + 2}.0) ** 2)")
            fn = ns[f"b{v}"]
            t0 = now()
            jax.block_until_ready(jax.jit(jax.grad(fn))(x))
            plain_first.append(now() - t0)
            run(self.shell, f"_d = rj.grad(b{v})")
            handle = ns["_d"]
            t0 = now()
            jax.block_until_ready(handle(x))
            ours_first.append(now() - t0)
        p, o = statistics.median(plain_first), statistics.median(ours_first)
        r.table(
            ["what", "bare `jax.jit(jax.grad(f))`", "ipyrefresh.jax handle", "ratio"],
            [["first call (trace + XLA compile), median of 5", fmt(p), fmt(o), f"{o / p:.2f}x"]],
        )
        r.goal("3 (info) one build vs a bare first call", "(no goal)", f"{o / p:.2f}x", None)


class _Forward:
    """The least any handle written in Python adds: a ``__call__`` that only forwards."""

    __slots__ = ("fn",)

    def __init__(self, fn: Any) -> None:
        self.fn = fn

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args)


def main() -> int:
    parser = arguments(__doc__ or "")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of each refresh timing")
    opts = parse(parser, "bench_jax")
    rounds = 1 if opts.quick else opts.rounds
    cmd = "PYTHONPATH=. .venv/bin/python benchmarks/bench_jax.py --results"
    if opts.rounds != parser.get_default("rounds"):
        cmd += f" --rounds {opts.rounds}"
    report = Report("jax", "JAX backend: ipyrefresh.jax versus jax.clear_caches()", cmd)
    report.say(
        f"jax {jax.__version__}, XLA_FLAGS={os.environ.get('XLA_FLAGS', '')!r}, "
        f"JAX_PLATFORMS={os.environ.get('JAX_PLATFORMS')}"
    )
    with using(Engine()):
        shell = InteractiveShell.instance()
        shell.run_line_magic("load_ext", "ipyrefresh")
        bench = Bench(shell, report)
        t0 = now()
        for cell in NOTEBOOK:
            run(shell, cell)
        for which in ("handles", "rj_steps"):
            bench.call_all(which)  # builds (trace and compile)
            bench.check(which)
            bench.call_all(which)  # the first reuse: each guard is generated, the steady state
            bench.check(which)
        report.say(
            f"setup: {N} derivatives and {STEPS} training steps compiled in "
            f"{fmt(now() - t0)} (the plain ones compile in their first round)"
        )
        rounds_note = "(ipyrefresh's rounds first, then the cached calls, then plain JAX's)"
        print(f"\nmeasuring {rounds_note}", flush=True)
        bench.ours(rounds)
        bench.call_section(10 if opts.quick else 60)
        bench.build_section()
        bench.theirs(rounds)
        bench.clear_caches_section()
        shell.run_line_magic("unload_ext", "ipyrefresh")
    return report.finish(opts.results)


if __name__ == "__main__":
    sys.exit(main())
