"""Dependency kinds: the things whose change makes a cached derivative stale.

Each kind knows how to *probe* its current state cheaply and without touching user
objects in ways they could object to: probes compare identities (``id`` of objects
that the probe keeps alive, so ids cannot be reused) and, for the few arrays and
containers a derivative actually reads, a content digest. They never call ``repr``,
``__eq__``, ``__hash__`` or ``__getattr__`` of user objects, so hostile objects in the
namespace cannot break or slow down the watcher.
"""

from __future__ import annotations

import hashlib
import zlib
from collections.abc import Hashable, Mapping
from types import FunctionType
from typing import Any

import numpy as np
from autograd.core import primitive_vjps


class _Missing:
    __slots__ = ()

    def __repr__(self) -> str:
        return "<missing>"


#: The state of a name that is not bound.
MISSING: Any = _Missing()
#: The state of something that could not be probed (a hostile object raised).
UNREADABLE: Any = _Missing()

#: Containers with more elements than this are watched by identity only.
MAX_CONTAINER_LEN = 1000
#: Arrays up to this size get a cryptographic digest; larger ones a CRC.
_BLAKE_BYTES = 1 << 16


class Probe:
    """A dependency's state at one moment: ``state`` to compare, ``keep`` to keep ids valid."""

    __slots__ = ("keep", "state")

    def __init__(self, state: Hashable, keep: Any) -> None:
        self.state = state
        self.keep = keep


class Dep:
    """Something a derivative depends on. Subclasses set ``key`` and ``label``."""

    __slots__ = ("key", "label")
    key: Hashable
    label: str

    def probe(self) -> Probe:
        raise NotImplementedError

    def same(self, last: Probe) -> bool:
        """Cheap check that nothing changed since ``last`` (the sweep's hot path).

        The default re-probes; kinds on the hot path override it with identity checks
        that allocate nothing.
        """
        return self.probe().state == last.state

    def describe(self, old: Probe, new: Probe) -> str:
        """A short verb phrase for the change from ``old`` to ``new`` ("redefined")."""
        raise NotImplementedError


class BindingDep(Dep):
    """A name in a namespace (module or user ``dict``, class ``mappingproxy``)."""

    __slots__ = ("name", "ns")

    def __init__(self, ns: Mapping[str, Any], name: str, label: str) -> None:
        self.ns = ns
        self.name = name
        self.key = ("bind", id(ns), name)
        self.label = label

    def probe(self) -> Probe:
        try:
            value = self.ns.get(self.name, MISSING)
        except Exception:
            value = UNREADABLE
        return Probe(id(value), value)

    def same(self, last: Probe) -> bool:
        try:
            return self.ns.get(self.name, MISSING) is last.keep
        except Exception:
            return last.keep is UNREADABLE

    def describe(self, old: Probe, new: Probe) -> str:
        if new.keep is MISSING:
            return "deleted"
        if old.keep is MISSING:
            return "defined"
        if type(new.keep) is FunctionType or type(old.keep) is FunctionType:
            return "redefined"
        return "rebound"


def function_fingerprint(fn: FunctionType) -> Probe:
    """Code, defaults, closure contents, ``__wrapped__`` and gradient rule of ``fn``.

    IPython's autoreload swaps ``__code__`` in place, and ``defvjp`` replaces a
    primitive's rule without rebinding any name, so identity of ``fn`` alone misses both.
    """
    closure = fn.__closure__
    cells: tuple[Any, ...] = ()
    if closure:
        contents = []
        for cell in closure:
            try:
                contents.append(cell.cell_contents)
            except ValueError:  # an empty cell
                contents.append(MISSING)
        cells = tuple(contents)
    wrapped = fn.__dict__.get("__wrapped__", MISSING)
    rule = primitive_vjps.get(fn, MISSING)
    objs = (fn.__code__, fn.__defaults__, fn.__kwdefaults__, wrapped, rule, *cells)
    return Probe(tuple(map(id, objs)), objs)


