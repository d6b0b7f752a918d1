"""Record a tape while autograd computes the first answer.

The first call of a derivative runs autograd's own machinery — its tracer, its
``VJPNode`` (our :class:`TapeNode` subclasses it and changes nothing of what it
computes) and its ``backward_pass`` — so the first answer is autograd's, bit for bit,
from one run of the user's code. While it runs, every primitive applied to a traced
value is appended to a :class:`Tape`: the function, its arguments, which of them came
from earlier results, and the value. Values that leave the traced world without a
gradient become *guards*, checked again on replay: comparisons and other
non-differentiable primitives (``OpGuard``) and ``bool()`` of a traced value
(``BoolGuard``). Only the differentiated arguments are traced, as in autograd.
"""

from __future__ import annotations

import array
import collections
import contextlib
import os
import sys
import warnings
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any

import autograd
import numpy as np
from autograd import builtins as abuiltins
from autograd.builtins import container_take
from autograd.core import VJPNode, backward_pass, vspace
from autograd.numpy.numpy_boxes import ArrayBox
from autograd.tracer import Box, trace
from autograd.wrap_util import unary_to_nary

from ...prints import CONSTANTS, Unprintable, attributes, print_of
from ..base import Transform

_SKIP_DIRS = tuple(
    os.path.dirname(m.__file__ or "") + os.sep
    for m in (sys.modules["autograd"], np, sys.modules[__name__.rsplit(".", 3)[0]])
)


#: autograd's indexing primitives (of a traced array; of a traced list, tuple or dict).
_ARRAY_GETITEM: Any = ArrayBox.__getitem__


class Unsupported(Exception):
    """The tape cannot represent this function; its fallback must run it."""


@dataclass(slots=True, eq=False)
class Op:
    """One primitive call: ``value = fun(*args, **kwargs)``; the arguments at positions
    ``argnums`` were the traced values of slots ``parents`` (autograd's parent order)."""

    slot: int
    fun: Any
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    argnums: tuple[int, ...]
    parents: tuple[int, ...]
    value: Any


@dataclass(slots=True, eq=False)
class OpGuard:
    """A non-differentiable primitive on traced values; its result must not change."""

    fun: Any
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    argnums: tuple[int, ...]
    parents: tuple[int, ...]
    value: Any
    where: str


@dataclass(slots=True, eq=False)
class BoolGuard:
    """``bool()`` of a traced value was taken by Python code and gave ``expected``."""

    slot: int
    expected: bool
    where: str


Event = Op | OpGuard | BoolGuard


