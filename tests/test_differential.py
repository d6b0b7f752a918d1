"""Differential test: random call graphs, random redefinitions, fresh autograd as the oracle.

A model of the notebook keeps the source of every definition. After every step (one or
two cells in a real IPython shell with ipyrefresh loaded), every live derivative handle
must equal ``autograd.grad`` of a function built from scratch from the current sources,
and the number of rebuilds must equal the number of entries the change affected — not
one more (no full refresh), not one fewer (no stale answer).
"""

from __future__ import annotations

import os
import random
import sys
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import autograd
import autograd.numpy as anp
import pytest
from autograd.core import primitive_vjps

from ipyrefresh._src import compilers as registry
from ipyrefresh._src.engine import Engine

from .conftest import Shell
from .notebook_model import N_DATA, N_FUNCS, NotebookModel

STEPS = int(os.environ.get("IPYREFRESH_DIFF_STEPS", "1500"))
#: The random notebooks run (more seeds hunt further: ``IPYREFRESH_DIFF_SEEDS=3,4,5``).
SEEDS = [int(s) for s in os.environ.get("IPYREFRESH_DIFF_SEEDS", "1,2").split(",")]
PRIMS = ["np.sin(x)", "np.cos(x)", "np.tanh(x)", "x ** 2", "np.exp(0.1 * x)", "x * x * x"]
HEADER = "import autograd.numpy as np\nfrom autograd.extend import primitive, defvjp\n"


#: The module on disk that function bodies call (``dmod.m(x)``), edited while the test
#: runs and reloaded by ``%autoreload 2``, as a user edits a helper file.
MODULE_SRC = "import autograd.numpy as np\nc = {c!r}\n\ndef m(x):\n    return c * {prim}\n"

#: Data the bodies read beyond scalars: a view of ``w``, a helper with a loop, a function
#: that changes ``w`` when called.
EXTRA_CELL = (
    "wv = w[1:]\n"
    "def lp(x):\n"
    "    s = 0.0\n"
    "    for _ in range(n_loop):\n"
    "        s = s + np.sin(x)\n"
    "    return s\n"
    "def bump(j, v):\n"
    "    w[j] = v\n"
)


