"""Direct adjoints: autograd's own VJPs for the common primitives, as expressions.

Each rule returns a Python expression for the cotangent of one argument, written with
*the same operations in the same order* as autograd's VJP (``numpy_vjps.py``), calling
the same helpers (``anp.where``, ``unbroadcast``'s sums, ``dot_adjoint_0``...), so that
a replay gives autograd's bits. What differs is only when the work is done: shapes,
broadcasting and metadata are decided when the tape is compiled, not on every call.

A rule applies only while the primitive's registered VJP is still autograd's own: after
``defvjp(anp.sin, ...)`` the user's rule runs (through the generic path).
"""

from __future__ import annotations

import ast
import builtins
import functools
import inspect
import operator
from collections.abc import Callable
from dataclasses import dataclass, field
from types import FunctionType
from typing import Any, Protocol

import autograd.numpy as anp
import numpy as np
from autograd.builtins import container_take as container_take
from autograd.builtins import grad_container_take
from autograd.core import primitive_vjps
from autograd.numpy import numpy_vjps
from autograd.numpy import numpy_wrapper as W
from autograd.numpy.numpy_boxes import ArrayBox

from ...nodes import NUMPY_SCALAR_TYPES, implementation
from ...rules import registered

getitem = ArrayBox.__getitem__


def _raw(f: Any) -> Any:
    return implementation(f)


class Names(Protocol):
    """What a rule needs from the code generator."""

    #: Every op of the tape is real and differentiated by autograd's own rule: each
    #: cotangent is real and has its value's shape (a user's rule may return another
    #: shape or a complex one, and a complex value makes complex cotangents).
    trusted_cotangents: bool

    def arg(self, op: Any, pos: int) -> str: ...
    def const(self, value: Any) -> str: ...


def is_autograds_rule(prim: Any) -> bool:
    """The VJP registered for ``prim`` is the one autograd's numpy_vjps defines (a
    user's rule, autograd.core's zero VJP from ``defvjp(anp.sin, None)``, or another
    primitive's rule of numpy_vjps' is not)."""
    site = _registered_by_autograd().get(prim)
    functions = _rule_functions(prim)
    return site is not None and functions is not None and all(map(site.holds, functions))


def is_container_take_rule() -> bool:
    """``container_take``'s VJP is still autograd's (builtins.grad_container_take)."""
    functions = _rule_functions(container_take) or []
    return bool(functions) and all(f is grad_container_take for f in functions)


def _rule_functions(prim: Any) -> list[Any] | None:
    """The VJP functions registered for ``prim`` through ``defvjp`` or ``defvjp_argnum``
    (which wrap them in a closure of ``autograd.core``); None for a rule set otherwise."""
    return registered(primitive_vjps.get(prim), prim)


@dataclass
class _Site:
    """What numpy_vjps registers for one primitive: named functions, and lambdas written
    in the registering call (known by their line)."""

    functions: list[Any] = field(default_factory=list)
    lines: set[int] = field(default_factory=set)

    def holds(self, f: Any) -> bool:
        if any(f is g for g in self.functions):
            return True
        code = getattr(f, "__code__", None)
        return (
            type(f) is FunctionType
            and _from_numpy_vjps(f)
            and code is not None
            and code.co_filename == numpy_vjps.__file__
            and code.co_firstlineno in self.lines
        )


@functools.cache
def _registered_by_autograd() -> dict[Any, _Site]:
    """The rules numpy_vjps registers, per primitive, read from its source: a rule of
    numpy_vjps' that the user registers for another primitive (``defvjp(np.sum,
    grad_np_mean)``) is not the one the direct adjoints follow."""
    names = vars(numpy_vjps)
    sites: dict[Any, _Site] = {}
    try:
        tree = ast.parse(inspect.getsource(numpy_vjps))
    except (OSError, SyntaxError):  # no source: no direct adjoints (autograd's VJPs run)
        return sites
    for node in ast.walk(tree):
        if not (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("defvjp", "defvjp_argnum")
            and node.args
        ):
            continue
        try:
            prim = _evaluate(node.args[0], names)
        except Exception:  # (a loop variable: those primitives take autograd's VJPs)
            continue
        site = sites.setdefault(prim, _Site())
        for arg in [*node.args[1:], *(k.value for k in node.keywords)]:
            if isinstance(arg, ast.Name) and callable(names.get(arg.id)):
                site.functions.append(names[arg.id])
            else:
                site.lines.update(n.lineno for n in ast.walk(arg) if isinstance(n, ast.Lambda))
    return sites


