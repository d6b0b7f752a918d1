"""Value-dependent control flow under the tape: guards, retraces, bounded variants, live
globals and fallbacks -- each checked against a fresh autograd computation."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import autograd
import autograd.numpy as np
import numpy as onp
import pytest
from autograd.extend import defvjp, primitive

import ipyrefresh
from ipyrefresh._src.compilers import reference
from ipyrefresh._src.engine import Engine
from ipyrefresh._src.tape.compiler import MAX_VARIANTS, TapeArtifact, TapeCompiler

from .conftest import Shell


def _close(got: Any, want: Any) -> None:
    if isinstance(want, tuple):
        for g, w in zip(got, want, strict=True):
            _close(g, w)
        return
    assert type(got) is type(want)
    assert onp.shape(got) == onp.shape(want)
    onp.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-13)


def _build(fn: Any, x: Any, *rest: Any, transform: str = "grad") -> TapeArtifact:
    built = TapeCompiler().build(fn, transform, 0, (x, *rest), {})
    assert built.fallback == "", built.fallback
    _close(built.result, reference(fn, transform, 0, (x, *rest), {}))
    art = built.artifact
    assert isinstance(art, TapeArtifact)
    return art


def _check(art: TapeArtifact, fn: Any, x: Any, *rest: Any, transform: str = "grad") -> str:
    _close(art(fn, (x, *rest), {}), reference(fn, transform, 0, (x, *rest), {}))
    return art.last_event


def branch(x: Any) -> Any:
    if x > 0:
        return np.sin(x) * x
    return np.exp(x) - x**2


def halve_until_small(x: Any) -> Any:
    while x > 1.0:
        x = x / 2.0 + np.sin(x) * 0.1
    return x * x


def loop_count(x: Any) -> Any:
    n = int(np.floor(x * 3.0))
    out = x
    for _ in range(n):
        out = np.tanh(out) * 1.5
    return out


def python_max(x: Any) -> Any:
    return max(x[0], 0.5) * abs(x[1]) + min(x[0], x[1])


def python_max_scalar(x: Any) -> Any:
    return max(x, 0.5) * abs(x)


def truthiness(x: Any) -> Any:
    if np.sum(x) - 1.0:
        return np.sum(np.cos(x))
    return np.sum(x)


def argmax_pick(x: Any) -> Any:
    return x[np.argmax(x)] * np.sum(x**2)


def where_mask(x: Any) -> Any:
    return np.sum(np.where(x > 0.0, x, 0.1 * x) ** 2)


def sign_flow(x: Any) -> Any:
    s = np.sign(x[0])
    return np.sum(x * s) if (x[1] > x[2]) else np.sum(x**3)


CASES: list[tuple[str, Callable[..., Any], Any, Any]] = [
    ("if x > 0", branch, 1.3, -0.7),
    ("while on a traced value", halve_until_small, 9.0, 0.5),
    ("loop count from int(floor(x))", loop_count, 1.1, 2.4),
    ("Python max/min/abs on arrays", python_max, onp.array([0.3, 0.9]), onp.array([0.9, 0.2])),
    ("Python max/abs on a scalar", python_max_scalar, 0.2, 0.9),
    ("bool() of a traced value", truthiness, onp.array([0.5, 0.5]), onp.array([0.2, 0.3])),
    ("argmax index", argmax_pick, onp.array([0.1, 0.9, 0.3]), onp.array([0.8, 0.1, 0.3])),
    ("np.where on a comparison", where_mask, onp.array([-1.0, 2.0]), onp.array([1.0, -2.0])),
    ("sign and comparison", sign_flow, onp.array([-1.0, 2.0, 1.0]), onp.array([1.0, 0.5, 1.0])),
]


@pytest.mark.parametrize(("label", "fn", "x1", "x2"), CASES, ids=[c[0] for c in CASES])
def test_guard_retraces_on_a_different_path(label: str, fn: Any, x1: Any, x2: Any) -> None:
    art = _build(fn, x1)
    assert _check(art, fn, x1) == "replay"
    event = _check(art, fn, x2)
    assert event.startswith("retrace: guard failed: "), event
    assert len(art.variants) == 2
    # both paths are now cached variants
    assert _check(art, fn, x1) == "replay"
    assert _check(art, fn, x2) == "replay"


def test_same_path_new_values_replays() -> None:
    art = _build(branch, 1.3)
    for x in [0.1, 2.0, 7.5]:
        assert _check(art, branch, x) == "replay"
    art = _build(halve_until_small, 9.0)  # 9 -> ~4.5 -> ~2.3 -> ~1.2 -> ~0.6: 4 steps
    assert _check(art, halve_until_small, 9.5) == "replay"
    assert _check(art, halve_until_small, 20.0).startswith("retrace")


def test_guards_hold_for_other_transforms() -> None:
    x1, x2 = onp.array([0.3, -0.2, 0.5]), onp.array([-0.3, 0.2, 0.5])

    def f(x: Any) -> Any:
        return np.where(x > 0, np.sin(x), x**2) * (2.0 if x[0] > 0 else -1.0)

    def s(x: Any) -> Any:
        return np.sum(f(x) ** 2)

    for transform, fn in [("elementwise_grad", f), ("jacobian", f), ("hessian", s)]:
        art = _build(fn, x1, transform=transform)
        assert _check(art, fn, x2, transform=transform).startswith("retrace")
        assert _check(art, fn, x1, transform=transform) == "replay"
    art = _build(s, x1, transform="value_and_grad")
    assert _check(art, s, x2, transform="value_and_grad").startswith("retrace")


def test_variants_are_bounded_then_autograd_with_a_warning() -> None:
    art = _build(halve_until_small, 1.5)
    xs = [2.0 ** (k + 1) + 0.3 for k in range(MAX_VARIANTS + 3)]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        events = [_check(art, halve_until_small, x) for x in xs]
    assert len(art.variants) == MAX_VARIANTS
    assert any(e.startswith("autograd fallback: more than") for e in events)
    assert art.note.startswith(f"more than {MAX_VARIANTS} traced variants")
    assert sum("traced variants" in str(w.message) for w in caught) == 1
    # known paths still replay
    assert _check(art, halve_until_small, 1.6) == "replay"


def test_int_of_a_traced_value_behaves_like_autograd() -> None:
    def f(x: Any) -> Any:
        return x * int(x)

    with pytest.raises(TypeError) as ours:
        TapeCompiler().build(f, "grad", 0, (2.5,), {})
    with pytest.raises(TypeError) as theirs:
        autograd.grad(f)(2.5)
    assert str(ours.value) == str(theirs.value)


def test_non_differentiated_arguments_are_replayed_live() -> None:
    def loss(w: Any, X: Any, y: Any, scale: float) -> Any:
        return np.mean((np.dot(X, w) - y) ** 2) * scale

    rng = onp.random.default_rng(0)
    X, y, w = rng.normal(size=(6, 3)), rng.normal(size=6), rng.normal(size=3)
    art = _build(loss, w, X, y, 2.0)
    for _ in range(3):  # new minibatches, new scale: same tape
        X, y = rng.normal(size=(6, 3)), rng.normal(size=6)
        assert _check(art, loss, w, X, y, float(rng.uniform())) == "replay"

    def indexed(w: Any, idx: Any) -> Any:  # integer arrays are guarded by value
        return np.sum(w[idx] ** 2)

    art = _build(indexed, w, onp.array([0, 2]))
    assert _check(art, indexed, w, onp.array([0, 2])) == "replay"
    assert _check(art, indexed, w, onp.array([1, 1])).startswith("retrace: guard failed: argument")


W = onp.array([[1.0, 2.0], [3.0, -1.0]])


def uses_global(x: Any) -> Any:
    return np.sum(np.tanh(np.dot(W, x)) * W[:, 0])


def test_data_globals_are_read_live() -> None:
    x = onp.array([0.3, -0.4])
    art = _build(uses_global, x)
    W[:] = W * 0.5 + 0.25  # in place: the tape holds W itself, not a copy
    assert _check(art, uses_global, x) == "replay"


def test_data_dependent_shapes_are_guarded() -> None:
    def f(w: Any, y: Any) -> Any:  # y is traced too; len() of a result reads its shape
        k = np.unique(y)
        return np.sum(w[: len(k)] ** 2) + np.sum(k)

    w = onp.arange(5.0)
    art = _build(f, w, onp.array([1.0, 1.0, 2.0]))
    assert _check(art, f, w, onp.array([3.0, 3.0, 1.0])) == "replay"
    event = _check(art, f, w, onp.array([1.0, 2.0, 3.0]))
    assert event == "retrace: guard failed: shape of unique(...)"

    def g(w: Any, y: Any) -> Any:  # only the shape of np.where(y) is used
        return np.sum(w[: len(np.where(y)[0])] ** 2)

    art = _build(g, w, onp.array([0.0, 1.0, 2.0]))
    assert _check(art, g, w, onp.array([0.0, 5.0, 2.0])) == "replay"
    event = _check(art, g, w, onp.array([1.0, 2.0, 3.0]))
    assert event == "retrace: guard failed: shape of where(...)"


def test_array_defaults_are_read_live() -> None:
    D = onp.array([2.0, 3.0])

    def h(x: Any, scale: Any = D, *, shift: Any = D) -> Any:
        return np.sum(np.sin(x) * scale[0] + shift[1] * x)

    x = onp.array([0.3, 0.4])
    art = _build(h, x)
    D[0], D[1] = 5.0, -1.0  # the defaults' contents change in place
    assert _check(art, h, x) == "replay"
    h.__defaults__ = (onp.array([1.0, 1.0]),)  # a new default object
    assert _check(art, h, x) == "replay"


V = onp.arange(4.0)


def uses_v(x: Any) -> Any:
    return np.sum(np.sin(x * V))


def test_a_global_arrays_shape_change_in_place_retraces() -> None:
    x = onp.array([0.1, 0.2, 0.3, 0.4])
    art = _build(uses_v, x)
    V.shape = (1, 4)  # same memory, new shape: the tape's broadcasting no longer applies
    try:
        assert _check(art, uses_v, x) == (
            "retrace: guard failed: shape/dtype of a global array read by the tape"
        )
        assert _check(art, uses_v, x + 1) == "replay"
    finally:
        V.shape = (4,)
    assert _check(art, uses_v, x) == "replay"


def test_global_rebinding_through_a_handle(engine: Engine) -> None:
    global W
    old = W
    engine.config.compiler = "tape"
    try:
        dh = ipyrefresh.grad(uses_global)
        x = onp.array([0.3, -0.4])
        _close(dh(x), autograd.grad(uses_global)(x))
        W = onp.array([[0.5, 1.0, 2.0], [1.0, 1.5, -1.0]])  # new shape: a rebuild
        x3 = onp.array([0.3, -0.4, 0.1])
        _close(dh(x3), autograd.grad(uses_global)(x3))
        W = onp.array([[2.0, 1.0, 0.0], [1.0, 1.0, 1.0]])  # same shape, new values
        _close(dh(x3), autograd.grad(uses_global)(x3))
    finally:
        W = old


@primitive
def cube(x: Any) -> Any:
    return x**3


defvjp(cube, lambda ans, x: lambda g: 3 * g * x**2)


@primitive
def no_vjp(x: Any) -> Any:
    return x * 2.0


def test_user_primitives_and_missing_vjps() -> None:
    def f(x: Any) -> Any:
        return np.sum(cube(np.sin(x)))

    x = onp.array([0.2, 0.4])
    art = _build(f, x)
    assert art.variants[0].general == 1
    assert _check(art, f, x * 3) == "replay"

    def g(x: Any) -> Any:
        return np.sum(no_vjp(x))

    with pytest.raises(NotImplementedError):  # autograd raises too; we do not hide it
        TapeCompiler().build(g, "grad", 0, (x,), {})


def test_fallbacks_are_reported_and_correct() -> None:
    x = onp.array([0.2, 0.4])

    def noisy(x: Any) -> Any:
        return np.sum(x * onp.random.rand(2))

    built = TapeCompiler().build(noisy, "grad", 0, (x,), {})
    assert "random" in built.fallback
    onp.random.seed(1)
    got = built.artifact(noisy, (x,), {})
    onp.random.seed(1)
    _close(got, autograd.grad(noisy)(x))
    assert built.artifact.last_event.startswith("autograd fallback: ")

    def boxes_in_a_list(x: Any) -> Any:
        return np.sum(onp.array([x[0], x[1]], dtype=object) * 2.0)

    art = _build(boxes_in_a_list, x)  # the object array's elementwise ops are traced
    assert _check(art, boxes_in_a_list, x * 3.0) == "replay"


def test_inside_another_autograd_trace_runs_autograd(engine: Engine) -> None:
    engine.config.compiler = "tape"

    def f(x: Any, w: Any) -> Any:
        return np.sum(np.sin(x * w) ** 2)

    df = ipyrefresh.grad(f)
    x, w = onp.array([0.3, 0.7]), onp.array([1.5, -0.5])
    outer = autograd.grad(lambda w: np.sum(df(x, w)))(w)
    _close(outer, autograd.grad(lambda w: np.sum(autograd.grad(f)(x, w)))(w))
    fallbacks = [e["fallback"] for e in ipyrefresh.status()["entries"]]
    assert any("another autograd trace" in fb for fb in fallbacks), fallbacks


def test_grad_v_reports_replay_retrace_and_fallback(ip: Shell) -> None:
    ip.run("%config IPyRefresh.compiler = 'tape'")
    ip.run(
        "def h(x):\n    if x > 0:\n        return np.sin(x) * x\n    return np.exp(x)\n"
        "def r(x):\n    import numpy\n    return x * numpy.random.rand()\n"
    )
    out = ip.shell.run_line_magic
    import contextlib
    import io

    def grad_v(line: str) -> str:
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            out("grad", f"-v {line}")
        return buf.getvalue()

    assert "built" in grad_v("h(1.0)")
    assert grad_v("h(2.0)").rstrip().endswith("; replay")
    assert "; retrace: guard failed: greater(...) == True at h, line 2" in grad_v("h(-1.0)")
    grad_v("r(1.0)")
    assert "; autograd fallback: it draws random numbers" in grad_v("r(1.0)")
    status = ipyrefresh.status()
    assert any("random" in e["fallback"] for e in status["entries"])
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        out("stale", "")
    assert "note: grad(r) runs on plain autograd: it draws random numbers" in buf.getvalue()
    # redefining h rebuilds its tape; the answer follows the new code
    ip.run("def h(x):\n    return np.cos(x) * 3.0")
    assert "rebuilt" in grad_v("h(1.0)")
    assert ip.shell.run_line_magic("grad", "h(0.5)") == pytest.approx(-3.0 * onp.sin(0.5))
