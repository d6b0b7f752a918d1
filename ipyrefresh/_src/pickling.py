"""Sending handles to other processes: ``pickle.dumps(dh)``, process pools, joblib, Dask.

A handle follows a name in the notebook; a worker has no notebook. So a pickled handle
carries what the name means *when it is pickled*: the function it resolves to now,
pickled with ``cloudpickle`` (functions defined in a notebook or script go by value, with
the globals they read, as their values are now; functions of importable modules go by
reference, and the worker imports them), plus the transform, ``argnum``, backend (the
configured one, if the handle has none of its own) and options. Unpickled, it is a handle
on that function (a fixed target) in an engine of the receiving process's own, so the
worker computes exactly the derivative the notebook would have at the moment of sending.
Each task pickles the handle anew, so after a redefinition the next tasks carry the new
code.

A worker keeps the handles it rebuilt for the last few distinct payloads: tasks that
carry byte-identical code and data reuse one handle and its compiled entry instead of
tracing (or jit-compiling) once per task. Each payload is still unpickled: that is what
sets a notebook class's attributes in the worker to the values the payload carries.
"""

from __future__ import annotations

import collections
import hashlib
import io
import itertools
import os
import pickle
import sys
import threading
import uuid
import weakref
from dataclasses import dataclass
from types import FunctionType, MethodType, ModuleType
from typing import TYPE_CHECKING, Any

import cloudpickle

from .code import is_user_module
from .keys import Transform
from .rules import users_rules

if TYPE_CHECKING:
    from .engine import Engine
    from .handles import Derivative

#: Payload format; bumped if what ``reduce_handle`` sends changes shape.
_FORMAT = 2
#: Distinct payloads whose rebuilt handles a process keeps, and the most bytes they hold
#: (twice the data their payloads carry: as loaded, and in the compiled entry).
_KEEP = 16
_KEEP_BYTES = 64 * 2**20
#: Per thread, the handles being pickled now (a function that reads its own handle).
_pickling = threading.local()


def reduce_handle(dh: Derivative) -> tuple[Any, tuple[Any, ...]]:
    """``Derivative.__reduce__``: the current function, by value where cloudpickle
    can, and what the handle computes of it."""
    target = dh.target
    try:
        fn = target.resolve()
    except Exception as exc:
        raise pickle.PicklingError(
            f"cannot pickle {_name(dh)}: {type(exc).__name__}: {exc}"
        ) from exc
    busy: set[int] = _pickling.__dict__.setdefault("handles", set())
    if id(dh) in busy:  # without this, pickling recursed until the stack ran out, repeatedly
        raise pickle.PicklingError(
            f"cannot pickle {_name(dh)}: the function it differentiates reads this handle "
            "itself (directly or through other handles), and a handle is sent as its "
            "function's code and data"
        )
    busy.add(id(dh))
    try:
        payload, by_reference = _dumps(fn)
    except Exception as exc:
        raise pickle.PicklingError(_unpicklable(dh, fn, exc)) from exc
    finally:
        busy.discard(id(dh))
    backend = dh.backend or dh._engine.config.backend
    x64 = None
    if backend == "jax" and "jax" in sys.modules:  # not imported: JAX's default, as there
        x64 = bool(sys.modules["jax"].config.jax_enable_x64)
    label = target.label
    meta = (_FORMAT, dh.transform.value, dh.argnum, backend, dh.options, label, x64, by_reference)
    return rebuild_handle, (payload, meta)


if TYPE_CHECKING:  # (cloudpickle has no annotations: its pickler is typed as pickle's)
    _CloudPickler = pickle.Pickler
else:
    _CloudPickler = cloudpickle.Pickler


class _Pickler(_CloudPickler):
    """cloudpickle's pickler, noting whether what it pickles names a module of the user's
    by reference: a module of their own files (or made in the notebook), a function or
    class of one (cloudpickle sends those by reference), or a handle whose payload does."""

    def __init__(self, file: io.BytesIO) -> None:
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self.by_reference = False

    def reducer_override(self, obj: Any) -> Any:
        module: Any
        if isinstance(obj, ModuleType):
            module = obj.__name__
        elif type(obj) is FunctionType or isinstance(obj, type):
            module = getattr(obj, "__module__", None)
        else:
            module = None
            if type(obj).__name__ == "Derivative" and type(obj).__module__ == _HANDLES:
                reduced = reduce_handle(obj)  # (its payload was pickled on its own)
                self.by_reference = self.by_reference or reduced[1][1][7]
                return reduced
        if not self.by_reference and type(module) is str:
            found = sys.modules.get(module)
            # (cloudpickle sends what a notebook's ``__main__`` defines by value)
            self.by_reference = (
                isinstance(found, ModuleType)
                and module != "__main__"
                and is_user_module(object.__getattribute__(found, "__dict__"))
            )
        return super().reducer_override(obj)


