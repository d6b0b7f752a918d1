"""Walking what a derivative reads: from its function to every value its answer depends on.

The walk starts at the function being differentiated and its non-differentiated
arguments, and follows everything a run can reach: the globals each user function loads
(and attribute chains through modules: ``mymod.SCALE``), closure cells, defaults,
function attributes, bound ``self``, the attributes of objects and the classes they come
from, the elements of lists, tuples, dicts and sets, recursively, plus every user code
object that actually ran while the derivative was built (``f = fs[k]; f(x)``). Each
value becomes a guard node (``nodes.py``); together they form a :class:`Guard`, which
the derivative checks at every call.

What it cannot validate, it says so (``Guard.unguardable``): then the derivative runs
plain autograd, which re-reads everything on every call.
"""

from __future__ import annotations

import array
import builtins
import collections
import functools
import random
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import BuiltinFunctionType, CodeType, FunctionType, MethodType, ModuleType
from typing import Any

import numpy as np
from autograd.tracer import Box

from . import code as codefacts
from .changes import ChangeKind
from .digest import array_digest
from .nodes import (
    CHEAP_DIGEST_BYTES,
    MISSING,
    Absent,
    Array,
    Buffer,
    Cell,
    Class,
    Function,
    Identity,
    Instance,
    Map,
    Method,
    Mismatch,
    Node,
    Primitive,
    Rule,
    Scalar,
    ScalarSeq,
    ScalarSet,
    Seq,
    Unreadable,
    Wrapped,
    is_key,
    is_scalar,
    part,
)

#: Most values one derivative's guard may hold; beyond, it runs plain autograd.
MAX_NODES = 200_000

_RNG_TYPES: tuple[type, ...] = (
    np.random.RandomState,
    np.random.Generator,
    np.random.BitGenerator,
    random.Random,
)
_SEQ_TYPES = (list, tuple, collections.deque)
_MAP_TYPES = (dict, collections.OrderedDict, collections.defaultdict, collections.Counter)
_IDENTITY_TYPES: tuple[type, ...] = (
    BuiltinFunctionType,
    CodeType,
    np.ufunc,
    np.dtype,
    type(len),
    type(str.join),
    type(dict.__dict__["fromkeys"]),
    type(int.__add__),
    type(object.__init__),
    type(array.array.append),
    range,
    slice,
)


# -- readers: where a root value is read from at check time ---------------------------


