"""Static dependency analysis: what a function can reach, read from its bytecode.

Starting from the function being differentiated, we follow the globals its code
loads (including attribute chains such as ``mymod.f`` through modules and classes),
its closure cells, defaults, ``__wrapped__``, ``functools.partial`` objects, bound
methods and small containers of functions, recursively through user code. Library
code (numpy, autograd, the standard library) is not entered: only the gradient rules
of autograd primitives it exposes are watched.

Everything here inspects objects by ``type()`` and plain ``dict`` lookups, never by
``isinstance``/``getattr`` on user objects, so proxies that claim every attribute
cannot mislead or break it.
"""

from __future__ import annotations

import builtins
import dis
import functools
import os
import site
import sysconfig
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import CodeType, FunctionType, MethodType, ModuleType
from typing import Any
from weakref import WeakKeyDictionary

import numpy as np

from .deps import MISSING, BindingDep, ContentDep, Dep, FunctionDep, RuleDep

_LOAD_GLOBAL = {"LOAD_GLOBAL", "LOAD_NAME"}
_LOAD_ATTR = {"LOAD_ATTR", "LOAD_METHOD"}
_STORE_GLOBAL = {"STORE_GLOBAL", "DELETE_GLOBAL"}


@dataclass(frozen=True)
class CodeRefs:
    """Names a code object (and the code nested in it) loads from its globals."""

    globals: frozenset[str]
    chains: frozenset[tuple[str, ...]]
    stores_globals: bool


_code_refs: WeakKeyDictionary[CodeType, CodeRefs] = WeakKeyDictionary()


def code_refs(code: CodeType) -> CodeRefs:
    """Global names and attribute chains loaded by ``code``; cached per code object."""
    cached = _code_refs.get(code)
    if cached is not None:
        return cached
    names: set[str] = set()
    chains: set[tuple[str, ...]] = set()
    stores = False
    stack = [code]
    while stack:
        co = stack.pop()
        chain: list[str] = []
        for ins in dis.get_instructions(co):
            op = ins.opname
            if op in _LOAD_GLOBAL:
                if len(chain) > 1:
                    chains.add(tuple(chain))
                chain = [ins.argval]
                names.add(ins.argval)
                continue
            if op in _LOAD_ATTR and chain:
                chain.append(ins.argval)
                continue
            if len(chain) > 1:
                chains.add(tuple(chain))
            chain = []
            if op in _STORE_GLOBAL:
                stores = True
        if len(chain) > 1:
            chains.add(tuple(chain))
        stack.extend(c for c in co.co_consts if type(c) is CodeType)
    refs = CodeRefs(frozenset(names), frozenset(chains), stores)
    _code_refs[code] = refs
    return refs


