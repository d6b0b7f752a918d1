"""The JAX compiler: each cache entry owns one ``jax.jit`` of a JAX transform.

``jax.jit(jax.grad(h))`` keys its cache on the function object, shapes and static
arguments, not on what ``h`` calls, so it answers stale after a callee is redefined
(jax issue 28225), and ``jax.clear_caches()`` throws every compiled function away. Here
every entry gets its own jitted wrapper around a *trampoline* that reaches the function
through a weak reference. The engine records which Python functions ran while the
wrapper was traced (the trace runs exactly those), watches them, and on a change drops
the entry's artifact — and with it the jitted wrapper and its XLA executables — so that
only affected entries are traced and compiled again, at their next call.

Arguments that the cache keys by value (ints, strings, ``None``, tuples of those) are
baked into the trace as constants, as a fresh ``jax.grad`` sees them as Python values;
arrays, floats and pytrees of them are traced. Like ``jax.jit``, an entry serves every
shape and dtype (handles key JAX entries without shapes): JAX traces again for new ones,
and such a retrace runs the current code under the call recorder too. A handle calls an
entry whose arguments are all traced straight through ``jax.jit``'s own C++ dispatch
(``compilers.Direct``), which is what keeps a cached call close to a bare jitted call.
Code that needs a traced argument's value in Python (``if b > 0`` on an argument that is
not differentiated) cannot be jitted; such entries run the plain, unjitted JAX transform
instead: slower, still right, and reported as a fallback.

This module imports jax; it is imported only when a "jax" compiler is first made.
"""

from __future__ import annotations

import contextlib
import functools
import sys
import weakref
from collections.abc import Callable, Iterator
from types import BuiltinFunctionType, FunctionType
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .analysis import is_user_code
from .compilers import Artifact, Built, Direct

_RECORDER = __name__.rpartition(".")[0] + ".recorder"

#: JAX caches that hold compiled executables, lowerings or device facts. They are keyed
#: on traced programs, not on Python functions, so they never answer for old code.
_KEEP = ("xla_primitive_callable", "compil", "lower", "hlo", "device", "backend", "sharding")
#: Referents of weakly keyed JAX cache entries that are traced programs, not Python code.
_PROGRAM_TYPES = frozenset({"ClosedJaxpr", "Jaxpr", "Module", "Primitive"})


def _library_only(obj: Any, depth: int = 0) -> bool:
    """True if ``obj`` is library code that reaches no user code (by type checks only)."""
    t = type(obj)
    if t is FunctionType:
        if obj.__dict__.get("_ipyrefresh_trampoline"):
            return True  # a live entry's own trace: it goes when the entry is invalidated
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


def _clear_staging_caches() -> None:
    """Drop JAX's cached traces of user code; keep everything else.

    ``jax.jit``-wrapped callees, ``lax.scan`` bodies and the like are traced once and
    cached by JAX on the function object. A cached trace runs no Python (so no
    dependency would be recorded) and can hold an old callee. Before a build, every
    weakly keyed cache entry whose key is (or wraps) user code is evicted, and the few
    small caches that cannot evict by key are cleared; traces of library functions,
    jaxpr transformations and every compiled executable (every other entry's, and the
    op-by-op kernels of eager code) stay.
    """
    try:
        from jax._src import util

        caches = list(util._caches.items())
    except (ImportError, AttributeError):  # pragma: no cover - other jax versions
        jax.clear_caches()
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


@contextlib.contextmanager
def _unrecorded() -> Iterator[None]:
    """Pause the engine's call recorder (``sys.setprofile``) in this thread, if it is on.

    Lowering a traced program to XLA and compiling it run a lot of JAX's Python code and
    none of the user's; a profile hook on every call there only costs time. Another
    profiler (cProfile, a debugger) is never touched.
    """
    hook = sys.getprofile()
    if hook is None or getattr(hook, "__module__", None) != _RECORDER:
        yield
        return
    sys.setprofile(None)
    try:
        yield
    finally:
        sys.setprofile(hook)


def _referent(key: Any) -> Any:
    if type(key) is tuple and key and type(key[0]) is weakref.ReferenceType:
        return key[0]()
    return None


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
#: Types of arguments that are always traced, never keyed by value: a direct call
#: takes these without a closer look (``_is_traced`` looks at the others).
_TRACED_TYPES = frozenset(
    {type(jax.device_put(np.float32(0))), np.ndarray, float, complex}
    | {np.float16, np.float32, np.float64}
)
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


def _is_traced(x: Any) -> bool:
    return not _is_static(x)


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


