"""Every primitive autograd defines a VJP for, replayed by the tape on *new* inputs,
must give autograd's gradient bit for bit (value, type, shape and dtype).

The table is autograd's own (``autograd.core.primitive_vjps``), restricted to the
``autograd.numpy`` namespaces; each entry needs a case below or a listed reason to skip,
so a primitive added to autograd fails the coverage test until it is handled.
"""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import Any

import autograd
import autograd.numpy as np
import autograd.numpy.fft
import autograd.numpy.linalg
import autograd.numpy.numpy_wrapper as wrapper
import numpy as onp
import pytest
from autograd.core import primitive_vjps
from autograd.numpy.numpy_boxes import ArrayBox

from ipyrefresh._src.engine import Engine
from ipyrefresh._src.handles import Derivative

from .oracle import same_result


def _table() -> dict[str, Any]:
    names: dict[Any, str] = {}
    spaces = [("np", np), ("np.linalg", np.linalg), ("np.fft", np.fft), ("np", wrapper)]
    for prefix, mod in spaces:
        for name, obj in sorted(vars(mod).items()):
            try:
                known = obj in primitive_vjps
            except TypeError:
                continue
            if known and obj not in names:
                names[obj] = f"{prefix}.{name}"
    names[ArrayBox.__getitem__] = "ArrayBox.__getitem__"
    return {v: k for k, v in names.items()}


TABLE = _table()

# Primitives exercised through a name of their own (the table lists one alias each).
SKIP: dict[str, str] = {
    "np.fft.truncate_pad": "internal helper of rfft's VJP with no public calling convention",
    "np.linalg.eig": "autograd's eig VJP needs complex cotangents a real loss never makes",
}


def _weights(shape: tuple[int, ...], k: float) -> Any:
    n = int(onp.prod(shape)) if shape else 1
    return onp.cos(onp.arange(n).reshape(shape) * 0.7 + k)


def scalarize(out: Any, k: float = 0.3) -> Any:
    """A scalar loss that depends on every element of ``out`` differently."""
    if isinstance(out, tuple | list) or type(out).__name__ == "SequenceBox":
        total = 0.0
        for i, o in enumerate(out):
            total = total + scalarize(o, k + i)
        return total
    shape = onp.shape(out)
    if np.iscomplexobj(out):
        re, im = np.real(out), np.imag(out)
        return np.sum(re * _weights(shape, k)) + np.sum(im * _weights(shape, k + 1))
    return np.sum(out * _weights(shape, k))


S = (2, 3)
SQ = (3, 3)
MASK = onp.array([[True, False, True], [False, True, True]])


def spd(a: Any) -> Any:
    return np.dot(a, a.T) + 3.0 * onp.eye(a.shape[0])


def sym(a: Any) -> Any:
    return a + a.T


# name -> list of (label, function of inputs, input shapes)
Case = tuple[str, Callable[..., Any], list[tuple[int, ...]]]
CASES: dict[str, list[Case]] = {}


def case(name: str, fn: Callable[..., Any], *shapes: tuple[int, ...], label: str = "") -> None:
    CASES.setdefault(name, []).append((label or f"{name}{shapes}", fn, list(shapes)))


# ufuncs: elementwise on several shapes, binary ones with broadcasting.
for _name, _f in TABLE.items():
    raw = getattr(_f, "fun", None)
    if not isinstance(raw, onp.ufunc) or raw.signature is not None:
        continue
    if raw.nin == 1:
        shift = 1.0 if raw.__name__ == "arccosh" else 0.0  # its domain is x >= 1
        for _shape in [(), (3,), S]:
            case(_name, (lambda f, s: lambda x: f(x + s))(_f, shift), _shape)
    elif raw.nin == 2:
        for _sx, _sy in [(S, S), (S, (3,)), ((2, 1), (1, 3)), ((), (3,)), ((3,), ())]:
            case(_name, (lambda f: lambda x, y: f(x, y))(_f), _sx, _sy)

# (which names are primitives depends on the autograd and numpy versions: numpy 1.x has no
# np.max alias of its own, autograd < 1.7 has mean/var/std themselves as primitives)
_REDUCTIONS = ["np.sum", "np.amax", "np.amin", "np.max", "np.min", "np.prod", "np.cumsum"]
for _name in [n for n in _REDUCTIONS if n in TABLE]:
    _f = TABLE[_name]
    case(_name, (lambda f: lambda x: f(x))(_f), S)
    case(_name, (lambda f: lambda x: f(x, axis=0))(_f), S, label=f"{_name} axis=0")
    if _name != "np.cumsum":
        case(_name, (lambda f: lambda x: f(x, axis=1, keepdims=True))(_f), S, label=f"{_name} kd")
