"""The JAX compiler: each cache entry owns one ``jax.jit`` of a JAX transform.

``jax.jit(jax.grad(h))`` keys its cache on ``h``, shapes and static arguments, not on
what ``h`` calls or reads, so it answers stale after a callee or a global array changes,
and ``jax.clear_caches()`` throws every compiled function away. Here every entry gets its
own jitted function, checked before each call by the same guard as any entry (the code
and data the trace read, which XLA baked into the executable), and dropped with the
entry when that guard fails, so only affected entries are traced and compiled again.

A derivative handle must answer what an unjitted JAX transform answers, and that sees
its non-differentiated arguments as they are. So only JAX arrays (in tuples, lists and
dicts with sorted keys: what jax.jit rebuilds as it was) are traced: inside the trace they
behave as they do unjitted, short of giving concrete values. Python scalars (``int``,
``float``, ``str``...) are *static* (a float traced as float32 would lose precision the
oracle keeps). numpy arrays and scalars, alone or in such containers, are *constants* of
the trace, given to it as copies and checked by value by the guard like a global: code
may treat them as numpy (``X.sort()`` in place, ``isinstance(n, np.integer)``, numpy's
integer sums), which a tracer would silently not do. Other objects run the unjitted
transform (the trace could leave tracers in them), as does code that changes its
arguments in place. Arguments the function never reads are not passed into the trace at
all (an optimizer's iteration counter does not recompile). Code that ``jax.jit`` rejects
for traced arguments (a JAX integer used as a shape or a loop bound) is traced again with
every argument a constant; code that needs concrete values even so, and functions with
effects, run the unjitted transform: correct, slower, and reported. (``rj.jit`` traces
as ``jax.jit`` does: that is what it must agree with.)

This module imports jax; it is imported only when the "jax" compiler is first used.
"""

from __future__ import annotations

import contextlib
import enum
import functools
import inspect
import operator
import threading
from collections.abc import Callable
from types import FunctionType
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax._src import core as _jax_core
from jax._src import tree_util as _jax_tree_util
from jax._src.array import ArrayImpl as _ArrayImpl

from ..changes import ChangeKind
from ..code import unread_arguments
from ..digest import array_digest
from ..guard import Guard
from ..keys import Transform
from ..nodes import MISSING, NUMPY_SCALAR_TYPES, Mismatch, Node, Scalar, is_key, same_scalar
from ..readers import ArgReader, FixedReader, Reader
from ..snapshot import Unguardable, Walker
from .base import Miss, PythonVariant, Request, Traced, Variant
from .jax_contexts import BuildContexts

_STATIC_TYPES = (int, float, complex, bool, str, bytes, type(None))
#: What JAX does when a value moves between host and device (see :func:`_checking`).
_TRANSFER_GUARDS = (
    "jax_transfer_guard",
    "jax_transfer_guard_host_to_device",
    "jax_transfer_guard_device_to_host",
    "jax_transfer_guard_device_to_device",
)
#: JAX settings that change what a trace computes.
_CONFIG = (
    "jax_enable_x64",
    "jax_default_matmul_precision",
    "jax_numpy_rank_promotion",
    "jax_default_prng_impl",  # (jax.jit's own cache does not key on it)
    "jax_debug_nans",  # (unjitted JAX raises at the first nan; a compiled answer would not)
    "jax_debug_infs",
    "jax_disable_jit",
    "jax_legacy_prng_key",  # (whether a raw uint32 key is accepted, warned about or refused)
    "jax_high_dynamic_range_gumbel",  # (other draws; jax.jit's fast path does not key on it)
    *_TRANSFER_GUARDS,
)


#: Settings under which unjitted JAX checks every operation (or runs no jit at all),
#: which a handle's compiled answer would not: it runs unjitted JAX while one is on.
#: (``rj.jit`` is a ``jax.jit``, which checks as a compiled function does, except that
#: ``jax_disable_jit`` runs it unjitted.)
_CHECKS = ("jax_debug_nans", "jax_debug_infs", "jax_disable_jit")


