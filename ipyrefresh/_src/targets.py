"""Targets: what a derivative differentiates — the name the user passed, or a fixed object.

``dg2 = grad(g2)`` follows the *name* ``g2``: redefine ``g2`` (or rebind it to another
function) and the next call answers for what ``g2`` means then. The name is read from
the call site (``callsite.py``), so ``g2 = g; grad(g2)`` follows ``g2``, not ``g``.
``grad(model.loss)`` follows ``model`` and reads ``.loss`` from it at each call. Anything
else (a lambda, ``fs[0]``, a local variable) is a fixed target: the object itself, held
weakly by the cache.
"""

from __future__ import annotations

import sys
import weakref
from collections.abc import Callable
from types import FrameType, FunctionType, MethodType, ModuleType
from typing import Any

from .callsite import passed_expression, rebound_names
from .keys import TargetKey
from .nodes import MISSING


class TargetGone(NameError):
    """The name a derivative follows is no longer bound (or its object was collected)."""


class Target:
    """What a handle differentiates; ``resolve()`` gives the callable it means now."""

    key: TargetKey
    label: str
    follows: bool
    #: Live handles on it (the engine counts them: see ``Engine.hold``).
    holders: int = 0

    def resolve(self) -> Any:
        raise NotImplementedError


class NameTarget(Target):
    """A binding ``ns[name]``, optionally followed by attributes (``model.loss``)."""

    follows = True

    def __init__(self, ns: dict[str, Any], name: str, attrs: tuple[str, ...] = ()) -> None:
        self.ns = ns
        self.name = name
        self.attrs = attrs
        self.key = TargetKey("name", id(ns), (name, *attrs))
        self.label = ".".join((name, *attrs))

    def resolve(self) -> Any:
        value = dict.get(self.ns, self.name, MISSING)
        if value is MISSING:  # (then, as Python looks a global up, the builtins)
            found = dict.get(self.ns, "__builtins__", MISSING)
            builtin = found.__dict__ if type(found) is ModuleType else found
            value = dict.get(builtin, self.name, MISSING) if type(builtin) is dict else MISSING
        if value is MISSING:
            raise TargetGone(
                f"name '{self.name}' is not defined any more; this derivative follows it"
            )
        for attr in self.attrs:
            value = getattr(value, attr)
        return value


class FixedTarget(Target):
    """One object, held weakly when it can be (the handle holds it strongly)."""

    follows = False

    def __init__(self, obj: Any, label: str) -> None:
        self.key = TargetKey("object", id(obj))
        self.label = label
        self.holders = 0  # live handles on this target (the engine drops its entries at 0)
        try:
            self._ref: Callable[[], Any] = weakref.ref(obj)
        except TypeError:  # not weakly referenceable: entries hold it, bounded by the LRU
            self._ref = lambda: obj

    def watch(self, callback: Callable[[Any], object]) -> weakref.ref[Any] | None:
        """A weak reference to the object that calls ``callback`` with itself when the
        object dies (the caller keeps it); None if the object cannot have one, or is gone."""
        obj = self._ref()
        if obj is None or type(self._ref) is not weakref.ref:
            return None
        return weakref.ref(obj, callback)

    @property
    def dead(self) -> bool:
        return self._ref() is None

    def resolve(self) -> Any:
        value = self._ref()
        if value is None:
            raise TargetGone(f"the function '{self.label}' no longer exists")
        return value


def label_of(fun: Any) -> str:
    if type(fun) is FunctionType:
        return fun.__name__
    if type(fun) is MethodType:
        return f"{type(fun.__self__).__name__}.{fun.__func__.__name__}"
    from .handles import Derivative  # (handles import this module)

    if type(fun) is Derivative:  # a handle of a handle: jit(grad(f))
        return fun.label
    name = type.__dict__["__name__"].__get__(type(fun))
    return name if type(name) is str else "callable"


def same_callable(a: Any, b: Any) -> bool:
    """``a is b``, or the same bound method (``obj.m`` makes a new method object)."""
    if a is b:
        return True
    if type(a) is MethodType and type(b) is MethodType:
        return a.__func__ is b.__func__ and a.__self__ is b.__self__
    return False