def _evaluate(node: ast.expr, names: dict[str, Any]) -> Any:
    """The value of ``node`` in ``names``: a name or an attribute (``anp.sin``, all but a
    few of them) looked up, anything else compiled and evaluated."""
    if isinstance(node, ast.Name):
        return names[node.id] if node.id in names else getattr(builtins, node.id)
    if isinstance(node, ast.Attribute):
        return getattr(_evaluate(node.value, names), node.attr)
    return eval(compile(ast.Expression(node), "<autograd>", "eval"), names)


def warm() -> None:
    """Read numpy_vjps' rules now (tens of milliseconds, once per process), rather than at
    the first replay of the first derivative."""
    _registered_by_autograd()


def _from_numpy_vjps(f: Any) -> bool:
    return bool(getattr(f, "__module__", None) == numpy_vjps.__name__)


def is_real(v: Any) -> bool:
    t = type(v)
    if t is float:
        return True
    if t is np.ndarray or isinstance(v, np.generic):
        return bool(v.dtype.kind == "f")
    return False


def _plain_number(v: Any) -> bool:
    return type(v) in (int, bool) or is_real(v)


def shape_of(v: Any) -> tuple[int, ...]:
    return tuple(np.shape(v))


def unbroadcast(expr: str, value_shape: tuple[int, ...], target: Any) -> str:
    """autograd's ``unbroadcast(expr, metadata(target))`` with the loop unrolled."""
    shape = shape_of(target)
    ndim = len(shape)
    cur = len(value_shape)
    while cur > ndim:
        expr = f"_usum({expr}, 0)"
        cur -= 1
    for axis, size in enumerate(shape):
        if size == 1:
            expr = f"_usum({expr}, {axis}, True)"
    return expr


def _usum(a: Any, axis: int, keepdims: bool = False) -> Any:
    """``np.sum(a, axis=axis, keepdims=keepdims)``: for an ndarray, the ``add.reduce`` call
    ``np.sum`` makes, without its Python layer."""
    if type(a) is np.ndarray:
        return _ADD_REDUCE(a, axis, None, None, keepdims)
    if keepdims:
        return np.sum(a, axis=axis, keepdims=True)
    return np.sum(a, axis=axis)


_ADD_REDUCE: Any = np.add.reduce


def _real_if_complex(a: Any) -> Any:
    """The end of autograd's ``unbroadcast`` for a real target: ``real`` of a complex
    cotangent (which the values of this call, not its types, decide)."""
    return np.real(a) if np.iscomplexobj(a) else a


UNARY: dict[Any, str] = {
    anp.negative: "-{g}",
    anp.exp: "{ans} * {g}",
    anp.expm1: "({ans} + 1) * {g}",
    anp.log: "{g} / {x}",
    anp.log1p: "{g} / ({x} + 1)",
    anp.sin: "{g} * _cos({x})",
    anp.cos: "-{g} * _sin({x})",
    anp.tan: "{g} / _cos({x}) ** 2",
    anp.arcsin: "{g} / _sqrt(1 - {x}**2)",
    anp.arccos: "-{g} / _sqrt(1 - {x}**2)",
    anp.arctan: "{g} / (1 + {x}**2)",
    anp.sinh: "{g} * _cosh({x})",
    anp.cosh: "{g} * _sinh({x})",
    anp.tanh: "{g} / _cosh({x}) ** 2",
    anp.arcsinh: "{g} / _sqrt({x}**2 + 1)",
    anp.arccosh: "{g} / _sqrt({x}**2 - 1)",
    anp.arctanh: "{g} / (1 - {x}**2)",
    anp.square: "{g} * 2 * {x}",
    anp.sqrt: "{g} * 0.5 * {x}**-0.5",
    anp.reciprocal: "-{g} / {x}**2",
    anp.abs: "{g} * _where(_conj({x}), _conj({x}), 0.0) / _where({ans}, {ans}, 1.0)",
    anp.absolute: "{g} * _where(_conj({x}), _conj({x}), 0.0) / _where({ans}, {ans}, 1.0)",
}