class Reader:
    """How to find a root value at check time; ``label`` names it in reasons."""

    __slots__ = ()

    def read(self, fn: Any, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> Any:
        raise NotImplementedError


class TargetReader(Reader):
    """The function being differentiated, as the handle resolved it for this call."""

    __slots__ = ()

    def read(self, fn: Any, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> Any:
        return fn


class NameReader(Reader):
    """A binding in a module's (or the notebook's) global namespace."""

    __slots__ = ("name", "ns")

    def __init__(self, ns: dict[str, Any], name: str) -> None:
        self.ns = ns
        self.name = name

    def read(self, fn: Any, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> Any:
        return dict.get(self.ns, self.name, MISSING)


class FixedReader(Reader):
    """An object reached once and checked on its own (a class, a primitive's function)."""

    __slots__ = ("get",)

    def __init__(self, get: Callable[[], Any]) -> None:
        self.get = get

    def read(self, fn: Any, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> Any:
        value = self.get()
        return MISSING if value is None else value


class ArgReader(Reader):
    """A positional or keyword argument of the call."""

    __slots__ = ("key",)

    def __init__(self, key: int | str) -> None:
        self.key = key

    def read(self, fn: Any, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> Any:
        key = self.key
        if type(key) is int:
            return args[key] if key < len(args) else MISSING
        return kwargs.get(key, MISSING)  # type: ignore[call-overload]


# -- the guard ---------------------------------------------------------------------------


@dataclass(eq=False)
class Guard:
    """Everything one build read, to be checked before its artifact answers a call.

    ``env`` covers the code and data the function reaches (a failure means the cached
    artifact is stale); ``args`` the non-differentiated arguments (a failure means this
    artifact does not apply to these arguments, another variant may).
    """

    env: list[tuple[Reader, Node]] = field(default_factory=list)
    args: list[tuple[Reader, Node]] = field(default_factory=list)
    unguardable: str = ""
    notes: list[str] = field(default_factory=list)
    rngs: list[tuple[str, Any]] = field(default_factory=list)  # (label, generator)
    labels: list[str] = field(default_factory=list)  # what the guard covers, for %callgraph
    #: (caller, callee) labels of calls visible in the code (for %callgraph)
    edges: dict[tuple[str, str], str] = field(default_factory=dict)
    size: int = 0
    big_arrays: int = 0  # arrays above CHEAP_DIGEST_BYTES: checked at calls, not after cells

    def check_env(self, fn: Any, deep: bool = True) -> Mismatch | None:
        for reader, node in self.env:
            bad = node.check(reader.read(fn, (), {}), deep)
            if bad is not None:
                return bad
        return None

    def check_args(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> Mismatch | None:
        for reader, node in self.args:
            bad = node.check(reader.read(None, args, kwargs), True)
            if bad is not None:
                return bad
        return None


class Unguardable(Exception):
    """The walk met something whose changes it cannot see."""


def rng_state(gen: Any) -> int:
    """A fingerprint of a random generator's state (numpy legacy, new-style, or Python's)."""
    if isinstance(gen, random.Random):
        return hash(gen.getstate())
    if isinstance(gen, np.random.RandomState):
        state: Any = gen.get_state(legacy=False)
    elif isinstance(gen, np.random.Generator):
        state = gen.bit_generator.state
    else:
        state = gen.state
    return _state_hash(state)


def _state_hash(state: Any) -> int:
    if type(state) is dict:
        return hash(tuple((k, _state_hash(v)) for k, v in state.items()))
    if type(state) is np.ndarray:
        return array_digest(state)
    return hash(state)


_GLOBAL_RNG = np.random.mtrand._rand


class Walker:
    """Builds a :class:`Guard` from roots; see the module docstring."""

    def __init__(self, guard: Guard, budget: int = MAX_NODES) -> None:
        self.guard = guard
        self.budget = budget
        self._keep: list[Any] = []  # keeps the ids below valid during the walk
        self._functions: set[int] = set()
        self._classes: set[int] = set()
        self._names: set[tuple[int, str]] = set()
        self._path: list[int] = []
        self._rngs: set[int] = set()
        #: Code objects whose function was walked (with their nested code).
        self.covered: set[CodeType] = set()

    # -- roots -------------------------------------------------------------------------
    def env_root(self, reader: Reader, node: Node) -> None:
        self.guard.env.append((reader, node))

    def target(self, fn: Any, label: str) -> None:
        self.env_root(TargetReader(), self.walk(fn, label))

    def argument(self, key: int | str, value: Any, label: str) -> None:
        self.guard.args.append((ArgReader(key), self.walk(value, label)))

    def global_name(self, globs: Mapping[str, Any], name: str, label: str) -> None:
        """A name loaded by user code from ``globs`` (falling back to the builtins)."""
        if type(globs) is not dict:
            raise Unguardable(f"{label} is read from a namespace that is not a dict")
        key = (id(globs), name)
        if key in self._names:
            return
        self._names.add(key)
        self._keep.append(globs)
        value = dict.get(globs, name, MISSING)
        self.guard.labels.append(label)
        if value is not MISSING:
            self.env_root(NameReader(globs, name), self.walk(value, label))
            return
        self.env_root(NameReader(globs, name), Absent(label))
        b = dict.get(globs, "__builtins__", builtins)
        bdict = b.__dict__ if type(b) is ModuleType else b
        if type(bdict) is dict and (id(bdict), name) not in self._names:
            self._names.add((id(bdict), name))
            self.env_root(NameReader(bdict, name), self.walk(bdict.get(name, MISSING), name))

    def code_reads(self, code: CodeType, globs: Mapping[str, Any], label: str) -> None:
        """The globals and module attributes that user ``code`` loads."""
        facts = codefacts.facts(code)
        if facts.dynamic_namespace:
            raise Unguardable(f"{label} reads its namespace by computed names (eval, globals())")
        prefix = _ns_prefix(globs)
        for name in sorted(facts.globals):
            self.global_name(globs, name, prefix + name)
            value = dict.get(globs, name, MISSING) if type(globs) is dict else MISSING
            if type(value) is FunctionType and codefacts.is_user_code(value.__code__):
                self.guard.edges[(label, prefix + name)] = "static"
        for chain in sorted(facts.chains):
            self._chain(globs, chain, prefix)

    def _chain(self, globs: Mapping[str, Any], chain: tuple[str, ...], prefix: str) -> None:
        head = chain[0]
        if head.startswith("import:"):
            name = head[len("import:") :]
            obj: Any = sys.modules.get(name, MISSING)
            path = name
        else:
            obj = dict.get(globs, head, MISSING) if type(globs) is dict else MISSING
            path = prefix + head
        for attr in chain[1:]:
            if not isinstance(obj, ModuleType):
                return  # through objects and classes, the walk of the value covers it
            ns = object.__getattribute__(obj, "__dict__")
            path = f"{path}.{attr}"
            self.global_name(ns, attr, path)
            obj = dict.get(ns, attr, MISSING)

    # -- values --------------------------------------------------------------------------
    def walk(self, value: Any, label: str) -> Node:
        self.guard.size += 1
        if self.guard.size > self.budget:
            raise Unguardable(f"it reads more than {self.budget:,} values")
        if value is MISSING:
            return Absent(label)
        t = type(value)
        if is_scalar(value):
            return Scalar(label, value)
        if t is FunctionType:
            return self.function(value, label)
        if t is MethodType:
            return Method(
                label, value, self.walk(value.__func__, label), self.walk(value.__self__, label)
            )
        if t is functools.partial:
            return Wrapped(label, value, self._parts(value, label, ("func", "args", "keywords")))
        if t is staticmethod or t is classmethod:
            return Wrapped(label, value, self._parts(value, label, ("__func__",)))
        if t is property:
            return Wrapped(label, value, self._parts(value, label, ("fget", "fset", "fdel")))
        if isinstance(value, ModuleType):
            return Identity(label, value)
        if isinstance(value, type):
            return self.klass(value, label)
        if isinstance(value, np.ndarray):
            if value.dtype.hasobject:
                return self._container(value, label, lambda: self._seq(list(value.flat), label))
            self._count_array(value)
            return Array(label, value)
        if t is bytearray or t is array.array:
            return Buffer(label, value)
        if isinstance(value, _RNG_TYPES):
            if id(value) not in self._rngs:
                self._rngs.add(id(value))
                self._keep.append(value)
                self.guard.rngs.append((label, value))
            return Identity(label, value)
        if t in _IDENTITY_TYPES or _is_ours(t):
            return Identity(label, value)
        if id(value) in self._path:  # a cycle: the same object as an enclosing one
            return Identity(label, value)
        if t in _SEQ_TYPES or (issubclass(t, tuple) and _is_namedtuple(t)):
            if issubclass(t, tuple) and t is not tuple:
                self._class_root(t)
            return self._container(value, label, lambda: self._seq(value, label))
        if isinstance(value, dict) and (t in _MAP_TYPES or not _has_dict(t)):
            return self._container(value, label, lambda: self._map(value, label))
        if t is set or t is frozenset:
            if all(is_key(v) for v in value):
                return ScalarSet(label, value)
            raise Unguardable(f"{label} is a set of objects")
        if _is_iterator(t):
            raise Unguardable(f"{label} is an iterator (reading it consumes it)")
        if isinstance(value, Box):
            raise Unguardable(f"{label} is traced by another autograd computation")
        return self._container(value, label, lambda: self.instance(value, label))

    def _container(self, value: Any, label: str, make: Callable[[], Node]) -> Node:
        self._path.append(id(value))
        self._keep.append(value)
        try:
            return make()
        finally:
            self._path.pop()

    def _seq(self, value: Any, label: str) -> Node:
        items = list(tuple.__iter__(value) if isinstance(value, tuple) else value)
        if all(is_scalar(v) for v in items) and type(value) is not np.ndarray:
            self.guard.size += len(items)
            return ScalarSeq(label, value)
        nodes = tuple(self.walk(v, f"{label}[{i}]") for i, v in enumerate(items))
        if type(value) is np.ndarray:
            raise Unguardable(f"{label} is an array of Python objects")
        return Seq(label, value, nodes)

    def _map(self, value: Any, label: str) -> Node:
        keys = tuple(dict.__iter__(value))
        if not all(is_key(k) for k in keys):
            raise Unguardable(f"{label} has keys that are not plain values")
        nodes = tuple(self.walk(dict.__getitem__(value, k), f"{label}[{k!r}]") for k in keys)
        default = None
        if type(value) is collections.defaultdict:
            default = self.walk(value.default_factory, f"{label}.default_factory")
        return Map(label, value, keys, nodes, default)

    def _parts(
        self, value: Any, label: str, names: tuple[str, ...]
    ) -> tuple[tuple[str, Node], ...]:
        return tuple((n, self.walk(part(value, n), label)) for n in names)

    def _count_array(self, value: np.ndarray) -> None:
        if value.nbytes > CHEAP_DIGEST_BYTES:
            self.guard.big_arrays += 1

    # -- functions -----------------------------------------------------------------------
    def function(self, fn: FunctionType, label: str) -> Node:
        if id(fn) in self._functions:  # checked in full where it was first reached
            return Identity(label, fn, ChangeKind.REDEFINED)
        self._functions.add(id(fn))
        self._keep.append(fn)
        if fn.__dict__.get("_is_autograd_primitive") is True:
            raw = fn.__dict__.get("fun")
            if type(raw) is FunctionType:
                self.env_root(FixedReader(_weak(raw)), self.function(raw, label))
            return Primitive(label, fn)
        code = fn.__code__
        self.covered.add(code)
        self.covered.update(_nested(code))
        positional = codefacts.parameters(code)[0]
        defaults = None
        if fn.__defaults__ is not None:
            first = len(positional) - len(fn.__defaults__)
            names = positional[first:]
            items = tuple(
                self.walk(v, f"{label}'s default {n}")
                for n, v in zip(names, fn.__defaults__, strict=False)
            )
            defaults = Seq(f"{label}'s defaults", fn.__defaults__, items)
        else:
            defaults = Scalar(f"{label}'s defaults", None)
        kwdefaults: Node
        if fn.__kwdefaults__:
            kwdefaults = self._map_labelled(fn.__kwdefaults__, lambda k: f"{label}'s default {k}")
        else:
            kwdefaults = Scalar(f"{label}'s defaults", fn.__kwdefaults__)
        cells: list[Node] = []
        for name, cell in zip(code.co_freevars, fn.__closure__ or (), strict=False):
            try:
                content = cell.cell_contents
            except ValueError:
                content = MISSING
            cell_label = f"{label}'s closed-over {name}"
            cells.append(Cell(cell_label, self.walk(content, cell_label)))
        attrs = self._map_labelled(fn.__dict__, lambda k: f"{label}.{k}")
        node = Function(label, fn, defaults, kwdefaults, tuple(cells), attrs)
        if codefacts.is_user_code(code):
            self.code_reads(code, fn.__globals__, label)
        return node

    def _map_labelled(self, mapping: dict[str, Any], name: Callable[[str], str]) -> Map:
        keys = tuple(mapping)
        nodes = tuple(self.walk(mapping[k], name(k)) for k in keys)
        return Map(name(""), mapping, keys, nodes)

    # -- classes and objects -----------------------------------------------------------
    def klass(self, cls: type, label: str) -> Node:
        if _is_user_class(cls):
            self._class_root(cls, label)
        return Identity(label, cls, ChangeKind.REDEFINED)

    def _class_root(self, cls: type, label: str | None = None) -> None:
        if id(cls) in self._classes:
            return
        self._classes.add(id(cls))
        self._keep.append(cls)
        label = label or _type_name(cls)
        dicts = []
        for c in type.__dict__["__mro__"].__get__(cls):
            if c is object or not _is_user_class(c):
                continue
            ns = type.__dict__["__dict__"].__get__(c)
            keys = tuple(k for k in ns if k not in ("__dict__", "__weakref__"))
            cname = label if c is cls else _type_name(c)
            nodes = tuple(self.walk(ns[k], f"{cname}.{k}") for k in keys)
            dicts.append((c, _ClassDict(f"{cname}.__dict__", keys, nodes)))
        self.env_root(FixedReader(_weak(cls)), Class(label, cls, tuple(dicts)))

    def instance(self, obj: Any, label: str) -> Node:
        cls = type(obj)
        self._class_root(cls) if _is_user_class(cls) else None
        descr = _dict_descriptor(cls)
        attrs: Node | None = None
        if descr is not None:
            d = descr.__get__(obj)
            if type(d) is dict:
                attrs = self._map_labelled(d, lambda k: f"{label}.{k}")
        slots = []
        for name, member in _slots(cls):
            try:
                content = member.__get__(obj)
            except AttributeError:
                content = MISSING
            slots.append((member, self.walk(content, f"{label}.{name}")))
        if attrs is None and not slots:
            self.guard.notes.append(f"{label} ({_type_name(cls)}) is checked by identity only")
            return Identity(label, obj)
        return Instance(label, cls, descr, attrs, tuple(slots))


class _ClassDict(Map):
    """A class's namespace, without its ``__dict__``/``__weakref__`` descriptors."""

    __slots__ = ()

    def __init__(self, label: str, keys: tuple[str, ...], values: tuple[Node, ...]) -> None:
        Node.__init__(self, label)
        self.type = type(type.__dict__)
        self.keys = keys
        self.values = values
        self.default = None

    def check(self, value: Any, deep: bool = True) -> Mismatch | None:
        keys = tuple(k for k in value if k not in ("__dict__", "__weakref__"))
        if keys != self.keys:
            return Mismatch(self.label.removesuffix(".__dict__"), ChangeKind.ATTRIBUTES_CHANGED)
        for key, node in zip(keys, self.values, strict=True):
            bad = node.check(value[key], deep)
            if bad is not None:
                return bad
        return None


def _weak(obj: Any) -> Callable[[], Any]:
    from .nodes import Ref

    return Ref(obj)


def _nested(code: CodeType) -> list[CodeType]:
    out: list[CodeType] = []
    stack = [code]
    while stack:
        co = stack.pop()
        for c in co.co_consts:
            if type(c) is CodeType:
                out.append(c)
                stack.append(c)
    return out


def _ns_prefix(globs: Mapping[str, Any]) -> str:
    name = dict.get(globs, "__name__") if type(globs) is dict else None
    if type(name) is not str or name == "__main__":
        return ""
    return f"{name}."


def _type_name(cls: type) -> str:
    name = type.__dict__["__qualname__"].__get__(cls)
    return name if type(name) is str else "?"


def _is_user_class(cls: type) -> bool:
    """A class defined in a notebook or the user's own modules (not a library's)."""
    ns = type.__dict__["__dict__"].__get__(cls)
    module = ns.get("__module__")
    if module == "__main__":
        return True
    mod = sys.modules.get(module) if type(module) is str else None
    file = getattr(mod, "__file__", None) if mod is not None else None
    if type(file) is str:
        return codefacts.is_user_code(_FakeCode(file))  # type: ignore[arg-type]
    return any(
        type(v) is FunctionType and codefacts.is_user_frame(v.__code__, v.__globals__)
        for v in list(ns.values())
    )


class _FakeCode:
    """Enough of a code object for ``is_user_code`` to judge a file name."""

    __slots__ = ("co_filename", "co_name", "co_qualname")

    def __init__(self, filename: str) -> None:
        self.co_filename = filename
        self.co_name = self.co_qualname = "<module>"


def _dict_descriptor(cls: type) -> Any:
    for c in type.__dict__["__mro__"].__get__(cls):
        d = type.__dict__["__dict__"].__get__(c).get("__dict__")
        if d is not None and type(d).__name__ == "getset_descriptor":
            return d
    return None


def _slots(cls: type) -> list[tuple[str, Any]]:
    found = []
    for c in type.__dict__["__mro__"].__get__(cls):
        for name, member in type.__dict__["__dict__"].__get__(c).items():
            if type(member).__name__ == "member_descriptor" and name not in ("__weakref__",):
                found.append((name, member))
    return found


def _has_dict(t: type) -> bool:
    return _dict_descriptor(t) is not None


def _is_namedtuple(t: type) -> bool:
    return "_fields" in type.__dict__["__dict__"].__get__(t)


def _is_iterator(t: type) -> bool:
    return any("__next__" in type.__dict__["__dict__"].__get__(c) for c in t.__mro__[:-1])


def _is_ours(t: type) -> bool:
    module = type.__dict__["__dict__"].__get__(t).get("__module__")
    return type(module) is str and module.startswith("ipyrefresh.")


def rules_of(prims: list[Any]) -> list[tuple[Reader, Node]]:
    """Guards on the VJPs registered for the primitives a tape replays."""
    out: list[tuple[Reader, Node]] = []
    seen: set[int] = set()
    for prim in prims:
        if id(prim) not in seen:
            seen.add(id(prim))
            out.append((TargetReader(), Rule(f"{getattr(prim, '__name__', '?')}", prim)))
    return out


__all__ = [
    "MISSING",
    "ArgReader",
    "FixedReader",
    "Guard",
    "NameReader",
    "Reader",
    "TargetReader",
    "Unguardable",
    "Unreadable",
    "Walker",
    "rng_state",
    "rules_of",
]
