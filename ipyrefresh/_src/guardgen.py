"""Compile a guard into one straight-line Python function (TorchDynamo's model).

The nodes of ``nodes.py`` define what each check means, and can check themselves
(``node.check``). For the call path, the checks of a guard are emitted as straight-line
code instead, so that a cache hit costs a few dictionary reads and identity compares per
value rather than a method call per node: identity (through a weak reference), scalar
values, a dict's length, keys and values, an array's layout and digest, a function's
code, defaults, closure cells, attributes and gradient rule. Node kinds with no emitter
here, and large containers, are checked by calling ``node.check`` from the generated
code. Both give the same verdict (the scenario suites check that they
do before every call: ``guards_agree`` in ``tests/scenario_helpers.py``).

The generated function takes ``(fn, args, kwargs, deep)`` and returns ``None`` when
everything holds, else the :class:`~ipyrefresh._src.nodes.Mismatch` of the first check
that failed (marked ``arg`` when it is about an argument).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import numpy as np
from autograd.core import primitive_jvps, primitive_vjps

from .changes import ChangeKind
from .code import GENERATED_FILE
from .digest import array_digest
from .guard import Check
from .identity import SEEN, UNSEEN, IdentityCheck
from .keys import arg_signature
from .nodes import (
    GONE,
    MISSING,
    NOTRACE,
    Absent,
    Arity,
    Array,
    Cell,
    Class,
    ClassDict,
    Function,
    Identity,
    Instance,
    Like,
    Map,
    Mismatch,
    Module,
    Node,
    Primitive,
    Related,
    Scalar,
    ScalarSeq,
    Seq,
    class_keys,
    class_names,
    iterate,
    maxlen,
    same_items,
    same_scalar,
    same_scalars,
    seen_items,
)
from .readers import ArgReader, CallReader, FixedReader, NameReader, Reader, TargetReader

#: Containers up to this size are unrolled; larger ones call their node's check.
_UNROLL = 24
_names = itertools.count()


def _cell(cell: Any) -> Any:
    try:
        return cell.cell_contents
    except ValueError:
        return MISSING


class _Emitter:
    def __init__(self) -> None:
        self.ns: dict[str, Any] = {
            "MISSING": MISSING,
            "GONE": GONE,
            "_dget": dict.get,
            "_iterate": iterate,
            "_maxlen": maxlen,
            "_tuple": tuple,
            "_type": type,
            "_len": len,
            "_dict_len": dict.__len__,
            "_same": same_scalar,
            "_same_all": same_scalars,
            "_same_items": same_items,
            "_seen_items": seen_items,
            "_SEEN": SEEN,
            "_UNSEEN": UNSEEN,
            "_digest": array_digest,
            "_cell": _cell,
            "_vjps": primitive_vjps.get,
            "_jvps": primitive_jvps.get,
            "_NOTRACE": NOTRACE,
            "_ndarray": np.ndarray,
            "_signature": arg_signature,
            "_keys": tuple,
            "_class_keys": class_keys,
            "_mro": type.__dict__["__mro__"].__get__,
            "_class_names": class_names,
            "_class_dict": type.__dict__["__dict__"].__get__,
        }
        self.lines: list[str] = []
        self._k = itertools.count()
        self._v = itertools.count()
        self._consts: dict[int, str] = {}
        self._keep: list[Any] = []

    def const(self, value: Any) -> str:
        name = self._consts.get(id(value))
        if name is None:
            name = self._consts[id(value)] = f"K{next(self._k)}"
            self.ns[name] = value
            self._keep.append(value)
        return name

    def var(self) -> str:
        return f"v{next(self._v)}"

    def line(self, text: str, indent: int = 1) -> None:
        self.lines.append("    " * indent + text)

    def fail(self, cond: str, mismatch: str) -> None:
        self.line(f"if {cond}: return {mismatch}")

    def mismatch(self, node: Node, kind: ChangeKind, arg: bool) -> str:
        return self.mismatch_at(node.label, kind, arg)

    def mismatch_at(self, subject: str, kind: ChangeKind, arg: bool) -> str:
        return self.const(Mismatch(subject, kind, arg))

    def node_fail(self, node: Node, v: str, arg: bool, kind: ChangeKind | None = None) -> str:
        """The mismatch ``node.fail(v, kind)`` would give (DELETED for MISSING)."""
        deleted = self.mismatch(node, ChangeKind.DELETED, arg)
        other = self.mismatch(node, kind or ChangeKind.REBOUND, arg)
        return f"({deleted} if {v} is MISSING else {other})"

    # -- nodes --------------------------------------------------------------------------
    def emit(self, node: Node, v: str, arg: bool) -> None:
        emitter = _EMITTERS.get(type(node))
        if emitter is None:
            self.delegate(node, v, arg)
        else:
            emitter(self, node, v, arg)

    def delegate(self, node: Node, v: str, arg: bool) -> None:
        """Call the node's own check; arguments' mismatches are marked as such."""
        n = self.const(node)
        bad = self.var()
        if arg:
            self.line(f"{bad} = {n}.check({v}, deep)")
            self.line(f"if {bad} is not None: return {self.const(_mark_arg)}({bad})")
        else:
            self.fail(f"({bad} := {n}.check({v}, deep)) is not None", bad)


def _mark_arg(bad: Mismatch) -> Mismatch:
    return Mismatch(bad.subject, bad.kind, True)


def _absent(e: _Emitter, node: Node, v: str, arg: bool) -> None:
    e.fail(f"{v} is not MISSING", e.mismatch(node, ChangeKind.DEFINED, arg))


def _scalar(e: _Emitter, node: Node, v: str, arg: bool) -> None:
    assert isinstance(node, Scalar)
    e.fail(_differs(e, node, v), e.node_fail(node, v, arg))
    _seen(e, node.slot, v)


def _differs(e: _Emitter, node: Scalar, v: str) -> str:
    k = e.const(node.value)
    return f"{v} is not {k}" if node.exact else f"{v} is not {k} and not _same({v}, {k})"


def _seen(e: _Emitter, slot: int | None, v: str) -> None:
    """The object found goes in its slot of the identity relation (see ``identity.py``)."""
    if slot is not None:
        e.line(f"S[{slot}] = {v}")


def _identity(e: _Emitter, node: Node, v: str, arg: bool) -> None:
    assert isinstance(node, Identity)
    e.fail(f"{v} is not {e.const(node.ref)}()", e.node_fail(node, v, arg, node.kind))


def _module(e: _Emitter, node: Node, v: str, arg: bool) -> None:
    assert isinstance(node, Module)
    e.fail(f"{v} is not {e.const(node.ref)}()", e.node_fail(node, v, arg, ChangeKind.REBOUND))
    changed = e.mismatch(node, ChangeKind.CLASS_CHANGED, arg)
    e.fail(f"_type({v}) is not {e.const(node.cls)}", changed)


def _primitive(e: _Emitter, node: Node, v: str, arg: bool) -> None:
    assert isinstance(node, Primitive)
    e.fail(f"{v} is not {e.const(node.ref)}()", e.node_fail(node, v, arg, ChangeKind.REDEFINED))
    _rules(e, node, node.rule, node.jvp, v, arg)
    notrace = e.const(node.notrace)
    e.fail(f"({v} in _NOTRACE) is not {notrace}", e.mismatch(node, ChangeKind.RULE_CHANGED, arg))
    if node.code is not None:
        same = f"{e.const(node)}.same_code({v})"
        e.fail(f"not {same}", e.mismatch(node, ChangeKind.CODE_CHANGED, arg))


def _rules(e: _Emitter, node: Node, vjp: Any, jvp: Any, v: str, arg: bool) -> None:
    """The gradient rules autograd has registered for ``v``: the same objects."""
    changed = e.mismatch(node, ChangeKind.RULE_CHANGED, arg)
    e.fail(f"_vjps({v}, MISSING) is not {e.const(vjp)}", changed)
    e.fail(f"_jvps({v}, MISSING) is not {e.const(jvp)}", changed)


def _function(e: _Emitter, node: Node, v: str, arg: bool) -> None:
    assert isinstance(node, Function)
    e.fail(f"{v} is not {e.const(node.ref)}()", e.node_fail(node, v, arg, ChangeKind.REDEFINED))
    code = e.const(node.code)
    e.fail(f"{v}.__code__ is not {code}", e.mismatch(node, ChangeKind.CODE_CHANGED, arg))
    names = [e.const(n) for n in node.names]
    attributes = e.mismatch(node, ChangeKind.ATTRIBUTES_CHANGED, arg)
    e.fail(
        f"{v}.__name__ is not {names[0]} or {v}.__qualname__ is not {names[1]} or "
        f"{v}.__module__ is not {names[2]} or {v}.__doc__ is not {names[3]}",
        attributes,
    )
    e.fail(f"not {e.const(node.annotations)}.holds({v}.__annotations__)", attributes)
    for attr, part in (("__defaults__", node.defaults), ("__kwdefaults__", node.kwdefaults)):
        if part is not None:
            w = e.var()
            e.line(f"{w} = {v}.{attr}")
            e.emit(part, w, arg)
    if node.cells:
        cl = e.var()
        e.line(f"{cl} = {v}.__closure__")
        for i, cell in enumerate(node.cells):
            w = e.var()
            e.line(f"{w} = _cell({cl}[{i}])")
            e.emit(cell, w, arg)
    if node.attrs is not None:
        w = e.var()
        e.line(f"{w} = {v}.__dict__")
        e.emit(node.attrs, w, arg)
    _rules(e, node, node.rule, node.jvp, v, arg)


def _cellnode(e: _Emitter, node: Node, v: str, arg: bool) -> None:
    """A closure cell holding a plain value: "h's closed-over a closed-over value changed"."""
    assert isinstance(node, Cell)
    inner, changed = node.inner, e.mismatch(node, ChangeKind.CLOSURE_CHANGED, arg)
    if type(inner) is Scalar:
        e.fail(_differs(e, inner, v), changed)
        _seen(e, inner.slot, v)
    elif type(inner) is Identity:
        e.fail(f"{v} is not {e.const(inner.ref)}()", changed)
    elif type(inner) is Absent:
        e.fail(f"{v} is not MISSING", changed)
    else:
        e.delegate(node, v, arg)


def _array(e: _Emitter, node: Node, v: str, arg: bool) -> None:
    assert isinstance(node, Array)
    _same_object(e, node, v, arg, e.const(node.type))
    shape, dtype, strides = e.const(node.shape), e.const(node.dtype), e.const(node.strides)
    e.fail(
        f"{v}.shape != {shape} or {v}.dtype != {dtype} or {v}.strides != {strides}",
        e.mismatch(node, ChangeKind.RESHAPED, arg),
    )
    e.fail(f"deep and _digest({v}) != {node.digest!r}", e.mismatch(node, ChangeKind.MUTATED, arg))


def _same_object(e: _Emitter, node: Array | Instance, v: str, arg: bool, cls: str) -> None:
    """The very object (where a weak reference can tell it), then of the class ``cls``:
    the same object given another class in place (``o.__class__ = B``) is a class
    change, as the nodes' own checks say."""
    other_class = f"_type({v}) is not {cls}"
    if node.ref is None:
        e.fail(other_class, e.node_fail(node, v, arg))
    else:
        e.fail(f"{v} is not {e.const(node.ref)}()", e.node_fail(node, v, arg))
        e.fail(other_class, e.mismatch(node, ChangeKind.CLASS_CHANGED, arg))


