"""Cache keys: which entry a call belongs to.

An entry is keyed by its target (the name a handle follows, or a fixed object), the
transform, the differentiated argument(s), the backend and the *signature* of the call:
types, shapes and dtypes of array arguments, and the values of a few kinds of argument
that code typically branches on (``str``, ``bool``, ``None``). Integers and floats are
keyed by type only: an iteration counter passed by an optimizer must not make a new
entry per call. Whether the code read a value is the guard's business: an entry's
variants check the non-differentiated arguments they depend on (``snapshot.Guard``).
"""

from __future__ import annotations

import enum
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any

import numpy as np

from .prints import key_print

Signature = Hashable
Argnum = int | tuple[int, ...]


class Transform(enum.Enum):
    """The derivative a handle computes (autograd's names)."""

    GRAD = "grad"
    VALUE_AND_GRAD = "value_and_grad"
    ELEMENTWISE_GRAD = "elementwise_grad"
    JACOBIAN = "jacobian"
    HESSIAN = "hessian"
    JIT = "jit"  # no derivative: the function itself, jitted (the JAX backend only)


_BY_VALUE = (bool, str, bytes, type(None))
_JAX_TYPES: dict[type, bool] = {}


def is_jax_array_type(t: type) -> bool:
    """A jax Array or tracer type, found without importing jax or running user code."""
    known = _JAX_TYPES.get(t)
    if known is not None:
        return known
    module = type.__dict__["__module__"].__get__(t)
    root = module.partition(".")[0] if type(module) is str else ""
    found = False
    if root in ("jax", "jaxlib"):
        attrs = [type.__dict__["__dict__"].__get__(c) for c in t.__mro__]
        found = any("shape" in a for a in attrs) and any("dtype" in a for a in attrs)
    if root in ("builtins", "numpy", "jax", "jaxlib"):
        _JAX_TYPES[t] = found  # library types only: user classes come and go with cells
    return found


class Unkeyable(Exception):
    """An argument nested deeper than :data:`MAX_KEY_DEPTH` (a list that contains
    itself): it makes no key, and the call runs the code (see ``handles``)."""


#: How deep an argument's lists, tuples and dicts are followed into its key.
MAX_KEY_DEPTH = 64


def arg_signature(x: Any, jax_backend: bool = False, depth: int = 0) -> Hashable:
    """The part of a key one argument contributes. For the JAX backend a numpy array
    keys like a JAX array of its shape and dtype: ``jax.jit`` takes either the same way
    (the entry's variant checks that the dtype is one JAX keeps, or misses). Raises
    :class:`Unkeyable` for containers nested past :data:`MAX_KEY_DEPTH`."""
    t = type(x)
    if t is float or t is int or t is complex:
        return t.__name__
    if t is np.ndarray:
        return ("jax", x.shape, x.dtype) if jax_backend else (x.shape, x.dtype.str)
    if t in _BY_VALUE:
        return (t.__name__, x)
    if is_jax_array_type(t):
        return ("jax", x.shape, x.dtype)
    if t in _NUMPY_SCALARS:  # (numpy's own: autograd has no vector space for a subclass)
        return ("scalar", x.dtype.str)
    if t is tuple or t is list or t is dict:
        if depth >= MAX_KEY_DEPTH:
            raise Unkeyable(f"an argument nests lists, tuples or dicts over {depth} deep")
        if t is dict:
            inner = ((key_print(k), arg_signature(v, jax_backend, depth + 1)) for k, v in x.items())
            return ("dict", *inner)
        return (t.__name__, *(arg_signature(v, jax_backend, depth + 1) for v in x))
    if issubclass(t, np.ndarray):
        return (*_type_names(t), x.shape, x.dtype.str)
    # Anything else by its type's name; its identity would pin it in memory.
    return ("object", *_type_names(t))


_NUMPY_SCALARS = frozenset(np.sctypeDict.values())


def _type_names(t: type) -> tuple[str, str]:
    """A type's module and qualified name (two classes of one name in two modules or
    cells differ). Read through type's own descriptors: a metaclass's
    ``__getattribute__`` must not run."""
    names = (type.__dict__["__module__"].__get__(t), type.__dict__["__qualname__"].__get__(t))
    module, qualname = (n if type(n) is str else "?" for n in names)
    return module, qualname


def call_signature(
    args: tuple[Any, ...], kwargs: dict[str, Any], jax_backend: bool = False
) -> Signature:
    """The part of a key that depends on the call's arguments."""
    sig = tuple(arg_signature(a, jax_backend) for a in args)
    if kwargs:
        named = ((k, arg_signature(v, jax_backend)) for k, v in kwargs.items())
        return (sig, tuple(sorted(named)))
    return sig


def check_argnum(argnum: Any) -> Argnum:
    """``argnum`` as the key stores it; a clear error for anything else."""
    if type(argnum) is int:
        return argnum
    if type(argnum) in (tuple, list) and argnum and all(type(a) is int for a in argnum):
        return tuple(argnum)
    raise TypeError(f"argnum must be an int or a non-empty tuple of ints, not {argnum!r}")


@dataclass(frozen=True)
class TargetKey:
    """A followed binding (``kind="name"``: namespace id, name, attribute path) or a
    fixed object (``kind="object"``: its id, valid while the target holds it)."""

    kind: str
    ident: int
    path: tuple[str, ...] = ()


@dataclass(frozen=True)
class EntryKey:
    """Everything that makes one cache entry."""

    target: TargetKey
    transform: Transform
    argnum: Argnum
    signature: Signature
    backend: str
    options: tuple[tuple[str, Any], ...] = ()  # rj.jit's static_argnums, donate_argnums...