@dataclass(eq=False)  # compared by identity: field-wise == would compare arrays
class Tape:
    """What one trace recorded. Slot 0 is the differentiated argument."""

    values: list[Any] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    output: int = -1
    unsupported: str = ""
    #: id of a constant array -> the tape's own copy (arrays sharing memory with an
    #: argument: the caller may change the argument after the call).
    owned: dict[int, Any] = field(default_factory=dict)
    #: Primitive calls on traced values whose result is not recorded yet (primitive,
    #: argument values, keywords): one left behind raised, and the function went on.
    pending: list[tuple[Any, Any, Any]] = field(default_factory=list)
    #: id -> (object, fingerprint at its first use) of the mutable constants the ops
    #: took: the tape keeps the objects, so a change after that use (by the function
    #: itself, or by the caller before the replay is generated) would replay other values.
    kept: dict[int, tuple[Any, Hashable]] = field(default_factory=dict)
    #: The differentiated argument's structure (types, lengths, keys, shapes) as traced.
    root: Hashable = None
    #: The effects the build's recording has met so far (its own list: it grows while the
    #: run goes on). One is enough for the build to run plain autograd.
    effects: list[str] = field(default_factory=list)

    def stopped(self) -> bool:
        """Nothing of this tape will replay (an effect, or a note of what a replay cannot
        do): the rest of the run is autograd's alone, recording and keeping nothing."""
        return bool(self.unsupported or self.effects)

    def keep_constants(self, args: Any, kwargs: dict[str, Any], boxed: tuple[int, ...]) -> None:
        """Fingerprint the mutable constants among a primitive's arguments (once each),
        before the primitive runs (a user primitive may change its workspace in place)."""
        for pos, a in enumerate(args):
            if pos not in boxed:
                self._keep(a)
        for a in kwargs.values():
            self._keep(a)

    def _keep(self, a: Any) -> None:
        t = type(a)
        if t in _SCALARS or t is float:  # (most constants: no attributes to look up)
            return
        if isinstance(a, tuple):  # (itself immutable: an index of arrays and slices)
            for v in tuple.__iter__(a):
                self._keep(v)
            return
        mutable = isinstance(a, _MUTABLE_CONSTANTS)
        if (mutable or attributes(a) is not None) and id(a) not in self.kept:
            with contextlib.suppress(Unprintable):  # (not checked: a list of objects)
                self.kept[id(a)] = (a, print_of(a, CONSTANTS))

    def changed(self) -> str:
        """What changed of what the tape kept since it was recorded ("" if nothing)."""
        for a, printed in self.kept.values():
            try:
                same = print_of(a, CONSTANTS) == printed
            except Unprintable:  # (a list that now holds an object)
                same = False
            if not same:
                return f"a {type(a).__name__} its ops used changed after that use"
        if self.values and structure(self.values[0]) != self.root:
            return "the differentiated argument changed its structure after the call"
        return ""

    def own_argument_arrays(self, arrays: list[Any]) -> None:
        """Copy, as they are now, the constants that may share memory with ``arrays``:
        the arguments' arrays, which the guard compares by contents, not identity (the
        caller may change one in place and pass an equal copy). By memory, not by
        ``.base``: a view of an argument that is itself a view (a minibatch
        ``data[0:3]``) has the data's owner for its base, not the argument."""
        if not arrays:
            return
        overlaps = np.may_share_memory
        for e in self.events:
            if isinstance(e, BoolGuard):
                continue
            boxed = set(e.argnums)
            for pos, a in enumerate(e.args):
                if pos in boxed:
                    continue
                for v in a if type(a) is tuple else (a,):  # (an index of arrays)
                    if type(v) is not np.ndarray or id(v) in self.owned:
                        continue
                    if any(overlaps(v, r) for r in arrays):
                        self.owned[id(v)] = copy_in_layout(v)

    def add(self, value: Any) -> int:
        self.values.append(value)
        return len(self.values) - 1

    def completed(self, fun: Any) -> None:
        """``fun``'s call returned. Calls above it on the stack never did: they raised,
        and the function caught the error."""
        pending = self.pending
        if not any(call[0] is fun for call in pending):
            return  # (not a call the hook saw begin)
        while True:
            call = pending.pop()
            if call[0] is fun:
                return
            self._raised(call)

    def finish(self) -> None:
        """The trace ended: calls that never completed raised errors the function caught;
        a constant changed after an op used it (a buffer refilled, a global changed and
        restored) leaves the tape one object for several values."""
        if self.stopped():
            self.pending.clear()  # (why those calls raised no longer matters)
            return
        while self.pending:
            self._raised(self.pending.pop())
        changed = self.changed()
        if changed:
            self.note("the function changes what it computed with: " + changed)

    def _raised(self, call: tuple[Any, Any, Any]) -> None:
        """A call that raised an error the function caught. autograd's own indexing of a
        traced array or container raising ``IndexError`` (the end of an iteration) or
        ``KeyError`` (a missing key) depends on the shapes and keys the cache key fixes
        and on an index the guard checks; any other error may depend on the values (a
        Cholesky factor, a singular matrix, numpy's error state, a user primitive's
        lookup of a key computed from ``x``): a replay of one run cannot stand for
        another. Only autograd's indexing runs again, to learn which error it raised (any
        other primitive's second run would repeat what it did: a print, an append)."""
        fun, argvals, kwargs = call
        if fun is _ARRAY_GETITEM or fun is container_take:
            try:
                with warnings.catch_warnings():  # (the user saw its warnings once already)
                    warnings.simplefilter("ignore")
                    fun.fun(*argvals, **kwargs)
            except (IndexError, KeyError):
                return
            except Exception:
                pass
        self.note(f"the function catches an error raised by {_name_of(fun)}")

    def note(self, reason: str) -> None:
        if not self.unsupported:
            self.unsupported = reason

    @property
    def ops(self) -> list[Op]:
        return [e for e in self.events if type(e) is Op]