def _checking(handles: bool) -> str:
    """The setting under which this call must run unjitted JAX, or "". A transfer guard
    other than "allow" counts too: unjitted JAX moves a numpy value to the device at
    each use (and logs or refuses it), where a compiled function holds it as a constant."""
    config = jax.config
    for name in _CHECKS:
        if getattr(config, name, False) is True and (handles or name == "jax_disable_jit"):
            return f"{name} is on: unjitted JAX checks each op"
    for name in _TRANSFER_GUARDS:
        value = getattr(config, name, None)
        if value is not None and value != "allow":
            return f"{name} is {value!r}: unjitted JAX guards each transfer"
    return ""


def _calls_back(jaxpr: Any) -> bool:
    """Whether a traced function runs host callbacks (user code, at every execution):
    callback primitives, or any effect (``jax.debug.print``'s, ``io_callback``'s)."""
    if jaxpr.effects:
        return True
    for eqn in jaxpr.eqns:
        if "callback" in eqn.primitive.name:
            return True
        if any(_calls_back(sub) for sub in _jax_core.jaxprs_in_params(eqn.params)):
            return True
    return False


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
    """A fresh JAX computation: what the "jax" compiler must agree with (unjitted for a
    derivative; for ``rj.jit``, a new ``jax.jit`` with its options, traced afresh in the
    caller's context)."""
    _BUILDING.ours += 1
    try:
        return _fresh(fn, request)(*args, **kwargs)
    finally:
        _BUILDING.ours -= 1


def _fresh(fn: Any, request: Request) -> Callable[..., Any]:
    if request.transform is Transform.JIT:
        options = request.options
        jitted: Callable[..., Any] = jax.jit(
            fn,
            static_argnums=options.get("static_argnums"),
            static_argnames=options.get("static_argnames"),
            donate_argnums=options.get("donate_argnums", ()),
        )
        return jitted
    transformed: Callable[..., Any] = TRANSFORMS[request.transform](fn, request.argnum)
    return transformed


def _is_static(x: Any) -> bool:
    t = type(x)
    if t in _STATIC_TYPES:
        return True
    return (t is tuple) and all(map(_is_static, x))


class _Building(threading.local):
    """Whether this thread is tracing a build (numpy values then enter JAX as copies: a
    compiled function reads its constants when it is lowered, after the trace)."""

    active = False
    #: ipyrefresh's own JAX transformations running in this thread (a build's trace, a
    #: fresh run): a handle they trace is not the user's ``jax.jit`` baking it in.
    ours = 0


_BUILDING = _Building()


def traced_by_ipyrefresh() -> bool:
    """This thread runs the user's code under a JAX transformation of ipyrefresh's."""
    return _BUILDING.ours > 0


def _convert_without_cache() -> None:
    """Make JAX convert numpy arrays afresh each time, as it does in a fresh process.

    Without x64, JAX converts a float64 (int64, complex128) numpy array to a float32 copy
    and keeps that copy in a cache keyed weakly on the array for as long as anything holds
    the copy — a kept ``jax.make_jaxpr``, a ``jax.vjp`` function, and every executable
    that baked the array in, ipyrefresh's own included. After the array changes in place,
    JAX's conversions (``jnp.asarray(w)``, ``w * x``, a fresh ``jax.grad``) still give the
    old values. The same conversion is installed for ``np.ndarray`` without the cache,
    when the "jax" compiler is first used: JAX then reads an array's contents as they are
    now, as it would in a process that holds no copy.
    """
    try:
        from jax._src import dtypes, literals
    except ImportError:  # pragma: no cover - other jax versions
        return
    register = getattr(dtypes, "register_canonicalize_value_handler", None)
    typed = getattr(literals, "TypedNdArray", None)
    if register is None or typed is None:  # pragma: no cover - JAX before the cache
        return
    canonical_dtype = dtypes.canonicalize_dtype
    check_valid = dtypes.check_valid_dtype
    invalid = getattr(dtypes, "InvalidInputException", TypeError)

    def convert(x: np.ndarray) -> Any:
        try:  # (strings, objects, records, long doubles: JAX's own conversion refuses them)
            check_valid(x.dtype)
        except TypeError as exc:
            raise invalid(str(exc)) from None
        dtype = canonical_dtype(x.dtype)
        if not dtype.isnative:  # ('>f8' from a file: JAX's own conversion refuses it)
            raise invalid(f"a numpy array of non-native byte order ({x.dtype})")
        if _BUILDING.active:  # a copy: the function may change x after this use
            return typed(np.array(x, dtype, copy=True))
        return typed(np.asarray(x, dtype))

    register(np.ndarray, convert)