def _scalar_seq(e: _Emitter, node: Node, v: str, arg: bool) -> None:
    assert isinstance(node, ScalarSeq)
    t, values = e.const(node.type), e.const(node.values)
    e.fail(f"_type({v}) is not {t}", e.node_fail(node, v, arg))
    if node.exact is not None:
        e.fail(f"{v} is not {e.const(node.exact)}", e.node_fail(node, v, arg))
    _maxlen(e, node, v, arg)
    items = v if node.type is tuple else f"_tuple(_iterate({v}))"
    changed = e.mismatch(node, ChangeKind.MUTATED, arg)
    e.fail(f"{v} is not {values} and not _same_all({items}, {values})", changed)
    if node.exact_items:
        positions = e.const(node.exact_items)
        e.fail(f"not _same_items({items}, {values}, {positions})", changed)
    _seen(e, node.slot, v)
    if node.item_slots:
        e.line(f"_seen_items(S, {items}, {e.const(node.item_slots)})")


def _maxlen(e: _Emitter, node: Seq | ScalarSeq, v: str, arg: bool) -> None:
    if node.maxlen is not MISSING:
        limit = e.const(node.maxlen)
        e.fail(f"_maxlen({v}) != {limit}", e.mismatch(node, ChangeKind.MUTATED, arg))


