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

import _ctypes
import array
import builtins
import collections
import ctypes
import datetime
import decimal
import functools
import gc
import importlib.machinery
import importlib.util
import operator
import random
import re
import sys
import weakref
from collections.abc import Callable, Mapping
from types import (
    BuiltinFunctionType,
    CodeType,
    FunctionType,
    GetSetDescriptorType,
    MappingProxyType,
    MemberDescriptorType,
    MethodType,
    ModuleType,
)
from typing import Any

import numpy as np
from autograd.core import primitive_jvps, primitive_vjps
from autograd.tracer import Box

from . import code as codefacts
from .changes import ChangeKind
from .digest import array_digest
from .guard import Guard
from .nodes import (
    MISSING,
    Absent,
    AllOf,
    Arity,
    Array,
    BaseValue,
    BoundBuiltin,
    Buffer,
    Cell,
    Class,
    ClassDict,
    DType,
    Function,
    Identity,
    Instance,
    JaxArray,
    Jitted,
    Like,
    Map,
    Method,
    Mismatch,
    Module,
    Node,
    Primitive,
    ReadContainer,
    ReadValue,
    Record,
    Reduced,
    Related,
    Scalar,
    ScalarSeq,
    ScalarSet,
    Seq,
    Unreadable,
    ViewOwner,
    WeakRefTo,
    Wrapped,
    class_keys,
    implementation,
    is_key,
    is_scalar,
    iterate,
    part,
    relate,
    set_items,
    view_owner,
)
from .prints import slot_members
from .readers import ArgReader, CallReader, FixedReader, NameReader, Reader, TargetReader
from .recorder import held_effect, type_effect, value_effect
from .rules import users_rules
from .targets import Target

#: Most values one derivative's guard may hold; beyond, it runs plain autograd.
MAX_NODES = 200_000

_RNG_TYPES: tuple[type, ...] = (
    np.random.RandomState,
    np.random.Generator,
    np.random.BitGenerator,
    np.random.SeedSequence,  # (its spawn() counts the children it made)
    random.Random,
)
#: A generator's methods that read its state without drawing; named as a library's
#: function (``np.random.get_state``, the global generator's), they reach the generator.
_STATE_READERS = frozenset({"get_state", "getstate", "__getstate__", "__reduce__"})
_PLAIN_CONTAINERS = frozenset(
    {
        np.ndarray,
        list,
        tuple,
        dict,
        collections.deque,
        collections.OrderedDict,
        collections.defaultdict,
        collections.Counter,
        bytearray,
        array.array,
        set,
        frozenset,
    }
)
_IDENTITY_TYPES: tuple[type, ...] = (
    BuiltinFunctionType,
    CodeType,
    np.ufunc,
    type(len),
    type(str.join),
    type(dict.__dict__["fromkeys"]),
    type(int.__add__),
    type(object.__init__),
    type(array.array.append),
    range,
    slice,
)


#: Mutable buffers whose bytes are all of their value: digested like arrays.
_BUFFERS: tuple[type, ...] = (bytearray, array.array, ctypes.Array, ctypes.Structure)
_BUFFERS += (ctypes.Union, ctypes._SimpleCData)
#: Helpers that read an array's memory past its own elements, under any name.
_PAST_VIEW_HELPERS = frozenset({id(np.lib.stride_tricks.as_strided)})
_GETTERS = (operator.attrgetter, operator.methodcaller)


def _gets_base(getter: Any) -> bool:
    """An ``attrgetter`` or ``methodcaller`` that reads ``.base`` (``'a.base'`` too)."""
    names = [v for v in getter.__reduce__()[1] if type(v) is str]
    return any(n == "__getattribute__" or "base" in n.split(".") for n in names)


#: What reads memory by its address, met under any name: numpy's helper that gives an
#: array's address (``np.byte_bounds`` before 2.0) and ctypes' functions that read or
#: write at one; and the ctypes types of pointers (hunt 54: ``C.cast(ADDR, PD)[i]``).
_BY_ADDRESS_HELPERS = frozenset(
    id(f)
    for f in (
        getattr(getattr(np.lib, "array_utils", np), "byte_bounds", None),
        ctypes.cast,
        ctypes.memmove,
        ctypes.memset,
        ctypes.string_at,
        ctypes.wstring_at,
    )
    if f is not None
)
_POINTER_TYPES = (ctypes._Pointer, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_wchar_p)
#: The ``_type_`` of ctypes values whose bytes are an address (``c_char_p``, ``c_wchar_p``,
#: ``c_void_p``): what they point to (``c_char_p(addr).value``) is read, not the bytes.
_ADDRESSES = frozenset({"z", "Z", "P"})
#: C functions called through ctypes, and the libraries that give them: what they read and
#: change (libc's rand(), a bit generator's state through its ``ctypes`` interface) is
#: memory no guard reads, and calling one is no event the call recorder sees.
_FOREIGN_CALLS = (_ctypes.CFuncPtr, ctypes.CDLL, ctypes.LibraryLoader)
#: Containers whose items the walk reads (a subclass adds only its attributes).
_DATA_TYPES: tuple[type, ...] = (list, tuple, dict, collections.deque, np.ndarray)
_DATA_TYPES += (set, frozenset, *_BUFFERS)
#: The bases of value types a subclass (with attributes of its own) can extend.
_SCALAR_BASES: tuple[type, ...] = (int, float, complex, str, bytes)
#: Objects without attributes whose value never changes: checked by identity.
#: C objects that cannot change but hold any objects, which ``__reduce__`` gives.
_HOLDERS: tuple[type, ...] = (operator.itemgetter, operator.methodcaller)
_IMMUTABLE_OBJECTS: tuple[type, ...] = (
    re.Pattern,
    datetime.date,
    datetime.time,
    datetime.timedelta,
    datetime.tzinfo,
    decimal.Decimal,
    operator.attrgetter,  # (names only)
    type(collections.namedtuple("_Pair", "a").__dict__["a"]),  # a namedtuple field (an index)
    MemberDescriptorType,  # a __slots__ entry of a class (its name and offset)
    GetSetDescriptorType,
    type(Ellipsis),
    type(NotImplemented),
)
#: Containers compared by contents whose identity is checked as a relation.
_RELATED_TYPES = frozenset({list, dict, set, frozenset, collections.deque, tuple})
_LRU_CACHED = type(functools.lru_cache(None)(lambda: None))
_HEAPTYPE = 1 << 9  # Py_TPFLAGS_HEAPTYPE: a class made by a class statement or at run time


