"""Cache keys for arguments: shapes and dtypes for arrays, values for small constants.

Arrays and floats are keyed by type, shape and dtype, never by value: a new value of the
same shape hits the same cache entry (a compiled tape guards whatever control flow the
values steer). Integers, strings and other small hashables are keyed by value, since
code typically branches or loops on them.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

import numpy as np

_FLOAT: Hashable = ("float",)
_COMPLEX: Hashable = ("complex",)
_VALUE_TYPES = (int, bool, str, bytes, type(None))


def arg_signature(x: Any) -> Hashable:
    t = type(x)
    if t is float:
        return _FLOAT
    if t is np.ndarray:
        return (x.shape, x.dtype.str)
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
    return ("object", t.__module__, t.__qualname__)


def call_signature(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Hashable:
    """The part of a cache key that depends on the call's arguments."""
    if kwargs:
        return (
            tuple(map(arg_signature, args)),
            tuple(sorted((k, arg_signature(v)) for k, v in kwargs.items())),
        )
    return tuple(map(arg_signature, args))
