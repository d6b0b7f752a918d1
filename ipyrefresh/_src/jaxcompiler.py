"""The JAX compiler: each cache entry owns one ``jax.jit`` of a JAX transform.

``jax.jit(jax.grad(h))`` keys its cache on the function object, shapes and static
arguments, not on what ``h`` calls, so it answers stale after a callee is redefined
(jax issue 28225), and ``jax.clear_caches()`` throws every compiled function away. Here
every entry gets its own jitted wrapper around a *trampoline* that reaches the function
through a weak reference. The engine records which Python functions ran while the
wrapper was traced (the trace runs exactly those), watches them, and on a change drops
the entry's artifact — and with it the jitted wrapper and its XLA executable — so that
only affected entries are traced and compiled again, at their next call.

Arguments that the cache keys by value (ints, strings, ``None``, tuples of those) are
baked into the trace as constants, as a fresh ``jax.grad`` sees them as Python values;
arrays, floats and pytrees of them are traced. Code that needs a traced argument's value
in Python (``if b > 0`` on an argument that is not differentiated) cannot be jitted; such
entries run the plain, unjitted JAX transform instead: slower, still right, and reported
as a fallback.

This module imports jax; it is imported only when a "jax" compiler is first made.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .compilers import Artifact, Built

_clear_staging_caches: Callable[[], None] | None
try:  # staging caches (traces), not compiled executables
    from jax._src.util import clear_all_caches as _clear_staging_caches
except ImportError:  # pragma: no cover - other jax versions
    _clear_staging_caches = None


def _elementwise_grad(fun: Callable[..., Any], argnums: Any = 0) -> Callable[..., Any]:
    """autograd's ``elementwise_grad``: the VJP with ones, i.e. the gradient of the sum."""

    def summed(*args: Any, **kwargs: Any) -> Any:
        return jnp.sum(fun(*args, **kwargs))

    return jax.grad(summed, argnums)


TRANSFORMS: dict[str, Callable[..., Any]] = {
    "grad": jax.grad,
    "value_and_grad": jax.value_and_grad,
    "elementwise_grad": _elementwise_grad,
    "jacobian": jax.jacobian,
    "hessian": jax.hessian,
}

#: Errors of code that needs a concrete value where ``jax.jit`` gives it a tracer.
_NEEDS_CONCRETE: tuple[type[BaseException], ...] = (
    jax.errors.ConcretizationTypeError,
    jax.errors.TracerArrayConversionError,
    jax.errors.TracerIntegerConversionError,
    jax.errors.NonConcreteBooleanIndexError,
)

_VALUE_TYPES = (int, bool, str, bytes, type(None))
_ARRAY_LEAVES = (jax.Array, np.ndarray, np.generic, float, int, complex, bool)


def reference(
    fn: Any, transform: str, argnum: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    """A fresh, unjitted JAX computation: the oracle the "jax" compiler must agree with."""
    return TRANSFORMS[transform](fn, argnum)(*args, **kwargs)


def _is_static(x: Any) -> bool:
    """True for what the cache keys by value: it becomes a constant of the trace."""
    t = type(x)
    if t in _VALUE_TYPES:
        return True
    if t is tuple or t is list:
        return all(map(_is_static, x))
    if t is dict:
        return all(type(k) is str and _is_static(v) for k, v in x.items())
    return False


def _not_traceable(x: Any) -> str:
    """Why ``jax.jit`` cannot take ``x`` as a traced argument ("" if it can)."""
    for leaf in jax.tree_util.tree_leaves(x):
        if not isinstance(leaf, _ARRAY_LEAVES):
            return f"an argument of type {type(leaf).__name__} is not a JAX type"
    return ""


def _weak(fn: Any) -> Callable[[], Any]:
    try:
        return weakref.ref(fn)
    except TypeError:  # not weakly referenceable: the engine holds such targets strongly too
        return lambda: fn


class JaxCompiler:
    """Per entry: ``jax.jit`` of the JAX transform of a trampoline to the function."""

    name = "jax"

    def __init__(self) -> None:
        self.builds = 0
        self.fallbacks = 0

    def build(
        self,
        fn: Any,
        transform: str,
        argnum: Any,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> Built:
        op = TRANSFORMS[transform]
        self.builds += 1
        # Functions wrapped in jax.jit, lax.scan bodies and the like are traced once and
        # cached by JAX on the function object; a cached trace would run no Python (so no
        # dependency would be recorded) and could hold an old callee. Clearing JAX's
        # staging caches makes this trace run the current code of everything it reaches;
        # compiled executables, including every other entry's, are kept.
        if _clear_staging_caches is not None:
            _clear_staging_caches()
        diff = argnum if type(argnum) is tuple else (argnum,)
        dyn = [i for i, a in enumerate(args) if i in diff or not _is_static(a)]
        kw_dyn = [k for k, v in kwargs.items() if not _is_static(v)]
        why = ""
        if any(i < 0 or i >= len(args) for i in diff):
            why = "argnum out of range"
        for i in dyn:
            why = why or _not_traceable(args[i])
        for k in kw_dyn:
            why = why or _not_traceable(kwargs[k])
        if why:
            return self._plain(fn, op, argnum, args, kwargs, why)

        ref = _weak(fn)
        consts = {i: a for i, a in enumerate(args) if i not in dyn}
        kw_consts = {k: v for k, v in kwargs.items() if k not in kw_dyn}
        nargs = len(args)
        position = {i: n for n, i in enumerate(dyn)}
        dyn_argnum = (
            tuple(position[i] for i in argnum) if type(argnum) is tuple else position[argnum]
        )

        def trampoline(*dyn_args: Any, **dyn_kwargs: Any) -> Any:
            f = ref()
            if f is None:  # pragma: no cover - the entry is dropped before its function dies
                raise ReferenceError("the function of this derivative no longer exists")
            it = iter(dyn_args)
            full = [consts[i] if i in consts else next(it) for i in range(nargs)]
            return f(*full, **kw_consts, **dyn_kwargs)

        trampoline.__name__ = trampoline.__qualname__ = getattr(fn, "__name__", "fun")
        jitted = jax.jit(op(trampoline, dyn_argnum))

        if not consts and not kwargs:

            def artifact(fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
                return jitted(*args)

        else:

            def artifact(fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
                return jitted(*[args[i] for i in dyn], **{k: kwargs[k] for k in kw_dyn})

        try:
            result = artifact(fn, args, kwargs)
        except _NEEDS_CONCRETE as exc:
            reason = f"needs concrete values under jax.jit ({type(exc).__name__})"
            return self._plain(fn, op, argnum, args, kwargs, reason)
        return Built(artifact, result, detail="jax.jit compiled")

    def _plain(
        self,
        fn: Any,
        op: Callable[..., Any],
        argnum: Any,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        why: str,
    ) -> Built:
        """The unjitted JAX transform on every call: right, not fast."""
        self.fallbacks += 1

        def artifact(fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
            return op(fn, argnum)(*args, **kwargs)

        plain: Artifact = artifact
        return Built(plain, plain(fn, args, kwargs), fallback=f"not jitted: {why}")