_MOMENTS = [("np._primitive_mean", "np.mean"), ("np._primitive_var", "np.var")]
for _new, _old in [*_MOMENTS, ("np._primitive_std", "np.std")]:
    _name = _new if _new in TABLE else _old
    _f = TABLE[_name]
    case(_name, (lambda f: lambda x: f(x))(_f), S)
    case(_name, (lambda f: lambda x: f(x, axis=1))(_f), S, label=f"{_name} axis=1")
case("np.sum", lambda x: np.sum(x, axis=(0, 1)), (2, 3, 2), label="sum axes")
case("np.sum", lambda x: x.sum(), (), label="sum scalar")

for _name in ["np.real", "np.imag", "np.conj", "np.angle", "np.real_if_close", "np.nan_to_num"]:
    case(_name, (lambda f: lambda x: f(x))(TABLE[_name]), S)
for _name in ["np.atleast_1d", "np.atleast_2d", "np.atleast_3d"]:
    case(_name, (lambda f: lambda x: f(x))(TABLE[_name]), ())
    case(_name, (lambda f: lambda x: f(x))(TABLE[_name]), (3,))
for _name in ["np.fliplr", "np.flipud", "np.tril", "np.triu", "np.trace"]:
    case(_name, (lambda f: lambda x: f(x))(TABLE[_name]), SQ)
# autograd's VJPs support these argument forms only (it raises on others, and so do we)
case("np.diagonal", lambda x: np.diagonal(x, axis1=-1, axis2=-2), SQ)
case("np.sort", lambda x: np.sort(x), (5,))
case("np.partition", lambda x: np.partition(x, 1), (4,))
case("np.diag", lambda x: np.diag(x), (3,))
case("np.diag", lambda x: np.diag(x), SQ, label="diag of matrix")
case("np.make_diagonal", lambda x: np.make_diagonal(x, axis1=-1, axis2=-2), S)
case("np.ravel", lambda x: np.ravel(x), S)
case("np.ravel", lambda x: x.flatten(), S, label="flatten")
case("np.reshape", lambda x: np.reshape(x, (3, 2)), S)
case("np.reshape", lambda x: x.reshape(-1), S, label="reshape method")
case("np.squeeze", lambda x: np.squeeze(x), (1, 3))
case("np.expand_dims", lambda x: np.expand_dims(x, 1), S)
case("np.swapaxes", lambda x: np.swapaxes(x, 0, 1), S)
case("np.moveaxis", lambda x: np.moveaxis(x, 0, -1), (2, 3, 2))
if "np.permute_dims" in TABLE:  # numpy >= 2
    case("np.permute_dims", lambda x: np.permute_dims(x, (1, 0)), S)
case("np.rollaxis", lambda x: np.rollaxis(x, 2), (2, 3, 2))
case("np.transpose", lambda x: x.T, S)
case("np.transpose", lambda x: np.transpose(x, (2, 0, 1)), (2, 3, 2), label="transpose axes")
case("np.roll", lambda x: np.roll(x, 2), (5,))
case("np.rot90", lambda x: np.rot90(x), S)
case("np.repeat", lambda x: np.repeat(x, 2, axis=0), S)
case("np.repeat", lambda x: np.repeat(x, 2), S, label="repeat flat")
case("np.tile", lambda x: np.tile(x, (2, 1)), S)
case("np.broadcast_to", lambda x: np.broadcast_to(x, (2, 3)), (1, 3))
case("np.clip", lambda x: np.clip(x, 0.3, 0.7), S)
case("np.diff", lambda x: np.diff(x), (5,))
case("np.gradient", lambda x: np.gradient(x), (6,))
case("np.pad", lambda x: np.pad(x, 1, "constant"), S)
case("np.full", lambda x: np.full((2, 2), x), ())
case("np.linspace", lambda x, y: np.linspace(x, y, 5), (), ())
case("np.array_from_args", lambda x: np.array([x[0], x[1] * 2.0, x[2]]), (3,))
case("np._array_from_scalar_or_array", lambda x: np.array(x, ndmin=2), (3,))
case("np.concatenate_args", lambda x, y: np.concatenate([x, y]), (3,), (2,))
case("np.concatenate_args", lambda x, y: np.stack([x, y], axis=1), (3,), (3,), label="stack")
case("np.concatenate_args", lambda x, y: np.hstack([x, y]), S, S, label="hstack")
for _name, _f in [("np.split", np.split), ("np.array_split", np.array_split)]:
    case(_name, (lambda f: lambda x: f(x, 2, axis=1))(_f), (2, 4))
