"""Record a tape: run a function once under autograd's tracer with our own node type.

Every primitive applied to a traced value becomes an :class:`Op` (function, argument
values, which arguments came from earlier slots, output value). Values that leave the
traced world without a gradient -- comparisons and other non-differentiable primitives,
``bool()`` of a box -- become *guards*: on replay they are recomputed and must equal what
the trace saw, or the tape is not valid for these inputs.

Slot 0 is the differentiated argument (autograd's ``x``); slots ``1..`` the other float
arguments, boxed too so that whatever the function computes from them is replayed
rather than baked in.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import autograd.numpy as anp
import numpy as np
from autograd import builtins as abuiltins
from autograd.core import VJPNode
from autograd.tracer import Box, Node, new_box, notrace_primitives, trace_stack

# Non-differentiable primitives whose result depends only on shapes and dtypes, which
# the cache key already fixes: no guard needed.
_STATIC_NOTRACE = {
    anp.ndim,
    anp.shape,
    anp.size,
    anp.result_type,
    anp.iscomplexobj,
    anp.isscalar,
    anp.zeros_like,
    anp.ones_like,
    anp.empty_like,
}

_SKIP_DIRS = tuple(
    os.path.dirname(m.__file__ or "") + os.sep
    for m in (sys.modules["autograd"], np, sys.modules[__name__.rsplit(".", 1)[0]])
)


class Unsupported(Exception):
    """The tape cannot represent this function; plain autograd must run it."""


@dataclass(slots=True)
class Op:
    """One primitive call: ``value = fun(*args, **kwargs)``; ``parents[pos]`` is the slot
    that argument position ``pos`` reads. A guard op is recomputed and compared."""

    slot: int
    fun: Any
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    parents: dict[int, int]
    value: Any
    guard: bool = False
    where: str = ""


@dataclass(slots=True)
class BoolGuard:
    """``bool(slot)`` was taken by Python code and gave ``expected``."""

    slot: int
    expected: bool
    where: str = ""


@dataclass
class Leaf:
    """A non-differentiated argument. ``how``: "box" (a slot, replayed live), "value"
    (guarded by equality), "identity" (guarded by ``is``), "static" (fixed by the key)."""

    slot: int
    path: str  # expression reading it from ``args``/``kwargs``
    value: Any
    how: str


@dataclass(eq=False)  # compared by identity: field-wise == would compare arrays
class Tape:
    """What one trace recorded."""

    root_path: str
    leaves: list[Leaf] = field(default_factory=list)
    values: list[Any] = field(default_factory=list)  # trace-time value per slot
    events: list[Op | BoolGuard] = field(default_factory=list)
    output: int = -1
    unsupported: str = ""
    trace_id: int = -1
    globals_read: set[int] = field(default_factory=set)  # ids of the function's data arrays


class TapeNode(Node):
    """Autograd node that appends each primitive call to a :class:`Tape`."""

    __slots__ = ["slot", "tape"]
    slot: int
    tape: Tape

    def __init__(
        self,
        value: Any,
        fun: Any,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        parent_argnums: tuple[int, ...],
        parents: tuple[TapeNode, ...],
    ) -> None:
        tape: Tape = parents[0].tape
        self.tape = tape
        self.slot = len(tape.values)
        tape.values.append(value)
        _check_constants(tape, args, kwargs, parent_argnums)
        pmap = {pos: p.slot for pos, p in zip(parent_argnums, parents, strict=True)}
        tape.events.append(Op(self.slot, fun, tuple(args), dict(kwargs), pmap, value))

    def initialize_root(self, tape: Tape, value: Any) -> None:
        self.tape = tape
        self.slot = len(tape.values)
        tape.values.append(value)


def _check_constants(
    tape: Tape, args: tuple[Any, ...], kwargs: dict[str, Any], boxed: tuple[int, ...]
) -> None:
    """Boxes hidden in constants (lists, object arrays, kwargs, outer traces) cannot be
    replayed: the tape would keep trace-time objects."""
    for pos, a in enumerate(args):
        t = type(a)
        if t in _SCALARS or pos in boxed or (t is np.ndarray and not a.dtype.hasobject):
            continue
        if _has_box(a):
            tape.unsupported = f"a traced value reaches {_name_of(a)} inside a constant argument"
    for v in kwargs.values():
        if _has_box(v):
            tape.unsupported = "a traced value is passed as a keyword argument of a primitive"


_SCALARS = {float, int, bool, str, type(None)}


def _has_box(a: Any, depth: int = 0) -> bool:
    t = type(a)
    if isinstance(a, Box):
        return True
    if depth < 3 and (t is list or t is tuple):
        return any(_has_box(v, depth + 1) for v in a)
    if depth < 3 and t is dict:
        return any(_has_box(v, depth + 1) for v in a.values())
    return t is np.ndarray and a.dtype.hasobject


def _name_of(f: Any) -> str:
    return getattr(f, "__name__", type(f).__name__)


def user_location(depth: int = 2) -> str:
    """``func line N`` of the nearest frame outside autograd, numpy and ipyrefresh."""
    frame: Any = sys._getframe(depth)
    while frame is not None:
        fname = frame.f_code.co_filename
        if not fname.startswith(_SKIP_DIRS):
            return f"{frame.f_code.co_name}, line {frame.f_lineno}"
        frame = frame.f_back
    return "?"


class _NotraceSpy:
    """Stands in for ``notrace_primitives[TapeNode]``: the primitive wrapper asks it
    whether to skip recording; for autograd's non-differentiable primitives we record a
    guard (reading the call from the wrapper's frame) and say yes."""

    def __contains__(self, f: Any) -> bool:
        if f not in notrace_primitives[VJPNode]:
            return False
        frame = sys._getframe(1)
        loc = frame.f_locals
        try:
            argvals, kwargs, boxed = loc["argvals"], loc["kwargs"], loc["boxed_args"]
            tape: Tape = boxed[0][1]._node.tape
        except (KeyError, IndexError, AttributeError):  # autograd internals changed
            _abort("cannot read autograd's primitive call (unknown autograd version)")
            return True
        if f in _STATIC_NOTRACE:
            return True
        if any(isinstance(a, Box) for a in argvals) or _has_box(kwargs):
            tape.unsupported = f"{_name_of(f)} mixes traced values of different traces"
            return True
        try:
            value = f.fun(*argvals, **kwargs)
        except Exception:  # the real call raises the same error a moment later
            return True
        pmap = {pos: b._node.slot for pos, b in boxed}
        tape.events.append(
            Op(-1, f, tuple(argvals), dict(kwargs), pmap, value, True, user_location(2))
        )
        return True


def _abort(reason: str) -> None:
    for tape in _ACTIVE:
        tape.unsupported = tape.unsupported or reason


_ACTIVE: list[Tape] = []

notrace_primitives[TapeNode] = _NotraceSpy()

_orig_bool = Box.__bool__


def _traced_bool(self: Box) -> bool:
    result = _orig_bool(self)
    node = self._node
    if type(node) is TapeNode:
        node.tape.events.append(BoolGuard(node.slot, result, user_location(2)))
    return result


Box.__bool__ = _traced_bool


# -- arguments --------------------------------------------------------------------------

_PLAIN = (int, bool, str, bytes, type(None))
_IDENTITY_TYPES = (type(len), type(lambda: 0), type(np), np.ufunc, type)


def _is_float_leaf(v: Any) -> bool:
    t = type(v)
    if t is float or t is complex:
        return True
    if t is np.ndarray:
        return v.dtype.kind in "fc"
    return isinstance(v, np.floating | np.complexfloating)


Plan = list[tuple[str, str, Any, str]]


def plan_leaves(
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    argnum: int | tuple[int, ...],
    box: bool,
    defaults: dict[str, tuple[str, Any]] | None = None,
) -> tuple[Plan, str]:
    """(trace path, replay path, value, how) for each non-differentiated leaf; how is
    "box", "value" (guard equality), "identity" (guard ``is``) or "static" (fixed by the
    cache key). ``defaults``: parameter -> (replay path, value) of defaults passed too."""
    nums = {argnum} if isinstance(argnum, int) else set(argnum)
    out: Plan = []

    def walk(v: Any, path: str, rpath: str, depth: int) -> None:
        t = type(v)
        if t in _PLAIN:
            out.append((path, rpath, v, "static"))
        elif _is_float_leaf(v):
            out.append((path, rpath, v, "box" if box else "value"))
        elif t is np.ndarray or isinstance(v, np.generic):
            if v.dtype.hasobject:
                raise Unsupported(f"argument {path} is an object array")
            out.append((path, rpath, v, "value"))
        elif (t is tuple or t is list) and depth < 4:
            for i, e in enumerate(v):
                walk(e, f"{path}[{i}]", f"{rpath}[{i}]", depth + 1)
        elif t is dict and depth < 4:
            for k, e in v.items():
                walk(e, f"{path}[{k!r}]", f"{rpath}[{k!r}]", depth + 1)
        elif isinstance(v, Box):
            raise Unsupported("called inside another autograd trace (arguments are boxes)")
        elif isinstance(v, _IDENTITY_TYPES):
            out.append((path, rpath, v, "identity"))
        else:
            raise Unsupported(f"argument {path} of type {t.__name__} cannot be replayed")

    for i, a in enumerate(args):
        if i not in nums:
            walk(a, f"args[{i}]", f"args[{i}]", 0)
    for k, a in kwargs.items():
        walk(a, f"kwargs[{k!r}]", f"kwargs[{k!r}]", 0)
    for k, (rpath, a) in (defaults or {}).items():
        walk(a, f"kwargs[{k!r}]", rpath, 0)
    root = (
        f"args[{argnum}]"
        if isinstance(argnum, int)
        else "(" + "".join(f"args[{i}], " for i in argnum) + ")"
    )
    return out, root


def _holds_float(v: Any, depth: int = 0) -> bool:
    t = type(v)
    if (t is tuple or t is list) and depth < 4:
        return any(_holds_float(e, depth + 1) for e in v)
    if t is dict and depth < 4:
        return any(_holds_float(e, depth + 1) for e in v.values())
    return _is_float_leaf(v)


def live_defaults(fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    """Parameters left to their defaults whose default holds float data: the trace
    passes them explicitly (boxed), and a replay reads the default as it is then, so
    ``def h(x, scale=W)`` sees ``W[0] = 5.0``. Maps name -> (replay path, value)."""
    code = getattr(fn, "__code__", None)
    if code is None or not callable(fn):
        return {}
    out: dict[str, Any] = {}
    npos = code.co_argcount
    defs = getattr(fn, "__defaults__", None) or ()
    first = npos - len(defs)
    for i in range(max(len(args), first, code.co_posonlyargcount), npos):
        name = code.co_varnames[i]
        if name not in kwargs and _holds_float(defs[i - first]):
            out[name] = (f"fn.__defaults__[{i - first}]", defs[i - first])
    kwdefs = getattr(fn, "__kwdefaults__", None) or {}
    for name in code.co_varnames[npos : npos + code.co_kwonlyargcount]:
        if name not in kwargs and name in kwdefs and _holds_float(kwdefs[name]):
            out[name] = (f"fn.__kwdefaults__[{name!r}]", kwdefs[name])
    return out


def _data_arrays(fn: Any) -> set[int]:
    """ids of the arrays bound in ``fn``'s globals and closure (read live on replay)."""
    found: set[int] = set()
    code = getattr(fn, "__code__", None)
    globs = getattr(fn, "__globals__", None)
    if code is not None and type(globs) is dict:
        for name in code.co_names:
            v = globs.get(name)
            if type(v) is np.ndarray:
                found.add(id(v))
    for cell in getattr(fn, "__closure__", None) or ():
        try:
            v = cell.cell_contents
        except ValueError:
            continue
        if type(v) is np.ndarray:
            found.add(id(v))
    return found


def _set_path(args: list[Any], kwargs: dict[str, Any], path: str, value: Any) -> None:
    """Replace the leaf at ``path`` (as made by plan_leaves) in mutable copies."""
    ns = {"args": args, "kwargs": kwargs}
    head, _, last = path.rpartition("[")
    # Paths are generated by us, never user text; compiled under our own file name so that
    # the call recorder does not take them for the user's code.
    container = eval(compile(head, "<ipyrefresh path>", "eval"), {}, ns)
    key = eval(compile(last[:-1], "<ipyrefresh path>", "eval"), {}, {})
    container[key] = value


def _thaw(v: Any) -> Any:
    t = type(v)
    if t is tuple or t is list:
        return [_thaw(e) for e in v]
    if t is dict:
        return {k: _thaw(e) for k, e in v.items()}
    return v


def _refreeze(orig: Any, v: Any) -> Any:
    t = type(orig)
    if t is tuple:
        return tuple(_refreeze(o, e) for o, e in zip(orig, v, strict=True))
    if t is list:
        return [_refreeze(o, e) for o, e in zip(orig, v, strict=True)]
    if t is dict:
        return {k: _refreeze(orig[k], v[k]) for k in orig}
    return v


def record(
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    argnum: int | tuple[int, ...],
    box_leaves: bool = True,
    owner: Any = None,
) -> tuple[Tape, Any]:
    """Run ``fn`` once under the tracer; return the tape and the (raw) output value.
    ``owner`` is the user's function whose global and closure arrays the tape reads live."""
    owner = owner if owner is not None else fn
    defaults = live_defaults(owner, args, kwargs) if box_leaves else {}
    plan, root_path = plan_leaves(args, kwargs, argnum, box_leaves, defaults)
    tape = Tape(root_path)
    tape.globals_read = _data_arrays(owner)
    allkw = {**kwargs, **{k: v for k, (_, v) in defaults.items()}}
    x = args[argnum] if isinstance(argnum, int) else tuple(args[i] for i in argnum)
    if not (_is_float_leaf(x) or type(x) in (tuple, list, dict)):
        raise Unsupported(f"cannot differentiate with respect to a {type(x).__name__}")
    try:
        _ACTIVE.append(tape)
        with trace_stack.new_trace() as t:
            tape.trace_id = t
            root = TapeNode.new_root(tape, x)
            xbox = new_box(x, t, root)
            targs = [_thaw(a) for a in args]
            tkw = {k: _thaw(v) for k, v in allkw.items()}
            for path, rpath, value, how in plan:
                slot = -1
                if how == "box":
                    node = TapeNode.new_root(tape, value)
                    slot = node.slot
                    _set_path(targs, tkw, path, new_box(value, t, node))
                tape.leaves.append(Leaf(slot, rpath, value, how))
            fargs = [_refreeze(o, v) for o, v in zip(args, targs, strict=True)]
            fkw = {k: _refreeze(allkw[k], v) for k, v in tkw.items()}
            if isinstance(argnum, int):
                fargs[argnum] = xbox
            else:
                for i, xi in zip(argnum, xbox, strict=False):
                    fargs[i] = xi
            out = fn(*fargs, **fkw)
    finally:
        # By identity, and tolerant of a stale tape left by an interrupted trace.
        for i, active in enumerate(_ACTIVE):
            if active is tape:
                del _ACTIVE[i]
                break
    if isinstance(out, Box) and out._trace == tape.trace_id and type(out._node) is TapeNode:
        tape.output = out._node.slot
        return tape, out._value
    if _has_box(out):
        raise Unsupported("the output holds traced values in a container")
    raise Unsupported("the output does not depend on the input")


_ = abuiltins  # SequenceBox and DictBox must be registered before tracing
