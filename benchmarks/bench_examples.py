"""autograd's own examples, run with plain autograd and with ipyrefresh: same numbers? faster?

    .venv/bin/python benchmarks/bench_examples.py [--quick] [--only NAME[,NAME...]]
                      [--repeat N] [--plots] [--no-probe] [--out FILE | --no-out]

What it does (issue 16):

1. Fetches autograd's source distribution for the installed version with
   ``pip download --no-deps --no-binary :all: autograd==<version>`` into
   ``benchmarks/.cache/`` (gitignored) and unpacks its ``examples/``.
2. Runs every example that needs no download of data three times, each time in a fresh
   subprocess with the same seeds and environment:

   * **plain**: the example's source, split into cells (see below), executed in a plain
     namespace with plain autograd;
   * **ipyrefresh**: the same cells run in a real IPython ``InteractiveShell`` after
     ``%load_ext ipyrefresh``, with ``from autograd import grad`` (and every other name
     ``ipyrefresh.__all__`` shares with autograd: ``value_and_grad``,
     ``elementwise_grad``, ``jacobian``, ``hessian``) rewritten to
     ``from ipyrefresh import ...``, in the example and in the sibling example modules it
     imports (``black_box_svi``, ``rnn``, ``gaussian_process``, ``data``). Names
     ipyrefresh lacks (``hessian_vector_product``) stay autograd's.
   * **shell**: plain autograd in the same kind of IPython shell, without ipyrefresh.
     Running cells in IPython costs something of its own (compiling, hooks, the
     display machinery: several times a program of a few milliseconds); *against the
     shell* (ipyrefresh / shell) leaves that out and shows what loading ipyrefresh
     costs. The issue's goals are judged against plain, as it asks.

   ``autograd.misc.optimizers`` (``adam``, ``sgd``, ``rmsprop``) need no routing: they
   never call ``autograd.grad`` themselves, they call the gradient function they are
   given (``unflatten_optimizer`` wraps it as ``lambda x, i: flatten(grad(unflatten(x),
   i))[0]``), and that function is the ipyrefresh handle the example made. Likewise
   ``scipy.optimize.minimize`` calls the ``value_and_grad`` handle it is given.
3. Compares everything the example printed (every line, hence every printed number) and
   its final values (every numeric or string value left in its namespace, arrays
   bitwise) exactly, and prints per example: identical or not (with the first differing
   line), the time of each run, the ratio, the time spent inside derivative calls, and
   ipyrefresh's fallbacks; then the issue's goals, PASS or FAIL.

Cells: the example's top-level statements, with the body of ``if __name__ ==
"__main__":`` unwrapped into top-level statements as a notebook would have them;
consecutive imports share a cell. Both runs execute exactly these cells, with
``__name__ == "__main__"`` and ``__file__`` pointing at the untouched example (rnn,
lstm and hmm_em read their own source files as training data).

Timed region: from the first cell to the end of the last, in both runs, in CPU time of
the process (``time.process_time``: the machine is shared, and other processes disturb
it far less than wall-clock time, which is reported too; BLAS runs one thread on both
sides). Before it, both runs import every module the example imports (and ipyrefresh
what it imports lazily), compute one throwaway gradient with the transform they use (the
first use in a process: lazy imports, regular expressions, IPython's first cell; the
ipyrefresh run then forgets its entry), and seed numpy's and Python's global generators
with 0; the ipyrefresh run creates its shell and loads the extension. Examples whose
plain run takes under ``REPEAT_UNTIL`` seconds run again (``--repeat``, at most 3 runs
a side, alternating) and keep each side's fastest run; every repeat must print the same.

Plots: matplotlib's pyplot functions (except ``imread``) and ``matplotlib.image.imsave``
are replaced by no-ops in both runs (``MPLBACKEND=Agg`` as well), so that drawing neither
costs time nor sleeps (``plt.pause``); the callbacks' numeric code still runs. ``--plots``
draws for real with Agg instead (``plt.pause`` then draws without sleeping). Neither way
do plots feed back into the numbers.

Edits: a few iteration counts are capped so that the default run fits in about
15 minutes on 2 shared cores (``--quick``: a few minutes); each cap is a textual edit
applied identically to both runs and listed in the report, as are the two lines that
call ``os.system`` (ImageMagick and ``rm``), which are not run.

Derivative time (``--no-probe`` turns it off): both runs count the time spent inside
outermost derivative calls, by wrapping what ``autograd.grad`` & co. return (plain) and
``Derivative.__call__`` (ipyrefresh), a wrapper of the same cost on both sides.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import hashlib
import io
import json
import math
import os
import platform
import re
import subprocess
import sys
import tarfile
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
CACHE = HERE / ".cache"
RESULTS = HERE / "results" / "examples.md"

#: Derivative transforms of autograd that ipyrefresh also provides (checked at run time
#: against ``ipyrefresh.__all__``).
TRANSFORMS = ("grad", "value_and_grad", "elementwise_grad", "jacobian", "hessian")

Edits = tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Example:
    name: str
    path: str  # relative to examples/
    driver: str  # "adam/sgd", "scipy.optimize", "loop", "calls"
    caps: Edits = ()  # textual edits applied to both runs
    quick: Edits = ()  # further edits with --quick (applied after ``caps``)
    skip: str = ""

    @property
    def optimizer_driven(self) -> bool:
        return self.driver in ("adam/sgd", "scipy.optimize")


_NO_SYSTEM: Edits = (("os.system(", "None and os.system("),)  # never run ImageMagick / rm

# hmm_em iterates EM to convergence (119 steps, 2.3 s each): at most N steps instead.
_EM_LOOP = "        while different(x0, x1):\n"
_EM_LOOP_CAPPED = (
    "        for _ in range({}):  # capped\n"
    "            if not different(x0, x1):\n"
    "                break\n"
)

EXAMPLES: tuple[Example, ...] = (
    # -- driven by autograd.misc.optimizers (grad(x, i) with the iteration number) --------
    Example(
        "neural_net_regression",
        "neural_net_regression.py",
        "adam/sgd",
        quick=(("num_iters=1000", "num_iters=200"),),
    ),
    Example(
        "black_box_svi",
        "black_box_svi.py",
        "adam/sgd",
        caps=(("num_iters=2000", "num_iters=1000"),),
        quick=(("num_iters=1000", "num_iters=200"),),
    ),
    Example(
        "bayesian_neural_net",
        "bayesian_neural_net.py",
        "adam/sgd",
        quick=(("num_iters=1000", "num_iters=200"),),
    ),
    Example(
        "rnn",
        "rnn.py",
        "adam/sgd",
        caps=(("num_iters=1000", "num_iters=200"),),
        quick=(("num_iters=200", "num_iters=40"),),
    ),
    Example(
        "lstm",
        "lstm.py",
        "adam/sgd",
        caps=(("num_iters=1000", "num_iters=100"),),
        quick=(("num_iters=100", "num_iters=20"),),
    ),
    Example(
        "ode_net",
        "ode_net.py",
        "adam/sgd",
        caps=(("num_iters=1000", "num_iters=20"),),
        quick=(("num_iters=20", "num_iters=5"),),
    ),
    Example(
        "mixture_variational_inference",
        "mixture_variational_inference.py",
        "adam/sgd",
        caps=(("num_iters=2000", "num_iters=150"),),
        quick=(("num_iters=150", "num_iters=40"),),
    ),
    Example(
        "natural_gradient_black_box_svi",
        "natural_gradient_black_box_svi.py",
        "adam/sgd",
        caps=(("num_iters = 200", "num_iters = 100"),),
        quick=(("num_iters = 100", "num_iters = 25"),),
    ),
    # -- driven by scipy.optimize ----------------------------------------------------------
    Example("gaussian_process", "gaussian_process.py", "scipy.optimize"),
    Example(
        "gplvm",
        "gplvm.py",
        "scipy.optimize",
        caps=(('method="CG", callback', 'method="CG", options={"maxiter": 200}, callback'),),
        quick=(('{"maxiter": 200}', '{"maxiter": 40}'),),
    ),
    Example(
        "ica",
        "ica.py",
        "scipy.optimize",
        caps=(('method="CG", callback', 'method="CG", options={"maxiter": 200}, callback'),),
        quick=(('{"maxiter": 200}', '{"maxiter": 40}'),),
    ),
    Example(
        "deep_gaussian_process",
        "deep_gaussian_process.py",
        "scipy.optimize",
        caps=(('method="CG", callback', 'method="CG", options={"maxiter": 100}, callback'),),
        quick=(('{"maxiter": 100}', '{"maxiter": 20}'),),
    ),
    Example(
        "gmm",
        "gmm.py",
        "scipy.optimize",
        caps=(('method="Newton-CG",', 'method="Newton-CG", options={"maxiter": 10},'),),
        quick=(('{"maxiter": 10}', '{"maxiter": 3}'),),
    ),
    Example("rosenbrock", "rosenbrock.py", "scipy.optimize"),
    Example(
        "bayesian_optimization",
        "bayesian_optimization.py",
        "scipy.optimize",
        caps=(("num_iters=20", "num_iters=8"),),
        quick=(("num_iters=8", "num_iters=3"),),
    ),
    Example("negative_binomial_maxlike", "negative_binomial_maxlike.py", "scipy.optimize"),
    Example(
        "wing",
        "fluidsim/wing.py",
        "scipy.optimize",
        caps=(('"maxiter": 50', '"maxiter": 1'), *_NO_SYSTEM),
    ),
    Example(
        "fluidsim",
        "fluidsim/fluidsim.py",
        "scipy.optimize",
        caps=(('"maxiter": 25', '"maxiter": 2'), *_NO_SYSTEM),
        quick=(('"maxiter": 2', '"maxiter": 1'),),
    ),
    # -- own loops and single calls -------------------------------------------------------
    Example(
        "hmm_em",
        "hmm_em.py",
        "loop",
        caps=((_EM_LOOP, _EM_LOOP_CAPPED.format(10)),),
        quick=((_EM_LOOP_CAPPED.format(10), _EM_LOOP_CAPPED.format(3)),),
    ),
    Example("logistic_regression", "logistic_regression.py", "loop"),
    Example("rkhs", "rkhs.py", "loop"),
    Example("fixed_points", "fixed_points.py", "calls"),
    Example("define_gradient", "define_gradient.py", "calls"),
    Example("sinusoid", "sinusoid.py", "calls"),
    Example("tanh", "tanh.py", "calls"),
    Example("print_trace", "print_trace.py", "calls"),
    # -- not run ------------------------------------------------------------------------------
    Example("neural_net", "neural_net.py", "adam/sgd", skip="downloads MNIST (data.load_mnist)"),
    Example("convnet", "convnet.py", "loop", skip="downloads MNIST (data_mnist.mnist)"),
    Example(
        "variational_autoencoder",
        "variational_autoencoder.py",
        "adam/sgd",
        skip="downloads MNIST (data.load_mnist)",
    ),
    Example(
        "generative_adversarial_net",
        "generative_adversarial_net.py",
        "loop",
        skip="downloads MNIST (data.load_mnist)",
    ),
    Example(
        "dot_graph",
        "dot_graph.py",
        "calls",
        skip="no derivative (autograd.tracer only); prints object ids, which differ per run",
    ),
    Example("data", "data.py", "calls", skip="helpers for other examples, not an example"),
    Example("data_mnist", "data_mnist.py", "calls", skip="the MNIST downloader"),
)
BY_NAME = {e.name: e for e in EXAMPLES}


# ---------------------------------------------------------------------------------------------
# Fetching the examples


def fetch_examples(version: str) -> Path:
    """``examples/`` of autograd's source distribution ``version`` (downloaded once)."""
    unpacked = CACHE / f"autograd-{version}"
    if not (unpacked / "examples").is_dir():
        CACHE.mkdir(parents=True, exist_ok=True)
        sdist = CACHE / f"autograd-{version}.tar.gz"
        if not sdist.exists():
            cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:"]
            cmd += [f"autograd=={version}", "-d", str(CACHE), "-q"]
            subprocess.run(cmd, check=True)
        with tarfile.open(sdist) as tar:
            tar.extractall(CACHE, filter="data")
    return unpacked / "examples"


