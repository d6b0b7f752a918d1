"""Guard nodes: what a derivative read, as it was, and how to tell whether it still is.

A build walks everything the function can reach (see ``snapshot.py``) and records one
node per value. ``node.check(value, deep)`` compares the value found *now* with the one
recorded, and returns ``None`` or a :class:`Mismatch` naming what differs. Nodes follow
TorchDynamo's guard kinds: identity for functions, classes and modules (plus the parts of
a function that can change in place: code, defaults, closure cells, attributes, gradient
rule), exact type and length for containers, value for scalars, and type, shape, dtype
and a content digest for arrays.

Checks never run user code: values are read with the C-level accessors of the exact
types that were recorded (``dict.__getitem__``, getset and member descriptors), never
``__eq__``, ``__getattr__``, ``__len__`` or ``repr`` of user objects. Containers are
compared by content, not identity, so a node holds no strong reference to the user's
lists, dicts or arrays (functions, classes and arrays are held weakly).
"""

from __future__ import annotations

import collections
import contextlib
import struct
import weakref
from collections.abc import Callable, Container, Mapping, Sequence
from types import BuiltinFunctionType, FunctionType, MethodType
from typing import Any

import numpy as np
from autograd.core import VJPNode, primitive_jvps, primitive_vjps
from autograd.tracer import notrace_primitives

from .changes import ChangeKind
from .digest import array_digest, buffer_digest, dtype_print, dtype_state, frozen_dtype
from .identity import Relation, seen
from .keys import arg_signature


class _Missing:
    __slots__ = ()

    def __repr__(self) -> str:
        return "<missing>"


#: The value of a name that is not bound (or an attribute that is not set).
MISSING: Any = _Missing()

SCALAR_TYPES: frozenset[type] = frozenset(
    {int, float, bool, complex, str, bytes, type(None), type(Ellipsis), type(NotImplemented)}
)


class Mismatch:
    """What differs: the source path of the value and how it changed; ``arg`` when it
    is about an argument of the call (another variant may fit) rather than the code."""

    __slots__ = ("arg", "kind", "subject")

    def __init__(self, subject: str, kind: ChangeKind, arg: bool = False) -> None:
        self.subject = subject
        self.kind = kind
        self.arg = arg

    def __repr__(self) -> str:
        return f"Mismatch({self.subject!r}, {self.kind.name})"


#: numpy's own scalar types, compared by value like Python's. A subclass of one is an
#: object like any other (its ``__dict__``, its own ``__eq__``); a structured array's
#: record, np.void, is a view of the array's memory.
NUMPY_SCALAR_TYPES: frozenset[type] = frozenset(np.sctypeDict.values()) - {np.object_, np.void}


def is_scalar(v: Any) -> bool:
    t = type(v)
    return t in SCALAR_TYPES or t in NUMPY_SCALAR_TYPES


def is_key(v: Any) -> bool:
    """A scalar, or a tuple of keys: what :func:`same_scalar` compares without user code."""
    return is_scalar(v) or (type(v) is tuple and all(map(is_key, v)))


def same_scalar(a: Any, b: Any) -> bool:
    """Exact equality of two scalars (or tuples of them) of the same type; NaN equals NaN.
    Types are compared first, so no user ``__eq__`` ever runs."""
    if a is b:
        return True
    t = type(a)
    if t is not type(b):
        return False
    if t is tuple:
        return len(a) == len(b) and all(map(same_scalar, a, b))
    if t not in SCALAR_TYPES and t not in NUMPY_SCALAR_TYPES:
        return False
    if (t is np.datetime64 or t is np.timedelta64) and a.dtype != b.dtype:
        return False  # (one minute == 60 seconds, but their integers differ)
    if t is complex or issubclass(t, np.complexfloating):
        # Part by part: 1+0j == 1-0j, and complex(nan, 1) is "NaN" whatever its real part.
        return same_scalar(a.real, b.real) and same_scalar(a.imag, b.imag)
    if a == b:
        # 0.0 == -0.0, but arctan2 (and autograd) tell them apart: compare the sign too.
        return a != 0 or t is bool or t is int or _sign_bit(a) == _sign_bit(b)
    # Both NaN, with the same bits: the sign (copysign tells them apart) and the payload
    # (arithmetic carries it into the result).
    return bool(a != a and b != b) and _nan_bits(a) == _nan_bits(b)


def _nan_bits(v: Any) -> Any:
    """A NaN's bits (its sign alone for a long double, whose padding bytes are not its)."""
    if type(v) is float:
        return _DOUBLE.pack(v)
    if isinstance(v, np.floating) and v.dtype.itemsize <= 8:
        return v.tobytes()
    return _sign_bit(v)


_DOUBLE = struct.Struct("<d")


def _sign_bit(v: Any) -> bool | None:
    """The sign bit of a real number (None for what has none: str, bytes)."""
    try:
        return bool(np.signbit(v))
    except TypeError:
        return None


def same_scalars(values: Sequence[Any], expected: Sequence[Any]) -> bool:
    """Element-wise :func:`same_scalar`, checking types before any comparison."""
    if len(values) != len(expected):
        return False
    return all(map(same_scalar, values, expected))


