"""Turn a tape into straight-line Python that computes what autograd computes.

Phases, each a function below:

1. :func:`liveness` — which forward values the answer and the guards need;
2. :func:`backward_order` — autograd's own ``toposort`` of the nodes, so gradients of a
   value used several times are added in autograd's order (bitwise-equal sums);
3. :func:`plan_backward` — per node, a direct adjoint expression for each parent
   (``adjoints.py``) or autograd's VJP maker; per slot, how contributions are added
   (``+`` then ``+=`` as ``add_outgrads`` does for dense values, ``add_outgrads``
   itself wherever a contribution's type is not known in advance);
4. :class:`Emitter` — forward code with guards checked as they come, backward code,
   and the transform's wrapper (seed, Jacobian loop, value and gradient).

The generated function takes ``(args, kwargs)`` and returns the answer, or a
:class:`~ipyrefresh._src.compilers.base.Miss` when a guard fails.
"""

from __future__ import annotations

import array
import collections
import copy
import itertools
from dataclasses import dataclass, field
from typing import Any

import autograd.numpy as anp
import numpy as np
from autograd.core import add_outgrads, primitive_vjps, vspace

from ...code import GENERATED_FILE
from ...nodes import SCALAR_TYPES, implementation, same_scalar
from ..base import Miss, Transform
from . import adjoints
from .record import BoolGuard, Op, OpGuard, Tape, Unsupported, copy_in_layout

_INLINE = (int, bool, str, type(None))


def _foreign(a: np.ndarray) -> bool:
    """An array over memory no array owns (``np.frombuffer`` of a ``bytearray``): the guard
    compares that buffer by value, so the caller may rebind it to an equal copy and
    change the old one."""
    base = a.base
    while isinstance(base, np.ndarray):
        a, base = base, base.base
    return base is not None


#: Mutable containers a replay holds copies of (see ``Emitter._own``), and tuple subclasses
#: (a namedtuple holding a list): an exact tuple is looked into instead.
_COPIED = (list, dict, set, collections.deque, array.array, tuple)
#: The module a replay's warnings come from: where autograd's primitives call numpy.
_WARNS_AS = "autograd.tracer"
_names = itertools.count()


def same(a: Any, b: Any) -> bool:
    """Exact equality of guard values: arrays by shape, dtype and content, floating-point
    ones bit for bit (``ceil(-0.3)`` is ``-0.0``, which ``arctan2`` tells from ``0.0``;
    NaNs by their sign too), scalars as :func:`~ipyrefresh._src.nodes.same_scalar`."""
    ta = type(a)
    if ta is not type(b):
        return False
    if ta is np.ndarray:
        if a.shape != b.shape or a.dtype != b.dtype:
            return False
        if a.dtype.kind in "fc":
            return bool(a.tobytes() == b.tobytes())  # (C order; NaNs alike only bit for bit)
        return bool(np.array_equal(a, b))
    if ta is tuple or ta is list:
        return len(a) == len(b) and all(map(same, a, b))
    if ta in SCALAR_TYPES or issubclass(ta, np.generic):
        try:
            return same_scalar(a, b)
        except Exception:
            return False
    try:
        return bool(a == b)
    except Exception:
        return False


def _iadd(x: Any, y: Any) -> Any:
    """A vector space's ``_mut_add``: ``x += y``, returning ``x``."""
    x += y
    return x


# -- phase 1: liveness -----------------------------------------------------------------------


def liveness(tape: Tape) -> list[bool]:
    """Slots whose values are computed on replay: ancestors of the output, of every
    guard, and ops whose output shape or dtype Python code may have read."""
    producer = {op.slot: op for op in tape.ops}
    needed = [False] * len(tape.values)

    def mark(slot: int) -> None:
        stack = [slot]
        while stack:
            s = stack.pop()
            if needed[s]:
                continue
            needed[s] = True
            op = producer.get(s)
            if op is not None:
                stack.extend(op.parents)

    mark(tape.output)
    for e in tape.events:
        if type(e) is BoolGuard:
            mark(e.slot)
        elif type(e) is OpGuard:
            for p in e.parents:
                mark(p)
        elif type(e) is Op and not adjoints.layout_static(e):
            mark(e.slot)
    return needed


# -- phase 2: autograd's backward order ------------------------------------------------------


