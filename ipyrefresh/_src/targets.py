"""Targets: what a derivative differentiates — the name the user passed, or a fixed object.

``dg2 = grad(g2)`` follows the *name* ``g2``: redefine ``g2`` (or rebind it to another
function) and the next call answers for what ``g2`` means then. The name is read from
the call site with ``executing`` (the library IPython's tracebacks use), so ``g2 = g;
grad(g2)`` follows ``g2``, not ``g``. ``grad(model.loss)`` follows ``model`` and reads
``.loss`` from it at each call. Anything else (a lambda, ``fs[0]``, a local variable)
is a fixed target: the object itself, held weakly by the cache.
"""

from __future__ import annotations

import ast
import sys
import weakref
from collections.abc import Callable
from types import FrameType, FunctionType, MethodType
from typing import Any

from .keys import TargetKey
from .nodes import MISSING


class TargetGone(NameError):
    """The name a derivative follows is no longer bound (or its object was collected)."""


class Target:
    """What a handle differentiates; ``resolve()`` gives the callable it means now."""

    key: TargetKey
    label: str
    follows: bool

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
        self._callbacks: list[Callable[[TargetKey], None]] = []
        try:
            self._ref: Callable[[], Any] = weakref.ref(obj, self._died)
        except TypeError:  # not weakly referenceable: entries hold it, bounded by the LRU
            self._ref = lambda: obj

    def _died(self, _: Any) -> None:
        for callback in self._callbacks:
            callback(self.key)

    def on_death(self, callback: Callable[[TargetKey], None]) -> None:
        self._callbacks.append(callback)

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
    """The target for ``grad(fun)`` called from ``frame``."""
    if frame is not None:
        path = passed_expression(frame)
        if path is not None:
            target = None if _is_local(frame, path[0]) else _follow(frame.f_globals, path, fun)
            if target is not None:
                return target
        target = _by_identity(frame, fun)
        if target is not None:
            return target
    return FixedTarget(fun, label_of(fun))


def target_in(ns: dict[str, Any], expression: str, fun: Any) -> Target:
    """The target for ``expression`` (``f``, ``model.loss``) evaluated in ``ns`` (``%grad``)."""
    path = _path(expression)
    target = _follow(ns, path, fun) if path is not None else None
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
    """``name`` is a local variable of the frame's function (read from the code object:
    touching ``frame.f_locals`` would keep a snapshot of every local alive until 3.13)."""
    code = frame.f_code
    if not code.co_flags & _CO_OPTIMIZED:  # module level (or a class body): not local
        return code.co_name != "<module>"
    return name in code.co_varnames or name in code.co_cellvars or name in code.co_freevars


_CO_OPTIMIZED = 0x1


def _by_identity(frame: FrameType, fun: Any) -> Target | None:
    """No source to read (``exec``'d code): a global name bound to ``fun``, if unique."""
    ns = frame.f_globals
    if frame.f_code.co_flags & _CO_OPTIMIZED or frame.f_code.co_name != "<module>":
        return None
    if type(fun) is FunctionType and dict.get(ns, fun.__name__, MISSING) is fun:
        return NameTarget(ns, fun.__name__)
    names = [
        k for k, v in list(ns.items()) if v is fun and type(k) is str and not k.startswith("_")
    ]
    return NameTarget(ns, names[0]) if len(names) == 1 else None


def passed_expression(frame: FrameType) -> tuple[str, ...] | None:
    """The name (or ``name.attr`` chain) passed as the function to the call that is
    executing in ``frame``; None if it is anything else or the source is unknown."""
    try:
        import executing

        node = executing.Source.executing(frame).node
    except Exception:
        return None
    if not isinstance(node, ast.Call):
        return None
    arg: ast.expr | None = node.args[0] if node.args else None
    for kw in node.keywords:
        if kw.arg in ("fun", "f", "fn"):
            arg = kw.value
    parts: list[str] = []
    while isinstance(arg, ast.Attribute):
        parts.append(arg.attr)
        arg = arg.value
    if not isinstance(arg, ast.Name) or _loop_variable(node, arg.id):
        return None
    return (arg.id, *reversed(parts))


def _loop_variable(node: ast.AST, name: str) -> bool:
    """``for fn in fs: hs.append(grad(fn))``: each handle means its own function, not
    whatever the loop variable is bound to later."""
    parent = getattr(node, "parent", None)
    while parent is not None:
        if isinstance(parent, (ast.For, ast.AsyncFor, ast.comprehension)):
            targets = [n.id for n in ast.walk(parent.target) if isinstance(n, ast.Name)]
            if name in targets:
                return True
        parent = getattr(parent, "parent", None)
    return False


def caller_frame(depth: int) -> FrameType | None:
    try:
        return sys._getframe(depth + 1)
    except ValueError:
        return None