def _seq(e: _Emitter, node: Node, v: str, arg: bool) -> None:
    assert isinstance(node, Seq)
    if len(node.items) > _UNROLL:
        return e.delegate(node, v, arg)
    e.fail(f"_type({v}) is not {e.const(node.type)}", e.node_fail(node, v, arg))
    _maxlen(e, node, v, arg)
    items = e.var()
    e.line(f"{items} = _tuple(_iterate({v}))")
    e.fail(f"_len({items}) != {len(node.items)}", e.mismatch(node, ChangeKind.MUTATED, arg))
    for i, item in enumerate(node.items):
        w = e.var()
        e.line(f"{w} = {items}[{i}]")
        e.emit(item, w, arg)
    return None


def _map(e: _Emitter, node: Node, v: str, arg: bool) -> None:
    assert isinstance(node, Map)
    if len(node.keys) > _UNROLL or node.default is not None or type(node) is not Map:
        return e.delegate(node, v, arg)
    e.fail(f"_type({v}) is not {e.const(node.type)}", e.node_fail(node, v, arg))
    changed = e.mismatch(node, ChangeKind.MUTATED, arg)
    if issubclass(node.type, dict):  # (dict's own length: a subclass's __len__ is user code)
        e.fail(f"_dict_len({v}) != {len(node.keys)}", changed)
    values = []
    for key in node.keys:
        w = e.var()
        e.line(f"{w} = _dget({v}, {e.const(key)}, MISSING)")
        e.fail(f"{w} is MISSING", changed)
        values.append(w)
    # Every key is there and there are no others; in order, and of the same types and
    # signs (a lookup finds True for 1, and -0.0 for 0.0). (Empty: the length said it.)
    if node.keys:
        e.fail(f"not _same_all(_tuple(_iterate({v})), {e.const(node.keys)})", changed)
    for key_node, w in zip(node.values, values, strict=True):
        e.emit(key_node, w, arg)
    return None