class _Jitted:
    """One entry's artifact: ``jax.jit`` of the JAX transform of a *trampoline*, a
    function that reaches the user's function through a weak reference.

    Arguments keyed by value are constants of the trace; the others are traced. Like
    ``jax.jit``, it serves every shape and dtype: JAX traces again for new ones, and such
    a retrace runs the current code (the engine calls an entry only while it is current)
    under the engine's ``watch``, so that what it calls becomes a dependency too.
    """

    def __init__(
        self,
        fn: Any,
        op: Callable[..., Any],
        argnum: Any,
        dyn: list[int],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> None:
        self.op, self.argnum, self.dyn = op, argnum, dyn
        self.kw_dyn = [k for k, v in kwargs.items() if not _is_static(v)]
        self.consts = {i: a for i, a in enumerate(args) if i not in dyn}
        self.kw_consts = {k: v for k, v in kwargs.items() if k not in self.kw_dyn}
        self.nargs = len(args)
        self.building = True
        #: Set by the engine: runs a callable under the call recorder.
        self.watch: Callable[[Callable[[], Any]], Any] | None = None
        #: Why this entry stopped jitting after its build ("" while it jits).
        self.note = ""
        position = {i: n for n, i in enumerate(dyn)}
        dyn_argnum = (
            tuple(position[i] for i in argnum) if type(argnum) is tuple else position[argnum]
        )
        self.jitted = jax.jit(op(self._trampoline(fn), dyn_argnum))

    def _trampoline(self, fn: Any) -> Callable[..., Any]:
        ref, me = _weak(fn), weakref.ref(self)

        def trampoline(*dyn_args: Any, **dyn_kwargs: Any) -> Any:
            owner, f = me(), ref()
            if owner is None or f is None:  # pragma: no cover - dropped with its entry
                raise ReferenceError("the function of this derivative no longer exists")
            if owner.building:
                return owner.call_user(f, dyn_args, dyn_kwargs)
            # A retrace, for arguments of new shapes, dtypes or weak types. It must not
            # reuse JAX's old traces of user code, and what it calls is recorded.
            _clear_staging_caches()
            watch = owner.watch
            if watch is None:  # pragma: no cover - the engine always sets it
                return owner.call_user(f, dyn_args, dyn_kwargs)
            return watch(lambda: owner.call_user(f, dyn_args, dyn_kwargs))

        trampoline.__name__ = trampoline.__qualname__ = getattr(fn, "__name__", "fun")
        trampoline._ipyrefresh_trampoline = True  # type: ignore[attr-defined]
        return trampoline

    def call_user(self, f: Any, dyn_args: tuple[Any, ...], dyn_kwargs: dict[str, Any]) -> Any:
        if not self.consts and not self.kw_consts:
            return f(*dyn_args, **dyn_kwargs)
        it = iter(dyn_args)
        full = [self.consts[i] if i in self.consts else next(it) for i in range(self.nargs)]
        return f(*full, **self.kw_consts, **dyn_kwargs)

    def split(
        self, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> tuple[list[Any], dict[str, Any]]:
        """The traced arguments of a call."""
        return [args[i] for i in self.dyn], {k: kwargs[k] for k in self.kw_dyn}

    def __call__(self, fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if not self.note:
            try:
                if not self.consts and not kwargs:
                    return self.jitted(*args)
                dyn_args, dyn_kwargs = self.split(args, kwargs)
                return self.jitted(*dyn_args, **dyn_kwargs)
            except _NEEDS_CONCRETE as exc:
                if self.building:
                    raise
                # Arguments of another shape made the code need concrete values: from
                # now on this entry runs unjitted, as a fallback built so would.
                self.note = f"not jitted: needs concrete values ({type(exc).__name__})"
        run = functools.partial(self.op(fn, self.argnum), *args, **kwargs)
        return self.watch(run) if self.watch is not None else run()


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
        _clear_staging_caches()  # the trace must run the current Python code
        diff = argnum if type(argnum) is tuple else (argnum,)
        dyn = [i for i, a in enumerate(args) if i in diff or not _is_static(a)]
        kw_dyn = [k for k, v in kwargs.items() if not _is_static(v)]  # checked below
        why = ""
        if any(i < 0 or i >= len(args) for i in diff):
            why = "argnum out of range"
        for i in dyn:
            why = why or _not_traceable(args[i])
        for k in kw_dyn:
            why = why or _not_traceable(kwargs[k])
        if why:
            return self._plain(fn, op, argnum, args, kwargs, why)

        jitted = _Jitted(fn, op, argnum, dyn, args, kwargs)
        try:
            trace = getattr(jitted.jitted, "trace", None)
            if trace is not None:  # the Python code runs here, under the call recorder
                dyn_args, dyn_kwargs = jitted.split(args, kwargs)
                trace(*dyn_args, **dyn_kwargs)
            with _unrecorded():  # lowering and XLA compilation run no user code
                result = jitted(fn, args, kwargs)
        except _NEEDS_CONCRETE as exc:
            reason = f"needs concrete values under jax.jit ({type(exc).__name__})"
            return self._plain(fn, op, argnum, args, kwargs, reason)
        finally:
            jitted.building = False
        direct = None
        if not jitted.consts and not kwargs:
            # Every argument is traced: a call with no keywords whose arguments are all
            # traced too can go straight to ``jax.jit``'s function, which checks shapes.
            direct = Direct(jitted.jitted, _TRACED_TYPES, _is_traced)
        return Built(jitted, result, detail="jax.jit compiled", direct=direct)

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
