"""Cache keys for arguments: shapes and dtypes for arrays, values for small constants.

Arrays and floats are keyed by type, shape and dtype, never by value: a new value of the
same shape hits the same cache entry (a compiled tape guards whatever control flow the
values steer). Integers, strings and other small hashables are keyed by value, since
code typically branches or loops on them.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any

import numpy as np

_FLOAT: Hashable = ("float",)
_COMPLEX: Hashable = ("complex",)
_VALUE_TYPES = (int, bool, str, bytes, type(None))
_JAX_TYPES: dict[type, bool] = {}


def _is_jax_array_type(t: type) -> bool:
    """A jax Array or tracer type, found without importing jax or running user code.

    Answers for builtin, numpy and jax types are remembered; user classes are not (they
    come and go with cells, and the memo would keep them alive).
    """
    module = type.__dict__["__module__"].__get__(t)
    root = module.partition(".")[0] if type(module) is str else ""
    found = False
    if root in ("jax", "jaxlib"):
        attrs = [type.__dict__["__dict__"].__get__(c) for c in t.__mro__]
        found = any("shape" in a for a in attrs) and any("dtype" in a for a in attrs)
    if root in ("builtins", "numpy", "jax", "jaxlib"):
        _JAX_TYPES[t] = found
    return found


def arg_signature(x: Any) -> Hashable:
    t = type(x)
    if t is float:
        return _FLOAT
    if t is np.ndarray:
        return (x.shape, x.dtype.str)
    jax_array = _JAX_TYPES.get(t)
    if jax_array is None:
        jax_array = _is_jax_array_type(t)
    if jax_array:  # immutable; keyed like numpy arrays, by shape and dtype
        return ("jax", x.shape, x.dtype)
    if t is complex:
        return _COMPLEX
    if t in _VALUE_TYPES:
        return (t.__name__, x)
    if issubclass(t, np.generic):
        return ("scalar", x.dtype.str)
    if t is tuple or t is list:
        return (t.__name__, *map(arg_signature, x))
    if t is dict:
        return ("dict", *((k, arg_signature(v)) for k, v in x.items()))
    if issubclass(t, np.ndarray):
        return (t.__name__, x.shape, x.dtype.str)
    # Anything else is keyed by its type only; its identity would pin it in memory.
    # Read through type's own descriptors: a metaclass's __getattribute__ must not run.
    names = (type.__dict__["__module__"].__get__(t), type.__dict__["__qualname__"].__get__(t))
    return ("object", *(n if type(n) is str else "?" for n in names))


def shape_free_signature(x: Any) -> Hashable:
    """Like ``arg_signature``, but arrays are keyed by their type alone.

    For compilers whose compiled functions dispatch on shapes and dtypes themselves, as
    ``jax.jit`` does: one entry serves them all.
    """
    t = type(x)
    if t is np.ndarray:
        return ("ndarray",)
    jax_array = _JAX_TYPES.get(t)
    if jax_array is None:
        jax_array = _is_jax_array_type(t)
    if jax_array:
        return ("jax",)
    if t is tuple or t is list:
        return (t.__name__, *map(shape_free_signature, x))
    if t is dict:
        return ("dict", *((k, shape_free_signature(v)) for k, v in x.items()))
    return arg_signature(x)


def call_signature(
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    key: Callable[[Any], Hashable] = arg_signature,
) -> Hashable:
    """The part of a cache key that depends on the call's arguments."""
    if kwargs:
        return (
            tuple(map(key, args)),
            tuple(sorted((k, key(v)) for k, v in kwargs.items())),
        )
    return tuple(map(key, args))
