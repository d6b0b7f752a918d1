"""The JAX compiler: each cache entry owns one ``jax.jit`` of a JAX transform.

``jax.jit(jax.grad(h))`` keys its cache on ``h``, shapes and static arguments, not on
what ``h`` calls or reads, so it answers stale after a callee or a global array changes,
and ``jax.clear_caches()`` throws every compiled function away. Here every entry gets its
own jitted function, checked before each call by the same guard as any entry (the code
and data the trace read, which XLA baked into the executable), and dropped with the
entry when that guard fails, so only affected entries are traced and compiled again.

Non-differentiated Python scalars (``int``, ``float``, ``str``...) are *static*, as they
are Python values to an unjitted ``jax.grad`` (a float traced as float32 would lose
precision the oracle keeps); arrays are traced. Arguments the function never reads are
not passed into the trace at all (an optimizer's iteration counter does not recompile).
Code that needs concrete values under ``jax.jit`` runs the unjitted transform instead,
as do functions with effects: correct, slower, and reported.

This module imports jax; it is imported only when the "jax" compiler is first used.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable
from types import BuiltinFunctionType, FunctionType
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ..code import is_user_code, unread_arguments
from ..guard import Guard
from ..keys import Transform
from ..nodes import Scalar
from ..readers import FixedReader
from .base import Miss, PythonVariant, Request, Traced, Variant

#: JAX caches that hold compiled executables, lowerings or device facts. They are keyed
#: on traced programs, not on Python functions, so they never answer for old code.
_KEEP = ("xla_primitive_callable", "compil", "lower", "hlo", "device", "backend", "sharding")
#: Referents of weakly keyed JAX cache entries that are traced programs, not Python code.
_PROGRAM_TYPES = frozenset({"ClosedJaxpr", "Jaxpr", "Module", "Primitive"})
_STATIC_TYPES = (int, float, complex, bool, str, bytes, type(None))
#: JAX settings that change what a trace computes.
_CONFIG = ("jax_enable_x64", "jax_default_matmul_precision", "jax_numpy_rank_promotion")

#: Errors of code that needs a concrete value where ``jax.jit`` gives it a tracer.
NEEDS_CONCRETE: tuple[type[BaseException], ...] = (
    jax.errors.ConcretizationTypeError,
    jax.errors.TracerArrayConversionError,
    jax.errors.TracerIntegerConversionError,
    jax.errors.TracerBoolConversionError,
    jax.errors.NonConcreteBooleanIndexError,
)


def _elementwise_grad(fun: Callable[..., Any], argnums: Any = 0) -> Callable[..., Any]:
    """autograd's ``elementwise_grad``: the VJP with ones, i.e. the gradient of the sum."""

    def summed(*args: Any, **kwargs: Any) -> Any:
        return jnp.sum(fun(*args, **kwargs))

    return jax.grad(summed, argnums)


def _identity(fun: Callable[..., Any], argnums: Any = 0) -> Callable[..., Any]:
    return fun


TRANSFORMS: dict[Transform, Callable[..., Any]] = {
    Transform.GRAD: jax.grad,
    Transform.VALUE_AND_GRAD: jax.value_and_grad,
    Transform.ELEMENTWISE_GRAD: _elementwise_grad,
    Transform.JACOBIAN: jax.jacobian,
    Transform.HESSIAN: jax.hessian,
    Transform.JIT: _identity,
}