def _instance(e: _Emitter, node: Node, v: str, arg: bool) -> None:
    assert isinstance(node, Instance)
    if node.slots:
        return e.delegate(node, v, arg)
    _same_object(e, node, v, arg, f"{e.const(node.cls)}()")
    if node.attrs is not None:
        w = e.var()
        e.line(f"{w} = {e.const(node.dict_descr)}.__get__({v})")
        e.emit(node.attrs, w, arg)
    return None


def _class(e: _Emitter, node: Node, v: str, arg: bool) -> None:
    """A user class: the same object, the same MRO (by identity), each user class's
    namespace."""
    assert isinstance(node, Class)
    e.fail(f"{v} is not {e.const(node.ref)}()", e.node_fail(node, v, arg, ChangeKind.REDEFINED))
    mro = e.var()
    e.line(f"{mro} = _mro({v})")
    same = " or ".join(
        [f"_len({mro}) != {len(node.mro)}"]
        + [f"{mro}[{i}] is not {e.const(ref)}()" for i, ref in enumerate(node.mro)]
    )
    e.fail(same, e.mismatch_at(node.label, ChangeKind.CLASS_CHANGED, arg))
    names = e.const(node.names)
    e.fail(
        f"_class_names({v}) != {names}",
        e.mismatch_at(node.label, ChangeKind.ATTRIBUTES_CHANGED, arg),
    )
    for ref, dict_node in node.dicts:
        w = e.var()
        e.line(f"{w} = _class_dict({e.const(ref)}())")
        e.emit(dict_node, w, arg)


def _related(e: _Emitter, node: Node, v: str, arg: bool) -> None:
    assert isinstance(node, Related)
    e.emit(node.inner, v, arg)
    _seen(e, node.slot, v)


def _class_dict(e: _Emitter, node: Node, v: str, arg: bool) -> None:
    assert isinstance(node, ClassDict)
    if len(node.keys) > _UNROLL:
        return e.delegate(node, v, arg)
    subject = node.label.removesuffix(".__dict__")
    changed = e.mismatch_at(subject, ChangeKind.ATTRIBUTES_CHANGED, arg)
    e.fail(f"_class_keys({v}) != {e.const(node.keys)}", changed)
    for key, value_node in zip(node.keys, node.values, strict=True):
        w = e.var()
        e.line(f"{w} = {v}[{e.const(key)}]")
        e.emit(value_node, w, arg)
    return None


_EMITTERS: dict[type, Callable[[_Emitter, Node, str, bool], None]] = {
    Absent: _absent,
    Scalar: _scalar,
    Identity: _identity,
    Module: _module,
    Primitive: _primitive,
    Function: _function,
    Cell: _cellnode,
    Array: _array,
    ScalarSeq: _scalar_seq,
    Seq: _seq,
    Map: _map,
    Instance: _instance,
    Class: _class,
    ClassDict: _class_dict,
    Related: _related,
}