class Unguardable(Exception):
    """The walk met something whose changes it cannot see."""


#: ``random.Random``'s C base's ``getstate`` (``random.Random.getstate`` adds the version
#: and ``gauss_next`` in Python).
_C_RANDOM_STATE: Callable[[random.Random], Any] = random.Random.__mro__[1].getstate  # type: ignore[attr-defined]


def rng_state(gen: Any) -> int:
    """A fingerprint of a random generator's state (numpy legacy, new-style, or Python's)."""
    if isinstance(gen, random.Random):
        if type(gen).getstate is random.Random.getstate:
            # Read through the C method, from this module: the call recorder then sees
            # ipyrefresh's own read, not a draw (a handle built inside another's build).
            return hash((_C_RANDOM_STATE(gen), getattr(gen, "gauss_next", None)))
        return hash(gen.getstate())
    if isinstance(gen, np.random.RandomState):
        state: Any = gen.get_state(legacy=False)
    elif isinstance(gen, np.random.SeedSequence):
        state = (gen.entropy, gen.spawn_key, gen.pool_size, gen.n_children_spawned)
    else:
        # A Generator or BitGenerator: its bits, and how many children its seed sequence
        # has spawned (``spawn`` draws no bits: each child's seed is the next number).
        bits = gen.bit_generator if isinstance(gen, np.random.Generator) else gen
        seq = getattr(bits, "seed_seq", None) or getattr(bits, "_seed_seq", None)
        state = (bits.state, getattr(seq, "n_children_spawned", None))
    return _state_hash(state)


def _state_hash(state: Any) -> int:
    if type(state) is dict:
        return hash(tuple((k, _state_hash(v)) for k, v in state.items()))
    if type(state) is tuple:
        return hash(tuple(map(_state_hash, state)))
    if type(state) is np.ndarray:
        return array_digest(state)
    return hash(state)


_GLOBAL_RNG = np.random.mtrand._rand


#: Builtins that store into the object they are given, met under any name.
_STORING_BUILTINS = (setattr, delattr, exec, eval)


def _refuse_handed_on(fn: Any, name: str, label: str) -> None:
    """The walk stops if the C function ``fn``, which the code ``label`` loads as a value
    by ``name``, has an effect (:func:`held_effect`)."""
    effect = held_effect(fn)
    if effect is not None:
        raise Unguardable(f"{label} hands {name} on as a value: it {effect}")