def target_for(fun: Any, frame: FrameType | None) -> Target:
    """The target for ``grad(fun)`` called from ``frame``.

    The call site decides: a global name (or ``name.attr`` chain) that means ``fun`` now is
    followed; any other expression — a lambda, ``fs[0]``, a local, a loop or comprehension
    variable — is the fixed object. Only when the source cannot be read (``exec``'d code)
    is a unique global name bound to ``fun`` guessed."""
    if frame is None:
        return FixedTarget(fun, label_of(fun))
    ns = frame.f_globals
    site = passed_expression(frame, lambda path: _follow(ns, path, fun) is not None)
    if site is None:
        target = _by_identity(frame, fun)
    elif site.path is None or _is_local(frame, site.path[0]):
        target = None
    else:
        target = _follow(frame.f_globals, site.path, fun)
    return target or FixedTarget(fun, label_of(fun))


def target_in(ns: dict[str, Any], expression: str, fun: Any) -> Target:
    """The target for ``expression`` evaluated in ``ns`` (``%grad``): the name, for a
    plain name that still means ``fun``; else ``fun`` itself. (``model.loss`` is read
    once, as Python reads a call's callee: a property may answer otherwise next time.)"""
    path = _path(expression)
    target = _follow(ns, path, fun) if path is not None and len(path) == 1 else None
    return target or FixedTarget(fun, expression)


def _path(name: str) -> tuple[str, ...] | None:
    parts = tuple(name.split("."))
    return parts if all(p.isidentifier() for p in parts) else None


def _follow(ns: dict[str, Any], path: tuple[str, ...], fun: Any) -> Target | None:
    """Follow ``path`` in the namespace ``ns``, if it means ``fun`` there now."""
    target = NameTarget(ns, path[0], path[1:])
    try:
        current = target.resolve()
    except Exception:
        return None
    return target if same_callable(current, fun) else None


def _is_local(frame: FrameType, name: str) -> bool:
    """``name`` is local where ``frame`` runs: a variable of its function (read from the
    code object: touching an optimized frame's ``f_locals`` would keep a snapshot of every
    local alive until 3.13), or bound in a class body's (or ``exec``'s own) namespace."""
    code = frame.f_code
    if code.co_flags & _CO_OPTIMIZED:
        return name in code.co_varnames or name in code.co_cellvars or name in code.co_freevars
    # Module level, a class body, exec with locals: the namespace itself — except inside an
    # inlined comprehension (PEP 709), where each read of f_locals makes a new snapshot
    # (3.12) or proxy. There a name the comprehension does not bind (the call site's syntax
    # tells) is global: a class body's comprehension does not see the class's names.
    namespace = frame.f_locals
    if namespace is not frame.f_locals:
        return False
    return namespace is not frame.f_globals and name in namespace


_CO_OPTIMIZED = 0x1


def _by_identity(frame: FrameType, fun: Any) -> Target | None:
    """No source to read (``exec``'d code): a global name bound to ``fun`` that the code
    reads and never rebinds (a loop variable, or a name a loop rebinds, is no name to
    follow), if there is exactly one."""
    ns = frame.f_globals
    reads = frame.f_code.co_names
    while frame.f_code.co_name in _COMPREHENSION_CODE and frame.f_back is not None:
        frame = frame.f_back  # (before 3.12, a comprehension's own frame)
    code = frame.f_code
    if code.co_flags & _CO_OPTIMIZED or code.co_name != "<module>" or frame.f_globals is not ns:
        return None
    namespace = frame.f_locals  # (a new snapshot at each read in an inlined comprehension)
    if namespace is not ns and namespace is frame.f_locals:
        return None
    rebound = rebound_names(code, _GLOBAL_STORES)
    names = [
        k
        for k, v in list(ns.items())
        if v is fun and type(k) is str and k in reads and k not in rebound
    ]
    return NameTarget(ns, names[0]) if len(names) == 1 else None


_COMPREHENSION_CODE = frozenset({"<listcomp>", "<setcomp>", "<dictcomp>"})  # run at once
_GLOBAL_STORES = frozenset({"STORE_NAME", "STORE_GLOBAL", "DELETE_NAME", "DELETE_GLOBAL"})


def caller_frame(depth: int) -> FrameType | None:
    try:
        return sys._getframe(depth + 1)
    except ValueError:
        return None
