"""Content digests of arrays and buffers, at memory speed.

A guard compares the digest an array had when a derivative was built with its digest
now: XXH3 (64 bit) runs at memory bandwidth (about 1 ms for 30 MB here), so checking an
array a derivative reads costs less than the derivative's own pass over it.
"""

from __future__ import annotations

import copy
from collections.abc import Hashable, Mapping
from typing import Any

import numpy as np
import xxhash

_hash = xxhash.xxh3_64_intdigest


def array_digest(arr: np.ndarray) -> int:
    """XXH3 of the array's elements in C order (a copy only for non-contiguous views)."""
    if not arr.flags.c_contiguous:
        arr = np.ascontiguousarray(arr)
    return _hash(arr)  # type: ignore[arg-type]


def buffer_digest(obj: Any) -> int:
    """XXH3 of anything with the buffer protocol (``bytearray``, ``array.array``)."""
    view = memoryview(obj)
    if not view.c_contiguous:
        return _hash(view.tobytes())
    return _hash(view.cast("B") if view.ndim != 1 or view.format != "B" else view)


def frozen_dtype(dtype: np.dtype[Any]) -> np.dtype[Any]:
    """``dtype`` as it is now. A structured dtype is mutable (``a.dtype.names = ('b',
    'a')`` renames fields in place, in the array's own dtype object): it is copied."""
    return copy.deepcopy(dtype) if dtype.names is not None else dtype


def dtype_print(dtype: np.dtype[Any]) -> Hashable:
    """A dtype as a value: its type string, and a structured dtype's fields by name
    (``|V16`` for any two float fields, whatever their names)."""
    return dtype.str if dtype.names is None else (dtype.str, str(dtype.descr))


def dtype_state(dtype: np.dtype[Any]) -> Hashable:
    """A dtype's whole value, nested ones included: a subarray's base and a structured
    dtype's fields (each a dtype of its own, whose names can change in place)."""
    if dtype.subdtype is not None:
        base, shape = dtype.subdtype
        return ("subarray", dtype_state(base), shape)
    if dtype.names is None:
        return str(dtype.str)
    fields: Mapping[str, tuple[Any, ...]] = dtype.fields or {}
    return (
        dtype.str,
        dtype.isalignedstruct,
        tuple((n, dtype_state(fields[n][0]), *fields[n][1:]) for n in dtype.names),
    )