class Walker:
    """Builds a :class:`Guard` from roots; see the module docstring."""

    def __init__(self, guard: Guard, budget: int = MAX_NODES, past_views: bool = False) -> None:
        self.guard = guard
        self.budget = budget
        #: The code may read past a view's own elements (``W.base``): the owner of an
        #: argument's view is compared too (a global's always is). Set by what the code
        #: names (see ``build._walk``), or after a walk that met a way past a view.
        self.past_views = past_views
        #: The walk met a helper that reads past views (``as_strided`` bound to another
        #: name, ``attrgetter('base')``): the walk is made again with ``past_views``.
        self.past_views_seen = False
        #: The walk met an object that code can store a value into (a list, deque or
        #: dict, an object's or a class's attributes, a container's bound method, or
        #: ``setattr``/``exec`` under any name): a JAX build then runs unjitted first,
        #: since a call through another name (``push = heapq.heappush``, ``l += [y]`` on an
        #: alias) can put a jax.jit tracer there that no reading of the code sees (hunt 57).
        self.reaches_mutable = False
        #: The labels of the roots :meth:`rules` added, and the primitives it walked.
        self.rule_labels: set[str] = set()
        self._rules_of: set[int] = set()
        self._keep: list[Any] = []  # keeps the ids below valid during the walk
        self._functions: set[int] = set()
        self._classes: set[int] = set()
        self._names: set[tuple[int, str]] = set()
        #: The C function a global names, being walked (:meth:`_walk_or_watch`): one
        #: reached anywhere else (an element, a default, a closure, an argument) is a
        #: value handed on, whose calls no hook may see (:meth:`_held_name`).
        self._named: Any = None
        self._path: list[int] = []
        self._rngs: set[int] = set()
        self._modules: set[int] = set()
        #: The numbers, strings and tuples of them read, for :meth:`finish`.
        self._values: list[ReadValue] = []
        #: The containers read, for :meth:`finish`.
        self._containers: list[ReadContainer] = []
        #: The argument being walked (its arrays are compared by contents), or None.
        self._argument: int | str | None = None
        self._source: str | None = None  # the user function whose reads are being walked
        #: Code objects whose function was walked (with their nested code).
        self.covered: set[CodeType] = set()
        #: Code objects of the function objects walked: their closures are checked.
        self.closures: set[CodeType] = set()

    def _reach_rng(self, gen: Any, label: str) -> None:
        """A random generator the code can draw from or read the state of (see
        ``build.run_build``, which compares and guards its state)."""
        if id(gen) not in self._rngs:
            self._rngs.add(id(gen))
            self._keep.append(gen)
            self.guard.rngs.append((label, gen))

    def finish(self) -> None:
        """The walk is complete: which of the equal values it read were the same object
        is checked too (see :func:`~ipyrefresh._src.nodes.relate`)."""
        self.guard.relation = relate(self._values, self._containers)
        self._values, self._containers = [], []

    # -- roots -------------------------------------------------------------------------
    def env_root(self, reader: Reader, node: Node) -> None:
        self.guard.env.append((reader, node))

    def target(self, fn: Any, label: str) -> None:
        self.env_root(TargetReader(), self.walk(fn, label))

    def rules(self, prim: Any) -> None:
        """Roots: the gradient rules registered for a primitive the run applied, where they
        are the user's (a function, a partial, a bound method, a callable object). Under a
        derivative of a derivative, or forward mode inside the reverse trace, the tape
        holds the arithmetic a rule did with its state as constants (hunt 60)."""
        if id(prim) in self._rules_of:
            return
        self._rules_of.add(id(prim))
        self._keep.append(prim)
        name = getattr(prim, "__name__", "?")
        for table, kind in ((primitive_vjps, "VJP"), (primitive_jvps, "JVP")):
            for rule in users_rules(table.get(prim)):
                label = f"{name}'s {kind}"
                self.rule_labels.add(label)
                self.env_root(FixedReader(_weak(rule)), self.walk(rule, label))

    def argument(self, key: int | str, value: Any, label: str) -> None:
        self._argument = key
        try:
            self.guard.args.append((ArgReader(key), self.walk(value, label)))
        finally:
            self._argument = None

    def call(
        self, args: tuple[Any, ...], kwargs: Mapping[str, Any], argnums: tuple[int, ...]
    ) -> None:
        """The call's shape, and the kind of each differentiated argument: what the cache
        key holds of them, checked by the guard itself (a variant tried without a key)."""
        self.guard.args.append((CallReader(), Arity("the call", len(args), tuple(kwargs))))
        for i in argnums:
            if i < len(args):
                self.guard.args.append((ArgReader(i), Like(f"argument {i}", args[i])))
                # The classes of a differentiated dict's object keys: the signature holds
                # each key and the print of its instance dict, not its class's attributes
                # (``Layer.scale``), which the code may read through the key.
                for cls in _key_classes(args[i]):
                    self.klass(cls, f"{_type_name(cls)} (a key of argument {i})")

    def global_name(
        self,
        globs: Mapping[str, Any],
        name: str,
        label: str,
        builtin: bool = True,
        builtins_ns: Any = None,
    ) -> None:
        """A name loaded by user code from ``globs`` (falling back to the builtins unless
        ``builtin`` is False: a module attribute). ``builtins_ns``: the builtins the code
        runs with, if known (a function's own, fixed when it was made); else those its
        globals name now."""
        if type(globs) is not dict:
            raise Unguardable(f"{label} is read from a namespace that is not a dict")
        key = (id(globs), name)
        if key in self._names:
            if builtin and builtins_ns is not None and name not in globs:
                self._builtin_name(globs, name, builtins_ns)  # (other code, own builtins)
            return
        self._names.add(key)
        self._keep.append(globs)
        value = dict.get(globs, name, MISSING)
        self.guard.labels.append(label)
        if value is not MISSING:
            if isinstance(value, type) and _library_namespace(globs):
                node: Node = self.klass(value, label)  # (a library's class can be patched)
            elif _namespace_reader(value):  # builtins.globals, sys._getframe
                raise Unguardable(f"{label} reads a namespace by computed names")
            elif callable(value) and _library_namespace(globs) and not _user_callable(value):
                # jnp.sin, np.random.rand...: a library's own callables are what they are;
                # their internals (caches, compiled traces) are not what user code reads.
                # An autograd primitive's rule is part of it (``defvjp(np.cos, ...)``),
                # read or not by this run: the code names it.
                effect = value_effect(value)  # (os.urandom held, for map or partial)
                if effect is not None:
                    raise Unguardable(f"{label} {effect}")
                owner = getattr(value, "__self__", None)
                if isinstance(owner, _RNG_TYPES) and value.__name__ in _STATE_READERS:
                    self._reach_rng(owner, f"{label}'s generator")  # (np.random.get_state)
                node = (
                    Primitive(label, value, own=False)
                    if _has_rule(value)
                    else Identity(label, value, ChangeKind.REDEFINED)
                )
            else:
                node = self._walk_or_watch(globs, name, value, label)
            self.env_root(NameReader(globs, name), node)
            return
        self.env_root(NameReader(globs, name), Absent(label))
        if builtin:
            self._builtin_name(globs, name, builtins_ns)

    def _builtin_name(self, globs: dict[str, Any], name: str, builtins_ns: Any) -> None:
        """``name``, absent from ``globs``, read from the builtins: a function's own
        (``builtins_ns``), and those ``globs`` names now, which code made as it runs (a
        comprehension on 3.11, a lambda) takes when it is made (hunt 42)."""
        current = dict.get(globs, "__builtins__", builtins)
        if builtins_ns is not None:
            if (id(globs), "__builtins__") not in self._names and "__builtins__" in globs:
                self._names.add((id(globs), "__builtins__"))
                label = f"{_ns_prefix(globs)}__builtins__"
                self.env_root(NameReader(globs, "__builtins__"), Identity(label, current))
            if current is not builtins_ns:
                self._builtin_name_in(current, name)
        self._builtin_name_in(current if builtins_ns is None else builtins_ns, name)

    def _builtin_name_in(self, b: Any, name: str) -> None:
        bdict = b.__dict__ if type(b) is ModuleType else b
        if type(bdict) is not dict:
            raise Unguardable(f"{name} is read from builtins that are not a dict")
        if (id(bdict), name) not in self._names:
            self._names.add((id(bdict), name))
            found = bdict.get(name, MISSING)
            # (the code names it itself: its facts say how it reads, see ``code_reads``)
            own = _namespace_reader(found) and codefacts.reads_namespace_by(name)
            # ``print``, ``open`` by their own name: the recorder sees them called (code
            # that prints only when ``verbose`` keeps its tape while it does not).
            own = own or value_effect(found) is not None
            node = Identity(name, found) if own else self.walk(found, name)
            self.env_root(NameReader(bdict, name), node)

    def _walk_or_watch(self, globs: dict[str, Any], name: str, value: Any, label: str) -> Node:
        """The walk of a global's value. One that stops the walk still leaves its binding
        watched: a build that runs plain autograd for it tries again when it is rebound
        (an ``lru_cache``'d helper redefined plainly)."""
        self._named = value
        try:
            return self.walk(value, label)
        except Unguardable:
            self.env_root(NameReader(globs, name), Identity(label, value, ChangeKind.REDEFINED))
            raise
        finally:
            self._named = None

    def code_reads(
        self, code: CodeType, globs: Mapping[str, Any], label: str, builtins_ns: Any = None
    ) -> None:
        """The globals and module attributes that user ``code`` loads (``builtins_ns``:
        the builtins it runs with, if known)."""
        if type(globs) is not dict:
            raise Unguardable(f"{label} is read from a namespace that is not a dict")
        facts = codefacts.facts(code)
        if facts.dynamic_namespace:
            raise Unguardable(f"{label} reads its namespace by computed names (eval, globals())")
        if facts.names_the_clock:
            raise Unguardable(f"{label} may read the clock (np.datetime64('now') parses 'now')")
        prefix = _ns_prefix(globs)
        outer, self._source = self._source, label
        try:
            for name in sorted(facts.held):
                self._held_name(globs, name, label, builtins_ns)
            for chain in sorted(facts.held_chains):
                self._held_attribute(globs, chain, label)
            for name in sorted(facts.globals):
                self.global_name(globs, name, prefix + name, builtins_ns=builtins_ns)
                value = dict.get(globs, name, MISSING)
                if type(value) is FunctionType and codefacts.is_user_code(value.__code__):
                    self.guard.edges[(label, prefix + name)] = "static"  # (recursion too)
            for chain in sorted(facts.chains):
                self._chain(globs, chain, prefix)
        finally:
            self._source = outer

    def _held_name(self, globs: dict[str, Any], name: str, label: str, builtins_ns: Any) -> None:
        """A C function with an effect, loaded by the code as a value (``map(print, xs)``,
        ``partial(warn, s)()``, ``print.__call__(s)``): what it is handed to may call it
        from C, where no hook sees the call (one called by its own name, the recorder
        sees). A global bound to one the walk refuses anyway (:meth:`_walk_or_watch`),
        except ``warnings.warn``, which counts only when user code calls it."""
        value = dict.get(globs, name, MISSING)
        if value is not MISSING:
            held = type(value) is BuiltinFunctionType and value_effect(value) is None
            found = [value] if held else []
        else:
            found = []
            for b in (builtins_ns, dict.get(globs, "__builtins__", builtins)):
                bdict = b.__dict__ if type(b) is ModuleType else b
                found.append(bdict.get(name) if type(bdict) is dict else None)
        for fn in found:
            if type(fn) is BuiltinFunctionType:
                _refuse_handed_on(fn, name, label)

    def _held_attribute(self, globs: dict[str, Any], chain: tuple[str, ...], label: str) -> None:
        """:meth:`_held_name` for a module's C function (``map(warnings.warn, msgs)``),
        found through modules only (a module global, its attributes)."""
        head = chain[0]
        if head.startswith("import:"):  # (a module the code imports, by its absolute name)
            obj = sys.modules.get(head[len("import:") :], MISSING)
        else:
            obj = dict.get(globs, head, MISSING)
        for attr in chain[1:]:
            if type(obj) is not ModuleType:
                return
            obj = dict.get(object.__getattribute__(obj, "__dict__"), attr, MISSING)
        if type(obj) is BuiltinFunctionType and value_effect(obj) is None:
            _refuse_handed_on(obj, ".".join(chain).removeprefix("import:"), label)

    def _chain(self, globs: Mapping[str, Any], chain: tuple[str, ...], prefix: str) -> None:
        head = chain[0]
        if head.startswith("import:"):
            name = head[len("import:") :]
            if name.startswith("."):  # relative to the package of the code's module
                package = globs.get("__package__") if type(globs) is dict else None
                try:
                    name = importlib.util.resolve_name(name, package)
                except Exception:
                    raise Unguardable(f"it imports {name!r} relative to no package") from None
            self.imported(name)
            obj: Any = sys.modules.get(name, MISSING)
            path = name
        else:
            obj = dict.get(globs, head, MISSING) if type(globs) is dict else MISSING
            path = prefix + head
        for attr in chain[1:]:
            if not isinstance(obj, ModuleType):
                return  # through objects and classes, the walk of the value covers it
            ns = object.__getattribute__(obj, "__dict__")
            if type(ns) is not dict:
                return
            path = f"{path}.{attr}"
            self.global_name(ns, attr, path)
            obj = dict.get(ns, attr, MISSING)
            if obj is MISSING:  # answered by the module's __getattr__ (PEP 562), if any
                getattr_label = f"{path.rpartition('.')[0]}.__getattr__"
                self.global_name(ns, "__getattr__", getattr_label, builtin=False)
                return

    def imported(self, name: str) -> None:
        """A module the code imports as it runs (``import m`` in a function,
        ``importlib.import_module('m')``): the import answers ``sys.modules[name]``, which
        may be another module by the next call."""
        modules = sys.modules
        if type(modules) is not dict:
            raise Unguardable("sys.modules is not a dict")
        key = (id(modules), name)
        if key in self._names:
            return
        self._names.add(key)
        label = f"sys.modules[{name!r}]"
        self.guard.labels.append(label)
        self.env_root(NameReader(modules, name), self.walk(modules.get(name, MISSING), label))

    # -- values --------------------------------------------------------------------------
    def walk(self, value: Any, label: str) -> Node:
        self.guard.size += 1
        if self.guard.size > self.budget:
            raise Unguardable(f"it reads more than {self.budget:,} values")
        if value is MISSING:
            return Absent(label)
        t = type(value)
        if id(value) in _PAST_VIEW_HELPERS or (t in _GETTERS and _gets_base(value)):
            self.past_views_seen = True  # (as_strided or .base under another name)
        if (
            id(value) in _BY_ADDRESS_HELPERS
            or (t is BuiltinFunctionType and value.__module__ == "_ctypes")  # (POINTER)
            or (isinstance(value, type) and issubclass(value, _POINTER_TYPES))
        ):
            raise Unguardable(f"{label} reads memory by its address")
        if is_scalar(value):
            scalar = Scalar(label, value)
            self._values.append((scalar, value, None, self._argument))
            return scalar
        if t is FunctionType:
            return self.function(value, label)
        if t is MethodType:
            func, owner = value.__func__, value.__self__
            return Method(label, value, self.walk(func, label), self.walk(owner, label))
        if t is functools.partial:
            return Wrapped(label, value, self._parts(value, label, ("func", "args", "keywords")))
        if t is staticmethod or t is classmethod:
            return Wrapped(label, value, self._parts(value, label, ("__func__",)))
        if t is property:
            return Wrapped(label, value, self._parts(value, label, ("fget", "fset", "fdel")))
        if isinstance(value, ModuleType):
            return self.module(value, label)
        if isinstance(value, type):
            return self.klass(value, label)
        if isinstance(value, _RNG_TYPES):
            self._reach_rng(value, label)
            return Identity(label, value)
        if t is BuiltinFunctionType:
            if _namespace_reader(value):  # under another name: G = globals; G()['a']
                raise Unguardable(f"{label} is {value.__name__}: it reads a namespace")
            # (called from C, by partial or map: unseen; warnings.warn too, but by a
            # global's own name, when the code loads it as a value: :meth:`_held_name`)
            effect = value_effect(value) if value is self._named else held_effect(value)
            if effect is not None:
                raise Unguardable(f"{label} {effect}")
            owner = value.__self__
            if owner is None or isinstance(owner, ModuleType):
                if value in _STORING_BUILTINS:
                    self._stores_possible()
                return Identity(label, value)
            self._stores_possible()
            return BoundBuiltin(label, value, self.walk(owner, f"{label}.__self__"))
        if t in _IDENTITY_TYPES:
            return Identity(label, value)
        if isinstance(value, np.dtype):  # (each dtype is of a class of its own)
            if value.metadata is not None:
                raise Unguardable(
                    f"{label} is a dtype with metadata (whose objects it does not read)"
                )
            return DType(label, value)
        if _is_jax_array(t):
            return JaxArray(label, value)
        if _is_jax_jitted(t):
            inner = object.__getattribute__(value, "__dict__").get("__wrapped__", MISSING)
            return Jitted(label, value, self.walk(inner, f"{label}.__wrapped__"))
        if _is_ours(t):
            return self._ours(value, label)
        if isinstance(value, Box):
            raise Unguardable(f"{label} is traced by another autograd computation")
        if id(value) in self._path:  # a cycle: the same object as an enclosing one
            return Identity(label, value)
        if t is _LRU_CACHED:
            raise Unguardable(f"{label} is an lru_cache'd function: its cache is hidden state")
        if isinstance(value, weakref.ReferenceType):  # (KeyedRef: a WeakValueDictionary's)
            target = weakref.ReferenceType.__call__(value)
            inner = self.walk(MISSING if target is None else target, label)
            return WeakRefTo(label, value, inner)
        if t is MappingProxyType:  # a read-only view: its mapping is what is read
            return self._container(value, label, lambda: self._proxy(value, label))
        return self._container(value, label, lambda: self._data(value, label))

    def _data(self, value: Any, label: str) -> Node:
        """Arrays, containers (and their subclasses, attributes included) and objects."""
        t = type(value)
        parts: list[Node] = []
        if isinstance(value, np.ndarray):
            if value.dtype.hasobject:
                raise Unguardable(f"{label} is an array of Python objects")
            parts.append(Array(label, value, identity=self._argument is None))
            if self._argument is not None:
                self.guard.argument_arrays.append(value)
            if (self._argument is None or self.past_views) and view_owner(value) is not None:
                parts.append(self._view_owner(value, label))
        elif t is np.void:
            if value.dtype.hasobject:
                raise Unguardable(f"{label} is a record holding Python objects")
            return Record(label, value)
        elif isinstance(value, _SCALAR_BASES):  # a subclass of int, str...: its value
            base = next(b for b in _SCALAR_BASES if isinstance(value, b))
            parts.append(BaseValue(label, value, base))
        elif isinstance(value, ctypes._SimpleCData) and getattr(t, "_type_", "") in _ADDRESSES:
            raise Unguardable(f"{label} is a ctypes pointer (what it points to is not read)")
        elif isinstance(value, _BUFFERS):  # (subclasses: and their attributes)
            parts.append(Buffer(label, value))
        elif isinstance(value, ctypes._Pointer):
            raise Unguardable(f"{label} is a ctypes pointer (what it points to is not read)")
        elif isinstance(value, _FOREIGN_CALLS):
            raise Unguardable(f"{label} calls C code through ctypes (its state is not read)")
        elif isinstance(value, (list, tuple, collections.deque)):
            parts.append(self._seq(value, label))
        elif isinstance(value, dict):
            parts.append(self._map(value, label))
        elif isinstance(value, (set, frozenset)):
            if not all(is_key(v) for v in set_items(value)):
                raise Unguardable(f"{label} is a set of objects")
            parts.append(ScalarSet(label, value))
        elif _is_iterator(t):
            raise Unguardable(f"{label} is an iterator (reading it consumes it)")
        if t not in _PLAIN_CONTAINERS:  # an object, or a subclass with attributes of its own
            node = self.instance(value, label)
            if node is not None:
                parts.append(node)
        if len(parts) == 1:
            return parts[0]
        return AllOf(label, tuple(parts))

    def _view_owner(self, value: np.ndarray, label: str) -> Node:
        """All the memory of a view's owner (see :class:`ViewOwner`): compared for every
        view the function reads, and for an argument's view where the code may read past
        it (an argument's owner is often a whole data set, ``X[i:j]`` a minibatch)."""
        try:
            return ViewOwner(f"{label}.base", value)
        except (TypeError, ValueError, BufferError) as exc:
            owner = type(view_owner(value)).__name__
            raise Unguardable(
                f"{label} views the memory of a {owner}, which it cannot read"
            ) from exc

    def _proxy(self, proxy: Any, label: str) -> Node:
        underlying = [r for r in gc.get_referents(proxy) if type(r) is dict]
        if len(underlying) != 1:
            raise Unguardable(f"{label} is a view of a mapping it cannot read safely")
        return _ProxyOf(label, self._map(underlying[0], label))

    def _ours(self, value: Any, label: str) -> Node:
        """ipyrefresh's own objects: a derivative handle called inside the function
        answers for its own target, so the target's code and data are read too."""
        target = getattr(value, "target", None)
        if isinstance(target, Target):
            try:
                fn = target.resolve()
            except Exception:
                fn = MISSING
            self.env_root(_TargetOf(value), self.walk(fn, f"{label} (its function)"))
        return Identity(label, value)

    def _container(self, value: Any, label: str, make: Callable[[], Node]) -> Node:
        self._path.append(id(value))
        self._keep.append(value)
        try:
            node = make()
        finally:
            self._path.pop()
        return self._related(value, node)

    def _related(self, value: Any, node: Node) -> Node:
        """A list, dict, set, deque, array, or tuple not of scalars alone (those are
        values): code could compare it with ``is`` to another one of the same kind (see
        :func:`~ipyrefresh._src.nodes.relate`)."""
        t = type(value)
        if t is np.ndarray:
            kind: Any = (t, value.shape, value.dtype.str)
        elif t in _RELATED_TYPES and not (t is tuple and type(node) is ScalarSeq):
            kind = (t, len(value))
        else:
            return node
        related = Related(node)
        self._containers.append((related, kind, value, self._argument))
        return related

    def _stores_possible(self) -> None:
        """What is walked now can be stored into; not an argument's (jax.jit rebuilds
        those from their leaves: the caller's containers are not the trace's)."""
        if self._argument is None:
            self.reaches_mutable = True

    def _seq(self, value: Any, label: str) -> Node:
        if not isinstance(value, tuple):
            self._stores_possible()
        items = list(iterate(value))
        if all(is_scalar(v) for v in items):
            self.guard.size += len(items)
            if self.guard.size > self.budget:
                raise Unguardable(f"it reads more than {self.budget:,} values")
            scalars = ScalarSeq(label, value)
            key = self._argument
            if isinstance(value, tuple):
                self._values.append((scalars, value, None, key))
            self._values += [(scalars, v, i, key) for i, v in enumerate(items)]
            return scalars
        nodes = tuple(self.walk(v, f"{label}[{i}]") for i, v in enumerate(items))
        return Seq(label, value, nodes)

    def _map(self, value: Any, label: str) -> Node:
        self._stores_possible()
        keys = tuple(iterate(value))
        if not all(is_key(k) for k in keys):
            raise Unguardable(f"{label} has keys that are not plain values")
        nodes = tuple(self.walk(dict.__getitem__(value, k), f"{label}[{k!r}]") for k in keys)
        default = None
        if isinstance(value, collections.defaultdict):
            default = self.walk(value.default_factory, f"{label}.default_factory")
        return Map(label, value, keys, nodes, default)

    def _parts(
        self, value: Any, label: str, names: tuple[str, ...]
    ) -> tuple[tuple[str, Node], ...]:
        return tuple((n, self.walk(part(value, n), label)) for n in names)

    # -- functions -----------------------------------------------------------------------
    def function(self, fn: FunctionType, label: str) -> Node:
        user = codefacts.is_user_code(fn.__code__)
        if user and self._source is not None:
            self.guard.edges[(self._source, label)] = "static"  # %callgraph's solid lines
        if id(fn) in self._functions:  # checked in full where it was first reached
            return Identity(label, fn, ChangeKind.REDEFINED)
        self._functions.add(id(fn))
        self._keep.append(fn)
        if fn.__dict__.get("_is_autograd_primitive") is True:
            # What the wrapper calls (not its ``fun`` attribute): a function, or any
            # callable of the user's (a bound method, a partial, an instance), walked as
            # any value; a library's (a ufunc, numpy's functions) is itself.
            raw = implementation(fn)
            own = _users_implementation(raw)
            if type(raw) is FunctionType:
                self.env_root(FixedReader(_weak(raw)), self.function(raw, label))
            elif own:
                implemented = f"{label}'s implementation"
                self.env_root(FixedReader(_weak(raw)), self.walk(raw, implemented))
            self.rules(fn)  # (applied only inside an inner derivative: never on the tape)
            return Primitive(label, fn, own)
        code = fn.__code__
        self.covered.add(code)
        self.covered.update(codefacts.nested(code))
        self.closures.add(code)
        positional = codefacts.parameters(code)[0]
        defaults: Node
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
        if user:
            self.code_reads(code, fn.__globals__, label, getattr(fn, "__builtins__", None))
        return node

    def _map_labelled(self, mapping: dict[str, Any], name: Callable[[str], str]) -> Map:
        keys = tuple(mapping)
        nodes = tuple(self.walk(mapping[k], name(k)) for k in keys)
        return Map(name(""), mapping, keys, nodes)

    # -- modules, classes and objects --------------------------------------------------
    def module(self, mod: ModuleType, label: str) -> Node:
        """A module: the same object; and for the user's own modules (and module objects
        made in a notebook), every binding in it, since code can reach them by computed
        names (``getattr(cfg, name)``), through aliases or as arguments."""
        ns = object.__getattribute__(mod, "__dict__")
        cls = type(mod)
        if cls is not ModuleType and _patchable(cls):  # (a lazy module's __getattr__)
            self._class_root(cls)
        if type(ns) is dict and id(mod) not in self._modules and codefacts.is_user_module(ns):
            self._modules.add(id(mod))
            self._keep.append(mod)
            name = ns.get("__name__")
            prefix = name if type(name) is str else label
            for key in list(ns):
                if type(key) is str and not (key.startswith("__") and key.endswith("__")):
                    self.global_name(ns, key, f"{prefix}.{key}")
            self.global_name(ns, "__getattr__", f"{prefix}.__getattr__", builtin=False)
        return Module(label, mod)

    def klass(self, cls: type, label: str) -> Node:
        effect = type_effect(cls)
        if effect is not None:
            raise Unguardable(f"{label} {effect}")
        if _patchable(cls):
            self._class_root(cls, label)
        meta = type(cls)
        if meta is not type and _patchable(meta):
            self._class_root(meta)
        return Identity(label, cls, ChangeKind.REDEFINED)

    def _class_root(self, cls: type, label: str | None = None) -> None:
        if id(cls) in self._classes:
            return
        self._classes.add(id(cls))
        self._keep.append(cls)
        label = label or _type_name(cls)
        dicts: list[tuple[type, Node]] = []
        for c in type.__dict__["__mro__"].__get__(cls):
            if c is object or not _patchable(c):
                continue
            ns = type.__dict__["__dict__"].__get__(c)
            keys = class_keys(ns)
            cname = label if c is cls else _type_name(c)
            if _is_user_class(c):
                self._stores_possible()
                nodes = tuple(self.walk(ns[k], f"{cname}.{k}") for k in keys)
                dicts.append((c, ClassDict(f"{cname}.__dict__", keys, nodes)))
            else:  # a library's class: the same methods and data (a monkeypatch changes them)
                dicts.append((c, _LibraryClassDict(f"{cname}.__dict__", ns)))
        self.env_root(FixedReader(_weak(cls)), Class(label, cls, tuple(dicts)))

    def instance(self, obj: Any, label: str) -> Node | None:
        """An object's ``__dict__`` and ``__slots__`` (its class is a root of its own).
        ``None`` for a container subclass with nothing beyond its items."""
        cls = type(obj)
        if issubclass(cls, _HOLDERS):
            return Reduced(label, obj, self.walk(obj.__reduce__(), label))
        if _patchable(cls):
            self._class_root(cls)
        meta = type(cls)
        if meta is not type and _patchable(meta):
            self._class_root(meta)
        descr = _dict_descriptor(cls)
        attrs: Node | None = None
        if descr is not None:
            d = descr.__get__(obj)
            if type(d) is dict:
                attrs = self._map_labelled(d, lambda k: f"{label}.{k}")
        read, containers = len(self._values), len(self._containers)
        slots = []
        for name, member in slot_members(cls):
            try:
                content = member.__get__(obj)
            except AttributeError:
                content = MISSING
            slots.append((member, self.walk(content, f"{label}.{name}")))
        flags = type.__dict__["__flags__"].__get__(cls)  # (a metaclass may refuse reads)
        data = issubclass(cls, _DATA_TYPES)  # (a subclass: its items are checked already)
        if attrs is None and (not slots or not (flags & _HEAPTYPE or data)):
            del self._values[read:], self._containers[containers:]  # (nodes not kept)
            if data:
                return None
            if issubclass(cls, _IMMUTABLE_OBJECTS) or (not slots and _stateless(cls)):
                return Identity(label, obj)
            # A C object with state of its own (a ContextVar, a cell, an mmap...): its
            # member descriptors, if any, are not all of it, and nothing here can tell
            # when it changes.
            raise Unguardable(f"{label} ({_type_name(cls)}) has state ipyrefresh cannot read")
        self._stores_possible()
        return Instance(label, obj, descr, attrs, tuple(slots))