BINARY: dict[Any, tuple[str, str]] = {
    anp.add: ("{g}", "{g}"),
    anp.subtract: ("{g}", "-{g}"),
    anp.multiply: ("{y} * {g}", "{x} * {g}"),
    anp.divide: ("{g} / {y}", "-{g} * {x} / {y}**2"),
    anp.true_divide: ("{g} / {y}", "-{g} * {x} / {y}**2"),
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

#: Forward operators that are the same ufunc call as the primitive, but cheaper to
#: dispatch, used when one operand is a numpy object and the others are plain numbers
#: (so the result type is the same, and no operand's own ``__add__`` or ``__radd__``
#: answers instead of the ufunc, as it would for an object with ``__array_priority__``).
#: Commutative ones may be written with their operands swapped (see :func:`_operator`).
OPERATORS: dict[Any, tuple[str, Callable[..., Any]]] = {
    anp.add: ("{x} + {y}", operator.add),
    anp.subtract: ("{x} - {y}", operator.sub),
    anp.multiply: ("{x} * {y}", operator.mul),
    anp.divide: ("{x} / {y}", operator.truediv),
    anp.true_divide: ("{x} / {y}", operator.truediv),
    anp.negative: ("-{x}", operator.neg),
}
_COMMUTATIVE = frozenset({anp.add, anp.multiply})


def _is_numpy(v: Any) -> bool:
    return type(v) is np.ndarray or type(v) in NUMPY_SCALAR_TYPES


def _is_operand(v: Any) -> bool:
    return _is_numpy(v) or type(v) in (int, float, complex, bool)


def forward(names: Names, op: Any) -> str | None:
    """A cheaper expression for an op's value than calling the primitive, or None."""
    if op.kwargs:
        return None
    f = op.fun
    if (f is getitem or f is container_take) and len(op.args) == 2:
        return f"{names.arg(op, 0)}[{names.arg(op, 1)}]"
    args = op.args
    if f not in OPERATORS or not any(map(_is_numpy, args)) or not all(map(_is_operand, args)):
        return None
    template = _operator(f, args)
    if template is None:
        return None
    if len(args) == 1:
        return template.format(x=names.arg(op, 0))
    if len(args) == 2:
        return template.format(x=names.arg(op, 0), y=names.arg(op, 1))
    return None


def _operator(f: Any, args: tuple[Any, ...]) -> str | None:
    """The operator form of ``f`` on operands like ``args`` that gives the ufunc's bits.

    An operand that is an array of one or more dimensions makes the operator call the
    ufunc itself. Otherwise numpy's scalar math answers, which agrees with the ufunc on
    every value except when both operands are NaN: which NaN (sign and payload) comes
    out depends on the order its compiled code takes them in (hunt 47: ``-x * x`` at a
    NaN gave the other sign). That order is found once per kind of operands, on NaNs of
    those kinds, and the form that gives the ufunc's NaN is used; if none does, the ufunc.
    """
    if any(type(a) is np.ndarray and a.ndim for a in args):
        return OPERATORS[f][0]
    key = (f, *(_kind(a) for a in args))
    if key not in _ORDERS:
        _ORDERS[key] = _probe(f, args)
    return _ORDERS[key]


def _kind(a: Any) -> Any:
    return (type(a), a.dtype) if type(a) is np.ndarray else type(a)


#: The form found for each (primitive, kind of each operand); None: call the ufunc.
_ORDERS: dict[tuple[Any, ...], str | None] = {}


def _probe(f: Any, args: tuple[Any, ...]) -> str | None:
    """The operator form (operands in order, else swapped for a commutative one) whose
    value is the ufunc's, bit for bit, on operands of the kinds of ``args``: every pairing
    of NaNs that differ in sign and payload, and a number."""
    if any(np.iscomplexobj(a) for a in args):
        return None  # (a complex product mixes its parts' NaNs: the ufunc)
    template, op = OPERATORS[f]
    forms: list[tuple[str, Callable[..., Any]]] = [(template, op)]
    if f in _COMMUTATIVE:
        forms.append((template.format(x="{y}", y="{x}"), lambda x, y: op(y, x)))
    cases = _pairings([_nans(a) for a in args])
    ufunc = _raw(f)
    for form, run in forms:
        try:
            if all(_same_bits(run(*case), ufunc(*case)) for case in cases):
                return form
        except Exception:
            return None
    return None


def _pairings(samples: list[list[Any]]) -> list[tuple[Any, ...]]:
    if len(samples) == 1:
        return [(a,) for a in samples[0]]
    return [(a, b) for a in samples[0] for b in samples[1]]


def _nans(a: Any) -> list[Any]:
    """NaNs of ``a``'s kind that differ in sign and payload, with a number, or only
    ``a`` for a kind that holds no NaN (an integer, a boolean)."""
    t = type(a)
    dtype = np.dtype(float) if t is float else getattr(a, "dtype", None)
    if dtype is None or dtype.kind != "f":
        return [a]
    base = np.array([np.nan, -np.nan, 1.5], dtype)
    if dtype.itemsize in (2, 4, 8):
        base.view(f"u{dtype.itemsize}")[1] += 1  # (another payload too)
    if t is float:
        return [float(v) for v in base]
    if t is np.ndarray:
        return [np.array(v, dtype) for v in base]
    return list(base)


def _same_bits(a: Any, b: Any) -> bool:
    if type(a) is not type(b):
        return False
    x, y = np.asarray(a), np.asarray(b)
    return x.dtype == y.dtype and x.tobytes() == y.tobytes()


def adjoint(names: Names, op: Any, pos: int, g: str, ans: str) -> str | None:
    """Expression for the cotangent of argument ``pos`` of ``op``, given cotangent ``g``.

    ``None`` when no direct rule applies; the generic path then calls autograd's VJP.
    """
    f = op.fun
    if not is_real(op.value) or not _plain_number(op.args[pos]):
        return None
    if not is_autograds_rule(f):
        return None
    nargs = len(op.args)
    if f in UNARY and nargs == 1 and not op.kwargs:
        return UNARY[f].format(g=g, x=names.arg(op, 0), ans=ans)
    if f in BINARY and nargs == 2 and not op.kwargs:
        if not all(_plain_number(a) for a in op.args):
            return None
        expr = BINARY[f][pos].format(g=g, x=names.arg(op, 0), y=names.arg(op, 1), ans=ans)
        if f is anp.power:
            expr = _fold_power(names, op, pos, g, ans) or expr
        if not names.trusted_cotangents:
            # autograd's own unbroadcast, which sums the axes and keeps the real part as
            # the cotangent of this call says.
            return f"_unbroadcast({expr}, {names.const(W.metadata(op.args[pos]))})"
        expr = unbroadcast(expr, shape_of(op.value), op.args[pos])
        if f is anp.power and pos == 0 and not _whole_exponent(op):
            # A Python float to a fractional power is complex when it is negative
            # (``(-1.0) ** 0.5``): autograd's unbroadcast keeps the real part, at each call.
            expr = f"_real_if_complex({expr})"
        return expr
    rule = RULES.get(f)
    return rule(names, op, pos, g) if rule is not None else None


def _whole_exponent(op: Any) -> bool:
    """``x ** y``'s adjoint raises ``x`` to a constant whole power (``x ** 2``): real."""
    if 1 in op.argnums:
        return False
    y = op.args[1]
    exponent = np.asarray(HELPERS["_where"](y, y - 1, 1.0))
    return exponent.dtype.kind in "iub" or bool(np.all(np.mod(exponent, 1) == 0))


def _fold_power(names: Names, op: Any, pos: int, g: str, ans: str) -> str | None:
    """``power``'s VJPs with the part that depends only on a constant operand computed
    once, by the same function (``x ** 2``: ``where(2, 2 - 1, 1.0)`` is a constant)."""
    x, y = op.args
    # Only what computes without a floating-point error (``log(-2.0)``) is folded: the
    # rule must meet numpy's error settings of each call, as autograd's does.
    try:
        with np.errstate(all="raise"):
            if pos == 0 and 1 not in op.argnums:
                exponent = names.const(HELPERS["_where"](y, y - 1, 1.0))
                return f"{g} * {names.arg(op, 1)} * {names.arg(op, 0)} ** {exponent}"
            if pos == 1 and 0 not in op.argnums:
                log = names.const(HELPERS["_log"](HELPERS["_where"](x, x, 1.0)))
                return f"{g} * {log} * {ans}"
    except FloatingPointError:
        return None
    return None


def _reduction(names: Names, op: Any, pos: int, g: str, mean: bool) -> str | None:
    """``repeat_to_match_shape`` of ``grad_np_sum`` / ``grad_np_mean``."""
    x = op.args[0]
    kw = dict(op.kwargs)
    axis = op.args[1] if len(op.args) > 1 else kw.pop("axis", None)
    kw.pop("keepdims", None)
    if len(op.args) > 2 or kw or pos != 0:
        return None
    shape = shape_of(x)
    if shape == ():  # repeat_to_match_shape returns (g, 1)
        return f"{g} / 1" if mean else g
    index = list(axis) if isinstance(axis, tuple) else axis
    new_shape = np.array(shape)
    new_shape[index] = 1
    expr = (
        f"_reshape({g}, {names.const(new_shape)}) + "
        f"_np_zeros({shape!r}, dtype={names.const(np.result_type(x))})"
    )
    if mean:
        reps = np.prod(np.array(shape)[index])
        expr = f"({expr}) / {names.const(reps)}"
    return expr


def _sum(names: Names, op: Any, pos: int, g: str) -> str | None:
    return _reduction(names, op, pos, g, mean=False)


def _mean(names: Names, op: Any, pos: int, g: str) -> str | None:
    return _reduction(names, op, pos, g, mean=True)


def _dot(names: Names, op: Any, pos: int, g: str) -> str | None:
    """``dot_vjp_0``/``dot_vjp_1``: autograd's adjoint helpers with constant metadata."""
    if op.kwargs or len(op.args) != 2:
        return None
    a, b = op.args
    am, bm = names.const(W.metadata(a)), names.const(W.metadata(b))
    an, bn = names.arg(op, 0), names.arg(op, 1)
    if _real_matrix(a) and _real_matrix(b):
        # The adjoint helpers' ``tensordot`` reduces, for two matrices, to one ``dot`` of
        # views of the same shape: called directly, it is the same BLAS call.
        if pos == 0:
            dtype = names.const(np.result_type(a))
            return f"_asarray(_np_dot({g}, {bn}.T), dtype={dtype})"
        dtype = names.const(np.result_type(b))
        return f"_asarray(_np_dot({g}.T, {an}).T, dtype={dtype})"
    if pos == 0:
        return f"_match_complex({an}, _dot_adjoint_0({bn}, {g}, {am}, {bm}))"
    return f"_match_complex({bn}, _dot_adjoint_1({an}, {g}, {am}, {bm}))"


def _real_matrix(v: Any) -> bool:
    return type(v) is np.ndarray and v.ndim == 2 and v.dtype.kind == "f"


def _matmul(names: Names, op: Any, pos: int, g: str) -> str | None:
    """``matmul_vjp_0``/``matmul_vjp_1`` with constant metadata."""
    if op.kwargs or len(op.args) != 2:
        return None
    a, b = op.args
    an, bn = names.arg(op, 0), names.arg(op, 1)
    if pos == 0:
        meta, nd = names.const(W.metadata(a)), np.ndim(b)
        return f"_matmul_adjoint_0({bn}, {g}, {meta}, {nd})"
    meta, nd = names.const(W.metadata(b)), np.ndim(a)
    return f"_matmul_adjoint_1({an}, {g}, {nd}, {meta})"


def _reshape_like(names: Names, op: Any, pos: int, g: str) -> str | None:
    """reshape/ravel: ``anp.reshape(g, anp.shape(x), order=order)``."""
    if pos != 0:
        return None
    order = op.kwargs.get("order")
    if set(op.kwargs) - {"order"}:
        return None
    if op.fun is anp.ravel and len(op.args) > 1:
        order = op.args[1]
    if op.fun is anp.reshape and len(op.args) > 2:
        order = op.args[2]
    return f"_reshape({g}, {shape_of(op.args[0])!r}, order={order!r})"


def _to_shape(names: Names, op: Any, pos: int, g: str) -> str | None:
    """expand_dims/squeeze: ``anp.reshape(g, anp.shape(x))``."""
    if pos != 0:
        return None
    return f"_reshape({g}, {shape_of(op.args[0])!r})"


def _transpose(names: Names, op: Any, pos: int, g: str) -> str | None:
    """``grad_transpose``: ``anp.transpose(g, argsort(axes))``."""
    if pos != 0 or set(op.kwargs) - {"axes"} or (len(op.args) > 1 and op.kwargs):
        return None
    axes = op.args[1] if len(op.args) > 1 else op.kwargs.get("axes")
    if axes is not None:
        axes = W.argsort.fun(axes) if hasattr(W.argsort, "fun") else np.argsort(axes)
    return f"_transpose({g}, {names.const(axes)})"


RULES: dict[Any, Callable[[Names, Any, int, str], str | None]] = {
    anp.sum: _sum,
    getattr(W, "_primitive_mean", anp.mean): _mean,  # (autograd < 1.7: mean itself)
    anp.dot: _dot,
    anp.matmul: _matmul,
    anp.reshape: _reshape_like,
    anp.ravel: _reshape_like,
    anp.expand_dims: _to_shape,
    anp.squeeze: _to_shape,
    anp.transpose: _transpose,
}

# Names the generated code may use: the very callables autograd's VJPs call (raw, where
# they are primitives: called on raw values a primitive calls its raw function anyway).
HELPERS: dict[str, Any] = {
    "_sum": _raw(W.sum),
    "_usum": _usum,
    "_cos": _raw(W.cos),
    "_sin": _raw(W.sin),
    "_cosh": _raw(W.cosh),
    "_sinh": _raw(W.sinh),
    "_sqrt": _raw(W.sqrt),
    "_log": _raw(W.log),
    "_conj": _raw(W.conj),
    "_real": _raw(W.real),
    "_real_if_complex": _real_if_complex,
    "_unbroadcast": numpy_vjps.unbroadcast,
    "_reshape": _raw(W.reshape),
    "_transpose": _raw(W.transpose),
    "_where": W.where if not hasattr(W.where, "fun") else W.where.fun,
    "_np_zeros": np.zeros,
    "_match_complex": numpy_vjps.match_complex,
    "_np_dot": np.dot,
    "_asarray": np.asarray,
    "_dot_adjoint_0": _raw(numpy_vjps.dot_adjoint_0),
    "_dot_adjoint_1": _raw(numpy_vjps.dot_adjoint_1),
    "_matmul_adjoint_0": numpy_vjps.matmul_adjoint_0,
    "_matmul_adjoint_1": numpy_vjps.matmul_adjoint_1,
}


# -- which primitives' output shapes follow from their inputs' shapes ----------------------


def _linalg_eig() -> Any:
    import autograd.numpy.linalg as alin

    return alin.eig


def _shape_static_set() -> set[Any]:
    import autograd.numpy.fft as afft
    import autograd.numpy.linalg as alin

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
        "where",
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
    found = {getattr(W, n) for n in names if hasattr(W, n)}
    found |= {f for f in vars(alin).values() if callable(f) and hasattr(f, "fun")}
    found |= {f for f in vars(afft).values() if callable(f) and hasattr(f, "fun")}
    return found


SHAPE_STATIC = _shape_static_set() | {container_take}
#: Ops of autograd's whose result is real or complex as the values say (their shape is not).
DTYPE_BY_VALUE = {W.real_if_close, _linalg_eig()}
_WHERE = getattr(anp, "_original_where", W.where)


def layout_static(op: Any) -> bool:
    """The op's output shape and dtype are fixed by its inputs' shapes and dtypes (which
    the key fixes, and the ops before this one).

    Others get a guard on both: Python code may read the shape of their result
    (``len(np.unique(y))``) without a trace seeing it, and a result that is real or
    complex as the values say (``eig`` of a non-symmetric matrix, ``real_if_close``, a
    primitive of the user's) changes what autograd's rules do with it.
    """
    f = op.fun
    if f is getitem:
        return 1 not in op.argnums
    if f is _WHERE:
        return len(op.args) == 3
    if f in DTYPE_BY_VALUE:
        return False
    raw = implementation(f)
    return f in SHAPE_STATIC or (isinstance(raw, np.ufunc) and raw.signature is None)


def layouts(v: Any) -> Any:
    """Shape and dtype of an array (or number), nested for a tuple or list of them."""
    t = type(v)
    if t is tuple or t is list:
        return tuple(layouts(e) for e in v)
    if t is np.ndarray:
        return (v.shape, v.dtype.str)
    return (np.shape(v), np.asarray(v).dtype.str)


def basic_index(idx: Any) -> bool:
    """True for indices made of ints, slices, None and Ellipsis (no repeated elements)."""
    items = idx if type(idx) is tuple else (idx,)
    return all(type(i) in (int, slice, type(None), type(Ellipsis)) for i in items)