class FunctionDep(Dep):
    """A user function: its code and everything baked into the function object."""

    __slots__ = ("fn",)

    def __init__(self, fn: FunctionType, label: str) -> None:
        self.fn = fn
        self.key = ("fn", id(fn))
        self.label = label

    def probe(self) -> Probe:
        return function_fingerprint(self.fn)

    def same(self, last: Probe) -> bool:
        fn = self.fn
        keep = last.keep
        if (
            fn.__code__ is not keep[0]
            or fn.__defaults__ is not keep[1]
            or fn.__kwdefaults__ is not keep[2]
            or primitive_vjps.get(fn, MISSING) is not keep[4]
            or fn.__dict__.get("__wrapped__", MISSING) is not keep[3]
        ):
            return False
        closure = fn.__closure__
        if closure:
            for cell, old in zip(closure, keep[5:], strict=True):
                try:
                    if cell.cell_contents is not old:
                        return False
                except ValueError:
                    if old is not MISSING:
                        return False
        return True

    def describe(self, old: Probe, new: Probe) -> str:
        o, n = old.state, new.state
        assert isinstance(o, tuple) and isinstance(n, tuple)
        if o[0] != n[0]:
            return "code changed in place"
        if o[4] != n[4]:
            return "gradient rule changed"
        if o[1] != n[1] or o[2] != n[2]:
            return "defaults changed"
        if o[3] != n[3]:
            return "wrapped function changed"
        return "closure changed"


class RuleDep(Dep):
    """The gradient rule of a library primitive (``defvjp`` on ``np.sin`` replaces it)."""

    __slots__ = ("prim",)

    def __init__(self, prim: Any, label: str) -> None:
        self.prim = prim
        self.key = ("rule", id(prim))
        self.label = label

    def probe(self) -> Probe:
        rule = primitive_vjps.get(self.prim, MISSING)
        return Probe(id(rule), (self.prim, rule))

    def same(self, last: Probe) -> bool:
        return primitive_vjps.get(self.prim, MISSING) is last.keep[1]

    def describe(self, old: Probe, new: Probe) -> str:
        return "gradient rule changed"


def array_digest(arr: np.ndarray, max_bytes: int) -> Hashable:
    """Shape, dtype and a content digest (``None`` above ``max_bytes``)."""
    head = (arr.shape, arr.dtype.str)
    if arr.dtype.hasobject or arr.nbytes > max_bytes:
        return head
    buf = arr if arr.flags.c_contiguous else np.ascontiguousarray(arr)
    if arr.nbytes <= _BLAKE_BYTES:
        return (*head, hashlib.blake2b(buf.data, digest_size=16).digest())
    return (*head, zlib.crc32(buf.data), arr.nbytes)


class ContentDep(Dep):
    """In-place changes of an array, list, dict or set that a derivative reads."""

    __slots__ = ("max_bytes", "obj")

    def __init__(self, obj: Any, label: str, max_bytes: int = 1 << 20) -> None:
        self.obj = obj
        self.key = ("content", id(obj))
        self.label = label
        self.max_bytes = max_bytes

    @staticmethod
    def applies_to(obj: Any) -> bool:
        t = type(obj)
        return t in (list, dict, set) or issubclass(t, np.ndarray)

    def probe(self) -> Probe:
        obj = self.obj
        t = type(obj)
        try:
            if issubclass(t, np.ndarray):
                return Probe(array_digest(obj, self.max_bytes), None)
            if len(obj) > MAX_CONTAINER_LEN:
                return Probe(("large", len(obj)), None)
            if t is dict:
                items = list(obj.items())
                return Probe(tuple((id(k), id(v)) for k, v in items), items)
            elems = list(obj)
            return Probe(tuple(map(id, elems)), elems)
        except Exception:
            return Probe(("unreadable",), None)

    def describe(self, old: Probe, new: Probe) -> str:
        o, n = old.state, new.state
        if (
            issubclass(type(self.obj), np.ndarray)
            and isinstance(o, tuple)
            and isinstance(n, tuple)
            and o[:2] != n[:2]
        ):
            return "changed shape or dtype in place"
        return "changed in place"