def _like(e: _Emitter, node: Node, v: str, arg: bool) -> None:
    assert isinstance(node, Like)
    sig, bad = node.sig, e.node_fail(node, v, arg, ChangeKind.RESHAPED)
    if type(sig) is tuple and len(sig) == 2 and type(sig[0]) is tuple:  # an ndarray's
        e.fail(
            f"_type({v}) is not _ndarray or {v}.shape != {sig[0]!r} or {v}.dtype.str != {sig[1]!r}",
            bad,
        )
    elif sig in ("float", "int", "complex"):
        e.fail(f"_type({v}) is not {sig}", bad)
    else:
        e.fail(f"_signature({v}) != {e.const(sig)}", bad)


def _arity(e: _Emitter, node: Node, v: str, arg: bool) -> None:
    assert isinstance(node, Arity)
    bad = e.mismatch(node, ChangeKind.RESHAPED, arg)
    keywords = f"_keys({v}[1]) != {node.keywords!r}" if node.keywords else f"{v}[1]"
    e.fail(f"_len({v}[0]) != {node.count} or {keywords}", bad)


_EMITTERS[Like] = _like
_EMITTERS[Arity] = _arity


def _read(e: _Emitter, reader: Reader) -> str:
    v = e.var()
    if type(reader) is TargetReader:
        e.line(f"{v} = fn")
    elif type(reader) is NameReader:
        e.line(f"{v} = _dget({e.const(reader.ns)}, {reader.name!r}, MISSING)")
    elif type(reader) is ArgReader:
        key = reader.key
        if type(key) is int:
            e.line(f"{v} = args[{key}] if {key} < _len(args) else MISSING")
        else:
            e.line(f"{v} = _dget(kwargs, {key!r}, MISSING)")
    elif type(reader) is CallReader:
        e.line(f"{v} = (args, kwargs)")
    elif type(reader) is FixedReader:
        e.line(f"{v} = {e.const(reader.get)}()")
        e.line(f"if {v} is None or {v} is GONE: {v} = MISSING")
    else:
        e.line(f"{v} = {e.const(reader)}.read(fn, args, kwargs)")
    return v


def compile_guard(
    env: list[tuple[Reader, Node]],
    args: list[tuple[Reader, Node]],
    identity: tuple[IdentityCheck, IdentityCheck] | None = None,
) -> tuple[Check, Check]:
    """Two functions ``(fn, args, kwargs, deep) -> Mismatch | None``: the code and data
    (``env``), and everything (``env`` then the arguments); each ends with its check of
    the identity relation, if there is one."""
    e = _Emitter()
    for reader, node in env:
        e.emit(node, _read(e, reader), False)
    env_lines = list(e.lines)
    for reader, node in args:
        e.emit(node, _read(e, reader), True)
    # The same two names in every guard (each has a namespace of its own): compiled names
    # are interned, and on Python 3.12+ interned strings live forever.
    if identity is None:
        env_body, full_body = _body(env_lines, "None"), _body(e.lines, "None")
    else:
        size = 1 + max(identity[1].slots, default=-1)
        env_body = _with_relation(env_lines, e.const(identity[0]), size)
        full_body = _with_relation(e.lines, e.const(identity[1]), size)
    source = (
        "def env(fn, args, kwargs, deep):\n"
        + env_body
        + "def full(fn, args, kwargs, deep):\n"
        + full_body
    )
    exec(compile(source, GENERATED_FILE, "exec"), e.ns)
    # (out of the namespace they hold as globals: no cycle keeps what they hold alive)
    env_check, full_check = e.ns.pop("env"), e.ns.pop("full")
    n = next(_names)
    env_check.__qualname__, full_check.__qualname__ = f"env_{n}", f"full_{n}"
    full_check.source = source  # for reading it when debugging: guard.compiled()[1].source
    return env_check, full_check


def _body(lines: list[str], result: str) -> str:
    return "".join(line + "\n" for line in lines) + f"    return {result}\n"


def _with_relation(lines: list[str], identity: str, size: int) -> str:
    """The checks, each node with a slot putting the object it found in ``S`` (nodes
    checked by their own ``check`` find it through ``_SEEN``), then the relation's check.
    (A check may run inside another's: resolving a target can run a property that calls
    a derivative; the outer one's list is put back.)"""
    return (
        f"    outer, S = _SEEN.objs, [_UNSEEN] * {size}\n"
        "    _SEEN.objs = S\n"
        "    try:\n"
        + "".join("    " + line + "\n" for line in lines)
        + f"        return {identity}(S)\n"
        "    finally:\n"
        "        _SEEN.objs = outer\n"
    )