def _setting(name: str) -> tuple[Any]:
    """A setting's value, in a one-tuple (a fixed reader's None means its object is gone);
    an enum's (``LegacyPrngKeyState.ALLOW``) as its value."""
    return (_plain(getattr(jax.config, name)),)


class _Settings(Node):
    """The JAX settings a trace depends on (a dozen, read at every call of a handle), read
    in one call: the very same values, or equal ones (each compared as :func:`_setting`
    gives it); a change names its setting."""

    __slots__ = ("names", "values")

    def __init__(self, names: tuple[str, ...], values: tuple[Any, ...]) -> None:
        super().__init__("jax.config")
        self.names = names
        self.values = values

    def check(self, value: Any, deep: bool = True) -> Mismatch | None:
        values = self.values
        if type(value) is not tuple or len(value) != len(values):
            return Mismatch(self.label, ChangeKind.REBOUND)
        if all(map(operator.is_, value, values)):
            return None
        for name, now, then in zip(self.names, value, values, strict=True):
            if not same_scalar(_plain(now), _plain(then)):
                return Mismatch(f"jax.config.{name}", ChangeKind.REBOUND)
        return None


def _plain(value: Any) -> Any:
    return value.value if isinstance(value, enum.Enum) else value


def _config_guard() -> list[tuple[Reader, Node]]:
    """Guards on the JAX settings a trace depends on (x64 turned on mid-notebook)."""
    out: list[tuple[Reader, Node]] = []
    names = tuple(
        name
        for name in _CONFIG
        if hasattr(jax.config, name)  # (a setting of another JAX release)
        and is_key(_setting(name))
    )
    if len(names) == 1:  # (attrgetter of one name gives its value, not a tuple)
        names *= 2
    if names:
        read = functools.partial(operator.attrgetter(*names), jax.config)
        out.append((FixedReader(read), _Settings(names, read())))
    # The pytree classes JAX knows: registering one (``register_pytree_node``,
    # ``register_static``, ``register_dataclass``) changes how a traced value flattens,
    # in JAX's C registry, with no Python-level change a guard could see. JAX's Python
    # mirror of that registry only grows (a class is registered once).
    registry = getattr(_jax_tree_util, "_registry", None)
    if type(registry) is dict:
        reader = FixedReader(functools.partial(len, registry))
        out.append((reader, Scalar("JAX's registered pytree classes", len(registry))))
    return out


def _static_pytree_fields(
    guard: Guard, args: tuple[Any, ...], kwargs: dict[str, Any], static: set[int | str]
) -> None:
    """Guards on the objects in the static (aux) data of traced arguments' pytrees (a
    ``register_dataclass`` meta field holding a config object): jax.jit compares them by
    ``==``, which an object changed in place still passes."""
    walker = Walker(guard)
    keys: list[int | str] = [i for i in range(len(args)) if i not in static]
    keys += [k for k in kwargs if k not in static]
    for key in keys:
        value = args[key] if isinstance(key, int) else kwargs[key]
        fields = _aux_objects(jax.tree_util.tree_structure(value))
        if fields:
            node = walker.walk(fields, f"argument {key}'s static pytree fields")
            guard.args.append((_AuxReader(key), node))


def _aux_objects(treedef: Any) -> tuple[Any, ...]:
    """The aux data of a treedef's nodes that are not plain keys (None, scalars, tuples of
    them: the treedef's own equality compares those by value)."""
    found: list[Any] = []
    todo = [treedef]
    while todo:
        t = todo.pop()
        data = t.node_data()
        if data is not None and not is_key(data[1]):
            found.append(data[1])
        todo.extend(t.children())
    return tuple(found)


class _AuxReader(Reader):
    """The static pytree fields of one argument (see :func:`_static_pytree_fields`)."""

    __slots__ = ("key",)

    def __init__(self, key: int | str) -> None:
        self.key = key

    def read(self, fn: Any, args: tuple[Any, ...], kwargs: Any) -> Any:
        key = self.key
        if isinstance(key, int):
            value = args[key] if key < len(args) else MISSING
        else:
            value = kwargs.get(key, MISSING)
        if value is MISSING:
            return MISSING
        return _aux_objects(jax.tree_util.tree_structure(value))