case("np.vsplit", lambda x: np.vsplit(x, 2), (4, 2))
case("np.hsplit", lambda x: np.hsplit(x, 2), (2, 4))
case("np.dsplit", lambda x: np.dsplit(x, 2), (2, 2, 4))
case("np._original_where", lambda x, y: np.where(MASK, x, y), S, S, label="where const mask")
case("np._original_where", lambda x, y: np.where(x > 0.5, x, y), S, S, label="where traced")
case("np.dot", lambda x, y: np.dot(x, y), S, (3, 2))
case("np.dot", lambda x, y: np.dot(x, y), S, (3,), label="dot mv")
case("np.dot", lambda x, y: np.dot(x, y), (3,), (3,), label="dot vv")
case("np.dot", lambda x, y: np.dot(x, y), (2,), S, label="dot vm")
case("np.dot", lambda x, y: np.dot(x, y), (), S, label="dot sm")
case("np.matmul", lambda x, y: x @ y, S, (3, 2))
case("np.matmul", lambda x, y: x @ y, S, (3,), label="matmul mv")
case("np.matmul", lambda x, y: x @ y, (3,), (3,), label="matmul vv")
case("np.matmul", lambda x, y: np.matmul(x, y), (2, 2, 3), (3, 2), label="matmul batched")
case("np.tensordot", lambda x, y: np.tensordot(x, y, axes=1), S, (3, 2))
case("np.inner", lambda x, y: np.inner(x, y), S, (4, 3))
case("np.outer", lambda x, y: np.outer(x, y), (3,), (2,))
case("np.kron", lambda x, y: np.kron(x, y), S, (2, 2))
case("np.cross", lambda x, y: np.cross(x, y), (2, 3), (2, 3))
case("np.einsum", lambda x, y: np.einsum("ij,jk->ik", x, y), S, (3, 2))
case("np.einsum", lambda x, y: np.einsum("ij,j->i", x, y), S, (3,), label="einsum mv")
case("np.linalg.det", lambda x: np.linalg.det(spd(x)), SQ)
case("np.linalg.slogdet", lambda x: np.linalg.slogdet(spd(x))[1], SQ)
case("np.linalg.inv", lambda x: np.linalg.inv(spd(x)), SQ)
case("np.linalg.pinv", lambda x: np.linalg.pinv(x), S)
case("np.linalg.solve", lambda x, y: np.linalg.solve(spd(x), y), SQ, (3,))
case("np.linalg.cholesky", lambda x: np.linalg.cholesky(spd(x)), SQ)
case("np.linalg.eigh", lambda x: np.linalg.eigh(sym(x))[0], SQ)
case("np.linalg.svd", lambda x: np.linalg.svd(x, full_matrices=False), S)
case("np.linalg._primitive_norm", lambda x: np.linalg.norm(x), S)
case("np.linalg._primitive_norm", lambda x: np.linalg.norm(x, axis=1), S, label="norm axis")
case("np.linalg._primitive_norm", lambda x: np.linalg.norm(x, ord="fro"), S, label="norm fro")
case("ArrayBox.__getitem__", lambda x: x[1], S, label="getitem int")
case("ArrayBox.__getitem__", lambda x: x[:, 1:] * x[0, 0], S, label="getitem slices")
case("ArrayBox.__getitem__", lambda x: x[[0, 1, 1]], (3,), label="getitem fancy repeated")
case("ArrayBox.__getitem__", lambda x: x[MASK], S, label="getitem mask")
case("ArrayBox.__getitem__", lambda x: x[0] + x[2] * x[0], (3,), label="getitem accumulate")
for _name in ["np.fft.fft", "np.fft.ifft", "np.fft.rfft", "np.fft.fftshift", "np.fft.ifftshift"]:
    case(_name, (lambda f: lambda x: f(x))(TABLE[_name]), (4,))
for _name in ["np.fft.fft2", "np.fft.ifft2", "np.fft.fftn", "np.fft.ifftn", "np.fft.rfft2"]:
    case(_name, (lambda f: lambda x: f(x))(TABLE[_name]), (4, 4))