def backward_order(tape: Tape) -> list[int]:
    """``autograd.util.toposort`` from the output node, over slots."""
    parents = {op.slot: op.parents for op in tape.ops}
    parents[0] = ()
    counts: dict[int, int] = {}
    stack = [tape.output]
    while stack:
        node = stack.pop()
        if node in counts:
            counts[node] += 1
        else:
            counts[node] = 1
            stack.extend(parents[node])
    order = []
    childless = [tape.output]
    while childless:
        node = childless.pop()
        order.append(node)
        for p in parents[node]:
            if counts[p] == 1:
                childless.append(p)
            else:
                counts[p] -= 1
    return order


# -- phase 3: the backward plan --------------------------------------------------------------


@dataclass(frozen=True)
class Dense:
    """A cotangent given by an expression (``{G}`` stands for the node's cotangent)."""

    expr: str


@dataclass(frozen=True)
class Scatter:
    """``A[idx]``'s cotangent: autograd's ``untake``, a sparse object added into zeros of
    ``A``'s shape (``add_outgrads``/``sparse_add``), done here in place."""

    expr: str
    index: str  # the index, as the generated code names it
    basic: bool  # ints and slices: no element repeats, ``acc[idx] += g`` is ``add.at``
    zeros: str  # expression for ``vspace(A).zeros()``


@dataclass(frozen=True)
class RootElement:
    """``params[k]`` of a list, tuple or dict argument: added into the k-th zeros."""

    expr: str
    position: int


Contribution = Dense | Scatter | RootElement


@dataclass
class Step:
    """The VJP of one node: a contribution per parent, or autograd's maker (``None``)."""

    op: Op
    parts: list[Contribution] | None


@dataclass
class Plan:
    steps: list[Step]
    generic_slots: set[int] = field(default_factory=set)  # accumulated with add_outgrads
    root_keys: list[Any] | None = None  # the split root's keys, when it is split


def plan_backward(tape: Tape, names: Any, order: list[int]) -> Plan:
    producer = {op.slot: op for op in tape.ops}
    root_keys = _root_split(tape, [producer[s] for s in order if s != 0])
    steps = []
    generic: set[int] = set()
    for slot in order:
        if slot == 0:
            continue
        op = producer[slot]
        parts: list[Contribution] | None = []
        for pos, parent in zip(op.argnums, op.parents, strict=True):
            part = _contribution(names, op, pos, parent, root_keys)
            if part is None:
                parts = None
                break
            parts.append(part)  # type: ignore[union-attr]
        if parts is None:
            _check_vjp(op)
            generic.update(op.parents)
        steps.append(Step(op, parts))
    # A sparse contribution to a slot accumulated by ``add_outgrads`` goes through
    # autograd's own VJP maker too: ``add_outgrads`` then sees the sparse object it expects.
    for step in steps:
        if step.parts is not None and any(
            isinstance(part, Scatter) and parent in generic
            for parent, part in zip(step.op.parents, step.parts, strict=True)
        ):
            _check_vjp(step.op)
            step.parts = None
            generic.update(step.op.parents)
    return Plan(steps, generic, root_keys)


def _contribution(
    names: Any, op: Op, pos: int, parent: int, root_keys: list[Any] | None
) -> Contribution | None:
    if root_keys is not None and parent == 0:
        return RootElement("{G}", root_keys.index(op.args[1]))
    if op.fun is adjoints.getitem and pos == 0 and _dense_real(op.args[0]):
        if not adjoints.is_autograds_rule(op.fun):
            return None
        idx = op.args[1]
        if isinstance(idx, list) and (len(idx) == 0 or not isinstance(idx[0], slice)):
            idx = np.array(idx, dtype="int64")  # as autograd's untake does
        a = op.args[0]
        zeros = f"_np_zeros({a.shape!r}, dtype={names.const(a.dtype)})"
        return Scatter("{G}", names.const(idx), adjoints.basic_index(idx), zeros)
    expr = adjoints.adjoint(names, op, pos, "{G}", f"v{op.slot}")
    return Dense(expr) if expr is not None else None


def _dense_real(v: Any) -> bool:
    return type(v) is np.ndarray and v.dtype.kind == "f" and v.ndim > 0