def _key_classes(value: Any, depth: int = 0) -> list[type]:
    """The classes of the keys of the dicts in a differentiated argument (dicts, lists and
    tuples of them), other than scalars'."""
    t = type(value)
    found: list[type] = []
    if depth > 32:
        return found
    if t is dict:
        found += [type(k) for k in value if not is_scalar(k)]
        items: Any = value.values()
    elif t is list or t is tuple:
        items = value
    else:
        return found
    for item in items:
        found += _key_classes(item, depth + 1)
    return list(dict.fromkeys(found))


def _stateless(cls: type) -> bool:
    """Instances of ``cls`` are no bigger than a bare ``object()``: no ``__dict__``, no
    slots, no C fields; nothing but their identity (a sentinel: ``MISSING = object()``,
    a class with ``__slots__ = ()``)."""
    size = type.__dict__["__basicsize__"].__get__(cls)
    return bool(size == _OBJECT_SIZE and type.__dict__["__itemsize__"].__get__(cls) == 0)


_OBJECT_SIZE = object.__basicsize__


class _LibraryClassDict(Node):
    """A library class's namespace: the same keys bound to the very same objects (its
    methods are the library's; a monkeypatch rebinds one). Checked in C loops."""

    __slots__ = ("keys", "values")

    def __init__(self, label: str, ns: Mapping[str, Any]) -> None:
        super().__init__(label)
        self.keys = tuple(ns)
        self.values = tuple(ns.values())

    def check(self, value: Any, deep: bool = True) -> Mismatch | None:
        if tuple(value) != self.keys or not all(map(operator.is_, value.values(), self.values)):
            return Mismatch(self.label.removesuffix(".__dict__"), ChangeKind.ATTRIBUTES_CHANGED)
        return None


