"""Direct adjoint formulas for the common primitives, specialized on known shapes.

Each rule returns a Python expression for the cotangent of one argument, written with the
same numpy operations as autograd's VJP (so types and values agree), but with
broadcasting resolved at compile time instead of by ``unbroadcast`` on every call. A rule
returns ``None`` when it does not apply; the caller then uses autograd's VJP maker.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import autograd.numpy as anp
import numpy as np
from autograd.builtins import container_take
from autograd.numpy.numpy_boxes import ArrayBox

_getitem = ArrayBox.__getitem__
_where = anp._original_where


class Names(Protocol):
    """What a rule needs from the code generator."""

    def arg(self, op: Any, pos: int) -> str: ...
    def const(self, value: Any) -> str: ...


def shape_of(v: Any) -> tuple[int, ...]:
    shape = getattr(v, "shape", None)
    return shape if type(shape) is tuple else tuple(np.shape(v))


def unbroadcast(expr: str, out_shape: tuple[int, ...], target: Any) -> str:
    """``expr`` (of ``out_shape``) summed down to the shape of ``target``, as autograd's
    ``unbroadcast`` does, with the axes decided now."""
    tshape = shape_of(target)
    lead = len(out_shape) - len(tshape)
    if lead > 0:
        axes = tuple(range(lead))
        expr = f"_sum({expr}, axis={axes})"
        out_shape = out_shape[lead:]
    keep = tuple(i for i, n in enumerate(tshape) if n == 1 and out_shape[i] != 1)
    if keep:
        expr = f"_sum({expr}, axis={keep}, keepdims=True)"
    return expr


UNARY: dict[Any, str] = {
    anp.negative: "-{g}",
    anp.exp: "{ans} * {g}",
    anp.log: "{g} / {x}",
    anp.sin: "{g} * _cos({x})",
    anp.cos: "-{g} * _sin({x})",
    anp.tan: "{g} / _cos({x}) ** 2",
    anp.tanh: "{g} / _cosh({x}) ** 2",
    anp.sinh: "{g} * _cosh({x})",
    anp.cosh: "{g} * _sinh({x})",
    anp.sqrt: "{g} * 0.5 * {x} ** -0.5",
    anp.square: "{g} * 2 * {x}",
    anp.arctan: "{g} / (1 + {x} ** 2)",
    anp.log1p: "{g} / ({x} + 1)",
    anp.expm1: "({ans} + 1) * {g}",
    anp.reciprocal: "-{g} / {x} ** 2",
    anp.abs: "{g} * _where({x}, {x}, 0.0) / _where({ans}, {ans}, 1.0)",
    anp.absolute: "{g} * _where({x}, {x}, 0.0) / _where({ans}, {ans}, 1.0)",
}

BINARY: dict[Any, tuple[str, str]] = {
    anp.add: ("{g}", "{g}"),
    anp.subtract: ("{g}", "-{g}"),
    anp.multiply: ("{y} * {g}", "{x} * {g}"),
    anp.divide: ("{g} / {y}", "-{g} * {x} / {y} ** 2"),
    anp.true_divide: ("{g} / {y}", "-{g} * {x} / {y} ** 2"),
    anp.power: (
        "{g} * {y} * {x} ** _where({y}, {y} - 1, 1.0)",
        "{g} * _log(_where({x}, {x}, 1.0)) * {ans}",
    ),
    anp.maximum: (
        "{g} * (({x} == {ans}) / (1.0 + ({x} == {y})))",
        "{g} * (({y} == {ans}) / (1.0 + ({y} == {x})))",
    ),
    anp.minimum: (
        "{g} * (({x} == {ans}) / (1.0 + ({x} == {y})))",
        "{g} * (({y} == {ans}) / (1.0 + ({y} == {x})))",
    ),
}

# Forward operators that are the same ufunc call as the primitive, but cheaper to
# dispatch, when one operand is already a numpy object.
OPERATORS: dict[Any, str] = {
    anp.add: "{x} + {y}",
    anp.subtract: "{x} - {y}",
    anp.multiply: "{x} * {y}",
    anp.divide: "{x} / {y}",
    anp.true_divide: "{x} / {y}",
    anp.negative: "-{x}",
}


def _is_numpy(v: Any) -> bool:
    return type(v) is np.ndarray or isinstance(v, np.generic)


def forward(names: Names, op: Any) -> str | None:
    """A cheaper expression for the forward value, or None for a plain call."""
    if op.kwargs:
        return None
    f = op.fun
    if (f is _getitem or f is container_take) and len(op.args) == 2:
        return f"{names.arg(op, 0)}[{names.arg(op, 1)}]"
    template = OPERATORS.get(f)
    if template is None or not any(_is_numpy(a) for a in op.args):
        return None
    if len(op.args) == 1:
        return template.format(x=names.arg(op, 0))
    if len(op.args) == 2:
        return template.format(x=names.arg(op, 0), y=names.arg(op, 1))
    return None


def _real(v: Any) -> bool:
    t = type(v)
    if t is float:
        return True
    if t is np.ndarray or isinstance(v, np.generic):
        return v.dtype.kind == "f"
    return False


def adjoint(names: Names, op: Any, pos: int, g: str, ans: str) -> str | None:
    """Expression for the cotangent of argument ``pos`` of ``op`` given cotangent ``g``."""
    f = op.fun
    if not _real(op.value) or not _real(op.args[pos]):
        return None
    if f in UNARY and len(op.args) == 1 and not op.kwargs:
        return UNARY[f].format(g=g, x=names.arg(op, 0), ans=ans)
    if f in BINARY and len(op.args) == 2 and not op.kwargs:
        if not all(_real(a) or type(a) in (int, bool) for a in op.args):
            return None
        expr = BINARY[f][pos].format(g=g, x=names.arg(op, 0), y=names.arg(op, 1), ans=ans)
        return unbroadcast(expr, shape_of(op.value), op.args[pos])
    rule = RULES.get(f)
    return rule(names, op, pos, g) if rule is not None else None


def _sum_like(names: Names, op: Any, pos: int, g: str, mean: bool) -> str | None:
    x = op.args[0]
    kw = dict(op.kwargs)
    axis = op.args[1] if len(op.args) > 1 else kw.pop("axis", None)
    keepdims = kw.pop("keepdims", False)
    if len(op.args) > 2 or kw or pos != 0 or type(keepdims) is not bool:
        return None
    shape = shape_of(x)
    if shape == ():
        return g
    new_shape = np.array(shape)
    new_shape[list(axis) if isinstance(axis, tuple) else axis] = 1
    reps = int(np.prod(np.array(shape)[list(axis) if isinstance(axis, tuple) else axis]))
    dtype = names.const(np.result_type(x))
    expr = f"_reshape({g}, {tuple(int(n) for n in new_shape)}) + _zeros({shape}, dtype={dtype})"
    if mean:
        expr = f"({expr}) / {names.const(np.int64(reps))}"
    return expr


def _sum(names: Names, op: Any, pos: int, g: str) -> str | None:
    return _sum_like(names, op, pos, g, False)


def _mean(names: Names, op: Any, pos: int, g: str) -> str | None:
    return _sum_like(names, op, pos, g, True)


def _linear(names: Names, op: Any, pos: int, g: str) -> str | None:
    """dot and matmul of vectors and matrices of one real dtype."""
    if op.kwargs or len(op.args) != 2:
        return None
    a, b = op.args
    if type(a) is not np.ndarray or type(b) is not np.ndarray or a.dtype != b.dtype:
        return None
    na, nb = a.ndim, b.ndim
    an, bn = names.arg(op, 0), names.arg(op, 1)
    if (na, nb) == (2, 2):
        return f"_matmul({g}, {bn}.T)" if pos == 0 else f"_matmul({an}.T, {g})"
    if (na, nb) == (2, 1):
        return f"_outer({g}, {bn})" if pos == 0 else f"_matmul({an}.T, {g})"
    if (na, nb) == (1, 2):
        return f"_matmul({bn}, {g})" if pos == 0 else f"_outer({an}, {g})"
    if (na, nb) == (1, 1):
        return f"{g} * {bn}" if pos == 0 else f"{g} * {an}"
    return None


def _reshape(names: Names, op: Any, pos: int, g: str) -> str | None:
    if pos != 0 or op.kwargs.get("order") not in (None, "C") or len(op.kwargs) > 1:
        return None
    return f"_reshape({g}, {shape_of(op.args[0])})"


def _transpose(names: Names, op: Any, pos: int, g: str) -> str | None:
    if pos != 0 or len(op.args) > 2 or set(op.kwargs) - {"axes"}:
        return None
    if len(op.args) > 1 and op.kwargs:
        return None
    axes = op.args[1] if len(op.args) > 1 else op.kwargs.get("axes")
    if axes is None:
        return f"_transpose({g})"
    inv = tuple(int(i) for i in np.argsort(axes))
    return f"_transpose({g}, {inv})"


RULES: dict[Any, Callable[[Names, Any, int, str], str | None]] = {
    anp.sum: _sum,
    anp.numpy_wrapper._primitive_mean: _mean,
    anp.dot: _linear,
    anp.matmul: _linear,
    anp.reshape: _reshape,
    anp.ravel: _reshape,
    anp.transpose: _transpose,
}


def _shape_static_set() -> set[Any]:
    import autograd.numpy.fft as afft
    import autograd.numpy.linalg as alin
    from autograd.numpy import numpy_wrapper as w

    names = [
        "sum",
        "prod",
        "amax",
        "amin",
        "max",
        "min",
        "cumsum",
        "cumprod",
        "dot",
        "matmul",
        "tensordot",
        "einsum",
        "inner",
        "outer",
        "kron",
        "cross",
        "reshape",
        "ravel",
        "transpose",
        "swapaxes",
        "moveaxis",
        "rollaxis",
        "permute_dims",
        "expand_dims",
        "squeeze",
        "concatenate_args",
        "array_from_args",
        "_array_from_scalar_or_array",
        "_original_where",
        "clip",
        "diff",
        "roll",
        "tile",
        "broadcast_to",
        "linspace",
        "full",
        "pad",
        "sort",
        "partition",
        "diag",
        "diagonal",
        "make_diagonal",
        "trace",
        "tril",
        "triu",
        "fliplr",
        "flipud",
        "rot90",
        "atleast_1d",
        "atleast_2d",
        "atleast_3d",
        "split",
        "array_split",
        "hsplit",
        "vsplit",
        "dsplit",
        "_astype",
        "astype",
        "real",
        "imag",
        "conj",
        "conjugate",
        "angle",
        "real_if_close",
        "nan_to_num",
        "sinc",
        "gradient",
        "_primitive_mean",
        "_primitive_var",
        "_primitive_std",
    ]
    found = {getattr(w, n) for n in names if hasattr(w, n)}
    found |= {f for f in vars(alin).values() if callable(f) and hasattr(f, "fun")}
    found |= {f for f in vars(afft).values() if callable(f) and hasattr(f, "fun")}
    return found


# Primitives whose output shape follows from their inputs' shapes (fixed by the cache key
# and the guards). Any other primitive (np.unique, np.bincount, ...) gets a shape guard:
# Python code may read the shape of its result (len(np.unique(y))).
SHAPE_STATIC = _shape_static_set() | {container_take}


def shapes(v: Any) -> Any:
    """Shape of an array, or the nested shapes of a tuple/list of arrays."""
    if type(v) is tuple or type(v) is list:
        return tuple(shapes(e) for e in v)
    return np.shape(v)


def shape_static(op: Any) -> bool:
    f = op.fun
    if f is _getitem:
        return 1 not in op.parents
    if f is _where:
        return len(op.args) == 3  # np.where(cond) is nonzero
    raw = getattr(f, "fun", None)
    return f in SHAPE_STATIC or (isinstance(raw, np.ufunc) and raw.signature is None)


# Names the generated code may use.
HELPERS: dict[str, Any] = {
    "_sum": np.sum,
    "_cos": np.cos,
    "_sin": np.sin,
    "_cosh": np.cosh,
    "_sinh": np.sinh,
    "_log": np.log,
    "_where": np.where,
    "_reshape": np.reshape,
    "_transpose": np.transpose,
    "_zeros": np.zeros,
    "_matmul": np.matmul,
    "_outer": np.outer,
}


def basic_index(idx: Any) -> bool:
    """True for indices made of ints, slices, None and Ellipsis (no repeated elements)."""
    items = idx if type(idx) is tuple else (idx,)
    return all(type(i) in (int, slice, type(None), type(Ellipsis)) for i in items)