class _Gone:
    """What a :class:`Ref` gives once its object is collected: no value a name can hold
    is this, so an identity check against a dead object always fails (a weak reference
    gives ``None``, which ``model = None`` would match)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<collected>"


GONE: Any = _Gone()


class Ref:
    """A reference that does not keep its object alive when it can avoid it."""

    __slots__ = ("_obj", "_ref")

    def __init__(self, obj: Any) -> None:
        try:
            self._ref: weakref.ref[Any] | None = weakref.ref(obj)
            self._obj: Any = GONE
        except TypeError:
            self._ref = None
            self._obj = obj

    def __call__(self) -> Any:
        ref = self._ref
        if ref is None:
            return self._obj
        obj = ref()
        return GONE if obj is None else obj


class Node:
    """A value as it was when a derivative was built."""

    __slots__ = ("label",)

    def __init__(self, label: str) -> None:
        self.label = label

    def check(self, value: Any, deep: bool = True) -> Mismatch | None:
        raise NotImplementedError

    def fail(self, value: Any, kind: ChangeKind | None = None) -> Mismatch:
        if value is MISSING:
            return Mismatch(self.label, ChangeKind.DELETED)
        return Mismatch(self.label, kind or ChangeKind.REBOUND)


class Absent(Node):
    """A name that was not bound: binding it later (shadowing a builtin) is a change."""

    __slots__ = ()

    def check(self, value: Any, deep: bool = True) -> Mismatch | None:
        return None if value is MISSING else Mismatch(self.label, ChangeKind.DEFINED)


class Scalar(Node):
    """An int, float, str, ... compared by type and value; or, when ``exact`` (see
    :func:`relate`), the very object. With a ``slot``, the object found is also part of
    the identity relation checked among the arguments and what they equal."""

    __slots__ = ("exact", "slot", "value")

    def __init__(self, label: str, value: Any) -> None:
        super().__init__(label)
        self.value = value
        self.exact = False
        self.slot: int | None = None

    def check(self, value: Any, deep: bool = True) -> Mismatch | None:
        if self.exact:
            if value is not self.value:
                return self.fail(value)
        elif not same_scalar(value, self.value):
            return self.fail(value)
        if self.slot is not None:
            seen(self.slot, value)
        return None


class Identity(Node):
    """Modules, library functions and classes, code objects: the very same object."""

    __slots__ = ("kind", "ref")

    def __init__(self, label: str, obj: Any, kind: ChangeKind = ChangeKind.REBOUND) -> None:
        super().__init__(label)
        self.ref = Ref(obj)
        self.kind = kind

    def check(self, value: Any, deep: bool = True) -> Mismatch | None:
        return None if value is self.ref() else self.fail(value, self.kind)


class Module(Node):
    """A module: the very same object, of the same class (``mod.__class__ = Live``, a
    subclass with properties, makes ``mod.K`` answer from the class, not the module's
    ``__dict__``, which is where a guard reads it)."""

    __slots__ = ("cls", "ref")

    def __init__(self, label: str, mod: Any) -> None:
        super().__init__(label)
        self.ref = Ref(mod)
        self.cls = type(mod)

    def check(self, value: Any, deep: bool = True) -> Mismatch | None:
        if value is not self.ref():
            return self.fail(value, ChangeKind.REBOUND)
        return None if type(value) is self.cls else Mismatch(self.label, ChangeKind.CLASS_CHANGED)


class JaxArray(Node):
    """A JAX array: immutable, so the very same object; but its buffer can be deleted
    (donated to a jitted call, ``x.delete()``), after which JAX refuses to read it."""

    __slots__ = ("ref",)

    def __init__(self, label: str, array: Any) -> None:
        super().__init__(label)
        self.ref = Ref(array)

    def check(self, value: Any, deep: bool = True) -> Mismatch | None:
        if value is not self.ref():
            return self.fail(value)
        return Mismatch(self.label, ChangeKind.DELETED) if value.is_deleted() else None


def function_names(fn: FunctionType) -> tuple[Any, Any, Any, Any]:
    """What a function keeps outside its ``__dict__`` that code reads as data (dispatch on
    ``f.__name__``, a docstring's length): compared by identity."""
    return (fn.__name__, fn.__qualname__, fn.__module__, fn.__doc__)


def same_names(fn: FunctionType, names: tuple[Any, Any, Any, Any]) -> bool:
    return (
        fn.__name__ is names[0]
        and fn.__qualname__ is names[1]
        and fn.__module__ is names[2]
        and fn.__doc__ is names[3]
    )


class Annotations:
    """A function's ``__annotations__`` dict, and the objects in it (by identity: they are
    types and strings, or values code reads, ``g.__annotations__['scale']``)."""

    __slots__ = ("items", "ref")

    def __init__(self, ann: dict[str, Any]) -> None:
        self.ref = Ref(ann)
        self.items = tuple(dict.items(ann))

    def holds(self, ann: Any) -> bool:
        if ann is not self.ref() or dict.__len__(ann) != len(self.items):
            return False
        return all(dict.get(ann, k, MISSING) is v for k, v in self.items)


class Function(Node):
    """A Python function: the same object, and the same code, defaults, closure cells,
    attributes (``__wrapped__``, function attributes) and autograd gradient rules.

    IPython's autoreload swaps ``__code__`` in place and ``defvjp`` replaces a rule
    without rebinding any name, so identity alone would miss both.
    """

    __slots__ = (
        "annotations",
        "attrs",
        "cells",
        "code",
        "defaults",
        "jvp",
        "kwdefaults",
        "names",
        "ref",
        "rule",
    )

    def __init__(
        self,
        label: str,
        fn: FunctionType,
        defaults: Node | None,
        kwdefaults: Node | None,
        cells: tuple[Node, ...],
        attrs: Node | None,
    ) -> None:
        super().__init__(label)
        self.ref = Ref(fn)
        self.code = fn.__code__
        self.defaults = defaults
        self.kwdefaults = kwdefaults
        self.cells = cells
        self.attrs = attrs
        self.rule = primitive_vjps.get(fn, MISSING)
        self.jvp = primitive_jvps.get(fn, MISSING)
        self.names = function_names(fn)
        self.annotations = Annotations(fn.__annotations__)

    def check(self, value: Any, deep: bool = True) -> Mismatch | None:
        if value is not self.ref():
            return self.fail(value, ChangeKind.REDEFINED)
        fn: FunctionType = value
        if fn.__code__ is not self.code:
            return Mismatch(self.label, ChangeKind.CODE_CHANGED)
        if not same_names(fn, self.names) or not self.annotations.holds(fn.__annotations__):
            return Mismatch(self.label, ChangeKind.ATTRIBUTES_CHANGED)
        if self.defaults is not None:
            bad = self.defaults.check(fn.__defaults__, deep)
            if bad is not None:
                return bad
        if self.kwdefaults is not None:
            bad = self.kwdefaults.check(fn.__kwdefaults__, deep)
            if bad is not None:
                return bad
        if self.cells:
            for cell, node in zip(fn.__closure__ or (), self.cells, strict=True):
                try:
                    content = cell.cell_contents
                except ValueError:
                    content = MISSING
                bad = node.check(content, deep)
                if bad is not None:
                    return bad
        if self.attrs is not None:
            bad = self.attrs.check(fn.__dict__, deep)
            if bad is not None:
                return bad
        if primitive_vjps.get(fn, MISSING) is not self.rule:
            return Mismatch(self.label, ChangeKind.RULE_CHANGED)
        if primitive_jvps.get(fn, MISSING) is not self.jvp:
            return Mismatch(self.label, ChangeKind.RULE_CHANGED)
        return None


def implementation(prim: Any) -> Any:
    """What autograd's wrapper of a primitive calls: the ``f_raw`` in its closure (its
    ``fun`` attribute is a copy for readers, which the wrapper never reads)."""
    code, closure = getattr(prim, "__code__", None), getattr(prim, "__closure__", None)
    if code is not None and closure and "f_raw" in code.co_freevars:
        with contextlib.suppress(ValueError, IndexError):  # (an empty cell)
            return closure[code.co_freevars.index("f_raw")].cell_contents
    return getattr(prim, "fun", prim)


def _cell_contents(fn: Any) -> tuple[Any, ...]:
    out = []
    for cell in fn.__closure__ or ():
        try:
            out.append(cell.cell_contents)
        except ValueError:
            out.append(MISSING)
    return tuple(out)


#: The primitives reverse mode treats as constants (``register_notrace(VJPNode, p)``).
NOTRACE: Container[Any] = notrace_primitives[VJPNode]


class Primitive(Node):
    """An autograd primitive: the same wrapper, the same registered VJP, traced or not
    (``register_notrace``); for one of the user's (``code`` set), also the same code and
    closure, the implementation in it included (``%autoreload`` patches a wrapper in
    place)."""

    __slots__ = ("cells", "code", "jvp", "notrace", "ref", "rule")

    def __init__(self, label: str, prim: Any, own: bool) -> None:
        super().__init__(label)
        self.ref = Ref(prim)
        self.rule = primitive_vjps.get(prim, MISSING)
        #: (Forward mode inside the reverse trace, ``make_jvp``: the tape holds what the
        #: JVP rule computed, hunt 60.)
        self.jvp = primitive_jvps.get(prim, MISSING)
        self.notrace = prim in NOTRACE
        self.code = prim.__code__ if own else None
        self.cells = tuple(Ref(c) for c in _cell_contents(prim)) if own else ()

    def same_code(self, value: Any) -> bool:
        """The wrapper runs the code and closure it had (a user primitive's)."""
        if self.code is None:
            return True
        if value.__code__ is not self.code:
            return False
        contents = _cell_contents(value)
        return len(contents) == len(self.cells) and all(
            c is r() for c, r in zip(contents, self.cells, strict=True)
        )

    def check(self, value: Any, deep: bool = True) -> Mismatch | None:
        if value is not self.ref():
            return self.fail(value, ChangeKind.REDEFINED)
        if primitive_vjps.get(value, MISSING) is not self.rule:
            return Mismatch(self.label, ChangeKind.RULE_CHANGED)
        if primitive_jvps.get(value, MISSING) is not self.jvp:
            return Mismatch(self.label, ChangeKind.RULE_CHANGED)
        if (value in NOTRACE) is not self.notrace:
            return Mismatch(self.label, ChangeKind.RULE_CHANGED)
        if not self.same_code(value):
            return Mismatch(self.label, ChangeKind.CODE_CHANGED)
        return None


class Array(Node):
    """A numpy array: the same shape, dtype and memory layout (BLAS results depend on
    it), and the same contents (a digest). ``deep=False`` (the sweep after cells) skips
    the digest.

    Arrays the function reads from its globals, closures and objects must also be the
    *same object*: a compiled replay holds them, so an equal copy bound in their place
    could hide a later change of the old one. An argument's arrays need not be: the
    tape keeps its own copy of what it read from arguments.

    The object is held by a weak reference, not known by its ``id``: a replay may hold
    only a view of it (``W[:2]``), and a view of a view keeps the owner alive, not the
    array bound to the name, whose ``id`` a new array can then take. numpy refuses to
    resize an array that has a weak reference, which is what keeps that view's memory
    valid (``a.resize(n, refcheck=False)`` would free it under the replay).
    """

    __slots__ = ("digest", "dtype", "ref", "shape", "strides", "type")

    def __init__(self, label: str, arr: np.ndarray, identity: bool = True) -> None:
        super().__init__(label)
        self.type = type(arr)
        self.shape = arr.shape
        self.dtype = frozen_dtype(arr.dtype)
        self.strides = arr.strides
        self.digest = array_digest(arr)
        self.ref = Ref(arr) if identity else None

    def check(self, value: Any, deep: bool = True) -> Mismatch | None:
        ref = self.ref
        if ref is not None and value is not ref():
            return self.fail(value)
        if type(value) is not self.type:  # (the same array: ``W.__class__ = B``)
            return self.fail(value, None if ref is None else ChangeKind.CLASS_CHANGED)
        arr: np.ndarray = value
        if arr.shape != self.shape or arr.dtype != self.dtype or arr.strides != self.strides:
            return Mismatch(self.label, ChangeKind.RESHAPED)
        if deep and array_digest(arr) != self.digest:
            return Mismatch(self.label, ChangeKind.MUTATED)
        return None


def view_owner(arr: np.ndarray) -> Any:
    """The object whose memory ``arr`` views, at the end of its ``.base`` chain: an array
    that owns its memory, or a buffer (``bytearray``, ``mmap``, ``array.array``); through
    ``as_strided``'s holder and a ``memoryview``'s ``.obj`` too. None for an array that owns
    its memory, or views immutable ``bytes``."""
    base: Any = arr.base
    for _ in range(64):
        if base is None:
            break
        inner: Any
        if isinstance(base, memoryview):
            inner = base.obj
        elif isinstance(base, np.ndarray):
            inner = base.base
        else:
            inner = _holder_base(base)
        if inner is None:
            break
        base = inner
    # (A DLPack capsule or an exporter with an address is returned too: what it keeps
    # may be more than its array shows (hunt 54), and a ViewOwner of it cannot be made.)
    return None if base is None or base is arr or isinstance(base, bytes) else base


def _holder_base(obj: Any) -> Any:
    """What numpy's ``as_strided`` holder (an object with an ``__array_interface__`` and
    the array it was made from as ``.base``) views."""
    if "__array_interface__" in getattr(obj, "__dict__", ()):
        return obj.__dict__.get("base")
    return None


class ViewOwner(Node):
    """All the memory a view's owner holds, the view's elements and the rest: code can
    read past a view (``W.base``, ``as_strided(W, ...)``, through an alias or a helper),
    so a view's own elements are not all it may have read (hunt 46). Its layout, then its
    contents."""

    __slots__ = ("digest", "layout")

    def __init__(self, label: str, arr: np.ndarray) -> None:
        super().__init__(label)
        owner = view_owner(arr)
        self.layout = _owner_layout(owner)
        self.digest = _owner_digest(owner)

    def check(self, value: Any, deep: bool = True) -> Mismatch | None:
        owner = view_owner(value) if isinstance(value, np.ndarray) else None
        if _owner_layout(owner) != self.layout:
            return Mismatch(self.label, ChangeKind.RESHAPED)
        if deep and _owner_digest(owner) != self.digest:
            return Mismatch(self.label, ChangeKind.MUTATED)
        return None


def _owner_layout(owner: Any) -> tuple[Any, ...]:
    if isinstance(owner, np.ndarray):
        return (type(owner), owner.shape, dtype_print(owner.dtype), owner.strides)
    return (type(owner), id(owner), memoryview(owner).nbytes if owner is not None else 0)


def _owner_digest(owner: Any) -> int:
    if owner is None:
        return 0
    return array_digest(owner) if isinstance(owner, np.ndarray) else buffer_digest(owner)


class DType(Node):
    """A numpy dtype: the same object, of the same value (a structured dtype's field names
    can be changed in place: ``dt.names = ('b', 'a')``)."""

    __slots__ = ("frozen", "ref")

    def __init__(self, label: str, dtype: np.dtype[Any]) -> None:
        super().__init__(label)
        self.ref = Ref(dtype)
        self.frozen = dtype_state(dtype)

    def check(self, value: Any, deep: bool = True) -> Mismatch | None:
        if value is not self.ref():
            return self.fail(value)
        if dtype_state(value) != self.frozen:
            return Mismatch(self.label, ChangeKind.MUTATED)
        return None


class Buffer(Node):
    """A ``bytearray``, ``array.array`` or other mutable buffer: type, layout (an
    ``array('i')`` of two items has the bytes of an ``array('h')`` of four) and contents."""

    __slots__ = ("digest", "layout", "type")

    def __init__(self, label: str, obj: Any) -> None:
        super().__init__(label)
        self.type = type(obj)
        self.layout = _layout(obj)
        self.digest = buffer_digest(obj)

    def check(self, value: Any, deep: bool = True) -> Mismatch | None:
        if type(value) is not self.type:
            return self.fail(value)
        if _layout(value) != self.layout or buffer_digest(value) != self.digest:
            return Mismatch(self.label, ChangeKind.MUTATED)
        return None


def _layout(obj: Any) -> tuple[str, int, tuple[int, ...] | None]:
    with memoryview(obj) as view:
        return view.format, view.itemsize, view.shape


class ScalarSeq(Node):
    """A list, tuple or deque of scalars (a shape, a list of floats): type and values,
    and a deque's ``maxlen``; the tuple itself and the items at some positions may have
    to be the very objects, or have slots (see :func:`relate`)."""

    __slots__ = ("exact", "exact_items", "item_slots", "maxlen", "slot", "type", "values")

    def __init__(self, label: str, seq: Any) -> None:
        super().__init__(label)
        self.type = type(seq)
        self.values = tuple(_iterate(seq))
        self.maxlen = maxlen(seq)
        #: A tuple that must be the very object, or None.
        self.exact: tuple[Any, ...] | None = None
        #: The positions whose items must be the very objects they were.
        self.exact_items: tuple[int, ...] = ()
        #: The tuple's own slot, or None.
        self.slot: int | None = None
        #: (position, slot) of the items in the relation.
        self.item_slots: tuple[tuple[int, int], ...] = ()

    def check(self, value: Any, deep: bool = True) -> Mismatch | None:
        if type(value) is not self.type:
            return self.fail(value)
        if self.exact is not None and value is not self.exact:
            return self.fail(value)
        if self.maxlen is not MISSING and maxlen(value) != self.maxlen:
            return Mismatch(self.label, ChangeKind.MUTATED)
        items = tuple(_iterate(value)) if self.type is not tuple else value
        if not same_scalars(items, self.values):
            return Mismatch(self.label, ChangeKind.MUTATED)
        if self.exact_items and not same_items(items, self.values, self.exact_items):
            return Mismatch(self.label, ChangeKind.MUTATED)
        if self.slot is not None:
            seen(self.slot, value)
        for position, slot in self.item_slots:
            seen(slot, items[position])
        return None


def same_items(items: Sequence[Any], values: Sequence[Any], positions: Sequence[int]) -> bool:
    """The items at ``positions`` are the very objects ``values`` holds there."""
    return all(items[i] is values[i] for i in positions)


def seen_items(objs: list[Any], items: Sequence[Any], slots: Sequence[tuple[int, int]]) -> None:
    """The items at the positions of ``slots`` go in their slots of ``objs``."""
    for position, slot in slots:
        objs[slot] = items[position]


#: A value a walk read: a number or string (a :class:`Scalar`), a tuple of them (a
#: :class:`ScalarSeq`, position None), or one item of a list, tuple or deque of them (its
#: position); and the argument it was found in (None: the code and data).
ReadValue = tuple["Scalar | ScalarSeq", Any, int | None, int | str | None]
#: A container a walk read (its node; the kind of container, see
#: ``snapshot.Walker._related``; the container; the argument it was found in).
ReadContainer = tuple["Related", Any, Any, int | str | None]


def relate(read: Sequence[ReadValue], containers: Sequence[ReadContainer] = ()) -> Relation | None:
    """Numbers, strings and tuples of them (and the items of lists, tuples and deques of
    them) are compared by value, unless code could tell two of them apart by identity:
    those the walk read in more than one place, or equal to another it read (a sentinel,
    ``CFG['mode'] is MISSING``; a string made the same object by ``sys.intern``).

    Those in the code and data must stay the very objects they were (another equal object
    is a change: the code may also compare it with what no guard reads as a value, the
    intern table, a ``range``'s start). An argument is a new object at each call (a
    literal passed from each cell, ``step(p, x, y, 0.1)``): when one is in such a group,
    the group gets slots in the identity relation instead, which the arguments must keep
    (``f(x, MISSING)``, then an equal copy, is another variant; see
    :mod:`~ipyrefresh._src.identity`). What CPython makes one object whatever the code
    (None, booleans, small ints, the empty tuple and string) needs neither.

    Lists, dicts, sets, deques, arrays and tuples holding them (``containers``) are
    compared by contents, and no node holds them: those of one kind (type and length, or
    an array's shape and dtype) get slots when the walk read more than one of them
    (``A is B`` after ``B = list(A)``; ``f(x, W, W)``, then ``f(x, W, W.copy())``)."""
    groups: dict[Any, list[ReadValue]] = {}
    for member in read:
        value = member[1]
        if _one_object_by_value(value):
            continue
        try:
            key = (type(value), "NaN" if value != value else value)
            groups.setdefault(key, []).append(member)
        except (TypeError, ValueError):  # (unhashable, or no truth value: left by value)
            continue
    relation = Relation()
    exact_items: dict[ScalarSeq, list[int]] = {}
    item_slots: dict[ScalarSeq, list[tuple[int, int]]] = {}
    mismatches: dict[tuple[Node, bool], Mismatch] = {}
    for members in groups.values():
        if len(members) < 2:
            continue
        with_argument = any(argument is not None for *_, argument in members)
        for node, value, position, argument in members:
            item = type(node) is ScalarSeq and position is not None
            if argument is None:
                if type(node) is Scalar:
                    node.exact = True
                elif type(node) is ScalarSeq and position is not None:
                    exact_items.setdefault(node, []).append(position)
                elif type(node) is ScalarSeq and isinstance(value, tuple):
                    node.exact = value
            if not with_argument:
                continue
            arg = argument is not None
            bad = mismatches.get((node, arg))
            if bad is None:
                kind = ChangeKind.MUTATED if item else ChangeKind.REBOUND
                bad = mismatches[node, arg] = Mismatch(node.label, kind, arg)
            slot = relation.add(value, bad, argument)
            if type(node) is ScalarSeq and position is not None:
                item_slots.setdefault(node, []).append((position, slot))
            else:
                node.slot = slot
    _relate_containers(relation, containers)
    for seq, positions in exact_items.items():
        seq.exact_items = tuple(sorted(positions))
    for seq, slots in item_slots.items():
        seq.item_slots = tuple(slots)
    return relation if relation.ids else None


def _relate_containers(relation: Relation, containers: Sequence[ReadContainer]) -> None:
    kinds: dict[Any, list[ReadContainer]] = {}
    for read in containers:
        kinds.setdefault(read[1], []).append(read)
    for reads in kinds.values():
        if len(reads) < 2:
            continue
        for related, _, container, argument in reads:
            bad = Mismatch(related.label, ChangeKind.REBOUND, argument is not None)
            related.slot = relation.add(container, bad, argument)


def _one_object_by_value(value: Any) -> bool:
    t = type(value)
    if t is int:
        return bool(-5 <= value <= 256)  # (CPython's cached small ints)
    return (
        value is None or t is bool or ((t is tuple or t is str or t is bytes) and len(value) == 0)
    )


class Seq(Node):
    """A list, tuple, namedtuple or deque: exact type, length, each element, and a
    deque's ``maxlen``."""

    __slots__ = ("items", "maxlen", "type")

    def __init__(self, label: str, seq: Any, items: tuple[Node, ...]) -> None:
        super().__init__(label)
        self.type = type(seq)
        self.items = items
        self.maxlen = maxlen(seq)

    def check(self, value: Any, deep: bool = True) -> Mismatch | None:
        if type(value) is not self.type:
            return self.fail(value)
        if self.maxlen is not MISSING and maxlen(value) != self.maxlen:
            return Mismatch(self.label, ChangeKind.MUTATED)
        elems = tuple(_iterate(value))
        if len(elems) != len(self.items):
            return Mismatch(self.label, ChangeKind.MUTATED)
        for node, elem in zip(self.items, elems, strict=True):
            bad = node.check(elem, deep)
            if bad is not None:
                return bad
        return None


class Map(Node):
    """A dict (or OrderedDict, defaultdict, mappingproxy): type, keys in order, values."""

    __slots__ = ("default", "keys", "type", "values")

    def __init__(
        self,
        label: str,
        mapping: Any,
        keys: tuple[Any, ...],
        values: tuple[Node, ...],
        default: Node | None = None,
    ) -> None:
        super().__init__(label)
        self.type = type(mapping)
        self.keys = keys
        self.values = values
        self.default = default  # a defaultdict's default_factory

    def check(self, value: Any, deep: bool = True) -> Mismatch | None:
        if type(value) is not self.type:
            return self.fail(value)
        keys = tuple(_iterate(value))
        if not same_scalars(keys, self.keys):
            return Mismatch(self.label, ChangeKind.MUTATED)
        get = dict.__getitem__
        for key, node in zip(keys, self.values, strict=True):
            bad = node.check(get(value, key), deep)
            if bad is not None:
                return bad
        if self.default is not None:
            return self.default.check(value.default_factory, deep)
        return None


def set_items(value: set[Any] | frozenset[Any]) -> list[Any]:
    """A set's items by the base type's own C iteration (a subclass's ``__iter__`` is
    user code)."""
    return list(set.__iter__(value) if isinstance(value, set) else frozenset.__iter__(value))


class ScalarSet(Node):
    """A set or frozenset of scalars, in the order it iterates: equal sets can iterate
    in different orders (``{1, 9}`` built from 9 first), and 1, 1.0, True, 0.0 and -0.0
    are equal members; the code sees its items one by one, as they were."""

    __slots__ = ("items", "type")

    def __init__(self, label: str, values: Any) -> None:
        super().__init__(label)
        self.type = type(values)
        self.items = tuple(set_items(values))

    def check(self, value: Any, deep: bool = True) -> Mismatch | None:
        if type(value) is not self.type:
            return self.fail(value)
        if not same_scalars(set_items(value), self.items):
            return Mismatch(self.label, ChangeKind.MUTATED)
        return None


class BaseValue(Node):
    """The value of an int, float, str, bytes or complex subclass's instance (its
    attributes are an :class:`Instance` of their own), read with the base type's C code."""

    __slots__ = ("args", "base")

    def __init__(self, label: str, value: Any, base: type) -> None:
        super().__init__(label)
        self.base = base
        self.args = base.__getnewargs__(value)  # type: ignore[attr-defined]

    def check(self, value: Any, deep: bool = True) -> Mismatch | None:
        if not isinstance(value, self.base):
            return self.fail(value)
        args = self.base.__getnewargs__(value)  # type: ignore[attr-defined]
        return None if same_scalar(args, self.args) else self.fail(value)


class Record(Node):
    """A numpy record (``np.void``): a view of its structured array's memory, compared by
    dtype and bytes."""

    __slots__ = ("data", "dtype")

    def __init__(self, label: str, value: Any) -> None:
        super().__init__(label)
        self.dtype = frozen_dtype(value.dtype)
        self.data = value.tobytes()

    def check(self, value: Any, deep: bool = True) -> Mismatch | None:
        if type(value) is not np.void or value.dtype != self.dtype:
            return self.fail(value)
        return None if value.tobytes() == self.data else Mismatch(self.label, ChangeKind.MUTATED)


class Instance(Node):
    """An object: the same class, its ``__dict__`` and its ``__slots__`` values.

    The class itself (methods, class attributes, base classes) is checked once, as a
    separate :class:`Class` node, however many instances of it a derivative reads.
    """

    __slots__ = ("attrs", "cls", "dict_descr", "ref", "slots")

    def __init__(
        self,
        label: str,
        obj: Any,
        dict_descr: Any,
        attrs: Node | None,
        slots: tuple[tuple[Any, Node], ...],
    ) -> None:
        super().__init__(label)
        self.cls = Ref(type(obj))
        self.ref = _weak_or_none(obj)  # the same object, where it can be told weakly
        self.dict_descr = dict_descr
        self.attrs = attrs
        self.slots = slots

    def check(self, value: Any, deep: bool = True) -> Mismatch | None:
        ref = self.ref
        if ref is not None and value is not ref():
            return self.fail(value)
        if type(value) is not self.cls():  # (the same object: ``o.__class__ = B``)
            return self.fail(value, None if ref is None else ChangeKind.CLASS_CHANGED)
        if self.attrs is not None:
            bad = self.attrs.check(self.dict_descr.__get__(value), deep)
            if bad is not None:
                return bad
        for descr, node in self.slots:
            try:
                content = descr.__get__(value)
            except AttributeError:
                content = MISSING
            bad = node.check(content, deep)
            if bad is not None:
                return bad
        return None


def _weak_or_none(obj: Any) -> Callable[[], Any] | None:
    try:
        return weakref.ref(obj)
    except TypeError:
        return None


_OD_ITER = collections.OrderedDict.__iter__


def iterate(value: Any) -> Any:
    return _iterate(value)


def _iterate(value: Any) -> Any:
    """Iterate a list, tuple, dict or deque (or a subclass) with the base type's own C
    iteration: a subclass's ``__iter__`` is user code. An OrderedDict iterates in its
    own order (``move_to_end`` changes it, not the dict's)."""
    if isinstance(value, collections.OrderedDict):
        return _OD_ITER(value)
    if isinstance(value, dict):
        return dict.__iter__(value)
    if isinstance(value, tuple):
        return tuple.__iter__(value)
    if isinstance(value, list):
        return list.__iter__(value)
    if isinstance(value, collections.deque):
        return _DEQUE_ITER(value)
    return iter(value)


_DEQUE_ITER = collections.deque.__iter__
_DEQUE_MAXLEN = collections.deque.__dict__["maxlen"]


def maxlen(value: Any) -> Any:
    """A deque's ``maxlen`` (``deque.__init__`` sets it anew in place), MISSING for the
    other sequences."""
    return _DEQUE_MAXLEN.__get__(value) if isinstance(value, collections.deque) else MISSING


class AllOf(Node):
    """Several views of one value: a dict subclass's items and its attributes, an
    ndarray subclass's contents and its attributes."""

    __slots__ = ("nodes",)

    def __init__(self, label: str, nodes: tuple[Node, ...]) -> None:
        super().__init__(label)
        self.nodes = nodes

    def check(self, value: Any, deep: bool = True) -> Mismatch | None:
        for node in self.nodes:
            bad = node.check(value, deep)
            if bad is not None:
                return bad
        return None


class Related(Node):
    """A list, dict, set, deque, array or tuple of such, which code could compare with
    ``is`` to another one read: checked by ``inner``; with a ``slot`` (see
    :func:`relate`), the object found is also part of the identity relation checked
    (these are compared by contents, and no node holds them)."""

    __slots__ = ("inner", "slot")

    def __init__(self, inner: Node) -> None:
        super().__init__(inner.label)
        self.inner = inner
        self.slot: int | None = None

    def check(self, value: Any, deep: bool = True) -> Mismatch | None:
        bad = self.inner.check(value, deep)
        if bad is None and self.slot is not None:
            seen(self.slot, value)
        return bad


class BoundBuiltin(Node):
    """A builtin bound method (``params.get``): the same method of the same kind of object,
    whose object is checked like any value."""

    __slots__ = ("name", "owner")

    def __init__(self, label: str, method: Any, owner: Node) -> None:
        super().__init__(label)
        self.name = method.__name__
        self.owner = owner

    def check(self, value: Any, deep: bool = True) -> Mismatch | None:
        if type(value) is not BuiltinFunctionType or value.__name__ != self.name:
            return self.fail(value)
        return self.owner.check(value.__self__, deep)


class Reduced(Node):
    """A C object that cannot change but holds objects that can (``itemgetter(idx)``,
    ``methodcaller(name, arg)``, ``idx`` a list): the very same object, and what its
    ``__reduce__`` gives (what it holds) as it was."""

    __slots__ = ("ref", "state")

    def __init__(self, label: str, obj: Any, state: Node) -> None:
        super().__init__(label)
        self.ref = Ref(obj)
        self.state = state

    def check(self, value: Any, deep: bool = True) -> Mismatch | None:
        if value is not self.ref():
            return self.fail(value)
        return self.state.check(value.__reduce__(), deep)


class WeakRefTo(Node):
    """A ``weakref.ref``: its referent, checked like any value (dead: MISSING)."""

    __slots__ = ("inner", "type")

    def __init__(self, label: str, ref: Any, inner: Node) -> None:
        super().__init__(label)
        self.type = type(ref)
        self.inner = inner

    def check(self, value: Any, deep: bool = True) -> Mismatch | None:
        if type(value) is not self.type:
            return self.fail(value)
        target = weakref.ReferenceType.__call__(value)  # (a subclass's __call__ is user code)
        return self.inner.check(MISSING if target is None else target, deep)


def class_keys(ns: Mapping[str, Any]) -> tuple[str, ...]:
    """A class namespace's keys in order, without the ``__dict__``/``__weakref__``
    descriptors every class with instance dicts has."""
    return tuple(k for k in ns if k not in ("__dict__", "__weakref__"))


class ClassDict(Node):
    """A user class's namespace: the same keys in order, each value checked like any."""

    __slots__ = ("keys", "values")

    def __init__(self, label: str, keys: tuple[str, ...], values: tuple[Node, ...]) -> None:
        super().__init__(label)
        self.keys = keys
        self.values = values

    def check(self, value: Any, deep: bool = True) -> Mismatch | None:
        keys = class_keys(value)
        if keys != self.keys:
            return Mismatch(self.label.removesuffix(".__dict__"), ChangeKind.ATTRIBUTES_CHANGED)
        for key, node in zip(keys, self.values, strict=True):
            bad = node.check(value[key], deep)
            if bad is not None:
                return bad
        return None


_TYPE_NAME = type.__dict__["__name__"]
_TYPE_QUALNAME = type.__dict__["__qualname__"]


def class_names(cls: type) -> tuple[str, str]:
    """A class's ``__name__`` and ``__qualname__`` (kept outside its ``__dict__``; read
    past any metaclass property of the same name)."""
    return (_TYPE_NAME.__get__(cls), _TYPE_QUALNAME.__get__(cls))


class Class(Node):
    """A user class: the same object, the same base classes, and the same attributes
    (methods, properties, class data) in each user class of its MRO."""

    __slots__ = ("dicts", "mro", "names", "ref")

    def __init__(self, label: str, cls: type, dicts: tuple[tuple[type, Node], ...]) -> None:
        super().__init__(label)
        self.ref = Ref(cls)
        self.mro = tuple(Ref(c) for c in type.__dict__["__mro__"].__get__(cls))
        self.dicts = tuple((Ref(c), node) for c, node in dicts)
        self.names = class_names(cls)

    def check(self, value: Any, deep: bool = True) -> Mismatch | None:
        if value is not self.ref():
            return self.fail(value, ChangeKind.REDEFINED)
        if class_names(value) != self.names:  # (strings: ``A.__name__ = 'B'``)
            return Mismatch(self.label, ChangeKind.ATTRIBUTES_CHANGED)
        mro = type.__dict__["__mro__"].__get__(value)
        if len(mro) != len(self.mro) or any(
            c is not r() for c, r in zip(mro, self.mro, strict=True)
        ):
            return Mismatch(self.label, ChangeKind.CLASS_CHANGED)
        for ref, node in self.dicts:
            bad = node.check(type.__dict__["__dict__"].__get__(ref()), deep)
            if bad is not None:
                return bad
        return None


class Wrapped(Node):
    """A ``staticmethod``, ``classmethod`` or ``property``: type and the wrapped callables."""

    __slots__ = ("getters", "parts", "type")

    def __init__(self, label: str, obj: Any, parts: tuple[tuple[str, Node], ...]) -> None:
        super().__init__(label)
        self.type = type(obj)
        self.parts = parts

    def check(self, value: Any, deep: bool = True) -> Mismatch | None:
        if type(value) is not self.type:
            return self.fail(value)
        for attr, node in self.parts:
            bad = node.check(_part(value, attr), deep)
            if bad is not None:
                return bad
        return None


_PARTS: dict[tuple[type, str], Any] = {}


def _part(obj: Any, attr: str) -> Any:
    """A field of a method, partial, staticmethod, classmethod or property, read through
    the type's own descriptor (these types are C types whose fields are read-only)."""
    t = type(obj)
    descr = _PARTS.get((t, attr))
    if descr is None:
        for klass in t.__mro__:
            if attr in klass.__dict__:
                descr = _PARTS[(t, attr)] = klass.__dict__[attr]
                break
    if descr is None:
        return MISSING
    return descr.__get__(obj, t)


def part(obj: Any, attr: str) -> Any:
    """Public form of :func:`_part` for the walker."""
    return _part(obj, attr)


class Jitted(Node):
    """A ``jax.jit``-wrapped function: this very object (its options and compiled code are
    its own), and the function it wraps, whose code and reads the next trace runs."""

    __slots__ = ("ident", "wrapped")

    def __init__(self, label: str, obj: Any, wrapped: Node) -> None:
        super().__init__(label)
        self.ident = Identity(label, obj)
        self.wrapped = wrapped

    def check(self, value: Any, deep: bool = True) -> Mismatch | None:
        bad = self.ident.check(value, deep)
        if bad is not None:
            return bad
        inner = object.__getattribute__(value, "__dict__").get("__wrapped__", MISSING)
        return self.wrapped.check(inner, deep)


class Method(Wrapped):
    """A bound method (``model.loss``): the function and the object it is bound to."""

    __slots__ = ()

    def __init__(self, label: str, obj: MethodType, func: Node, self_: Node) -> None:
        super().__init__(label, obj, (("__func__", func), ("__self__", self_)))


class Unreadable(Node):
    """A value whose reading raised at build time: anything readable now is a change."""

    __slots__ = ()

    def check(self, value: Any, deep: bool = True) -> Mismatch | None:
        return None if value is MISSING else self.fail(value)


class Cell(Node):
    """One closure cell of a function: labelled by the variable it holds."""

    __slots__ = ("inner",)

    def __init__(self, label: str, inner: Node) -> None:
        super().__init__(label)
        self.inner = inner

    def check(self, value: Any, deep: bool = True) -> Mismatch | None:
        bad = self.inner.check(value, deep)
        if bad is not None and bad.subject == self.inner.label:
            return Mismatch(self.label, ChangeKind.CLOSURE_CHANGED)
        return bad


class Like(Node):
    """A differentiated argument: a tape replays any value of the same kind, the part of
    the cache key it makes (``keys.arg_signature``: its type; shape and dtype for an array)."""

    __slots__ = ("sig",)

    def __init__(self, label: str, value: Any) -> None:
        super().__init__(label)
        self.sig = arg_signature(value)

    def check(self, value: Any, deep: bool = True) -> Mismatch | None:
        if value is MISSING:
            return Mismatch(self.label, ChangeKind.DELETED)
        if arg_signature(value) != self.sig:
            return Mismatch(self.label, ChangeKind.RESHAPED)
        return None


class Arity(Node):
    """How many positional arguments a call passes, and which keywords, in their order
    (``**kw`` iterates in the order they were passed)."""

    __slots__ = ("count", "keywords")

    def __init__(self, label: str, count: int, keywords: tuple[str, ...]) -> None:
        super().__init__(label)
        self.count = count
        self.keywords = tuple(keywords)

    def check(self, value: Any, deep: bool = True) -> Mismatch | None:
        args, kwargs = value
        if len(args) != self.count or tuple(kwargs) != self.keywords:
            return Mismatch(self.label, ChangeKind.RESHAPED)
        return None