class _Retrace(Exception):
    """``jax.jit`` started tracing again (a new static value or weak type): that trace
    must run under the engine's recorder, as a build, not inside this variant."""


#: The JAX settings under which a call of a compiled function does more than compute: a
#: transfer guard logs (or refuses) its transfers, ``debug_nans``/``debug_infs`` check its
#: output and run it again de-optimized. A call started before its guard is checked is
#: made only under the values its build saw, or a refused start would show (hunt 62).
_NOISY = (
    "jax_debug_nans",
    "jax_debug_infs",
    "jax_transfer_guard",
    "jax_transfer_guard_host_to_device",
    "jax_transfer_guard_device_to_host",
    "jax_transfer_guard_device_to_device",
)
#: Their values now, as a tuple (a name repeated: attrgetter of one name gives no tuple).
_read_noisy: Callable[[], tuple[Any, ...]] = functools.partial(
    operator.attrgetter(*(*(n for n in _NOISY if hasattr(jax.config, n)), "jax_debug_nans")),
    jax.config,
)


class JaxVariant:
    """One entry's ``jax.jit``: static and unread arguments split off, the rest traced.

    The jitted function is valid for any traced argument values (``jax.jit`` checks their
    shapes and dtypes itself); the guard holds only the code and data the trace read.
    """

    replays_python = False
    any_shapes = True

    def __init__(
        self,
        jitted: Any,
        plan: _Plan,
        guard: Guard,
        context: Callable[[], Any],
        *,
        pure: bool,
    ) -> None:
        self._jitted = jitted
        self._context = context
        self._plan = plan
        self.guard = guard
        self.note = ""
        #: No effect, callback or donated argument: starting it for a call the guard then
        #: refuses changes nothing (JAX dispatches it, and its answer is dropped)...
        self._pure = pure
        #: ... under the settings of its build, all off (see :data:`_NOISY`: with
        #: ``debug_nans`` on, a stale start would report its old code's nans, hunt 64).
        self._noisy = _read_noisy()
        self._quiet = pure and all(v is None or v is False or v == "allow" for v in self._noisy)

    def starts_first(self) -> bool:
        return self._quiet and all(map(operator.is_, _read_noisy(), self._noisy))

    def run(self, fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if self._plan.mismatch(args, kwargs):
            return Miss("the call's arguments split into static and traced ones otherwise")
        try:
            with self._context():
                plan = self._plan
                return self._jitted(*plan.pass_args(args), **plan.pass_kwargs(kwargs))
        except _Retrace:
            return Miss("jax.jit would trace again (new static arguments or types)")

    def describe(self) -> str:
        return "jax.jit"


def _name_as(
    wrapper: Any, fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any], plan: _Plan
) -> None:
    """JAX's errors about the trace of ``wrapper`` for these arguments (a tracer used as a
    Python bool, a shape) name ``fn``, its source line and its arguments, as
    ``jax.jit(fn)``'s do, not our wrapper and ``_ipyrefresh_args[1]`` (hunt 65): JAX takes
    a wrapper's debug info from its ``__fun_debug_info__`` (the caller removes it after
    the trace: other arguments would count other values). Left as it is if this JAX does
    not work so."""
    try:
        from jax._src import api_util

        def info_of(f: Any) -> Any:
            return api_util.debug_info(
                "jit",
                f,
                args,
                kwargs,
                static_argnums=plan.static,
                static_argnames=plan.static_names or (),
            )

        info, own = info_of(fn), info_of(wrapper)
        if info.arg_names is None or len(info.arg_names) != len(own.arg_names or ()):
            # (the user's signature binds the arguments otherwise: the wrapper's names
            # count the traced values as JAX will)
            info = info._replace(arg_names=own.arg_names)
        api_util.save_wrapped_fun_debug_info(wrapper, info)
    except Exception:  # (names only: the trace is the same without them)
        return


#: JAX's concrete array type (``type(x) in`` is the hot path's test; subclasses and
#: tracers take the tree walk of :func:`_traceable`).
_JAX_ARRAYS = frozenset({_ArrayImpl})