@dataclass
class Model(NotebookModel):
    """Functions of a float built from autograd primitives, a custom VJP ``p``, and data
    read every way a notebook reads it: dict items and nested arrays, attributes of an
    instance and its class, a loop count, a view, a module file, a rule on ``np.cos``."""

    module: str = "dmod"
    module_c: float = 1.25
    module_prim: str = "np.sin(x)"
    cos_k: float = 1.0  # np.cos's rule, while the test runs: -g * sin(x) * cos_k

    def term(self, i: int) -> tuple[str, set[str]]:
        r = self.rng
        c = round(r.uniform(-2, 2), 3)
        kind = r.random()
        if kind < 0.25 and i > 0:
            j = r.randrange(i)
            return f"{c} * f{j}(x)", {f"f{j}"}
        prim, uses = self.prim()
        if kind < 0.35:
            k = r.randrange(N_DATA)
            return f"a{k} * {prim}", {f"a{k}"} | uses
        if kind < 0.42:
            return f"np.sum(w) * {prim}", {"w"} | uses
        if kind < 0.48:
            return f"{c} * p(x)", {"p"}
        if kind < 0.54:
            return f"cfg['s'] * {prim}", {"cfg"} | uses
        if kind < 0.60:
            return f"np.sum(cfg['inner']['v']) * {prim}", {"cfg"} | uses
        if kind < 0.66:
            return f"obj.mul({prim})", {"obj"} | uses
        if kind < 0.72:
            return f"{c} * lp(x)", {"n_loop"}
        if kind < 0.78:
            return f"np.sum(wv) * {prim}", {"wv"} | uses
        if kind < 0.84:
            return f"{c} * {self.module}.m(x)", {self.module}
        return f"{c} * {prim}", uses

    def prim(self) -> tuple[str, set[str]]:
        prim = self.rng.choice(PRIMS)
        return prim, ({"cosrule"} if "np.cos" in prim else set())

    def new_body(self, i: int) -> tuple[str, set[str]]:
        terms = [self.term(i) for _ in range(self.rng.randint(1, 3))]
        expr = " + ".join(t for t, _ in terms)
        uses = set().union(*(u for _, u in terms))
        if self.rng.random() < 0.25:  # value-dependent control flow
            other, more = self.term(i)
            cut = round(self.rng.uniform(-0.5, 0.5), 2)
            src = f"def f{i}(x):\n    if x > {cut}:\n        return {expr}\n    return {other}\n"
            return src, uses | more
        return f"def f{i}(x):\n    return {expr}\n", uses

    def closure(self, name: str) -> set[str]:
        reach = super().closure(name)
        if self.module in reach and "np.cos" in self.module_prim:
            reach.add("cosrule")  # the module's function uses np.cos (and its rule)
        return reach

    def rule_cell(self) -> str:
        return f"defvjp(p, lambda ans, x: lambda g: g * {self.rule} * x)"

    def cos_rule_cell(self) -> str:
        return f"defvjp(np.cos, lambda ans, x: lambda g: -g * np.sin(x) * {self.cos_k!r})"

    def module_source(self) -> str:
        return MODULE_SRC.format(c=self.module_c, prim=self.module_prim)

    # -- changes beyond the shared model's ----------------------------------------------
    def _w_changed(self, j: int, old: float) -> set[str]:
        if self.w[j] == old:
            return set()
        # (the view is compared with all of its owner: code can read past a view)
        return {"w", "wv"}

    def _in_place(self, run: Callable[[str], object]) -> set[str]:
        old = list(self.w)
        changed = super()._in_place(run)
        return set().union(*(self._w_changed(j, old[j]) for j in range(3))) if changed else set()

    def _loop_in_place(self, run: Callable[[str], object]) -> set[str]:
        old = list(self.w)
        super()._loop_in_place(run)
        return set().union(*(self._w_changed(j, old[j]) for j in range(3)))

    def through_view(self, run: Callable[[str], object]) -> set[str]:
        j = self.rng.randrange(2)
        old, self.w[j + 1] = self.w[j + 1], round(self.rng.uniform(-1, 1), 3)
        run(f"wv[{j}] = {self.w[j + 1]!r}")
        return self._w_changed(j + 1, old)

    def through_call(self, run: Callable[[str], object]) -> set[str]:
        j = self.rng.randrange(3)
        old, self.w[j] = self.w[j], round(self.rng.uniform(-1, 1), 3)
        run(f"bump({j}, {self.w[j]!r})")
        return self._w_changed(j, old)

    def edit_module(self, path: Path, run: Callable[[str], object]) -> set[str]:
        """Save a new version of the module file; the next cell reloads it."""
        old = (self.module_c, self.module_prim)
        self.module_c = round(self.rng.uniform(-2, 2), 3)
        self.module_prim = self.rng.choice(PRIMS[:3])
        path.write_text(self.module_source())
        stamp = path.stat().st_mtime + 1.0  # a new mtime even within the clock's tick
        os.utime(path, (stamp, stamp))
        run("z = 2")  # %autoreload reloads before this cell
        return {self.module} if (self.module_c, self.module_prim) != old else set()

    def library_rule(self, run: Callable[[str], object]) -> set[str]:
        self.cos_k = round(self.rng.uniform(-2, 2), 3)
        run(self.cos_rule_cell())
        return {"cosrule"}

    # -- the oracle -----------------------------------------------------------------------
    def expect_call(self, name: str, x: float) -> tuple[float | None, bool]:
        """The oracle's answer, and whether the engine must (successfully) rebuild."""
        want = self.oracle(name, x)
        return want, self.rebuilds(name, want is not None)

    def oracle(self, name: str, x: float) -> float | None:
        """Fresh autograd on freshly defined code and data (None: the code cannot run).
        (The rule on ``np.cos`` is autograd's global state: the oracle shares it.)"""
        module = types.ModuleType(self.module)
        exec(self.module_source(), module.__dict__)
        ns: dict = {self.module: module}
        src = HEADER + "@primitive\ndef p(x):\n    return x * x\n" + self.rule_cell() + "\n"
        src += "".join(f"{k} = {v!r}\n" for k, v in self.data.items())
        src += f"w = np.array({self.w!r})\n" + self.data_cells() + EXTRA_CELL
        src += "".join(self.funcs.values())
        exec(src, ns)
        if name not in ns:
            return None
        try:
            return float(autograd.grad(ns[name])(x))
        except NameError:
            return None


def check_all(ip: Shell, engine: Engine, model: Model, x: float) -> None:
    """Call every handle; compare with the oracle; count rebuilds against the model (the
    plain-autograd backend runs the code on every call: it never needs a rebuild)."""
    builds_before = engine.stats["builds"]
    expected_builds = 0
    for i in range(N_FUNCS):
        want, rebuilt = model.expect_call(f"f{i}", x)
        try:
            got = float(ip.ns[f"d{i}"](x))
        except NameError:
            got = None
        check_value(f"f{i}", got, want, model)
        expected_builds += rebuilt
    if engine.config.backend != "autograd":
        assert engine.stats["builds"] - builds_before == expected_builds