def _library_prefixes() -> tuple[str, ...]:
    paths = {sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    paths.update(site.getsitepackages())
    paths.add(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # ipyrefresh itself
    return tuple(os.path.normcase(os.path.realpath(p)) + os.sep for p in paths if p)


_LIBRARY = _library_prefixes()
_is_user_file: dict[str, bool] = {}


def is_user_code(code: CodeType) -> bool:
    """True for code the user wrote: cells, ``exec``'d strings, their own modules."""
    filename = code.co_filename
    known = _is_user_file.get(filename)
    if known is None:
        if filename.startswith("<frozen") or filename in ("<__array_function__ internals>",):
            known = False
        elif filename.startswith("<"):
            known = True
        else:
            real = os.path.normcase(os.path.realpath(filename))
            known = not real.startswith(_LIBRARY)
        _is_user_file[filename] = known
    return known


def is_primitive(fn: Any) -> bool:
    return type(fn) is FunctionType and fn.__dict__.get("_is_autograd_primitive") is True


def namespace_of(obj: Any) -> Mapping[str, Any] | None:
    """The live attribute namespace of a module or class, else ``None``."""
    t = type(obj)
    if issubclass(t, ModuleType):
        ns = object.__getattribute__(obj, "__dict__")
        return ns if type(ns) is dict else None
    if issubclass(t, type):
        return type.__dict__["__dict__"].__get__(obj)
    return None


@dataclass
class DepGraph:
    """The dependency set of one derivative, with the edges ``%callgraph`` draws."""

    deps: dict[Any, Dep] = field(default_factory=dict)
    #: (caller label, callee label) -> "static" | "dynamic" | "both"
    edges: dict[tuple[str, str], str] = field(default_factory=dict)
    #: user functions reached, by label
    functions: dict[str, FunctionType] = field(default_factory=dict)
    side_effects: list[str] = field(default_factory=list)

    def add(self, dep: Dep) -> None:
        self.deps.setdefault(dep.key, dep)

    def edge(self, src: str, dst: str, kind: str) -> None:
        old = self.edges.get((src, dst))
        self.edges[(src, dst)] = kind if old in (None, kind) else "both"


_BUILTINS = builtins.__dict__
_MAX_CONTAINER_FOLLOW = 64


class Analyzer:
    """Builds a :class:`DepGraph` from a root function, statically and from call logs."""

    def __init__(self, graph: DepGraph, max_digest_bytes: int = 1 << 20) -> None:
        self.graph = graph
        self.max_digest_bytes = max_digest_bytes
        self._seen: set[int] = set()
        self._keep: list[Any] = []  # keeps ids in _seen valid during the analysis

    # -- static ---------------------------------------------------------------------
    def function(self, fn: FunctionType, label: str, kind: str = "static") -> None:
        """Add a user function and, recursively, everything its code can reach."""
        if id(fn) in self._seen:
            return
        self._seen.add(id(fn))
        self._keep.append(fn)
        graph = self.graph
        graph.add(FunctionDep(fn, label))
        graph.functions.setdefault(label, fn)
        code = fn.__code__
        self.code_globals(code, fn.__globals__, label, kind)
        if fn.__closure__:
            for name, cell in zip(code.co_freevars, fn.__closure__, strict=False):
                try:
                    value = cell.cell_contents
                except ValueError:
                    continue
                self.value(value, name, label, kind)
        for value in fn.__defaults__ or ():
            self.value(value, f"{label}(default)", label, kind, data=False)
        for value in (fn.__kwdefaults__ or {}).values():
            self.value(value, f"{label}(default)", label, kind, data=False)
        wrapped = fn.__dict__.get("__wrapped__", MISSING)
        if wrapped is not MISSING:
            self.value(wrapped, f"{label}.__wrapped__", label, kind)
        if is_primitive(fn):
            raw = fn.__dict__.get("fun")
            if type(raw) is FunctionType and is_user_code(raw.__code__):
                self.function(raw, f"{label}.fun", kind)

    def code_globals(
        self, code: CodeType, globs: dict[str, Any], label: str, kind: str = "static"
    ) -> None:
        """Bindings that ``code`` loads from ``globs``, and what they hold."""
        graph = self.graph
        refs = code_refs(code)
        if refs.stores_globals:
            graph.side_effects.append(f"{label} assigns a global")
        for name in refs.globals:
            value = globs.get(name, MISSING)
            if value is MISSING and name in _BUILTINS:
                # A negative edge: defining a global of this name later shadows the builtin.
                graph.add(BindingDep(globs, name, name))
                continue
            graph.add(BindingDep(globs, name, name))
            self.value(value, name, label, kind)
        for chain in refs.chains:
            self.chain(globs, chain, label, kind)

    def chain(self, globs: dict[str, Any], chain: tuple[str, ...], src: str, kind: str) -> None:
        """``mod.sub.f``: a binding dependency for each link through modules and classes."""
        obj = globs.get(chain[0], MISSING)
        path = chain[0]
        for attr in chain[1:]:
            ns = namespace_of(obj)
            if ns is None:
                return
            path = f"{path}.{attr}"
            self.graph.add(BindingDep(ns, attr, path))
            obj = ns.get(attr, MISSING)
            if obj is MISSING:
                return
            self.value(obj, path, src, kind, data=False)

    def value(self, value: Any, label: str, src: str, kind: str, data: bool = True) -> None:
        """What a loaded value contributes: functions to follow, data to watch."""
        t = type(value)
        graph = self.graph
        if t is FunctionType:
            if is_user_code(value.__code__):
                graph.edge(src, label, kind)
                self.function(value, label, kind)
            elif is_primitive(value):
                graph.add(RuleDep(value, label))
        elif t is MethodType:
            self.value(value.__func__, label, src, kind, data)
        elif t is functools.partial:
            self.value(value.func, label, src, kind, data)
            for a in (*value.args, *value.keywords.values()):
                self.value(a, f"{label}(partial arg)", src, kind, data=False)
        elif data and ContentDep.applies_to(value):
            graph.add(ContentDep(value, label, self.max_digest_bytes))
            if t is not np.ndarray and not issubclass(t, np.ndarray):
                self._elements(value, label, src, kind)
        elif t is tuple:
            self._elements(value, label, src, kind)
        elif issubclass(t, type) and id(value) not in self._seen:
            self._class(value, label, src, kind)
        elif (
            t.__module__ not in ("builtins", "numpy")
            and not issubclass(t, (ModuleType, np.generic))
            and id(t) not in self._seen
        ):
            # A callable instance of a user class: its methods run on call.
            self._class(t, f"{label}.__class__", src, kind)

    def _elements(self, value: Any, label: str, src: str, kind: str) -> None:
        try:
            items = list(value.values()) if type(value) is dict else list(value)
        except Exception:
            return
        if len(items) > _MAX_CONTAINER_FOLLOW:
            return
        for i, item in enumerate(items):
            if type(item) in (FunctionType, MethodType, functools.partial):
                self.value(item, f"{label}[{i}]", src, kind, data=False)

    def _class(self, cls: type, label: str, src: str, kind: str) -> None:
        """Methods of a user class: monkeypatching ``C.m = ...`` must be seen."""
        self._seen.add(id(cls))
        self._keep.append(cls)
        ns = type.__dict__["__dict__"].__get__(cls)
        for name, attr in list(ns.items()):
            fn = attr.__func__ if type(attr) in (staticmethod, classmethod) else attr
            if type(fn) is FunctionType and is_user_code(fn.__code__):
                self.graph.add(BindingDep(ns, name, f"{label}.{name}"))
                self.function(fn, f"{label}.{name}", kind)

    # -- dynamic --------------------------------------------------------------------
    def called(self, code: CodeType, globs: dict[str, Any], caller: str | None, root: str) -> str:
        """A user code object entered while the derivative was built; returns its label.

        ``caller`` is the label of the nearest user frame that called it, or ``None`` when
        autograd itself called it (the root function, or a user's gradient rule).
        """
        label = code.co_qualname
        fn, bindings = resolve_qualname(code, globs)
        if fn is not None:
            for dep in bindings:
                self.graph.add(dep)
            self.function(fn, label, "dynamic")
        else:
            self.code_globals(code, globs, label, "dynamic")
        if label != root:
            self.graph.edge(caller or root, label, "dynamic")
        return label


def resolve_qualname(code: CodeType, globs: dict[str, Any]) -> tuple[Any, list[Dep]]:
    """The function object that owns ``code``, found through its qualified name.

    ``C.m`` resolves through the class ``C``; closures (``f.<locals>.g``) and lambdas
    cannot be resolved by name and return ``None``: their enclosing function or the
    container they came from is watched instead.
    """
    qualname = getattr(code, "co_qualname", code.co_name)
    parts = qualname.split(".")
    if any(p.startswith("<") for p in parts):
        return None, []
    ns: Mapping[str, Any] | None = globs
    deps: list[Dep] = []
    obj: Any = MISSING
    path = ""
    for part in parts:
        if ns is None:
            return None, []
        path = f"{path}.{part}" if path else part
        deps.append(BindingDep(ns, part, path))
        obj = ns.get(part, MISSING)
        if type(obj) in (staticmethod, classmethod):
            obj = obj.__func__
        ns = namespace_of(obj)
    if type(obj) is FunctionType and obj.__code__ is code:
        return obj, deps
    return None, []