def edited(source: str, edits: Edits, what: str) -> str:
    for old, new in edits:
        if old not in source:
            raise SystemExit(f"{what}: the edit {old!r} -> {new!r} no longer applies")
        source = source.replace(old, new)
    return source


def example_edits(example: Example, quick: bool) -> Edits:
    return example.caps + (example.quick if quick else ())


# ---------------------------------------------------------------------------------------------
# Sources: imports pointed at ipyrefresh, cells


def redirected_names() -> list[str]:
    import autograd

    import ipyrefresh

    names = [n for n in TRANSFORMS if n in ipyrefresh.__all__ and hasattr(autograd, n)]
    assert names, "ipyrefresh exports none of autograd's transforms"
    return names


def point_at_ipyrefresh(source: str, names: list[str]) -> str:
    """``from autograd import grad, hessian_vector_product`` becomes
    ``from autograd import hessian_vector_product; from ipyrefresh import grad`` (on the
    same line, so line numbers stay)."""
    tree = ast.parse(source)
    lines = source.splitlines(keepends=True)
    for node in sorted(ast.walk(tree), key=lambda n: -getattr(n, "lineno", 0)):
        if not (isinstance(node, ast.ImportFrom) and node.module == "autograd" and not node.level):
            continue
        moved = [a for a in node.names if a.name in names]
        if not moved:
            continue
        kept = [a for a in node.names if a.name not in names]

        def spell(aliases: list[ast.alias]) -> str:
            return ", ".join(a.name + (f" as {a.asname}" if a.asname else "") for a in aliases)

        parts = [f"from ipyrefresh import {spell(moved)}"]
        if kept:
            parts.insert(0, f"from autograd import {spell(kept)}")
        first, last = node.lineno - 1, (node.end_lineno or node.lineno) - 1
        indent = lines[first][: node.col_offset]
        lines[first : last + 1] = [indent + "; ".join(parts) + "\n"]
    return "".join(lines)