case("np.fft.rfftn", lambda x: np.fft.rfftn(x), (4, 4))
case("np.fft.irfft", lambda x: np.fft.irfft(x), (5,))
case("np.fft.irfft2", lambda x: np.fft.irfft2(x), (4, 3))
case("np.fft.irfftn", lambda x: np.fft.irfftn(x), (4, 3))
case("np.astype", lambda x: x.astype(float) * 2.0, S, label="astype")
case("np.sinc", lambda x: np.sinc(x), S)
case("np.ravel", lambda x: x.ravel(), S, label="ravel method")
# Fast paths of the compiler: matrix products with constant and transposed operands,
# powers with a constant side, broadcasts summed back.
_M = onp.linspace(0.1, 1.3, 12).reshape(3, 4)
case("np.dot", lambda x: np.dot(x, _M), S, label="dot by a constant matrix")
case("np.dot", lambda x: np.dot(_M.T, x.T), S, label="dot of transposed views")
case("np.dot", lambda x: np.dot(x.astype("float32"), _M), S, label="dot float32 by float64")
_POW = "np.pow" if "np.pow" in TABLE else "np.power"  # (numpy 1.x has no np.pow)
case(_POW, lambda x: x**2, S, label="power constant int exponent")
case(_POW, lambda x: x.astype("float32") ** 3, S, label="power float32 base")
case(_POW, lambda x: 2.0**x, S, label="power constant base")
case(_POW, lambda x: _M[:2, :3] ** x, S, label="power constant array base")
# Primitives only older autograd or numpy releases have (the lowest-versions run)
_OLD: dict[str, tuple[Callable[..., Any], tuple[int, ...]]] = {
    "np._astype": (lambda x: x.astype("float32"), S),
    "np.linalg.norm": (lambda x: np.linalg.norm(x), S),
    "np.msort": (lambda x: np.msort(x), (4,)),
    "np.where": (lambda x: np.where(MASK, x, -2.0 * x), S),
}
for _name, (_fn, _shape) in _OLD.items():
    if _name in TABLE:
        case(_name, _fn, _shape)
case("np.add", lambda x: x + _M[:, :1].T[:, :3] * 0 + onp.ones((4, 1, 3)), S, label="add broadcast")


def test_every_primitive_has_a_case_or_a_reason() -> None:
    missing = sorted(set(TABLE) - set(CASES) - set(SKIP))
    assert not missing, f"primitives without a case or a listed reason: {missing}"
    assert not set(SKIP) & set(CASES)


def _inputs(shapes: list[tuple[int, ...]], seed: int) -> list[Any]:
    rng = onp.random.default_rng(seed)
    out: list[Any] = []
    for shape in shapes:
        v = rng.uniform(0.2, 0.8, size=shape)
        out.append(float(v) if shape == () and seed % 2 else v)
    return out


def replayed(handle: Derivative) -> None:
    """The handle's entries answer from compiled tapes, not a fallback."""
    assert handle.entries
    for entry in handle.entries:
        runs = [v.describe() for v in entry.variants]
        assert entry.info.note == "" and all(v.note == "" for v in entry.variants), entry.info.note
        assert any(r.startswith("tape:") for r in runs), runs


def _params() -> list[Any]:
    params = []
    for cases in CASES.values():
        for label, fn, shapes in cases:
            for argnum in range(len(shapes)):
                params.append(pytest.param(fn, shapes, argnum, id=f"{label}-arg{argnum}"))
    return params


@pytest.mark.parametrize(("fn", "shapes", "argnum"), _params())
def test_replay_matches_autograd_bitwise_on_new_inputs(
    engine: Engine, fn: Callable[..., Any], shapes: list[tuple[int, ...]], argnum: int
) -> None:
    def loss(*xs: Any) -> Any:
        return scalarize(fn(*xs))

    handle = Derivative("grad", loss, argnum)
    # Seeds 1 and 3 give scalars as floats, 2 and 4 as 0-d arrays: two entries, each
    # built by autograd's own run and then replayed on new values.
    for seed in (1, 2, 3, 4, 1, 2):
        xs = _inputs(shapes, seed)
        same_result(handle(*xs), autograd.grad(loss, argnum)(*xs))
    replayed(handle)


_ELEMENTWISE = ["np.sin", "np.exp", "np.tanh", "np.sqrt", "np.multiply", "np.add", _POW]