def copy_in_layout(a: np.ndarray) -> np.ndarray:
    """A copy of ``a`` with its strides and its data's alignment: numpy and BLAS choose how
    to sum by the memory layout, and the replay must round as the traced run did."""
    itemsize = a.itemsize
    if a.size == 0 or itemsize == 0:
        empty: np.ndarray = a.copy(order="K")
        return empty
    low = sum((n - 1) * s for n, s in zip(a.shape, a.strides, strict=True) if s < 0)
    high = sum((n - 1) * s for n, s in zip(a.shape, a.strides, strict=True) if s > 0)
    span = high - low + itemsize
    buffer = np.empty(span + _ALIGN, np.uint8)
    # The first element at -low (+ shift) from the buffer's start, aligned as in ``a``.
    shift = (a.ctypes.data + low - buffer.ctypes.data) % _ALIGN
    out: np.ndarray = np.ndarray(
        a.shape, a.dtype, buffer=buffer, offset=shift - low, strides=a.strides
    )
    out[...] = a
    return out


_ALIGN = 64  # (a cache line: the widest alignment a SIMD loop or BLAS kernel looks at)


#: Constant arguments that may change in place after an op used them, subclasses included
#: (an OrderedDict, a user's dict class); tuples are looked into: an index ``(rows, cols)``.
_MUTABLE_CONSTANTS = (list, dict, collections.deque, array.array, bytearray, np.ndarray)
_SCALARS = frozenset({int, bool, str, bytes, type(None)})


def structure(value: Any, depth: int = 0) -> Hashable:
    """Types, lengths, keys, shapes and dtypes of a (nested) value, not its numbers."""
    t = type(value)
    if t is np.ndarray:
        return (t, value.shape, value.dtype.str)
    if depth < 8 and (t is list or t is tuple):
        return (t, tuple(structure(v, depth + 1) for v in value))
    if depth < 8 and t is dict:
        return (t, tuple((k, structure(v, depth + 1)) for k, v in value.items()))
    return (t,)


def arrays_in(values: Any, depth: int = 0) -> list[Any]:
    found = []
    for v in values:
        if type(v) is np.ndarray:
            found.append(v)
        elif type(v) in (list, tuple) and depth < 4:
            found += arrays_in(v, depth + 1)
        elif type(v) is dict and depth < 4:
            found += arrays_in(v.values(), depth + 1)
    return found


class TapeNode(VJPNode):
    """autograd's reverse-mode node, which also appends its primitive call to a tape."""

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
        super().__init__(value, fun, args, kwargs, parent_argnums, parents)
        tape = parents[0].tape
        self.tape = tape
        tape.completed(fun)
        if tape.unsupported or tape.effects:  # (tape.stopped(), inlined: every op runs this)
            # A 40,000-op simulation that prints first would otherwise record, check and
            # keep every op's value for nothing.
            self.slot = -1
            return
        self.slot = tape.add(value)
        _check_constants(tape, fun, args, kwargs, parent_argnums)
        tape.events.append(
            Op(
                self.slot,
                fun,
                tuple(args),
                dict(kwargs),
                tuple(parent_argnums),
                tuple(p.slot for p in parents),
                value,
            )
        )

    # autograd's Node.new_root passes its arguments on to initialize_root
    def initialize_root(self, tape: Tape, value: Any) -> None:  # type: ignore[override]
        super().initialize_root()
        self.tape = tape
        self.slot = tape.add(value)
        tape.root = structure(value)


def _check_constants(
    tape: Tape, fun: Any, args: Any, kwargs: dict[str, Any], boxed: tuple[int, ...]
) -> None:
    """Boxes hidden inside constant arguments (lists, object arrays, keywords, outer
    traces) cannot be replayed: the tape would keep trace-time objects."""
    for pos, a in enumerate(args):
        if pos not in boxed and _has_box(a):
            tape.note(f"a traced value reaches {_name_of(fun)} inside a constant argument")
    for v in kwargs.values():
        if _has_box(v):
            tape.note(f"a traced value is a keyword argument of {_name_of(fun)}")