def _is_main_guard(node: ast.stmt) -> bool:
    if not isinstance(node, ast.If) or node.orelse:
        return False
    test = node.test
    return (
        isinstance(test, ast.Compare)
        and isinstance(test.left, ast.Name)
        and test.left.id == "__name__"
        and len(test.comparators) == 1
        and isinstance(test.comparators[0], ast.Constant)
        and test.comparators[0].value == "__main__"
    )


def cells_of(source: str) -> list[str]:
    """Top-level statements as cells (``if __name__ == "__main__":`` unwrapped);
    consecutive imports share a cell."""
    lines = source.splitlines()
    stmts: list[ast.stmt] = []
    for node in ast.parse(source).body:
        stmts.extend(node.body if _is_main_guard(node) else [node])
    cells: list[tuple[bool, list[str]]] = []
    for node in stmts:
        decorators = getattr(node, "decorator_list", [])
        start = min([node.lineno] + [d.lineno for d in decorators]) - 1
        indent = node.col_offset
        text = [
            line[indent:] if line[:indent].strip() == "" else line
            for line in lines[start : node.end_lineno]
        ]
        is_import = isinstance(node, ast.Import | ast.ImportFrom)
        if cells and is_import and cells[-1][0]:
            cells[-1][1].extend(text)
        else:
            cells.append((is_import, text))
    return ["\n".join(text) + "\n" for _, text in cells]


def imports_of(cells: list[str]) -> str:
    """Every import statement of the cells (also inside functions), to run before timing."""
    out = []
    for cell in cells:
        for node in ast.walk(ast.parse(cell)):
            if isinstance(node, ast.Import | ast.ImportFrom):
                out.append(ast.unparse(node))
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------------------------------------
# The worker: one run of one example, in its own process


class _Null:
    """Stands for every matplotlib object when plots are off: any attribute, any call."""

    def __call__(self, *args: Any, **kwargs: Any) -> _Null:
        return self

    def __getattr__(self, name: str) -> _Null:
        if name.startswith("__"):
            raise AttributeError(name)
        return self

    def __iter__(self) -> Iterator[_Null]:
        return iter((self, self))


def _plots(real: bool) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.image
    import matplotlib.pyplot as plt

    if real:

        def pause(interval: float) -> None:  # draw, but do not sleep
            plt.gcf().canvas.draw()

        plt.pause = pause
        return
    null = _Null()
    for name in dir(plt):
        value = getattr(plt, name)
        if name.startswith("_") or name == "imread" or isinstance(value, type):
            continue
        if callable(value):
            setattr(plt, name, null)
    matplotlib.image.imsave = null