@pytest.mark.parametrize("name", _ELEMENTWISE)
@pytest.mark.parametrize("transform", ["elementwise_grad", "jacobian", "value_and_grad", "hessian"])
def test_other_transforms(engine: Engine, name: str, transform: str) -> None:
    f = TABLE[name]
    nin = f.fun.nin

    def g(x: Any) -> Any:
        out = f(x) if nin == 1 else f(x, x[::-1] + 0.5)
        return np.sum(out * out) if transform in ("value_and_grad", "hessian") else out

    handle = Derivative(transform, g)
    ref = getattr(autograd, transform)
    for seed in (1, 3, 1):
        x = _inputs([(4,)], seed)[0]
        same_result(handle(x), ref(g)(x))
    replayed(handle)


def test_hessian_is_a_tape_of_the_jacobian(engine: Engine) -> None:
    def f(x: Any, W: Any) -> Any:
        return np.sum(np.tanh(np.dot(W, x)) ** 2) + np.sum(x**3)

    W = onp.random.default_rng(0).normal(size=(3, 4))
    handle = Derivative("hessian", f)
    for seed in (1, 4):
        x = _inputs([(4,)], seed)[0]
        same_result(handle(x, W), autograd.hessian(f)(x, W))
    replayed(handle)
    W2 = W * 2.0  # another value of a non-differentiated argument: another variant
    same_result(handle(x, W2), autograd.hessian(f)(x, W2))
    same_result(handle(x, W2), autograd.hessian(f)(x, W2))


def test_direct_adjoints_are_used_for_common_primitives(engine: Engine) -> None:
    def f(x: Any, W: Any, b: Any) -> Any:
        h = np.tanh(np.dot(x, W) + b)
        return np.mean((h - 0.5) ** 2) + np.sum(np.exp(-x[:, 0]))

    rng = onp.random.default_rng(1)
    args = (rng.normal(size=(5, 3)), rng.normal(size=(3, 2)), rng.normal(size=2))
    for argnum in range(3):
        handle = Derivative("grad", f, argnum)
        handle(*args)
        new = list(args)
        new[argnum] = args[argnum] + 0.1
        same_result(handle(*new), autograd.grad(f, argnum)(*new))
        (entry,) = handle.entries
        (variant,) = entry.variants
        assert "direct" in variant.describe(), variant.describe()
        source = variant.source  # type: ignore[attr-defined]
        # Only x[:, 0] (autograd's sparse untake) goes through autograd's VJP makers.
        assert source.count("iter(") <= (1 if argnum == 0 else 0), source


def test_tuple_argnum_and_list_argument(engine: Engine) -> None:
    def f(params: list[Any], x: Any) -> Any:
        W, b = params
        return np.sum(np.tanh(np.dot(x, W) + b))

    rng = onp.random.default_rng(2)
    params = [rng.normal(size=(3, 2)), rng.normal(size=2)]
    x = rng.normal(size=(4, 3))
    handle = Derivative("grad", f)
    handle(params, x)
    new = [params[0] * 0.5, params[1] + 1.0]
    same_result(handle(new, x), autograd.grad(f)(new, x))
    replayed(handle)

    def g(a: Any, b: float, c: Any) -> Any:
        return np.sum(a * b) + b * np.sum(c**2)

    handle = Derivative("grad", g, (0, 1))
    handle(x, 0.5, x)
    same_result(handle(x + 1, 0.25, x), autograd.grad(g, (0, 1))(x + 1, 0.25, x))
    replayed(handle)


def test_module_objects_are_plain() -> None:
    assert isinstance(np, types.ModuleType)


def test_container_roots_and_keyword_arguments(engine: Engine) -> None:
    rng = onp.random.default_rng(3)

    def f(p: dict[str, Any], x: Any, scale: float = 1.0) -> Any:
        return np.sum(np.tanh(x * p["w"] + p["b"]) * p["c"]) * scale + p["w"][0] * p["w"][1]

    p = {"w": rng.normal(size=3), "b": rng.normal(size=3), "c": 0.5}
    x = rng.normal(size=3)
    handle = Derivative("grad", f)
    same_result(handle(p, x, scale=2.0), autograd.grad(f)(p, x, scale=2.0))
    q = {"w": p["w"] * 2, "b": p["b"] - 1, "c": 1.5}
    same_result(handle(q, x, scale=2.0), autograd.grad(f)(q, x, scale=2.0))
    same_result(handle(q, x, scale=0.5), autograd.grad(f)(q, x, scale=0.5))
    same_result(handle(q, x, scale=0.5), autograd.grad(f)(q, x, scale=0.5))

    def uses_whole_list(params: list[Any]) -> Any:
        total = np.sum(np.concatenate(params) ** 2)
        return total * np.sum(params[1])

    params = [rng.normal(size=2), rng.normal(size=3)]
    handle = Derivative("grad", uses_whole_list)
    handle(params)
    new = [params[0] + 1.0, params[1] * 0.5]
    same_result(handle(new), autograd.grad(uses_whole_list)(new))
    replayed(handle)


