"""A new derivative's first call runs plain autograd; the build comes at its second call
(``IPyRefresh.build_at_call``, 2 by default). The rest of the suite builds at the first
call, so that every scenario's first call is a build whose guard its change must fail;
here the default is what runs. The oracle is a fresh autograd computation, bit for bit."""

from __future__ import annotations

import autograd
import numpy as onp
import pytest

import ipyrefresh
from ipyrefresh._src.engine import current

from .conftest import Shell


@pytest.fixture
def default(ip: Shell) -> Shell:
    ip.run("%config IPyRefresh.build_at_call = 2")
    ip.run("import autograd")
    return ip


def only_entry() -> dict:
    (entry,) = ipyrefresh.status()["entries"]
    return entry


def test_the_first_call_runs_autograd_the_second_builds(default: Shell) -> None:
    ip = default
    ip.run("def g(x):\n    return np.sin(x) * x\ndef h(x):\n    return 2.0 * g(x) + x ** 3")
    ip.run("dh = grad(h)")
    assert ip.run("dh(0.3)") == autograd.grad(ip.ns["h"])(0.3)
    status = ipyrefresh.status()
    assert (status["builds"], status["calls_before_build"]) == (0, 1)
    assert only_entry()["state"] == "unbuilt"  # never "fresh": nothing is cached yet
    assert ip.run("dh(0.7)") == autograd.grad(ip.ns["h"])(0.7)
    assert (ipyrefresh.status()["builds"], only_entry()["state"]) == (1, "fresh")
    assert ip.run("dh(0.9)") == autograd.grad(ip.ns["h"])(0.9)
    assert (ipyrefresh.status()["builds"], only_entry()["hits"]) == (1, 1)


def test_stale_says_not_built_after_one_call(
    default: Shell, capsys: pytest.CaptureFixture[str]
) -> None:
    ip = default
    ip.run("def h(x):\n    return x ** 2")
    ip.run("grad(h)(1.0)")
    capsys.readouterr()
    ip.run("%stale")
    assert capsys.readouterr().out.splitlines() == [
        "None of 1 derivatives is stale: 0 fresh (checked just now), 1 not built yet:",
        "  grad(h)  not built yet (1 call so far, by plain autograd; built at a later call)",
    ]
    ip.run("%refresh --all")  # (nothing to rebuild: it was never built)
    assert "Nothing" in capsys.readouterr().out
    assert ipyrefresh.status()["builds"] == 0


def test_a_change_between_the_plain_call_and_the_build(default: Shell) -> None:
    """Whatever changes after the plain first call, the build at the second reads now."""
    ip = default
    ip.run("a = 2.0\nW = np.array([1.0, 2.0])")
    ip.run("def g(x):\n    return a * x\ndef h(x):\n    return np.sum(g(x) * W)")
    ip.run("dh = grad(h)")
    x = onp.array([0.5, -1.5])
    ip.ns["x"] = x
    assert onp.array_equal(ip.run("dh(x)"), autograd.grad(ip.ns["h"])(x))
    ip.run("a = 3.0\nW[0] = 7.0\ndef g(x):\n    return a * x * x")
    for _ in range(3):
        assert onp.array_equal(ip.run("dh(x)"), autograd.grad(ip.ns["h"])(x))
    assert ipyrefresh.status()["builds"] == 1


def test_rebuilds_are_not_deferred(default: Shell) -> None:
    """Only a derivative never built runs autograd first: after a change, the next call
    rebuilds (a derivative called again and again is not charged a plain call per edit)."""
    ip = default
    ip.run("def g(x):\n    return np.tanh(x)\ndef h(x):\n    return g(x) * x")
    ip.run("dh = grad(h)\ndh(0.1)\ndh(0.2)")
    assert ipyrefresh.status()["builds"] == 1
    ip.run("def g(x):\n    return np.cos(x)")
    assert ip.run("dh(0.3)") == autograd.grad(ip.ns["h"])(0.3)
    status = ipyrefresh.status()
    assert (status["builds"], status["rebuilds"], status["calls_before_build"]) == (2, 1, 1)


def test_nested_and_effectful_derivatives_called_once(
    default: Shell, capsys: pytest.CaptureFixture[str]
) -> None:
    """autograd's tanh example: derivatives of derivatives, each called once, build nothing
    and answer autograd's bits; a function that prints prints once per call, as autograd's."""
    ip = default
    ip.run("from ipyrefresh import elementwise_grad as egrad")
    ip.run(
        "def tanh(x):\n"
        "    y = np.exp(-2.0 * x)\n"
        "    return (1.0 - y) / (1.0 + y)\n"
        "x = np.linspace(-3, 3, 7)"
    )
    eg, tanh, x = autograd.elementwise_grad, ip.ns["tanh"], ip.ns["x"]
    ours = ip.run("egrad(egrad(egrad(tanh)))(x)")  # (each of the three called once)
    assert onp.array_equal(ours, eg(eg(eg(tanh)))(x))
    assert ipyrefresh.status()["builds"] == 0
    # egrad(tanh) is called a second time (inside egrad(egrad(tanh))): it builds then.
    ours = ip.run("[egrad(tanh)(x), egrad(egrad(tanh))(x)]")
    assert onp.array_equal(ours[0], eg(tanh)(x)) and onp.array_equal(ours[1], eg(eg(tanh))(x))
    assert ipyrefresh.status()["builds"] == 1
    ip.run("def noisy(x):\n    print('called')\n    return x * x")
    capsys.readouterr()
    ip.run("d = grad(noisy)\nd(1.0)\nd(2.0)\nd(3.0)")
    assert capsys.readouterr().out.count("called") == 3


@pytest.mark.parametrize("at", [1, 3])
def test_build_at_call_is_configurable(ip: Shell, at: int) -> None:
    ip.run(f"%config IPyRefresh.build_at_call = {at}")
    ip.run("def h(x):\n    return x ** 3")
    for k in range(1, 5):
        assert ip.run(f"grad(h)({k}.0)") == autograd.grad(ip.ns["h"])(float(k))
        assert ipyrefresh.status()["builds"] == (1 if k >= at else 0)
    assert ipyrefresh.status()["calls_before_build"] == at - 1


def test_build_at_call_below_one_is_refused(ip: Shell) -> None:
    ip.run("%config IPyRefresh.build_at_call = 2")
    ip.run("%config IPyRefresh.build_at_call = 0")  # (IPython reports the TraitError)
    assert current().config.build_at_call == 2


@pytest.mark.parametrize(
    "draw", ["onp.random.standard_normal(2)", "rs.randn(2)", "gen.standard_normal(2)"]
)
def test_random_draws_across_the_plain_call_and_the_build(default: Shell, draw: str) -> None:
    """The plain first call, the build at the second and the calls after draw from the
    generator exactly as autograd's calls do, from the same seeds, one after another."""
    ip = default
    setup = (
        "onp.random.seed(3)\nrs = onp.random.RandomState(4)\n"
        "gen = onp.random.default_rng(5)\n"
        f"def f(x):\n    return np.sum(x * {draw})\n"
    )
    ip.run("import numpy as onp\n" + setup + "df = grad(f)\nx = np.array([0.5, -1.0])")
    mine = [ip.run("df(x)") for _ in range(4)]
    ip.run(setup)
    theirs = [ip.run("autograd.grad(f)(x)") for _ in range(4)]
    assert all(onp.array_equal(a, b) for a, b in zip(mine, theirs, strict=True))
    assert len({a.tobytes() for a in mine}) == 4  # (each call drew anew)