def _weak(obj: Any) -> Callable[[], Any]:
    from .nodes import Ref

    return Ref(obj)


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
    file = mod.__dict__.get("__file__") if isinstance(mod, ModuleType) else None
    if type(file) is str:
        return codefacts.is_user_file(file)
    return any(
        type(v) is FunctionType and codefacts.is_user_frame(v.__code__, v.__globals__)
        for v in list(ns.values())
    )


def _patchable(cls: type) -> bool:
    """A class whose methods code can change: the user's, or a library's written in Python
    (``Fraction.__float__ = ...``); not a C type (``ndarray``, ``float``), which refuses,
    nor an extension's (jax's ``ArrayImpl``): its internals are the library's own."""
    if _is_user_class(cls):
        return True
    if not type.__dict__["__flags__"].__get__(cls) & _HEAPTYPE:
        return False
    ns = type.__dict__["__dict__"].__get__(cls)
    module = sys.modules.get(ns.get("__module__"))
    file = getattr(module, "__file__", None) if isinstance(module, ModuleType) else None
    if type(file) is str and file.endswith(_EXTENSION_SUFFIXES):
        return False  # a class of an extension module (methods jax adds to its ArrayImpl)
    return any(type(v) in _PYTHON_METHODS for v in list(ns.values()))


_PYTHON_METHODS = frozenset({FunctionType, property, staticmethod, classmethod})
_EXTENSION_SUFFIXES = tuple(importlib.machinery.EXTENSION_SUFFIXES)