def _root_split(tape: Tape, ops: list[Op]) -> list[Any] | None:
    """Keys of a list, tuple or dict root whose every use is ``root[key]`` with a constant
    key, and whose elements are real arrays or floats: its cotangent is then built element
    by element, as autograd's container vector space adds them, without sparse objects."""
    root = tape.values[0]
    if type(root) not in (list, tuple, dict):
        return None
    keys = list(range(len(root))) if type(root) is not dict else list(root)
    if not all(_real_leaf(root[k]) for k in keys):
        return None
    take = adjoints.container_take
    for op in ops:
        if 0 in op.parents:
            if op.fun is not take or op.parents != (0,) or op.kwargs or len(op.args) != 2:
                return None
            key = op.args[1]
            if type(key) not in (int, str) or key not in keys:
                return None
    if not adjoints.is_container_take_rule():
        return None
    return keys


def _real_leaf(v: Any) -> bool:
    if type(v) is float:
        return True
    return (type(v) is np.ndarray or isinstance(v, np.floating)) and np.result_type(v).kind == "f"


def _trusted(op: Op) -> bool:
    """A real op differentiated by autograd's own rule (``container_take``'s included):
    the cotangents it makes are real and shaped as its arguments."""
    if not adjoints.is_real(op.value):
        return False
    if op.fun is adjoints.container_take:
        return adjoints.is_container_take_rule()
    return adjoints.is_autograds_rule(op.fun)


def _check_vjp(op: Op) -> None:
    """autograd built this VJP while tracing (``VJPNode``); it exists."""
    if primitive_vjps.get(op.fun) is None:  # pragma: no cover - the trace raised already
        raise Unsupported(f"VJP of {getattr(op.fun, '__name__', op.fun)} not defined")


# -- phase 4: emission -----------------------------------------------------------------------


@dataclass
class Compiled:
    """Generated code for one tape."""

    run: Any
    source: str
    guards: list[str]
    ops: int
    direct: int