def check_value(name: str, got: float | None, want: float | None, model: Model) -> None:
    if want is None:
        assert got is None, f"{name}: expected an error, got {got}"
    else:
        assert got is not None, f"{name}: expected {want}, got an error"
        assert got == want, (name, got, want, model.funcs)  # bit for bit


def compilers() -> list[str]:
    return sorted(set(registry.available()) - {"jax"})


@pytest.fixture
def cos_rule() -> Iterator[None]:
    """The test redefines ``np.cos``'s rule, as a user may; put autograd's back after."""
    saved = primitive_vjps[anp.cos]
    try:
        yield
    finally:
        primitive_vjps[anp.cos] = saved


@pytest.fixture
def module_dir(tmp_path: Path) -> Iterator[Path]:
    sys.path.insert(0, str(tmp_path))
    try:
        yield tmp_path
    finally:
        sys.path.remove(str(tmp_path))


#: Chances of the shared model's changes: redefine, rebind, in place, custom rule, delete,
#: dict item, nested array in place, instance attribute, class attribute, in place in a
#: loop, loop count. The rest of [0, 1) goes to the changes below.
WEIGHTS = (0.25, 0.08, 0.06, 0.04, 0.04, 0.04, 0.04, 0.04, 0.03, 0.04, 0.04)


@pytest.mark.slow
@pytest.mark.parametrize("compiler", compilers())
@pytest.mark.parametrize("seed", SEEDS)
def test_random_redefinitions_match_fresh_autograd(
    ip: Shell, engine: Engine, compiler: str, seed: int, cos_rule: None, module_dir: Path
) -> None:
    rng = random.Random(seed)
    model = Model(rng, module=f"dmod_{compiler}_{seed}")
    path = module_dir / f"{model.module}.py"
    path.write_text(model.module_source())
    ip.run(f"%config IPyRefresh.backend = {compiler!r}")
    ip.run("%load_ext autoreload\n%autoreload 2")
    ip.run(HEADER + "@primitive\ndef p(x):\n    return x * x\n")
    ip.run(model.rule_cell())
    ip.run(model.cos_rule_cell())
    ip.run(f"import {model.module}")
    ip.run("w = np.array([0.5, -0.25, 1.0])")
    ip.run(model.data_cells() + EXTRA_CELL)
    for k in range(N_DATA):
        model.data[f"a{k}"] = 1.0 + k
        ip.run(f"a{k} = {model.data[f'a{k}']!r}")
    for i in range(N_FUNCS):
        model.define(i, ip.run)
        ip.run(f"d{i} = grad(f{i})")
    model.stale = {f"f{i}" for i in range(N_FUNCS)}
    check_all(ip, engine, model, 0.3)

    mid_cell_checks = 0
    kinds: dict[str, int] = {}
    for _ in range(STEPS):
        x = round(rng.uniform(-1.0, 1.0), 3)
        action = rng.random()
        changed = model.change(action, WEIGHTS, ip.run)
        rest = (action - sum(WEIGHTS)) / (1 - sum(WEIGHTS))
        extra = [model.through_view, model.through_call, model.edit_module, model.library_rule]
        if changed is None and rest < 0.55:
            play = extra[min(int(rest / 0.1375), 3)]
            kinds[play.__name__] = kinds.get(play.__name__, 0) + 1
            changed = play(path, ip.run) if play == model.edit_module else play(ip.run)
        elif changed is None and rest < 0.9:
            # Redefine a callee and differentiate in the same cell, before and after.
            i, j = rng.randrange(N_FUNCS), rng.randrange(N_FUNCS)
            builds = engine.stats["builds"]
            before, rebuilt_before = model.expect_call(f"f{i}", x)
            src, uses = model.new_body(j)
            ip.run(
                f"try:\n    _before = float(d{i}({x!r}))\nexcept NameError:\n    _before = None\n"
                + src
                + f"try:\n    _after = float(d{i}({x!r}))\nexcept NameError:\n    _after = None\n"
            )
            model.funcs[f"f{j}"], model.calls[f"f{j}"] = src, uses
            model.invalidate({f"f{j}"})
            after, rebuilt_after = model.expect_call(f"f{i}", x)
            check_value(f"f{i}", ip.ns["_before"], before, model)
            check_value(f"f{i}", ip.ns["_after"], after, model)
            if compiler != "autograd":
                assert engine.stats["builds"] - builds == rebuilt_before + rebuilt_after
            mid_cell_checks += 1
        elif changed is None:
            ip.run("z = 1")
        model.invalidate(changed or set())
        check_all(ip, engine, model, x)
    assert mid_cell_checks > 0 and len(kinds) == 4, kinds
    status = engine.status()
    if compiler != "autograd":
        assert status["rebuilds"] > STEPS // 4  # the run really exercised invalidation