def reference(fn: Any, request: Request, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """A fresh, unjitted JAX computation: what the "jax" compiler must agree with."""
    return TRANSFORMS[request.transform](fn, request.argnum)(*args, **kwargs)


def _is_static(x: Any) -> bool:
    t = type(x)
    if t in _STATIC_TYPES:
        return True
    return (t is tuple) and all(map(_is_static, x))


def _library_only(obj: Any, depth: int = 0) -> bool:
    """True if ``obj`` is library code that reaches no user code (by type checks only)."""
    t = type(obj)
    if t is FunctionType:
        if is_user_code(obj.__code__) or depth > 3:
            return False
        for cell in obj.__closure__ or ():
            try:
                value = cell.cell_contents
            except ValueError:
                continue
            if callable(value) and not _library_only(value, depth + 1):
                return False
        wrapped = obj.__dict__.get("__wrapped__")
        return wrapped is None or _library_only(wrapped, depth + 1)
    if t is BuiltinFunctionType or t.__name__ in _PROGRAM_TYPES:
        return True
    if t is functools.partial:
        return _library_only(obj.func, depth + 1) and not any(
            callable(a) for a in (*obj.args, *obj.keywords.values())
        )
    return False  # anything else might wrap user code: treat it as user code


def clear_user_traces() -> None:
    """Drop JAX's cached traces of user code; keep everything else.

    ``jax.jit``-wrapped callees and ``lax.scan`` bodies are traced once and cached by JAX
    on the function object: a cached trace runs no Python (no recorder would see what it
    calls) and holds the values it read then. Before a build, every weakly keyed cache
    entry whose key is (or wraps) user code is evicted; traces of library functions and
    compiled executables stay. On JAX versions without these internals, everything goes.
    """
    try:
        from jax._src import util

        caches = list(util._caches.items())
    except (ImportError, AttributeError):  # pragma: no cover - other jax versions
        clear_all: Callable[[], None] = jax.clear_caches  # (untyped in some jax versions)
        clear_all()
        return
    for cache, name in caches:
        if any(k in name for k in _KEEP):
            continue
        evict = getattr(cache, "evict_weakref", None)
        keys = getattr(cache, "cache_keys", None)
        if evict is None or keys is None:
            cache.cache_clear()
            continue
        try:
            referents = {id(r): r for r in (_referent(k) for k in keys()) if r is not None}
            for r in referents.values():
                if not _library_only(r):
                    evict(r)
        except Exception:  # pragma: no cover - a cache of another shape: start it afresh
            cache.cache_clear()


def _referent(key: Any) -> Any:
    if type(key) is tuple and key and type(key[0]) is weakref.ReferenceType:
        return key[0]()
    return None


def _canonicalizer() -> Callable[[Any], Any] | None:
    try:
        from jax._src import dtypes
    except ImportError:  # pragma: no cover - other jax versions
        return None
    found: Callable[[Any], Any] | None = getattr(dtypes, "canonicalize_value", None)
    return found


_CANONICALIZE = _canonicalizer()


def sync_copies(arrays: list[Any]) -> bool:
    """Make JAX's cached conversions of these numpy arrays equal to their contents now.

    Without x64, JAX converts a float64 (int64, complex128) numpy array to a float32 copy
    and keeps that copy in a cache keyed weakly on the array for as long as anything holds
    the copy (a kept ``jax.make_jaxpr``, a ``jax.vjp`` function, an executable). After the
    array changes in place, JAX's conversions — and so a fresh ``jax.grad`` — still use the
    old copy. Each copy found out of date is rewritten in place with the current values
    (what the copy stands for; with x64 on the same objects are views, and behave so).
    Returns True if one was.
    """
    canonical = _CANONICALIZE
    if canonical is None:
        return False
    stale = False
    seen: set[int] = set()
    for a in arrays:
        if type(a) is not np.ndarray or id(a) in seen or a.size == 0:
            continue
        seen.add(id(a))
        try:
            copy = canonical(a)
        except Exception:  # not something JAX converts: nothing cached for it
            continue
        if copy is a or not isinstance(copy, np.ndarray) or copy.dtype == a.dtype:
            continue
        if copy.shape != a.shape or np.shares_memory(copy, a):
            continue
        fresh = np.asarray(a, dtype=copy.dtype)
        if fresh.tobytes() != copy.tobytes():
            stale = True
            if copy.flags.writeable:
                copy[...] = fresh
            else:  # pragma: no cover - a read-only copy: JAX will answer for the old data
                raise RuntimeError(
                    "JAX holds a read-only out-of-date copy of an array the function reads"
                )
    return stale


def _config_guard() -> list[Any]:
    """Guards on the JAX settings a trace depends on (x64 turned on mid-notebook)."""
    out = []
    for name in _CONFIG:
        value = getattr(jax.config, name, None)
        if value is None or type(value) not in (bool, str, int):
            continue
        reader = FixedReader(functools.partial(getattr, jax.config, name))
        out.append((reader, Scalar(f"jax.config.{name}", value)))
    return out


class _Retrace(Exception):
    """``jax.jit`` started tracing again (a new static value or weak type): that trace
    must run under the engine's recorder, as a build, not inside this variant."""


class JaxVariant:
    """One entry's ``jax.jit``: static and unread arguments split off, the rest traced.

    The jitted function is valid for any traced argument values (``jax.jit`` checks their
    shapes and dtypes itself); the guard holds only the code and data the trace read.
    """

    replays_python = False
    any_shapes = True

    def __init__(self, jitted: Any, plan: _Plan, guard: Guard) -> None:
        self._jitted = jitted
        self._plan = plan
        self.guard = guard
        self.note = ""

    def run(self, fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        try:
            return self._jitted(*self._plan.pass_args(args), **kwargs)
        except _Retrace:
            return Miss("jax.jit would trace again (new static arguments or types)")

    def describe(self) -> str:
        return "jax.jit"


class _Plan:
    """Which arguments go into the jitted function, and which of them are static."""

    def __init__(
        self,
        args: tuple[Any, ...],
        diff: tuple[int, ...],
        unread: frozenset[int],
        static: tuple[int, ...] | None,
    ) -> None:
        self.unread = tuple(i for i in range(len(args)) if i in unread and i not in diff)
        if static is None:  # the handles: Python scalars are static, as jax.grad sees them
            static = tuple(i for i, a in enumerate(args) if i not in diff and _is_static(a))
        self.static = tuple(i for i in static if i not in self.unread)

    def pass_args(self, args: tuple[Any, ...]) -> tuple[Any, ...]:
        if not self.unread:
            return args
        return tuple(None if i in self.unread else a for i, a in enumerate(args))


class JaxCompiler:
    """Registered as "jax"."""

    name = "jax"
    needs_guard = True

    def trace(
        self, fn: Any, request: Request, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Traced:
        op = TRANSFORMS[request.transform]
        code = getattr(fn, "__code__", None) if type(fn) is FunctionType else None
        unread = unread_arguments(code, len(args), tuple(kwargs))[0] if code else frozenset()
        diff = () if request.transform is Transform.JIT else request.argnums
        options = request.options
        if request.transform is Transform.JIT:
            unread = frozenset()  # jax.jit traces every argument: nothing to drop
        plan = _Plan(args, diff, unread, options.get("static_argnums"))
        traced = op(fn, request.argnum) if request.transform is not Transform.JIT else fn
        built = [False]

        def once(*a: Any, **k: Any) -> Any:
            if built[0]:
                raise _Retrace
            return traced(*a, **k)

        clear_user_traces()  # the trace must run the current Python code
        jitted = jax.jit(
            once,
            static_argnums=plan.static,
            static_argnames=options.get("static_argnames"),
            donate_argnums=options.get("donate_argnums", ()),
        )
        try:
            result = jitted(*plan.pass_args(args), **kwargs)
        except NEEDS_CONCRETE as exc:
            why = f"needs concrete values under jax.jit ({type(exc).__name__})"
            return Traced(reference(fn, request, args, kwargs), unsupported=why)
        finally:
            built[0] = True

        def compile_variant(guard: Guard) -> Variant:
            guard.args = []  # jax.jit takes any values of the traced arguments itself
            guard.add(_config_guard())
            return JaxVariant(jitted, plan, guard)

        return Traced(result, compile_variant, detail="jax.jit compiled")

    def sync(self, arrays: list[Any]) -> bool:
        return sync_copies(arrays)

    def fallback(self, request: Request, guard: Guard, why: str) -> Variant:
        op = TRANSFORMS[request.transform]
        argnum = request.argnum

        def run(fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
            return op(fn, argnum)(*args, **kwargs)

        return PythonVariant(run, guard, why, "unjitted JAX")