def test_output_independent_of_input_runs_autograd(engine: Engine) -> None:
    def f(x: Any, y: Any) -> Any:
        return np.sum(y**2)

    x, y = onp.ones(2), onp.ones(3)
    handle = Derivative("grad", f)
    with pytest.warns(UserWarning, match="independent"):
        same_result(handle(x, y), autograd.grad(f)(x, y))
    (entry,) = handle.entries
    assert "does not depend on the input" in entry.info.note


def test_complex_inputs_use_autograds_vjps(engine: Engine) -> None:
    def f(z: Any) -> Any:
        return np.sum(np.real(z * np.conj(z)) + np.imag(np.exp(z)))

    z1 = onp.array([0.3 + 0.2j, -0.1 + 0.5j])
    z2 = onp.array([1.3 - 0.2j, 0.4 + 0.1j])
    handle = Derivative("grad", f)
    same_result(handle(z1), autograd.grad(f)(z1))
    same_result(handle(z2), autograd.grad(f)(z2))
    replayed(handle)


def test_hessian_and_jacobian_with_guards_and_lists(engine: Engine) -> None:
    def f(x: Any) -> Any:
        y = np.tanh(x) if x[0] > 0 else np.sin(x)
        return np.sum(y**2) * np.max(x)

    def j(x: Any) -> Any:
        return np.tanh(x) * x[0] if x[0] > 0 else x

    x1, x2 = onp.array([0.5, -0.2, 0.1]), onp.array([-0.5, 0.3, 0.9])
    for transform in ("hessian", "jacobian", "value_and_grad"):
        g = f if transform != "jacobian" else j
        handle = Derivative(transform, g)
        ref = getattr(autograd, transform)
        for x in (x1, x2, x1 * 2, x2, x1):
            same_result(handle(x), ref(g)(x))
        (entry,) = handle.entries
        assert len(entry.variants) == 2  # one per branch, each replayed


def test_float32_gradients_keep_autograds_dtype(engine: Engine) -> None:
    def f(x: Any) -> Any:
        return np.sum(x**3 + np.sqrt(x) * 2.0 + x**0.5)

    x = onp.linspace(0.1, 1.0, 4, dtype=onp.float32)
    handle = Derivative("grad", f)
    for v in (x, x * 2, x):
        same_result(handle(v), autograd.grad(f)(v))
    replayed(handle)


def test_a_value_used_many_times_sums_in_autograds_order(engine: Engine) -> None:
    def f(x: Any) -> Any:
        a = np.sin(x)
        return np.sum(a * 1e16 + a * 3.3 - a * 1e16 + a**2 + np.exp(a) * a + a / 7.0)

    handle = Derivative("grad", f)
    rng = onp.random.default_rng(5)
    for _ in range(5):
        x = rng.normal(size=7)
        same_result(handle(x), autograd.grad(f)(x))
    replayed(handle)


#: Scalar roots of each kind the tape's operator forms meet (hunt 47).
SCALAR_KINDS: dict[str, Callable[[float], Any]] = {
    "float": float,
    "float64": onp.float64,
    "float32": onp.float32,
    "float16": onp.float16,
    "0-d float64": onp.array,
    "0-d float32": lambda v: onp.array(v, onp.float32),
}


@pytest.mark.parametrize("kind", list(SCALAR_KINDS))
def test_operators_on_two_nans_give_the_ufuncs_nan(engine: Engine, kind: str) -> None:
    """numpy's scalar math and the ufunc agree on every value but two NaN operands, where
    the one taken depends on the order the compiled code takes them in: a replay at a NaN
    must give autograd's NaN, sign and payload (``-x * x`` gave the other sign)."""

    def f(x: Any) -> Any:
        return np.exp(-x * x) + (x + x) * (x - x) / x + x * 2.0 + 2.0 * x - (3.0 - x)

    make = SCALAR_KINDS[kind]
    handle = Derivative("value_and_grad", f)
    nan = float("nan")
    for v in (0.3, 0.5, 0.7, nan, -nan, 0.2, nan, -nan):
        x = make(v)
        same_result(handle(x), autograd.value_and_grad(f)(x))
    replayed(handle)