_HANDLES = "ipyrefresh._src.handles"


def _dumps(fn: Any) -> tuple[bytes, bool]:
    """``fn`` pickled by cloudpickle, and whether the payload names a user's module."""
    out = io.BytesIO()
    pickler = _Pickler(out)
    pickler.dump(fn)
    return out.getvalue(), pickler.by_reference


def dask_token(dh: Derivative) -> tuple[Any, ...]:
    """``Derivative.__dask_tokenize__``: Dask names a task by its function and arguments,
    and keeps results under that name; a handle's token is what it would send now, so a
    redefinition makes new tasks instead of finding the old results (some Dask versions
    also cache a callable's token by identity). A handle that cannot be pickled still
    runs under Dask's local schedulers (threads): it gets a token of its own, as Dask
    gives what it cannot pickle."""
    try:
        _, (payload, meta) = reduce_handle(dh)
    except pickle.PicklingError:
        return ("ipyrefresh.Derivative", uuid.uuid4().hex)
    if meta[7]:  # (it names a user's module: its bytes do not say what that means now)
        return ("ipyrefresh.Derivative", uuid.uuid4().hex)
    if meta[3] == "jax":  # (JAX's rules travel in the payload)
        return ("ipyrefresh.Derivative", hashlib.blake2b(payload).hexdigest(), meta, None)
    rules = _rules_token()
    if rules is None:
        return ("ipyrefresh.Derivative", uuid.uuid4().hex)
    return ("ipyrefresh.Derivative", hashlib.blake2b(payload).hexdigest(), meta, rules)


def _rules_token() -> str | None:
    """What autograd's gradient rules (VJP and JVP) are now: a ``defvjp`` in the notebook
    is not part of the function's payload, yet changes what its tasks compute (under
    Dask's thread schedulers, which share the table). Each registration makes a new rule
    object, known by a serial number of its own; a rule of the user's (a function of the
    notebook, a partial, a bound method, a callable object) is known by its pickled bytes
    too, which carry what it reads (hunt 63). None when such a rule cannot be pickled:
    its state has no name, and its tasks get a token of their own."""
    from autograd.core import primitive_jvps, primitive_vjps

    digest = hashlib.blake2b()
    with _lock:
        makers = [*primitive_vjps.values(), *primitive_jvps.values()]
        for maker in makers:
            serial, own = _rule_serial(maker)
            digest.update(serial.to_bytes(8, "little"))
            if own:
                try:
                    payload, by_reference = _dumps(own)
                except Exception:
                    return None
                if by_reference:  # (a rule of a module of yours: what it reads is not in it)
                    return None
                digest.update(payload)
        # (Only the rules registered now: a replaced one, which a serial holds strongly
        # when it cannot be held weakly, must go with what it holds, hunt 64.)
        now = set(map(id, makers))
        for key in [k for k in _rule_serials if k not in now]:
            del _rule_serials[key]
    return digest.hexdigest()


def _rule_serial(maker: Any) -> tuple[int, list[Any]]:
    """A rule object's serial number (a new one for a new object, even at the id of a
    dead one: the object is held weakly, hunt 63) and the callables of the user's it
    runs (looked up again each time: held here, they would keep what they hold)."""
    known = _rule_serials.get(id(maker))
    if known is not None and known[0]() is maker:
        return known[1], users_rules(maker) if known[2] else []
    serial = next(_serials)
    own = users_rules(maker)
    try:
        ref: Any = weakref.ref(maker)
    except TypeError:  # (not weakly referenceable: held while the table holds it)
        ref = lambda: maker  # noqa: E731
    _rule_serials[id(maker)] = (ref, serial, bool(own))
    return serial, own