def _dict_descriptor(cls: type) -> Any:
    """The descriptor of an instance's ``__dict__``: a getset of a class made in Python, or
    a member of a C type that keeps one (``types.SimpleNamespace``: hunt 58)."""
    for c in type.__dict__["__mro__"].__get__(cls):
        d = type.__dict__["__dict__"].__get__(c).get("__dict__")
        if d is not None and type(d).__name__ in ("getset_descriptor", "member_descriptor"):
            return d
    return None


def _user_callable(value: Any, depth: int = 0) -> bool:
    """A callable of the user's put into a library's namespace (a monkeypatch): a function,
    a method of one, a partial of one, or an instance of a user's class (``np.act =
    Act(2.0)``; code may change its state in place, ``np.act.k = 3.0``)."""
    t = type(value)
    if t is FunctionType:
        return codefacts.is_user_code(value.__code__)
    if depth > 8:
        return False
    if t is MethodType:
        return _user_callable(value.__func__, depth + 1)
    if t is functools.partial:
        return _user_callable(value.func, depth + 1)
    return _is_user_class(t)


def _library_namespace(ns: dict[str, Any]) -> bool:
    """The namespace of a library's module (numpy's, jax's), not the user's."""
    file = ns.get("__file__")
    return type(file) is str and not codefacts.is_user_file(file)


