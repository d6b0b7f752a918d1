"""Random programs (compositions of common primitives, with value-dependent branches)
differentiated by the tape and replayed on new inputs must equal autograd bit for bit."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import autograd
import autograd.numpy as np
import numpy as onp
import pytest

from ipyrefresh._src.engine import Engine
from ipyrefresh._src.handles import Derivative

from .oracle import same_result

N = 4
M = onp.linspace(-1.0, 1.0, N * N).reshape(N, N)
MASK = onp.array([True, False, True, True])

UNARY: list[Callable[[Any], Any]] = [
    np.sin,
    np.cos,
    np.tanh,
    lambda v: np.exp(-(v**2)),
    lambda v: np.log1p(v**2),
    lambda v: np.sqrt(v**2 + 1.0),
    lambda v: np.abs(v) * 0.5,
    lambda v: np.dot(M, v),
    lambda v: v[::-1] * 1.5,
    lambda v: np.reshape(v, (2, 2)).T.ravel(),
    lambda v: np.where(MASK, v, -v),
    lambda v: np.maximum(v, 0.1),
    lambda v: v - np.mean(v),
    lambda v: np.concatenate([v[:2], v[2:] * 2.0]),
    lambda v: np.cumsum(v) * 0.3,
    lambda v: v / (1.0 + np.sum(v**2)),
]
BINARY: list[Callable[[Any, Any], Any]] = [
    lambda a, b: a + b,
    lambda a, b: a * b,
    lambda a, b: a - 0.5 * b,
    lambda a, b: a * np.sum(b) * 0.1,
    lambda a, b: np.stack([a, b]).sum(axis=0),
]


def make_program(seed: int) -> Callable[[Any], Any]:
    rng = onp.random.default_rng(seed)
    steps = []
    for _ in range(int(rng.integers(3, 9))):
        kind = rng.integers(0, 3)
        if kind == 0:
            steps.append(("u", int(rng.integers(len(UNARY))), 0, 0))
        elif kind == 1:
            steps.append(("b", int(rng.integers(len(BINARY))), int(rng.integers(0, 8)), 0))
        else:
            steps.append(("if", int(rng.integers(len(UNARY))), int(rng.integers(len(UNARY))), 0))

    def program(x: Any) -> Any:
        vals = [x]
        for kind, i, j, _ in steps:
            v = vals[-1]
            if kind == "u":
                vals.append(UNARY[i](v))
            elif kind == "b":
                vals.append(BINARY[i](v, vals[j % len(vals)]))
            else:  # a value-dependent branch
                vals.append(UNARY[i](v) if v[0] > v[1] else UNARY[j](v))
        return np.sum(vals[-1] ** 2) + np.sum(vals[-1])

    return program


@pytest.mark.parametrize("seed", range(120))
def test_random_program(engine: Engine, seed: int) -> None:
    program = make_program(seed)
    rng = onp.random.default_rng(1000 + seed)
    xs = [rng.normal(size=N) for _ in range(4)]
    handle = Derivative("grad", program)
    for x in xs + xs:
        same_result(handle(x), autograd.grad(program)(x))
    (entry,) = handle.entries
    assert entry.info.note == "" and entry.builds == 1
    assert all(not v.replays_python for v in entry.variants)