class Probe:
    """Time spent inside outermost derivative calls (nested ones count in their caller)."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.calls = 0
        self.depth = 0
        self.times: list[float] = []  # each outermost call's CPU seconds

    def wrap(self, call: Callable[..., Any]) -> Callable[..., Any]:
        probe = self

        def timed(*args: Any, **kwargs: Any) -> Any:
            if probe.depth:
                return call(*args, **kwargs)
            probe.depth += 1
            t0 = time.process_time()
            try:
                return call(*args, **kwargs)
            finally:
                spent = time.process_time() - t0
                probe.seconds += spent
                probe.calls += 1
                probe.times.append(spent)
                probe.depth -= 1

        return timed


def _install_probe(mode: str, names: list[str]) -> Probe:
    probe = Probe()
    if mode != "ipyrefresh":
        import autograd

        for name in names:
            make = getattr(autograd, name)

            def transform(fun: Any, argnum: Any = 0, _make: Any = make) -> Any:
                return probe.wrap(_make(fun, argnum))

            transform.__name__ = name
            setattr(autograd, name, transform)
    else:
        from ipyrefresh._src.handles import Derivative

        Derivative.__call__ = probe.wrap(Derivative.__call__)  # type: ignore[method-assign]
    return probe


def _leaves(name: str, value: Any, out: dict[str, Any], depth: int = 0) -> None:
    import numpy as np

    if isinstance(value, bool | int | float | complex | str | np.generic):
        out[name] = value
    elif isinstance(value, np.ndarray):
        if value.dtype != object:
            out[name] = value
        elif depth < 4:
            for i, v in enumerate(value.ravel().tolist()):
                _leaves(f"{name}.flat[{i}]", v, out, depth + 1)
    elif isinstance(value, list | tuple) and depth < 4:
        for i, v in enumerate(value):
            _leaves(f"{name}[{i}]", v, out, depth + 1)
    elif isinstance(value, dict) and depth < 4:
        for k in sorted(value, key=repr):
            _leaves(f"{name}[{k!r}]", value[k], out, depth + 1)


def final_values(ns: dict[str, Any], hidden: set[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in sorted(ns):
        if name.startswith("_") or name in hidden:
            continue
        _leaves(name, ns[name], out)
    return out


def describe_value(value: Any) -> str:
    import numpy as np

    if isinstance(value, np.ndarray):
        digest = hashlib.sha256(np.ascontiguousarray(value).tobytes()).hexdigest()[:16]
        return f"array{value.shape} {value.dtype} sha256:{digest}"
    if isinstance(value, np.generic):
        return f"{type(value).__name__}({value.item()!r})"
    if isinstance(value, str) and len(value) > 200:
        return f"str[{len(value)}] sha256:{hashlib.sha256(value.encode()).hexdigest()[:16]}"
    return repr(value)


def fallbacks(status: dict[str, Any]) -> list[str]:
    """Entries that run plain autograd somewhere, or carry a note."""
    out = []
    for e in status["entries"]:
        plain = [r for r in e["runs"] if "plain autograd" in r]
        if plain or e["fallback"] or e["notes"]:
            what = f"{e['name']} {e['signature']}: {len(e['runs'])} variants"
            if plain:
                what += f" ({len(plain)} plain autograd)"
            if e["fallback"]:
                what += f"; {e['fallback']}"
            if e["notes"]:
                what += "; notes: " + "; ".join(e["notes"])
            out.append(what)
    return out


WARM_UP = """
import autograd.numpy as _anp
from {module} import grad as _grad
def _warm_up(x):
    return _anp.sum(_anp.sin(x) * x)
for _k in range(3):
    _grad(_warm_up)(_anp.ones(3))