def rebuild_handle(payload: bytes, meta: tuple[Any, ...]) -> Derivative:
    """A handle on the function in ``payload``, in this process's own engine."""
    if meta[0] != _FORMAT:
        raise pickle.UnpicklingError(
            f"this ipyrefresh reads handles of format {_FORMAT}, not {meta[0]}: "
            "install the same ipyrefresh version in the workers as in the notebook"
        )
    if meta[6] is not None:
        _match_x64(meta[6])
    # Unpickled every time, even for a payload seen before: cloudpickle keeps one copy of
    # a notebook's class per process and sets its attributes from each payload it loads,
    # so the payload's state must be applied again before a kept handle answers (another
    # payload may have set the class otherwise since).
    try:
        fn, found = _loads(payload)
    except Exception as exc:
        name = f"{meta[1]}({meta[5]})"
        raise pickle.UnpicklingError(
            f"cannot rebuild the derivative handle {name} sent from another process: "
            f"{type(exc).__name__}: {exc}. Functions of modules are sent by reference: "
            "this process must be able to import them, with the same packages installed."
        ) from exc
    # What the payload names by reference (``mymod.f``) is part of the key, as the very
    # objects it resolved to here: after a module is edited and reloaded, the same bytes
    # mean other functions (hunt 49), and a kept handle would answer with the old ones.
    key = (hashlib.blake2b(payload, digest_size=20).digest(), meta, tuple(map(id, found)))
    with _lock:
        kept = _kept.get(key)
        if kept is not None and not _runs_its_code(kept.handle):
            _kept.move_to_end(key)
            return kept.handle
    dh = _new_handle(fn, meta)
    # (It holds the payload's data twice, as loaded and in its compiled entry. One too big
    # to keep is not kept: del frees it, as for the function itself: hunt 54.)
    size = 2 * len(payload)
    if size > _KEEP_BYTES:
        return dh
    with _lock:
        _kept[key] = _Kept(dh, size, found)
        total = sum(k.size for k in _kept.values())
        while len(_kept) > _KEEP or total > _KEEP_BYTES:
            total -= _kept.popitem(last=False)[1].size
    return dh


@dataclass(frozen=True)
class _Kept:
    """A rebuilt handle kept for tasks that carry the same payload: with its payload's size
    and the objects that payload named by reference (held, so their ids stay theirs)."""

    handle: Derivative
    size: int
    found: tuple[Any, ...]


class _Loader(pickle.Unpickler):
    """``pickle.loads``, noting every object the payload names by reference (functions
    and classes of modules, modules through cloudpickle's ``subimport``) and the handles
    rebuilt inside it."""

    def __init__(self, payload: bytes) -> None:
        super().__init__(io.BytesIO(payload))
        self.found: list[Any] = []

    def find_class(self, module: str, name: str) -> Any:
        obj = super().find_class(module, name)
        self.found.append(obj)
        if obj is rebuild_handle or any(obj is f for f in _IMPORTERS):
            found = self.found

            # (the module, or the handle inside: whose own key says whether it is the
            # one loaded before)
            def made(*args: Any) -> Any:
                result = obj(*args)
                found.append(result)
                return result

            return made
        return obj


#: cloudpickle's functions that give a module a payload names by reference.
_IMPORTERS: tuple[Any, ...] = tuple(
    getattr(cloudpickle.cloudpickle, name) for name in ("subimport", "dynamic_subimport")
)


def _loads(payload: bytes) -> tuple[Any, tuple[Any, ...]]:
    loader = _Loader(payload)
    return loader.load(), tuple(loader.found)


def _runs_its_code(dh: Derivative) -> bool:
    """Whether a kept handle may run its function's code at calls (it draws random
    numbers, counts, appends): that function's state has moved on since its payload was
    loaded, and a task carrying the same payload must start from the state it carries.
    Only a build shows it does not: a handle not built yet is not shared (Dask unpickles
    a batch of tasks before it runs them, hunt 63)."""
    variants = [v for e in dh.entries for v in e.variants]
    return not variants or any(v.replays_python for v in variants)


def _new_handle(fn: Any, meta: tuple[Any, ...]) -> Derivative:
    from .handles import Derivative
    from .targets import FixedTarget

    _, transform, argnum, backend, options, label, _, _ = meta
    return Derivative(
        Transform(transform),
        fn,
        argnum,
        backend,
        target=FixedTarget(fn, label),
        engine=_engine(),
        options=options,
    )


def _match_x64(enabled: bool) -> None:
    """JAX's precision as in the process that sent the handle: a worker at JAX's default
    would answer in float32 for a notebook that enabled x64. Arguments unpickled before
    the handle (Dask unpickles a task's arguments first) were made at the worker's
    setting: see the README for setting x64 in the workers themselves."""
    import jax

    config: Any = jax.config
    if bool(config.jax_enable_x64) != enabled:
        config.update("jax_enable_x64", enabled)


