"""A print of a value: a hashable summary equal for equal values, kept to compare later.

One printer serves two questions, with their own reach:

- :data:`ARGUMENTS` — has an entry met these argument values before? (``sightings``).
  Cheap and narrow: builtin containers up to 4 deep and 256 long, dicts with string keys,
  exact ndarrays and numpy scalars. What it cannot print is traced, as for a repeat.
- :data:`CONSTANTS` — has a constant a tape keeps changed since an op used it? (the
  tape's recorder). Wide: arrays of any class, deques, ``array.array``, ``bytearray``,
  dicts with any keys, any length, 16 deep, and the instance dict of a plain object (a
  config a user primitive reads). What it cannot print stays unchecked by the tape.

Arrays and long strings are printed by a 64-bit digest of their bytes, never kept.
"""

from __future__ import annotations

import array
import collections
import enum
import types
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any

import numpy as np
import xxhash

from .digest import array_digest, dtype_print


class _Unequal:
    """Equal to nothing but itself: a key whose state has no print matches no other call's."""

    __slots__ = ()


class Unprintable(Exception):
    """A value without a print within the reach asked for."""


@dataclass(frozen=True, slots=True)
class Reach:
    """How far a print looks."""

    #: Containers nested deeper than this are unprintable.
    depth: int
    #: Containers longer than this are unprintable (None: any length).
    length: int | None
    #: Subclasses of ndarray and numpy scalars, deques, ``array.array``, ``bytearray``,
    #: dict keys of any type and plain objects' instance dicts; else only builtin
    #: containers, string keys, exact ndarrays and numpy's own scalars.
    wide: bool


ARGUMENTS = Reach(depth=4, length=256, wide=False)
CONSTANTS = Reach(depth=16, length=None, wide=True)

_SCALARS = frozenset({int, bool, type(None)})
_LONG = 64  # strings and bytes longer than this are printed by a digest
_SEQUENCES = frozenset({list, tuple})
_WIDE_SEQUENCES = frozenset({list, tuple, collections.deque})


def print_of(value: Any, reach: Reach, depth: int = 0) -> Hashable:
    """The print of ``value`` (:class:`Unprintable` if it has none within ``reach``)."""
    t = type(value)
    if t is float:
        return (t, value.hex())  # tells 0.0 from -0.0, and every nan alike
    if t in _SCALARS:
        return (t, value)
    if t is complex:
        return (t, value.real.hex(), value.imag.hex())
    if t is str or t is bytes:
        if len(value) <= _LONG:
            return (t, value)
        data = value.encode("utf-8", "surrogatepass") if t is str else value
        return (t, len(value), xxhash.xxh3_64_intdigest(data))
    if t is np.ndarray or (reach.wide and isinstance(value, np.ndarray)):
        if value.dtype.hasobject:
            raise Unprintable
        return (t, value.shape, dtype_print(value.dtype), array_digest(np.asarray(value)))
    if isinstance(value, np.generic) and (reach.wide or t.__module__ == "numpy"):
        if value.dtype.hasobject:
            raise Unprintable
        return (t, dtype_print(value.dtype), value.tobytes())
    if depth >= reach.depth:
        raise Unprintable
    if t in (_WIDE_SEQUENCES if reach.wide else _SEQUENCES):
        _check_length(value, reach)
        elems = tuple(print_of(v, reach, depth + 1) for v in value)
        return (t, elems, value.maxlen) if t is collections.deque else (t, elems)
    if t is dict:
        _check_length(value, reach)
        if not reach.wide and any(type(k) is not str for k in value):
            raise Unprintable
        return (t, tuple((key_print(k), print_of(v, reach, depth + 1)) for k, v in value.items()))
    if reach.wide:
        if isinstance(value, _CONTAINERS):  # (a subclass: OrderedDict, a namedtuple, a user's)
            items = print_of(_plain(value), reach, depth + 1)
            return (t, items, _attributes_print(value, reach, depth))
        if t is array.array:
            return (t, value.typecode, value.tobytes())
        if t is bytearray:
            return (t, bytes(value))
        attrs = attributes(value)
        if attrs is not None:
            return (t, print_of(attrs, reach, depth + 1))
    raise Unprintable


def key_print(k: Any) -> Hashable:
    """A dict key with its type, floats by their bits: keys that are equal but not alike
    (``1``, ``True``, ``1.0``, ``np.int64(1)``; ``0.0`` and ``-0.0``) are different inputs
    (code may branch on them, and a gradient dict is keyed by the caller's key objects).
    A plain object's key also carries the print of its attributes (an ``Enum`` member is
    itself)."""
    t = type(k)
    if t is float:
        return (t, k.hex())
    if t is complex:
        return (t, k.real.hex(), k.imag.hex())
    if t is tuple:
        return (t, *(key_print(v) for v in k))
    if isinstance(k, np.generic):
        return (t, k.tobytes())
    if isinstance(k, enum.Enum):
        return (t, k)
    attrs = attributes(k)
    if attrs is None:
        # Slots hold state no print here reads: such a key matches no other call's.
        return (t, k, _Unequal()) if slot_members(t) else (t, k)
    # An object with attributes (a user's class with its own ``__eq__`` and ``__hash__``):
    # a dict finds an equal key, but the code may read what the equality ignores.
    try:
        return (t, k, print_of(attrs, CONSTANTS, 1))
    except Unprintable:
        return (t, k, _Unequal())


#: Containers whose subclasses the wide reach prints by their items (read through the base
#: class, so that no overridden ``__iter__`` or ``items`` runs) and their attributes.
_CONTAINERS = (list, tuple, dict, collections.deque)


def _plain(value: Any) -> Any:
    """The items of a container subclass, as the builtin container they are."""
    if isinstance(value, dict):
        return dict(dict.items(value))
    if isinstance(value, list):
        return list(list.__iter__(value))
    if isinstance(value, tuple):
        return tuple(tuple.__iter__(value))
    return list(collections.deque.__iter__(value))


def _attributes_print(value: Any, reach: Reach, depth: int) -> Hashable:
    attrs = attributes(value)
    return None if attrs is None else print_of(attrs, reach, depth + 1)


def _check_length(value: Any, reach: Reach) -> None:
    if reach.length is not None and len(value) > reach.length:
        raise Unprintable


def slot_members(cls: type) -> list[tuple[str, Any]]:
    """The slot descriptors of ``cls`` and its bases (``__weakref__`` aside): state an
    instance keeps outside any dict, read without running the class's own lookups."""
    found = []
    for c in type.__dict__["__mro__"].__get__(cls):
        for name, member in type.__dict__["__dict__"].__get__(c).items():
            if type(member) is types.MemberDescriptorType and name != "__weakref__":
                found.append((name, member))
    return found


def attributes(value: Any) -> dict[str, Any] | None:
    """A plain object's instance dict (not a function's, class's or module's), or None."""
    if isinstance(value, _NOT_OBJECTS):
        return None
    try:
        attrs = object.__getattribute__(value, "__dict__")
    except Exception:
        return None
    return attrs if type(attrs) is dict else None


_NOT_OBJECTS = (type, types.FunctionType, types.BuiltinFunctionType, types.ModuleType, np.ufunc)