def _traceable(x: Any, depth: int = 0) -> bool:
    """Whether unjitted JAX code sees ``x`` as jax.jit's trace does, short of concrete
    values: JAX arrays, in tuples, lists, None and dicts whose keys are in sorted order
    (jax.jit rebuilds a dict with sorted keys, and other pytree classes from their
    flattened fields only). numpy values stay numpy objects to unjitted code, and
    Python numbers inside containers become float32 at jit's boundary."""
    if isinstance(x, jax.Array):  # (the common cases, on every call: no tree walk)
        return True
    t = type(x)
    if t is tuple or t is list:
        return depth < 32 and all(_traceable(v, depth + 1) for v in x)
    if t is dict:
        keys = list(x)
        try:
            ordered = keys == sorted(keys)
        except TypeError:
            return False
        return ordered and depth < 32 and all(_traceable(v, depth + 1) for v in x.values())
    return x is None


def _layout(tree: Any) -> tuple[Any, list[Any]]:
    """A pytree's structure, the identities of its leaves and the contents of its numpy
    leaves: what the function's own changes to its arguments (``log.append``,
    ``state['n'] = ...``, ``X.sort()``) alter."""
    leaves, treedef = jax.tree_util.tree_flatten(tree)
    return treedef, [
        (id(v), array_digest(np.asarray(v)))
        if isinstance(v, np.ndarray) and not v.dtype.hasobject
        else id(v)
        for v in leaves
    ]


def _copyable(x: Any, depth: int = 0) -> bool:
    """A constant the trace can take as a copy of its containers: numpy and JAX arrays,
    numbers, strings, None, in tuples, lists and dicts (numpy cannot hold a tracer). Not
    a subclass of numpy's array or scalar types: its attributes are the caller's object's,
    which a copy would not carry."""
    t = type(x)
    if t is np.ndarray or t in NUMPY_SCALAR_TYPES or t in _STATIC_TYPES:
        return True
    if isinstance(x, jax.Array):
        return True
    if t is tuple or t is list:
        return depth < 32 and all(_copyable(v, depth + 1) for v in x)
    if t is dict:
        return depth < 32 and all(_copyable(v, depth + 1) for v in x.values())
    return False


def _copied(x: Any) -> Any:
    """``x`` with its tuples, lists, dicts and numpy arrays copied (see :func:`_copyable`):
    what the function changes in them is seen (:func:`_layout`), and done to the caller's
    objects by the unjitted run that answers instead."""
    t = type(x)
    if t is tuple or t is list:
        return t(_copied(v) for v in x)
    if t is dict:
        return {k: _copied(v) for k, v in x.items()}
    if isinstance(x, np.ndarray):
        return np.array(x, copy=True, subok=True)
    return x


class _Mutated(Exception):
    """The function changed a traced argument: jax.jit gave it a copy, unjitted JAX
    gives it the caller's object. It runs unjitted JAX."""


