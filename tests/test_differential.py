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
from dataclasses import dataclass

import autograd
import pytest

from ipyrefresh._src import compilers as registry
from ipyrefresh._src.engine import Engine

from .conftest import Shell
from .notebook_model import N_DATA, N_FUNCS, NotebookModel

STEPS = int(os.environ.get("IPYREFRESH_DIFF_STEPS", "1500"))
PRIMS = ["np.sin(x)", "np.cos(x)", "np.tanh(x)", "x ** 2", "np.exp(0.1 * x)", "x * x * x"]
HEADER = "import autograd.numpy as np\nfrom autograd.extend import primitive, defvjp\n"


@dataclass
class Model(NotebookModel):
    """Functions of a float built from autograd primitives, a custom VJP ``p``."""

    def term(self, i: int) -> tuple[str, set[str]]:
        r = self.rng
        c = round(r.uniform(-2, 2), 3)
        kind = r.random()
        if kind < 0.35 and i > 0:
            j = r.randrange(i)
            return f"{c} * f{j}(x)", {f"f{j}"}
        if kind < 0.5:
            k = r.randrange(N_DATA)
            return f"a{k} * {r.choice(PRIMS)}", {f"a{k}"}
        if kind < 0.6:
            return f"np.sum(w) * {r.choice(PRIMS)}", {"w"}
        if kind < 0.7:
            return f"{c} * p(x)", {"p"}
        return f"{c} * {r.choice(PRIMS)}", set()

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

    def rule_cell(self) -> str:
        return f"defvjp(p, lambda ans, x: lambda g: g * {self.rule} * x)"

    def expect_call(self, name: str, x: float) -> tuple[float | None, bool]:
        """The oracle's answer, and whether the engine must (successfully) rebuild."""
        want = self.oracle(name, x)
        return want, self.rebuilds(name, want is not None)

    def oracle(self, name: str, x: float) -> float | None:
        """Fresh autograd on freshly defined code (None: the code cannot run)."""
        ns: dict = {}
        src = HEADER + "@primitive\ndef p(x):\n    return x * x\n" + self.rule_cell() + "\n"
        src += "".join(f"{k} = {v!r}\n" for k, v in self.data.items())
        src += f"w = np.array({self.w!r})\n" + "".join(self.funcs.values())
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


@pytest.mark.slow
@pytest.mark.parametrize("compiler", compilers())
@pytest.mark.parametrize("seed", [1, 2])
def test_random_redefinitions_match_fresh_autograd(
    ip: Shell, engine: Engine, compiler: str, seed: int
) -> None:
    rng = random.Random(seed)
    model = Model(rng)
    ip.run(f"%config IPyRefresh.backend = {compiler!r}")
    ip.run(HEADER + "@primitive\ndef p(x):\n    return x * x\n")
    ip.run(model.rule_cell())
    ip.run("w = np.array([0.5, -0.25, 1.0])")
    for k in range(N_DATA):
        model.data[f"a{k}"] = 1.0 + k
        ip.run(f"a{k} = {model.data[f'a{k}']!r}")
    for i in range(N_FUNCS):
        model.define(i, ip.run)
        ip.run(f"d{i} = grad(f{i})")
    model.stale = {f"f{i}" for i in range(N_FUNCS)}
    check_all(ip, engine, model, 0.3)

    mid_cell_checks = 0
    for _ in range(STEPS):
        x = round(rng.uniform(-1.0, 1.0), 3)
        action = rng.random()
        changed = model.change(action, (0.4, 0.15, 0.1, 0.07, 0.08), ip.run)
        if changed is None and action < 0.9:
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
    assert mid_cell_checks > 0
    status = engine.status()
    if compiler != "autograd":
        assert status["rebuilds"] > STEPS // 4  # the run really exercised invalidation