# -- this process's own engine and kept handles -------------------------------------------
#
# Not the process's current engine: a child made by fork() inherits that one, whose lock
# may be held by a thread that does not exist in the child and whose listeners talk to
# the notebook's front end over the parent's sockets. Forked children start afresh.

_lock = threading.Lock()
#: Rebuilt handles by payload digest, meta and what the payload named by reference.
_kept: collections.OrderedDict[Any, _Kept] = collections.OrderedDict()
#: Rule objects met by :func:`_rules_token`, by id: a weak reference, a serial number,
#: and whether the rule runs callables of the user's.
_rule_serials: dict[int, tuple[Any, int, bool]] = {}
_serials = itertools.count()
_engines: list[Engine] = []


def _engine() -> Engine:
    """The engine of handles sent here. They build at their first call: tasks that carry
    the same payload share a kept handle only once its build has shown that the function
    does not run its code at every call (:func:`_runs_its_code`); a first call run as plain
    autograd would show nothing, and every task would run plain autograd."""
    from .config import IPyRefresh
    from .engine import Engine

    with _lock:
        if not _engines:
            _engines.append(Engine(IPyRefresh(build_at_call=1)))
        return _engines[0]


def _forked() -> None:
    global _lock, _kept
    _lock = threading.Lock()
    _kept = collections.OrderedDict()
    _engines.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forked)


# -- a clear error for what cannot be sent -----------------------------------------------


def _name(dh: Derivative) -> str:
    argnum = "" if dh.argnum == 0 else f", argnum={dh.argnum}"
    return f"the derivative handle {dh.transform.value}({dh.target.label}{argnum})"


def _unpicklable(dh: Derivative, fn: Any, exc: BaseException) -> str:
    culprit = _culprit(fn, dh.target.label, set(), 0)
    where = f"{culprit} cannot be pickled" if culprit else f"'{dh.target.label}' cannot be pickled"
    return (
        f"cannot pickle {_name(dh)} to send it to another process: {where} "
        f"({type(exc).__name__}: {exc}). A handle sends the function it differentiates, "
        "with the globals, closures and defaults it reads, by value; make those picklable "
        "or create them inside the function."
    )


def _picklable(obj: Any) -> bool:
    try:
        cloudpickle.dumps(obj)
    except Exception:
        return False
    return True


def _culprit(obj: Any, path: str, seen: set[int], depth: int) -> str | None:
    """The first thing reachable from ``obj`` (through what cloudpickle sends with a
    function: globals it reads, closure cells, defaults) that cannot be pickled, as a
    path ``h -> global 'g' -> global 'lock' (a _thread.lock)``; None if not found."""
    if id(obj) in seen or depth > 8:
        return None
    seen.add(id(obj))
    parts: list[tuple[str, Any]] = []
    if type(obj) is FunctionType:
        names: set[str] = set()
        _global_names(obj.__code__, names)
        for name in sorted(names):
            if name in obj.__globals__:
                parts.append((f"global '{name}'", obj.__globals__[name]))
        for name, cell in zip(obj.__code__.co_freevars, obj.__closure__ or (), strict=False):
            try:
                parts.append((f"closure variable '{name}'", cell.cell_contents))
            except ValueError:  # an empty cell
                continue
        parts.extend((f"default {i}", v) for i, v in enumerate(obj.__defaults__ or ()))
        parts.extend((f"default '{k}'", v) for k, v in (obj.__kwdefaults__ or {}).items())
    elif type(obj) is MethodType:
        parts = [("its object", obj.__self__), ("its function", obj.__func__)]
    else:
        attrs = getattr(obj, "__dict__", None)
        if type(attrs) is dict:
            parts = [(f"attribute '{k}'", v) for k, v in attrs.items()]
    for label, value in parts:
        if _picklable(value):
            continue
        deeper = _culprit(value, f"{path} -> {label}", seen, depth + 1)
        return deeper or f"{path} -> {label} (a {_type_name(value)})"
    return None


def _global_names(code: Any, names: set[str]) -> None:
    names.update(code.co_names)
    for const in code.co_consts:
        if hasattr(const, "co_names"):
            _global_names(const, names)


def _type_name(value: Any) -> str:
    cls = type(value)
    module = getattr(cls, "__module__", None)
    name = getattr(cls, "__qualname__", cls.__name__)
    return name if module in (None, "builtins") else f"{module}.{name}"