class _Plan:
    """Which arguments go into the jitted function: static, traced or constant.

    For the derivative handles (``handles=True``) the split follows what an unjitted JAX
    transform sees (see the module docstring): Python scalars (and tuples of them) are
    static, positional or keyword; JAX arrays and pytrees of them are traced (unless
    ``constant`` says all are constants); the rest are constants, passed to the trace by
    closure and checked by the guard. :meth:`mismatch` tells whether a call splits so.
    """

    def __init__(
        self,
        fun: Any,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        diff: tuple[int, ...],
        unread: frozenset[int],
        options: dict[str, Any],
        handles: bool,
        constant: bool = False,
    ) -> None:
        self.count = len(args)
        self.unread = tuple(i for i in range(len(args)) if i in unread and i not in diff)
        self.handles = handles
        static: tuple[int, ...] | None = options.get("static_argnums")
        names: tuple[str, ...] | None = options.get("static_argnames")
        if not handles:
            static, names = _static_of(fun, len(args), static, names)
        consts: tuple[int, ...] = ()
        const_names: tuple[str, ...] = ()
        if handles:
            static = tuple(i for i, a in enumerate(args) if i not in diff and _is_static(a))
            names = tuple(sorted(k for k, v in kwargs.items() if _is_static(v)))
            consts = tuple(
                i
                for i, a in enumerate(args)
                if i not in diff and i not in static and (constant or not _traceable(a))
            )
            const_names = tuple(
                sorted(
                    k
                    for k, v in kwargs.items()
                    if k not in names and (constant or not _traceable(v))
                )
            )
        self.static = tuple(i for i in (static or ()) if i not in self.unread)
        self.static_names = names
        self.constants = tuple(i for i in consts if i not in self.unread)
        self.constant_names = const_names
        #: An argument that is no constant it can copy (an object, a pytree class): the
        #: function could store traced values in it. The call runs unjitted JAX.
        self.unfaithful = next(
            (f"argument {i}" for i in self.constants if not _copyable(args[i])),
            next((f"argument {k!r}" for k in const_names if not _copyable(kwargs[k])), ""),
        )
        # The order the call gave its keywords in: a handle's function sees them in that
        # order (``**kw``), where jax.jit would sort them.
        self.keywords = tuple(kwargs)
        self.diff = diff
        skip = {*diff, *self.static, *self.unread, *self.constants}
        self.traced = tuple(i for i in range(len(args)) if i not in skip)
        self._blank = frozenset((*self.unread, *self.constants))

    def mismatch(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
        """Which argument keeps this call from running the traced function ("" if none):
        it must split into static, traced and constant arguments as the traced call did
        (checked only for the handles; the guard compares the constants' values)."""
        if not self.handles:
            return ""
        if len(args) != self.count or (tuple(kwargs) if kwargs else ()) != self.keywords:
            return "the arguments"
        for i in self.traced:
            a = args[i]
            if type(a) not in _JAX_ARRAYS and not _traceable(a):
                return f"argument {i}"
        for i in self.static:
            if not _is_static(args[i]):
                return f"argument {i}"
        names = self.static_names or ()
        for k, v in kwargs.items():
            if (k in names) != _is_static(v):
                return f"argument {k!r}"
            if k not in names and k not in self.constant_names and not _traceable(v):
                return f"argument {k!r}"
        return ""

    def pass_args(self, args: tuple[Any, ...]) -> tuple[Any, ...]:
        """The positional arguments jax.jit gets: None for unread ones and constants."""
        blank = self._blank
        if not blank:
            return args
        return tuple(None if i in blank else a for i, a in enumerate(args))

    def pass_kwargs(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        """The keyword arguments jax.jit gets: None for constants."""
        names = self.constant_names
        if not names:
            return kwargs
        return {k: None if k in names else v for k, v in kwargs.items()}

    def with_constants(
        self, fun: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Callable[..., Any]:
        """``fun`` called as this call called it: its constants in place of the Nones
        jax.jit passes, and (for a handle) its keywords in the call's order (it runs
        only inside the build's trace)."""
        if not self.handles:
            return fun
        # The constants' containers are copies: what the function stores in them (a traced
        # value) stays in the trace, and is seen, not left in the caller's objects.
        consts = {i: _copied(args[i]) for i in self.constants}
        const_kw = {k: _copied(kwargs[k]) for k in self.constant_names}
        order = self.keywords

        def call(*args_: Any, **kwargs_: Any) -> Any:
            full = tuple(consts.get(i, v) for i, v in enumerate(args_))
            given = {**kwargs_, **const_kw}
            before = _layout((args_, kwargs_, consts, const_kw))
            out = fun(*full, **{k: given[k] for k in order})
            if _layout((args_, kwargs_, consts, const_kw)) != before:
                raise _Mutated
            return out

        return call


def _static_of(
    fun: Any, count: int, argnums: tuple[int, ...] | None, argnames: tuple[str, ...] | None
) -> tuple[tuple[int, ...], tuple[str, ...]]:
    """``rj.jit``'s static arguments as ``jax.jit`` takes them: negative positions counted
    from this call's end, and when only one of the two options is given, each position
    and name also as the other where the signature has a parameter that is both (given
    both, each means only itself)."""
    nums = {i + count if i < 0 else i for i in argnums or ()}
    names = set(argnames or ())
    params: list[inspect.Parameter] = []
    if argnums is None or argnames is None:
        with contextlib.suppress(TypeError, ValueError):  # (no signature: nothing to map)
            params = list(inspect.signature(fun).parameters.values())
    both = inspect.Parameter.POSITIONAL_OR_KEYWORD
    for i, p in enumerate(params):
        if p.kind is both and (i in nums or p.name in names):
            nums.add(i)
            names.add(p.name)
    return tuple(sorted(nums)), tuple(sorted(names))


class JaxCompiler:
    """Registered as "jax"."""

    name = "jax"
    needs_guard = True

    def __init__(self) -> None:
        _convert_without_cache()
        #: Builds trace under context values of their own, part of the keys of JAX's
        #: trace, lowering and compile caches: the build's traces run the current Python
        #: code (jitted callees and scan bodies included, which JAX would otherwise answer
        #: from traces cached earlier), and the user's own cached traces stay untouched.
        make: Callable[[Any], Callable[[Any], Any]] = jax.make_user_context
        self.contexts = BuildContexts(make(None))
        self._context = self.contexts.fresh

    def trace(
        self,
        fn: Any,
        request: Request,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        *,
        may_write: bool = False,
    ) -> Traced:
        code = getattr(fn, "__code__", None) if type(fn) is FunctionType else None
        unread = unread_arguments(code, len(args), tuple(kwargs))[0] if code else frozenset()
        diff = () if request.transform is Transform.JIT else request.argnums
        options = request.options
        if request.transform is Transform.JIT:
            unread = frozenset()  # jax.jit traces every argument: nothing to drop
        handles = request.transform is not Transform.JIT
        plan = _Plan(fn, args, kwargs, diff, unread, options, handles)
        context = self._context()
        if plan.unfaithful:
            with context():
                result = reference(fn, request, args, kwargs)
            why = f"{plan.unfaithful} is an object the function could store traced values in"
            return Traced(result, unsupported=why)
        checking = _checking(handles)
        if checking:
            with context():
                result = reference(fn, request, args, kwargs)
            return Traced(result, unsupported=checking)
        if handles and may_write:
            # Code that may store into objects it did not make (``global key; key, sub =
            # split(key)``, a memo dict) would leave jax.jit's tracers in them (hunt 41):
            # unjitted JAX answers, changing them as the user's own jax.grad does, and
            # jax.jit traces only a second run, made if the first changed nothing.
            with context():
                result = reference(fn, request, args, kwargs)
            again = functools.partial(
                self._compiled, fn, request, plan, args, kwargs, context, diff, unread, True
            )
            return Traced(result, retrace=again)
        with self.contexts.for_build(fn) as shared:
            return self._compiled(fn, request, plan, args, kwargs, shared, diff, unread)

    def _compiled(
        self,
        fn: Any,
        request: Request,
        plan: _Plan,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        context: Callable[[], Any],
        diff: tuple[int, ...],
        unread: frozenset[int],
        answered: bool = False,
    ) -> Traced:
        """``fn`` traced under ``jax.jit`` as ``plan`` splits it, else with the arguments
        jax.jit rejected made constants, else run unjitted (with the reason), unless a
        first run ``answered`` the call already."""
        options, handles = request.options, plan.handles
        retry = True
        rejected: Exception
        try:
            return self._jit(fn, request, plan, args, kwargs, context)
        except _Mutated as exc:  # (it changed jit's copies: the caller's objects are as
            rejected, retry = exc, False  # they were, for the unjitted run below)
        except Exception as exc:
            if not handles:  # rj.jit rejects what jax.jit rejects
                raise
            rejected = exc
        # jax.jit rejected the code with its traced arguments (a JAX integer as a shape,
        # a loop bound, an ``if``); unjitted JAX sees their values: make them constants.
        constant = _Plan(fn, args, kwargs, diff, unread, options, handles, constant=True)
        if (
            retry
            and not constant.unfaithful
            and (constant.constants, constant.constant_names)
            != (plan.constants, plan.constant_names)
        ):
            try:
                return self._jit(fn, request, constant, args, kwargs, context)
            except Exception as exc:
                rejected = exc
        # (The user's error, if unjitted JAX raises too: the caller gets that one.)
        result = None
        if not answered:
            with context():
                result = reference(fn, request, args, kwargs)
        if isinstance(rejected, _Mutated):
            why = "it changes its traced arguments in place (jax.jit would pass it copies)"
        else:
            why = f"jax.jit rejects it ({type(rejected).__name__}) where unjitted JAX does not"
        return Traced(result, unsupported=why)

    def _jit(
        self,
        fn: Any,
        request: Request,
        plan: _Plan,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        context: Callable[[], Any],
    ) -> Traced:
        """Trace ``fn`` under ``jax.jit`` split as ``plan`` says (raises what it raises)."""
        handles = plan.handles
        traced = TRANSFORMS[request.transform](fn, request.argnum) if handles else fn
        built = [False]
        # Emptied after the trace: the variant must not keep fn (or the constants) alive.
        holder = [plan.with_constants(traced, args, kwargs)]

        # (Parameter names no call's keywords collide with: jax.jit reads the signature.)
        def once(*_ipyrefresh_args: Any, **_ipyrefresh_kwargs: Any) -> Any:
            if built[0]:
                raise _Retrace
            return holder[0](*_ipyrefresh_args, **_ipyrefresh_kwargs)

        options = request.options
        passed, passed_kw = plan.pass_args(args), plan.pass_kwargs(kwargs)
        _name_as(once, traced, passed, passed_kw, plan)
        jitted = jax.jit(
            once,
            static_argnums=plan.static,
            static_argnames=plan.static_names,
            donate_argnums=options.get("donate_argnums", ()),
        )
        was, _BUILDING.active = _BUILDING.active, True
        _BUILDING.ours += 1
        try:
            with context():
                trace = jitted.trace(*passed, **passed_kw)  # (the user's code runs here)
            calls_back = _calls_back(trace.jaxpr.jaxpr)
            if calls_back:
                self.contexts.taint()
        finally:
            _BUILDING.active = was
            _BUILDING.ours -= 1
            built[0] = True
            holder.clear()
            once.__dict__.pop("__fun_debug_info__", None)  # (for this trace's arguments only)

        def finish() -> Any:
            # Lowering, compiling and running what was traced: JAX's code only (its trace
            # cache answers the call; ``once`` refuses to run the function again).
            try:
                with self.contexts.running(context):
                    return jitted(*passed, **passed_kw)
            except _Retrace:
                out.unsupported = "jax.jit traced again after the build's trace"
                with self._context()():  # (not the build's: this run is not recorded)
                    return reference(fn, request, args, kwargs)

        def compile_variant(guard: Guard) -> Variant:
            # jax.jit takes any values of the traced arguments itself; it keys static
            # arguments by hash, which an object changed in place keeps: those stay, as do
            # the constants (compared by value, as a global is).
            kept: set[int | str] = {*plan.static, *(plan.static_names or ())}
            kept.update(plan.constants, plan.constant_names)
            guard.args = [(r, n) for r, n in guard.args if type(r) is ArgReader and r.key in kept]
            guard.add(_config_guard())
            try:
                _static_pytree_fields(guard, args, kwargs, kept)
            except Unguardable as exc:
                guard.unguardable = str(exc)
                return self.fallback(request, guard, str(exc))
            pure = not (calls_back or options.get("donate_argnums", ()))
            return JaxVariant(jitted, plan, guard, context, pure=pure)

        out = Traced(None, compile_variant, detail="jax.jit compiled", finish=finish)
        return out

    def runs_first_sight(self, request: Request) -> bool:
        """A handle meeting a new value of a static or constant argument runs unjitted JAX
        for it (a new minibatch at every call must not compile at every call); ``rj.jit``
        compiles, as ``jax.jit`` does for a new static value."""
        return request.transform is not Transform.JIT

    def defers_first_build(self, request: Request) -> bool:
        """A first call compiles, as ``jax.jit`` does (unjitted JAX can cost more than a
        compile: a ``scan`` runs op by op)."""
        return False

    def fallback(self, request: Request, guard: Guard, why: str) -> Variant:
        guard.add(_config_guard())  # (a debugging setting turned off again: build then)
        # One context while the guard holds: fresh traces of jitted callees and scan
        # bodies, kept between calls. A guard that misses some of what the code reads
        # cannot tell when those traces go stale: then every call gets a context of its own.
        # So does every call of an ``rj.jit`` that falls back (it prints, draws, reads what
        # cannot be checked): a fresh ``jax.jit`` traces it, and runs its effects, anew.
        fresh_each_call = bool(guard.unguardable) or request.transform is Transform.JIT
        kept = None if fresh_each_call else self._context()
        new_context = self._context

        def run(fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
            context = kept if kept is not None else new_context()
            with context():
                return reference(fn, request, args, kwargs)

        return PythonVariant(run, guard, why, "unjitted JAX")