del _anp, _grad, _warm_up, _k
"""


def _import_lazy_modules(package: Any) -> None:
    """Import what ipyrefresh imports at its first build (the tape compiler, the guard
    code generator, ``executing``), so that the timed region holds no imports; not its
    JAX backend, which the examples never use."""
    import importlib
    import pkgutil

    for mod in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
        if "jax" not in mod.name:
            with contextlib.suppress(ImportError):
                importlib.import_module(mod.name)
    with contextlib.suppress(ImportError):
        importlib.import_module("executing")


def worker(opts: argparse.Namespace) -> None:
    import random

    import numpy as np

    example = BY_NAME[opts.example]
    pristine = Path(opts.examples)
    path = pristine / example.path
    source = edited(path.read_text(), example_edits(example, opts.quick), example.name)
    names = redirected_names()
    result: dict[str, Any] = {"mode": opts.mode, "example": example.name}
    with tempfile.TemporaryDirectory(prefix=f"bench-{example.name}-") as tmp:
        modules = pristine / Path(example.path).parent
        if opts.mode == "ipyrefresh":
            source = point_at_ipyrefresh(source, names)
            modules = Path(tmp) / "modules"
            modules.mkdir()
            for sibling in (pristine / Path(example.path).parent).glob("*.py"):
                text = point_at_ipyrefresh(sibling.read_text(), names)
                (modules / sibling.name).write_text(text)
        work = Path(tmp) / "cwd"
        work.mkdir()
        home = os.getcwd()
        os.chdir(work)
        sys.path.insert(0, str(modules))
        sys.argv = [str(path)]
        cells = cells_of(source)
        _plots(opts.plots)
        probe = _install_probe(opts.mode, names) if opts.probe else None
        scratch: dict[str, Any] = {"__name__": "__bench_imports__", "__file__": str(path)}
        exec(compile(imports_of(cells), str(path), "exec"), scratch)
        run_cell: Callable[[str, int], None]
        if opts.mode == "plain":
            ns: dict[str, Any] = {"__name__": "__main__", "__file__": str(path)}
            hidden: set[str] = set()

            def run_cell(cell: str, i: int) -> None:
                exec(compile(cell, f"<cell {i}>", "exec"), ns if i >= 0 else scratch)

        else:
            from IPython.core.interactiveshell import InteractiveShell
            from traitlets.config import Config

            config = Config()
            config.HistoryManager.enabled = False
            shell = InteractiveShell.instance(config=config)
            shell.ast_node_interactivity = "none"  # as in the plain run: nothing displayed
            if opts.mode == "ipyrefresh":
                import ipyrefresh

                result["ipyrefresh"] = ipyrefresh.__file__
                _import_lazy_modules(ipyrefresh)
                shell.run_line_magic("load_ext", "ipyrefresh")
            ns = shell.user_ns
            ns["__file__"] = str(path)
            hidden = set(shell.user_ns_hidden) | {"In", "Out"}

            def run_cell(cell: str, i: int) -> None:
                res = shell.run_cell(cell, store_history=True)
                error = res.error_before_exec or res.error_in_exec
                if error is not None:
                    raise error

        # First use in the process (lazy imports, regular expressions, IPython's first
        # cell), in both runs alike: one throwaway gradient, built, replayed, hit.
        module = "ipyrefresh" if opts.mode == "ipyrefresh" else "autograd"
        with contextlib.redirect_stdout(io.StringIO()):
            run_cell(WARM_UP.format(module=module), -1)
        if probe is not None:
            probe.seconds, probe.calls, probe.times = 0.0, 0, []
        baseline: dict[str, int] = {}
        if opts.mode == "ipyrefresh":
            from ipyrefresh._src.engine import current

            current().clear()  # forget the warm-up's entry
            baseline = dict(current().stats)
        np.random.seed(0)
        random.seed(0)
        out = io.StringIO()
        w0, t0 = time.perf_counter(), time.process_time()
        try:
            with contextlib.redirect_stdout(out):
                for i, cell in enumerate(cells):
                    run_cell(cell, i)
        except BaseException as exc:
            result["error"] = "".join(traceback.format_exception(exc))[-3000:]
        result["seconds"] = time.process_time() - t0
        result["wall_seconds"] = time.perf_counter() - w0
        result["stdout"] = out.getvalue()
        result["cells"] = len(cells)
        if probe is not None:
            result["deriv_seconds"], result["deriv_calls"] = probe.seconds, probe.calls
            if probe.times:
                result["deriv_first"] = probe.times[0]
                later = sorted(probe.times[1:])
                result["deriv_median_later"] = later[len(later) // 2] if later else None
        finals = final_values(ns, hidden)
        result["finals"] = [f"{k} = {describe_value(v)}" for k, v in finals.items()]
        arrays = {k: v for k, v in finals.items() if isinstance(v, np.ndarray) and v.size}
        result["arrays"] = list(arrays)
        np.savez(opts.out + ".npz", *arrays.values())
        if opts.mode == "ipyrefresh":
            status = current().status(check=False)
            result["status"] = {
                k: status[k] - baseline.get(k, 0)
                for k in ("entries_total", "builds", "rebuilds", "variants")
            }
            result["status"]["hits"] = sum(e["hits"] for e in status["entries"])
            result["fallbacks"] = fallbacks(status)
        os.chdir(home)  # before the directory goes (IPython reads the cwd at exit)
    with open(opts.out, "w") as fh:
        json.dump(result, fh)


# ---------------------------------------------------------------------------------------------
# The driver


@dataclass
class Outcome:
    example: Example
    plain: dict[str, Any] = field(default_factory=dict)
    ipy: dict[str, Any] = field(default_factory=dict)
    shell: dict[str, Any] = field(default_factory=dict)  # plain autograd in an IPython shell
    identical: bool = False
    first_diff: str = ""
    numbers: str = ""  # "12 of 1,200 printed numbers differ"
    finals: str = ""  # "3 of 40 final values differ (max |diff| 1e-12)"

    @property
    def ok(self) -> bool:
        return "error" not in self.plain and "error" not in self.ipy

    @property
    def ratio(self) -> float:
        """ipyrefresh / plain, CPU time of the timed region."""
        return self.ipy["seconds"] / max(self.plain["seconds"], 1e-9)

    @property
    def wall_ratio(self) -> float:
        return self.ipy["wall_seconds"] / max(self.plain["wall_seconds"], 1e-9)

    @property
    def shell_ratio(self) -> float | None:
        """ipyrefresh / plain autograd in the same kind of IPython shell: what loading
        ipyrefresh costs, apart from what running the cells in IPython costs."""
        if "seconds" not in self.shell or "error" in self.shell:
            return None
        return self.ipy["seconds"] / max(self.shell["seconds"], 1e-9)


#: Short examples are run again (``--repeat``) until plain autograd has run this long.
REPEAT_UNTIL = 6.0

_NUMBER = re.compile(r"[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?|nan|inf")


def run_one(example: Example, mode: str, opts: argparse.Namespace, timeout: float) -> dict:
    with tempfile.TemporaryDirectory(prefix="bench-examples-") as tmp:
        out = os.path.join(tmp, "result.json")
        cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", mode]
        cmd += ["--example", example.name, "--examples", str(opts.examples), "--out", out]
        cmd += ["--quick"] * opts.quick + ["--plots"] * opts.plots + ["--no-probe"] * opts.no_probe
        env = dict(os.environ)
        env.update(
            PYTHONPATH=os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep),
            PYTHONHASHSEED="0",
            MPLBACKEND="Agg",
            IPYTHONDIR=os.path.join(tmp, "ipython"),
        )
        for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            env.setdefault(var, "1")
        t0 = time.perf_counter()
        try:
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return {"error": f"timed out after {timeout:.0f} s", "seconds": timeout}
        wall = time.perf_counter() - t0
        if not os.path.exists(out):
            return {"error": f"worker failed:\n{proc.stderr[-3000:]}", "seconds": wall}
        with open(out) as fh:
            result = json.load(fh)
        import numpy as np

        with np.load(out + ".npz") as npz:
            result["values"] = {k: npz[f"arr_{i}"] for i, k in enumerate(result["arrays"])}
        result["stderr"] = proc.stderr
        result["wall"] = wall
        return result


def compare(o: Outcome) -> None:
    a, b = o.plain["stdout"].splitlines(), o.ipy["stdout"].splitlines()
    nums_a = [_NUMBER.findall(line) for line in a]
    nums_b = [_NUMBER.findall(line) for line in b]
    total = sum(map(len, nums_a))
    differ = sum(
        sum(x != y for x, y in zip(la, lb, strict=False)) + abs(len(la) - len(lb))
        for la, lb in zip(nums_a, nums_b, strict=False)
    ) + sum(map(len, nums_a[len(nums_b) :]))
    o.numbers = f"{differ:,} of {total:,} printed numbers differ"
    if len(a) != len(b):
        o.numbers += f"; {len(a):,} lines printed by plain, {len(b):,} by ipyrefresh"
    first = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), None)
    if first is None and len(a) != len(b):
        first = min(len(a), len(b))
    if first is not None:
        x = a[first] if first < len(a) else "<end>"
        y = b[first] if first < len(b) else "<end>"
        o.first_diff = f"line {first + 1}: plain {x[:100]!r} / ipyrefresh {y[:100]!r}"
    fa, fb = o.plain["finals"], o.ipy["finals"]
    diff_finals = sorted(set(fa) ^ set(fb))
    names = sorted({line.split(" = ")[0] for line in diff_finals})
    worst = 0.0
    va, vb = o.plain["values"], o.ipy["values"]
    for name in names:
        if name in va and name in vb and va[name].shape == vb[name].shape:
            with contextlib.suppress(TypeError, ValueError):
                d = abs(va[name].astype(float) - vb[name].astype(float))
                worst = max(worst, float(d.max()))
    o.finals = f"{len(names)} of {len(fa)} final values differ"
    if worst:
        o.finals += f" (max |diff| {worst:.3g})"
    if names and not o.first_diff:
        la = next((x for x in fa if x.split(" = ")[0] == names[0]), "<missing>")
        lb = next((x for x in fb if x.split(" = ")[0] == names[0]), "<missing>")
        o.first_diff = f"final {names[0]}: plain {la[:80]!r} / ipyrefresh {lb[:80]!r}"
    o.identical = not o.first_diff and not names


def _one_line(text: str) -> str:
    return " / ".join(line.strip() for line in text.strip().splitlines())


def _ms(seconds: float | None) -> str:
    return "?" if seconds is None else f"{seconds * 1e3:,.1f} ms"


def _x(ratio: float | None) -> str:
    return "?" if ratio is None else f"{ratio:.2f}x"


def _bold_x(ratio: float | None) -> str:
    return f"**{_x(ratio)}**" if ratio is not None and ratio > 1.05 else _x(ratio)


def _seconds(run: dict[str, Any]) -> str:
    if "seconds" not in run or "error" in run:
        return "?"
    t = run["seconds"]
    return f"{t:.2f} s" if t >= 0.1 else f"{t * 1e3:.1f} ms"


def geomean(xs: list[float]) -> float:
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else float("nan")


def report(outcomes: list[Outcome], skipped: list[Example], opts: argparse.Namespace) -> str:
    rows = [
        "| example | driver | identical | plain | ipyrefresh | ratio | wall ratio | "
        "shell | against the shell | "
        "in derivatives: plain / ipyrefresh (speed-up), calls; share of plain | "
        "ipyrefresh: entries, builds, fallbacks |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---|---|",
    ]
    details: list[str] = []
    for o in outcomes:
        e = o.example
        if not o.ok:
            err = (o.plain.get("error") or o.ipy.get("error") or "").strip().splitlines()
            side = "plain" if "error" in o.plain else "ipyrefresh"
            rows.append(f"| {e.name} | {e.driver} | error ({side}) | | | | | | | | |")
            details.append(f"* **{e.name}**: {side} run failed: `{err[-1] if err else ''}`")
            continue
        p, q = o.plain, o.ipy
        deriv = ""
        if "deriv_seconds" in p and "deriv_seconds" in q:
            share = p["deriv_seconds"] / max(p["seconds"], 1e-9)
            deriv = (
                f"{p['deriv_seconds']:.2f} s / {q['deriv_seconds']:.2f} s "
                f"({p['deriv_seconds'] / max(q['deriv_seconds'], 1e-9):.2f}x), "
                f"{q['deriv_calls']:,}; {share:.0%} of plain"
            )
        st = q.get("status", {})
        fb = q.get("fallbacks", [])
        variants = f" (+{st['variants']} variants)" if st.get("variants") else ""
        rows.append(
            f"| {e.name} | {e.driver} | {'yes' if o.identical else '**no**'} | "
            f"{_seconds(p)} | {_seconds(q)} | "
            f"{'**' if o.ratio > 1.05 else ''}{o.ratio:.2f}x{'**' if o.ratio > 1.05 else ''} | "
            f"{o.wall_ratio:.2f}x | {_seconds(o.shell)} | {_bold_x(o.shell_ratio)} | "
            f"{deriv} | {st.get('entries_total', '?')}, {st.get('builds', '?')}{variants}, "
            f"{len(fb)} |"
        )
        lines = []
        for side, run in (("plain", p), ("shell", o.shell), ("ipyrefresh", q)):
            if run.get("nondeterministic"):
                lines.append(f"  the {side} runs differed from each other (not deterministic)")
        if not o.identical:
            lines.append(f"  differs: {o.first_diff}; {o.numbers}; {o.finals}")
        if p.get("deriv_calls") and q.get("deriv_calls"):
            lines.append(
                f"  derivative calls: the first {_ms(p.get('deriv_first'))} plain, "
                f"{_ms(q.get('deriv_first'))} ipyrefresh; later ones (median) "
                f"{_ms(p.get('deriv_median_later'))} plain, "
                f"{_ms(q.get('deriv_median_later'))} ipyrefresh"
            )
        for f in fb[:6]:
            lines.append(f"  fallback: {f}")
        if len(fb) > 6:
            lines.append(f"  ... and {len(fb) - 6} more fallbacks")
        warned = sorted(
            {
                line.strip()
                for line in q.get("stderr", "").splitlines()
                if "ipyrefresh" in line and "Warning" in line
            }
        )
        lines += [f"  stderr: {w[:200]}" for w in warned[:3]]
        if lines:
            details.append(f"* **{e.name}**\n" + "\n".join(lines))
    ran = [o for o in outcomes if o.ok]
    goals = []
    identical = [o for o in ran if o.identical]
    goals.append(
        (
            "every example identical to plain autograd",
            len(identical) == len(outcomes) and bool(outcomes),
            f"{len(identical)} of {len(outcomes)}",
        )
    )
    slow = [o for o in ran if o.ratio > 1.05]
    goals.append(
        (
            "no example slower than 1.05x plain autograd",
            not slow and len(ran) == len(outcomes) and bool(outcomes),
            ", ".join(f"{o.example.name} {o.ratio:.2f}x" for o in slow) or "none slower",
        )
    )
    shell_ratios = [(o, o.shell_ratio) for o in ran]
    slow_in_shell = [(o, r) for o, r in shell_ratios if r is not None and r > 1.05]
    unknown = [o.example.name for o, r in shell_ratios if r is None]
    goals.append(
        (
            "(not the issue's goal: what loading ipyrefresh costs) no example slower than "
            "1.05x plain autograd in the same kind of IPython shell",
            not slow_in_shell and not unknown and bool(ran),
            ", ".join(f"{o.example.name} {r:.2f}x" for o, r in slow_in_shell)
            + (f"; shell run failed: {', '.join(unknown)}" if unknown else "")
            or "none slower",
        )
    )
    opt = [o for o in ran if o.example.optimizer_driven]
    g = geomean([1 / o.ratio for o in opt])
    how = f"{g:.2f}x over {len(opt)}: " + ", ".join(o.example.name for o in opt)
    probed = [o for o in opt if o.plain.get("deriv_seconds") and o.ipy.get("deriv_seconds")]
    if probed and len(probed) == len(opt):
        inside = geomean([o.plain["deriv_seconds"] / o.ipy["deriv_seconds"] for o in probed])
        bound = geomean(
            [
                o.plain["seconds"] / max(o.plain["seconds"] - o.plain["deriv_seconds"], 1e-9)
                for o in probed
            ]
        )
        how += (
            f". Inside derivative calls alone: {inside:.2f}x. The most any derivative could "
            f"give (plain's time outside derivative calls kept): {bound:.2f}x"
        )
    goals.append(
        (
            "geometric-mean speed-up >= 2x over the optimizer-driven examples",
            bool(opt) and g >= 2,
            how,
        )
    )
    wing = next((o for o in ran if o.example.name == "wing"), None)
    if wing is not None and wing.ipy.get("deriv_median_later") and wing.plain.get("deriv_calls"):
        p, q = wing.plain, wing.ipy
        w = (
            f"a call after the first (median): {p['deriv_median_later']:.2f} s plain, "
            f"{q['deriv_median_later']:.2f} s ipyrefresh; first call {p['deriv_first']:.2f} s / "
            f"{q['deriv_first']:.2f} s; all {q['deriv_calls']} calls {p['deriv_seconds']:.2f} s / "
            f"{q['deriv_seconds']:.2f} s; whole run {wing.ratio:.2f}x"
        )
        plain_runs = [f for f in q.get("fallbacks", []) if "plain autograd" in f]
        ok = q["deriv_median_later"] < p["deriv_median_later"] and not plain_runs
        if plain_runs:
            w = f"no replay: {plain_runs[0]}; " + w
    elif wing is not None:
        w, ok = f"whole run {wing.ratio:.2f}x", wing.ratio < 1
    else:
        w, ok = "not run", False
    goals.append(("the wing (fluidsim) replay faster than autograd", ok, w))
    lines = [*rows, ""]
    if details:
        lines += ["Per example:", "", *details, ""]
    lines += ["Goals (issue 16):", ""]
    lines += [f"* {'PASS' if ok else 'FAIL'}: {what} — {how}" for what, ok, how in goals]
    if skipped:
        lines += ["", "Not run:", ""]
        lines += [f"* {e.name}: {e.skip}" for e in skipped]
    edits = [(o.example, example_edits(o.example, opts.quick)) for o in outcomes]
    edits = [(e, ed) for e, ed in edits if ed]
    if edits:
        lines += ["", "Edits applied identically to both runs:", ""]
        for e, ed in edits:
            lines.append(
                f"* {e.name}: " + "; ".join(f"`{_one_line(a)}` -> `{_one_line(b)}`" for a, b in ed)
            )
    return "\n".join(lines) + "\n"


def _keep_fastest(first: dict[str, Any], again: dict[str, Any]) -> None:
    """Fold a repeated run into the first: the fastest times; a repeat that printed or
    ended differently is flagged (the example is not deterministic)."""
    if "error" in again:
        first.setdefault("error", "a repeat failed: " + again["error"])
        return
    if again["stdout"] != first["stdout"] or again["finals"] != first["finals"]:
        first["nondeterministic"] = True
    for key in ("seconds", "wall_seconds", "deriv_seconds"):
        if key in first and key in again:
            first[key] = min(first[key], again[key])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", help="comma-separated example names")
    parser.add_argument("--quick", action="store_true", help="fewer iterations (minutes)")
    parser.add_argument("--plots", action="store_true", help="draw the plots (Agg)")
    parser.add_argument("--no-probe", action="store_true", help="do not time derivative calls")
    parser.add_argument("--out", help=f"write the markdown report here (default: {RESULTS})")
    parser.add_argument("--no-out", action="store_true", help="write no report")
    parser.add_argument(
        "--repeat",
        type=int,
        default=3,
        help=f"run each side up to N times (until {REPEAT_UNTIL:.0f} s of plain), keep the fastest",
    )
    # One run in this process; "shell" is plain autograd in an IPython shell.
    parser.add_argument(
        "--worker", choices=["plain", "shell", "ipyrefresh"], help=argparse.SUPPRESS
    )
    parser.add_argument("--example", help=argparse.SUPPRESS)
    parser.add_argument("--examples", help=argparse.SUPPRESS)
    opts = parser.parse_args()
    if opts.worker:
        opts.mode, opts.probe = opts.worker, not opts.no_probe
        worker(opts)
        return
    version = metadata.version("autograd")
    opts.examples = fetch_examples(version)
    chosen = list(EXAMPLES)
    if opts.only:
        wanted = [n.strip() for n in opts.only.split(",") if n.strip()]
        unknown = [n for n in wanted if n not in BY_NAME]
        if unknown:
            raise SystemExit(f"unknown example(s) {unknown}; known: {sorted(BY_NAME)}")
        chosen = [BY_NAME[n] for n in wanted]
    on_disk = {p.stem for p in opts.examples.rglob("*.py")} - {"__init__"}
    unlisted = sorted(on_disk - {Path(e.path).stem for e in EXAMPLES})
    if unlisted:
        print(f"note: examples this benchmark does not know: {unlisted}")
    skipped = [e for e in chosen if e.skip]
    outcomes = []
    started = time.perf_counter()
    for e in chosen:
        if e.skip:
            continue
        o = Outcome(e)
        spent = 0.0
        for r in range(opts.repeat):
            plain = run_one(e, "plain", opts, timeout=1800)
            if "error" in plain:
                o.plain = plain
                break
            limit = 4 * plain["wall_seconds"] + 300
            shell = run_one(e, "shell", opts, timeout=limit)
            ipy = run_one(e, "ipyrefresh", opts, timeout=limit)
            if r == 0:
                o.plain, o.shell, o.ipy = plain, shell, ipy
            else:
                _keep_fastest(o.plain, plain)
                _keep_fastest(o.shell, shell)
                _keep_fastest(o.ipy, ipy)
            if "error" in ipy:
                break
            spent += plain["seconds"]
            if spent >= REPEAT_UNTIL:
                break
        if o.ok:
            compare(o)
            print(
                f"{e.name:32} identical={'yes' if o.identical else 'NO '}  "
                f"CPU plain {o.plain['seconds']:7.2f} s  ipyrefresh {o.ipy['seconds']:7.2f} s  "
                f"ratio {o.ratio:5.2f}x (wall {o.wall_ratio:5.2f}x; "
                f"against the shell {_x(o.shell_ratio)})"
                + ("" if o.identical else f"  {o.first_diff[:90]}"),
                flush=True,
            )
        else:
            print(f"{e.name:32} error", flush=True)
        outcomes.append(o)
    text = report(outcomes, skipped, opts)
    print()
    print(text)
    if opts.no_out:
        return
    import numpy as np

    import ipyrefresh

    argv = " ".join(sys.argv[1:])
    header = (
        "# autograd's examples, plain autograd against ipyrefresh\n\n"
        f"Command:\n\n    .venv/bin/python benchmarks/bench_examples.py {argv}\n\n"
        f"Machine: {platform.machine()}, {os.cpu_count()} cores (shared), Python "
        f"{sys.version.split()[0]}, numpy {np.__version__}, autograd {version}, ipyrefresh "
        f"{ipyrefresh.__version__} ({_git_head()}); BLAS threads "
        f"{os.environ.get('OPENBLAS_NUM_THREADS', '1')}; whole run "
        f"{(time.perf_counter() - started) / 60:.1f} min; "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}.\n\n"
        "Each example runs three times, in fresh processes with the same seeds: plain "
        "autograd, plain autograd in a real IPython shell (*shell*), and in a real IPython "
        "shell with `%load_ext ipyrefresh` and its `from autograd "
        "import grad, ...` pointed at ipyrefresh. *identical*: every printed line and every "
        "final value (arrays bitwise) equal. *plain*, *ipyrefresh*: CPU time of all the "
        "example's cells (imports and a first throwaway gradient done before; the fastest "
        "of up to 3 runs for short examples); *ratio*: ipyrefresh / plain (below 1 is "
        "faster); *wall ratio*: the same in wall-clock time; *against the shell*: "
        "ipyrefresh / shell, which leaves out what IPython's own running of cells costs. "
        "*In derivatives*: CPU time "
        "inside outermost derivative calls, the number of calls, and the share of plain's "
        "time they take (the rest, callbacks and plotting arithmetic, no derivative can "
        "speed up). *Fallbacks*: cache entries with a variant that runs plain autograd or "
        "a note. Plots are no-ops in both runs"
        + (" (here: drawn with Agg)" if opts.plots else "")
        + "; see the docstring of `benchmarks/bench_examples.py`.\n\n"
    )
    out = Path(opts.out) if opts.out else RESULTS
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(header + text)
    print(f"wrote {out}")


def _git_head() -> str:
    try:
        head = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(ROOT), "status", "--porcelain", "--", "ipyrefresh"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        return f"commit {head}" + (", ipyrefresh/ modified" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "commit unknown"


if __name__ == "__main__":
    main()