def _has_box(a: Any, depth: int = 0) -> bool:
    t = type(a)
    if isinstance(a, Box):
        return True
    if depth < 4 and (t is list or t is tuple):
        return any(_has_box(v, depth + 1) for v in a)
    if depth < 4 and t is dict:
        return any(_has_box(v, depth + 1) for v in a.values())
    return t is np.ndarray and a.dtype.hasobject


def _name_of(f: Any) -> str:
    name = getattr(f, "__name__", None)
    return name if type(name) is str else type(f).__name__


def user_location(depth: int = 2) -> str:
    """``func, line N`` of the nearest frame outside autograd, numpy and ipyrefresh."""
    frame: Any = sys._getframe(depth)
    while frame is not None:
        if not frame.f_code.co_filename.startswith(_SKIP_DIRS):
            return f"{frame.f_code.co_name}, line {frame.f_lineno}"
        frame = frame.f_back
    return "?"


# -- the transforms, as autograd writes them, over a recording make_vjp ------------------


def _make_vjp(tape: Tape) -> Callable[[Callable[[Any], Any], Any], tuple[Any, Any]]:
    def make_vjp(fun: Callable[[Any], Any], x: Any) -> tuple[Any, Any]:
        start = TapeNode.new_root(tape, x)
        end_value, end_node = trace(start, fun, x)
        if end_node is None:
            tape.note("the output does not depend on the input")

            def vjp(g: Any) -> Any:
                return vspace(x).zeros()

        else:
            if type(end_node) is TapeNode and end_node.tape is tape:
                tape.output = end_node.slot
            else:
                tape.note("the output was computed by another trace")

            def vjp(g: Any) -> Any:
                return backward_pass(g, end_node)

        return vjp, end_value

    return make_vjp


def transform(kind: Transform, tape: Tape) -> Callable[..., Any]:
    """autograd's transform ``kind``, recording into ``tape``; same code, same answer.

    For the Hessian (autograd's ``jacobian(jacobian(f))``) the outer Jacobian records: its
    tape holds the whole inner computation, derivative included.
    """
    make_vjp = _make_vjp(tape)

    @unary_to_nary
    def grad(fun: Any, x: Any) -> Any:
        vjp, ans = make_vjp(fun, x)
        if not vspace(ans).size == 1:
            raise TypeError(
                "Grad only applies to real scalar-output functions. "
                "Try jacobian, elementwise_grad or holomorphic_grad."
            )
        return vjp(vspace(ans).ones())

    @unary_to_nary
    def value_and_grad(fun: Any, x: Any) -> Any:
        vjp, ans = make_vjp(fun, x)
        if not vspace(ans).size == 1:
            raise TypeError(
                "value_and_grad only applies to real scalar-output "
                "functions. Try jacobian, elementwise_grad or "
                "holomorphic_grad."
            )
        return ans, vjp(vspace(ans).ones())

    @unary_to_nary
    def elementwise_grad(fun: Any, x: Any) -> Any:
        vjp, ans = make_vjp(fun, x)
        if vspace(ans).iscomplex:
            raise TypeError("Elementwise_grad only applies to real-output functions.")
        return vjp(vspace(ans).ones())

    @unary_to_nary
    def jacobian(fun: Any, x: Any) -> Any:
        vjp, ans = make_vjp(fun, x)
        ans_vspace = vspace(ans)
        jacobian_shape = ans_vspace.shape + vspace(x).shape
        grads = map(vjp, ans_vspace.standard_basis())
        return autograd.numpy.reshape(autograd.numpy.stack(grads), jacobian_shape)

    @unary_to_nary
    def hessian(fun: Any, x: Any) -> Any:
        return jacobian(autograd.jacobian(fun))(x)

    return {
        Transform.GRAD: grad,
        Transform.VALUE_AND_GRAD: value_and_grad,
        Transform.ELEMENTWISE_GRAD: elementwise_grad,
        Transform.JACOBIAN: jacobian,
        Transform.HESSIAN: hessian,
    }[kind]


_ = abuiltins  # SequenceBox and DictBox must be registered before tracing