class _TargetOf(Reader):
    """The function a derivative handle differentiates now (a handle read by a function)."""

    __slots__ = ("handle",)

    def __init__(self, handle: Any) -> None:
        self.handle = weakref.ref(handle)

    def read(self, fn: Any, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> Any:
        handle = self.handle()
        if handle is None:
            return MISSING
        try:
            return handle.target.resolve()
        except Exception:
            return MISSING


class _ProxyOf(Node):
    """A ``mappingproxy``: the dict it shows, checked as a dict."""

    __slots__ = ("inner",)

    def __init__(self, label: str, inner: Node) -> None:
        super().__init__(label)
        self.inner = inner

    def check(self, value: Any, deep: bool = True) -> Mismatch | None:
        if type(value) is not MappingProxyType:
            return self.fail(value)
        underlying = [r for r in gc.get_referents(value) if type(r) is dict]
        if len(underlying) != 1:
            return self.fail(value)
        return self.inner.check(underlying[0], deep)


def _is_iterator(t: type) -> bool:
    return any("__next__" in type.__dict__["__dict__"].__get__(c) for c in t.__mro__[:-1])


def _is_jax_array(t: type) -> bool:
    """JAX's concrete array type (compared as itself: a class's own ``__name__`` may be
    anything, a metaclass may refuse to tell it)."""
    array = sys.modules.get("jax._src.array")
    return array is not None and t is getattr(array, "ArrayImpl", None)


def _is_jax_jitted(t: type) -> bool:
    """``jax.jit``'s function type (jaxlib's C++ ``PjitFunction``)."""
    name = type.__dict__["__name__"].__get__(t)  # (never a metaclass's own __getattribute__)
    module = type.__dict__["__dict__"].__get__(t).get("__module__")
    return name == "PjitFunction" and type(module) is str and module.startswith("jaxlib")


def _is_ours(t: type) -> bool:
    module = type.__dict__["__dict__"].__get__(t).get("__module__")
    return type(module) is str and module.startswith("ipyrefresh.")


def _has_rule(value: Any) -> bool:
    try:
        return value in primitive_vjps
    except TypeError:  # unhashable
        return False


def _users_implementation(raw: Any) -> bool:
    """Whether a primitive's implementation is the user's (its wrapper's code and closure
    are then checked): anything but a library's function, ufunc or C function."""
    if isinstance(raw, (BuiltinFunctionType, np.ufunc)):
        return False
    return type(raw) is not FunctionType or codefacts.is_user_code(raw.__code__)


def rules_of(prims: list[Any]) -> list[tuple[Reader, Node]]:
    """Guards on the primitives a tape replays: the VJPs registered for them, and for the
    user's, the implementation their wrapper calls (wherever the code found them)."""
    out: list[tuple[Reader, Node]] = []
    seen: set[int] = set()
    for prim in prims:
        if id(prim) not in seen:
            seen.add(id(prim))
            own = _users_implementation(implementation(prim))
            label = f"{getattr(prim, '__name__', '?')}"
            out.append((FixedReader(_weak(prim)), Primitive(label, prim, own)))
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


#: Builtins that read a namespace (or a frame) by computed names: reached other than by
#: their own name (``G = globals``, a default, a closure, ``builtins.globals``) the
#: code's names do not show it, so meeting one anywhere in a walk makes it unguardable.
_NAMESPACE_READERS = (
    *(builtins.globals, builtins.vars, builtins.locals, builtins.eval, builtins.exec),
    *(builtins.compile, builtins.__import__, sys._getframe),
)


def _namespace_reader(value: Any) -> bool:
    return any(value is reader for reader in _NAMESPACE_READERS)