class Emitter:
    """Generates the replay function of one tape for one transform."""

    def __init__(self, tape: Tape, kind: Transform, root: str) -> None:
        self.tape = tape
        self.kind = kind
        self.root = root  # expression reading the differentiated argument(s)
        self.trusted_cotangents = all(map(_trusted, tape.ops))
        self.ns: dict[str, Any] = dict(adjoints.HELPERS)
        self.ns.update(
            _same=same,
            _add=add_outgrads,
            _layouts=adjoints.layouts,
            _stack=anp.stack,
            _iadd=_iadd,
            _add_at=np.add.at,
            _reshape_j=getattr(anp.reshape, "fun", anp.reshape),
            # numpy's floating-point warnings name the module of the Python frame that
            # ran the ufunc: under autograd, one of autograd's. A filter by module
            # (``filterwarnings("error", module="autograd")``) must act on the replay's.
            __name__=_WARNS_AS,
        )
        self._consts: dict[int, str] = {}
        self._keep: list[Any] = []
        self.lines: list[str] = []
        self.guards: list[str] = []

    # -- names -----------------------------------------------------------------------------
    def const(self, value: Any) -> str:
        t = type(value)
        if t in _INLINE or (t is float and np.isfinite(value) and repr(float(value)) != "-0.0"):
            return repr(value)
        if t is tuple and all(type(v) in _INLINE for v in value):
            return repr(value)
        name = self._consts.get(id(value))
        if name is None:
            name = self._consts[id(value)] = f"K{len(self._consts)}"
            self._keep.append(value)  # keeps ids unique while compiling
            # The tape owns its lists and dicts, and what it read from arguments: the user
            # may rebind a name (or pass) an equal copy, which the guard accepts, and then
            # change the old object.
            self.ns[name] = self._own(value)
        return name

    def _own(self, value: Any) -> Any:
        """The tape's own copy of a constant where the user may still change it: what it
        read from arguments, lists, dicts, sets, deques, ``array.array``s and tuple
        subclasses (their subclasses too), and these inside a tuple (an index
        ``(rows, cols)``)."""
        owned = self.tape.owned.get(id(value))
        if owned is not None:
            return owned
        t = type(value)
        if t is tuple:
            return tuple(self._own(v) for v in value)
        if isinstance(value, _COPIED):  # (subclasses too: an OrderedDict, a namedtuple)
            try:
                return copy.deepcopy(value)
            except Exception as exc:
                raise Unsupported(
                    f"a {t.__name__} its ops used cannot be copied ({type(exc).__name__}), "
                    "and the caller may still change it"
                ) from exc
        if t is np.ndarray and _foreign(value):
            return copy_in_layout(value)
        return value

    def arg(self, op: Any, pos: int) -> str:
        for p, slot in zip(op.argnums, op.parents, strict=True):
            if p == pos:
                return f"v{slot}"
        return self.const(op.args[pos])

    def call_args(self, op: Any) -> str:
        parts = [self.arg(op, i) for i in range(len(op.args))]
        if op.kwargs:
            parts.append(f"**{self.const(op.kwargs)}")
        return ", ".join(parts)

    def guard(self, cond: str, what: str, indent: str = "    ") -> None:
        miss = self.const(Miss(what))
        self.lines.append(f"{indent}if {cond}: return {miss}")
        self.guards.append(what)

    # -- phases ----------------------------------------------------------------------------
    def emit(self) -> Compiled:
        tape = self.tape
        needed = liveness(tape)
        self.lines.append(f"    v0 = {self.root}")
        self._forward(needed)
        order = backward_order(tape)
        plan = plan_backward(tape, self, order)
        body = self._backward(plan)
        self._wrap(body, plan)
        # One name for every replay (each has a namespace of its own): compiled names are
        # interned, and on Python 3.12+ interned strings live forever.
        source = "def replay(args, kwargs):\n" + "\n".join(self.lines) + "\n"
        exec(compile(source, GENERATED_FILE, "exec"), self.ns)
        # Taken out of its namespace, which it holds as its globals: left in, the two
        # would be a cycle that keeps the constants (views of the user's arrays) alive
        # until a full garbage collection after the replay is dropped (hunt 51).
        replay = self.ns.pop("replay")
        replay.__qualname__ = f"replay_{next(_names)}"  # (told apart in profiles)
        direct = sum(1 for s in plan.steps if s.parts is not None)
        return Compiled(replay, source, self.guards, len(plan.steps), direct)

    def _forward(self, needed: list[bool]) -> None:
        for e in self.tape.events:
            if type(e) is BoolGuard:
                want = "True" if e.expected else "False"
                self.guard(f"bool(v{e.slot}) is not {want}", f"bool(...) is {want} at {e.where}")
            elif type(e) is OpGuard:
                raw = self.const(implementation(e.fun))
                self.lines.append(f"    t = {raw}({self.call_args(e)})")
                exp = e.value
                if type(exp) in (bool, np.bool_):
                    self.guard(f"t is not {self.const(exp)}", _describe(e, exp))
                else:
                    self.guard(f"not _same(t, {self.const(exp)})", _describe(e, exp))
            elif type(e) is Op and needed[e.slot]:
                expr = adjoints.forward(self, e)
                if expr is None:
                    expr = f"{self.const(implementation(e.fun))}({self.call_args(e)})"
                self.lines.append(f"    v{e.slot} = {expr}")
                if not adjoints.layout_static(e):
                    want = self.const(adjoints.layouts(e.value))
                    fname = getattr(e.fun, "__name__", "?")
                    self.guard(f"_layouts(v{e.slot}) != {want}", f"shape or dtype of {fname}(...)")

    def _backward(self, plan: Plan) -> list[str]:
        """Backward statements (without indentation), in autograd's order.

        Per slot, contributions are added as ``add_outgrads`` would: the first one kept
        as it is, the second added into a new array, later ones in place; a sparse one
        (``A[idx]``'s) into zeros. A slot any of whose contributions comes from an
        autograd VJP maker (of unknown kind) is accumulated with ``add_outgrads`` itself.
        """
        body: list[str] = []
        state: dict[int, str] = {}  # slot -> "plain" (kept as given) or "owned"
        generic = plan.generic_slots
        if plan.root_keys is not None:
            root = self.tape.values[0]
            for k, key in enumerate(plan.root_keys):
                body.append(f"r{k} = {self.const(vspace(root[key]))}.zeros()")

        def read(slot: int) -> str:
            if slot == self.tape.output:
                return "gs"
            return f"f{slot}[0]" if slot in generic else f"g{slot}"

        def add(slot: int, part: Contribution, g: str) -> None:
            expr = f"({part.expr.replace('{G}', g)})"
            name, now = f"g{slot}", state.get(slot)
            if slot in generic:
                prev = f"f{slot}" if now else "None"
                body.append(f"f{slot} = _add({prev}, {expr})")
                state[slot] = "owned"
            elif isinstance(part, RootElement):
                body.append(f"r{part.position} += {expr}")
            elif isinstance(part, Scatter):
                if now is None:
                    body.append(f"{name} = {part.zeros}")
                elif now == "plain":  # vs.mut_add(None, prev): zeros + prev, then owned
                    body.append(f"{name} = _iadd({part.zeros}, {name})")
                if part.basic:
                    body.append(f"{name}[{part.index}] += {expr}")
                else:
                    body.append(f"_add_at({name}, {part.index}, {expr})")
                state[slot] = "owned"
            elif now is None:
                body.append(f"{name} = {expr}")
                state[slot] = "plain"
            elif now == "plain":
                body.append(f"{name} = {name} + {expr}")
                state[slot] = "owned"
            else:
                body.append(f"{name} += {expr}")

        for step in plan.steps:
            op = step.op
            g = read(op.slot)
            if step.parts is not None:
                for parent, part in zip(op.parents, step.parts, strict=True):
                    add(parent, part, g)
            else:
                maker = self.const(primitive_vjps[op.fun])
                argtuple = "(" + "".join(f"{self.arg(op, i)}, " for i in range(len(op.args))) + ")"
                kw = self.const(op.kwargs)
                body.append(
                    f"it = iter({maker}({op.argnums!r}, v{op.slot}, {argtuple}, {kw})({g}))"
                )
                for parent in op.parents:
                    add(parent, Dense("next(it)"), g)
        return body

    def _wrap(self, body: list[str], plan: Plan) -> None:
        tape = self.tape
        result = "f0[0]" if 0 in plan.generic_slots else "g0"
        if plan.root_keys is not None:
            root = tape.values[0]
            elems = [f"r{k}" for k in range(len(plan.root_keys))]
            if type(root) is dict:
                # The caller's own key objects, as autograd's dict vector space gives back
                # (hunt 56: keys written by their repr came back as plain str and int):
                # the key says they are alike, and in the same order, as the build's.
                result = f"dict(zip(v0, ({', '.join(elems)},)))"
            else:
                result = f"{type(root).__name__}(({', '.join(elems)},))"
        if tape.output == 0:  # the function returns its argument unchanged
            result = "gs"
        vs = vspace(tape.values[tape.output])
        vs_name = self.const(vs)
        lines = self.lines
        if self.kind is Transform.JACOBIAN:
            jshape = tuple(vs.shape) + tuple(vspace(tape.values[0]).shape)
            lines.append("    grads = []")
            lines.append(f"    for gs in {vs_name}.standard_basis():")
            lines.extend("        " + b for b in body)
            lines.append(f"        grads.append({result})")
            lines.append(f"    return _reshape_j(_stack(grads), {jshape!r})")
            return
        lines.append(f"    gs = {vs_name}.ones()")
        lines.extend("    " + b for b in body)
        if self.kind is Transform.VALUE_AND_GRAD:
            lines.append(f"    return v{tape.output}, {result}")
        else:
            lines.append(f"    return {result}")


def _describe(e: OpGuard, expected: Any) -> str:
    name = getattr(e.fun, "__name__", "?")
    shown = repr(bool(expected) if type(expected) is np.bool_ else expected)
    if len(shown) > 40:
        shown = shown[:37] + "..."
    return f"{name}(...) == {shown} at {e.where}"


def generate(tape: Tape, kind: Transform, root: str) -> Compiled:
    """Compile ``tape`` (recorded for ``kind``; a Hessian's tape is a Jacobian's)."""
    if tape.unsupported:
        raise Unsupported(tape.unsupported)
    changed = tape.changed()  # (between the traced call and this, its first replay)
    if changed:
        raise Unsupported(changed)
    if tape.output < 0:
        raise Unsupported("the output does not depend on the input")
    try:
        return Emitter(tape, kind, root).emit()
    except Unsupported:
        raise
    except Exception as exc:
        raise Unsupported(f"cannot compile the tape ({type(exc).__name__}: {exc})") from None
