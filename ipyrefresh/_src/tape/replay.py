"""Turn a recorded tape into straight-line Python: forward with raw numpy, guards checked
as they come, backward with direct adjoints where known and autograd's VJP makers else.

The generated function takes ``(fn, args, kwargs)`` and returns the transform's result, or
an ``int``: the index of the first guard that failed (the tape does not apply).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from autograd.builtins import container_take
from autograd.core import add_outgrads, primitive_vjps, vspace
from autograd.numpy.numpy_boxes import ArrayBox

from . import adjoints
from .trace import BoolGuard, Op, Tape, Unsupported

_getitem = ArrayBox.__getitem__
Runner = Callable[[Any, tuple[Any, ...], dict[str, Any]], Any]


def same(a: Any, b: Any) -> bool:
    """Exact equality of guard values (arrays by content, NaN equal to NaN)."""
    ta = type(a)
    if ta is not type(b):
        return False
    if ta is np.ndarray:
        return (
            a.shape == b.shape
            and a.dtype == b.dtype
            and bool(np.array_equal(a, b, equal_nan=a.dtype.kind in "fc"))
        )
    if ta is tuple or ta is list:
        return len(a) == len(b) and all(map(same, a, b))
    try:
        if a != a:  # NaN
            return bool(b != b)
        return bool(a == b)
    except Exception:
        return False


def _add(prev: Any, g: Any) -> Any:
    return add_outgrads(prev, g)


@dataclass
class Compiled:
    """Generated code for one tape variant."""

    run: Runner
    guards: list[str]  # description per guard index
    source: str
    general: int  # ops that use autograd's VJP makers
    specialized: int


_INLINE = (int, bool, str, type(None))
_G = "@G@"  # stands for the cotangent's name until names are assigned


class _Gen:
    def __init__(self, tape: Tape) -> None:
        self.tape = tape
        self.ns: dict[str, Any] = dict(adjoints.HELPERS)
        self.ns.update(_same=same, _add=_add, _stack=np.stack, _npreshape=np.reshape)
        self.ns["_shapes"] = adjoints.shapes
        self.ns["_add_at"] = np.add.at
        self._consts: dict[int, str] = {}
        self.guards: list[str] = []
        self.lines: list[str] = []
        self.array_guards: list[str] = []  # shape/dtype checks of live global arrays

    # -- names ------------------------------------------------------------------------
    def const(self, value: Any) -> str:
        t = type(value)
        if t in _INLINE or (t is float and np.isfinite(value)):
            return repr(value)
        if t is tuple and all(type(v) in _INLINE for v in value):
            return repr(value)
        name = self._consts.get(id(value))
        if name is None:
            name = self._consts[id(value)] = f"K{len(self._consts)}"
            self.ns[name] = value  # referenced, never copied: globals stay live
            if t is np.ndarray and id(value) in self.tape.globals_read:
                dt = self.const(value.dtype)
                self.array_guards.append(f"{name}.shape != {value.shape!r} or {name}.dtype != {dt}")
        return name

    def arg(self, op: Any, pos: int) -> str:
        slot = op.parents.get(pos)
        return f"v{slot}" if slot is not None else self.const(op.args[pos])

    def call_args(self, op: Op) -> str:
        parts = [self.arg(op, i) for i in range(len(op.args))]
        if op.kwargs:
            parts.append(f"**{self.const(op.kwargs)}")
        return ", ".join(parts)

    def guard(self, cond: str, what: str) -> None:
        self.lines.append(f"    if {cond}: return {len(self.guards)}")
        self.guards.append(what)


def _describe(op: Op, expected: Any) -> str:
    name = getattr(op.fun, "__name__", "?")
    shown = repr(bool(expected) if type(expected) is np.bool_ else expected)
    if len(shown) > 40:
        shown = shown[:37] + "..."
    return f"{name}(...) == {shown} at {op.where}"


def generate(tape: Tape, transform: str) -> Compiled:
    """Compile ``tape`` for ``transform`` (grad, value_and_grad, elementwise_grad,
    jacobian) into a Python function."""
    gen = _Gen(tape)
    nslots = len(tape.values)
    ops = [e for e in tape.events if isinstance(e, Op) and not e.guard]
    producer = {op.slot: op for op in ops}

    # x-dependence (slot 0 is the root) and what the output and the guards need.
    xdep = [False] * nslots
    xdep[0] = True
    for op in ops:
        xdep[op.slot] = any(xdep[p] for p in op.parents.values())
    if not xdep[tape.output]:
        raise Unsupported("the output does not depend on the input")
    needed = [False] * nslots
    live = [False] * nslots  # needs a cotangent

    def mark(slot: int, flags: list[bool]) -> None:
        stack = [slot]
        while stack:
            s = stack.pop()
            if flags[s]:
                continue
            flags[s] = True
            op = producer.get(s)
            if op is not None:
                stack.extend(op.parents.values())

    mark(tape.output, live)
    live = [a and b for a, b in zip(live, xdep, strict=True)]
    mark(tape.output, needed)
    for e in tape.events:
        if isinstance(e, BoolGuard):
            mark(e.slot, needed)
        elif isinstance(e, Op) and e.guard:
            for p in e.parents.values():
                mark(p, needed)
        elif not adjoints.shape_static(e):  # its shape is guarded even if unused
            mark(e.slot, needed)

    # -- arguments -----------------------------------------------------------------------
    lines = gen.lines
    lines.append(f"    v0 = {tape.root_path}")
    for leaf in tape.leaves:
        if leaf.how == "box":
            lines.append(f"    v{leaf.slot} = {leaf.path}")
        elif leaf.how == "value":
            expected = leaf.value.copy() if hasattr(leaf.value, "copy") else leaf.value
            gen.guard(f"not _same({leaf.path}, {gen.const(expected)})", f"argument {leaf.path}")
        elif leaf.how == "identity":
            gen.guard(f"{leaf.path} is not {gen.const(leaf.value)}", f"argument {leaf.path}")

    # -- forward -------------------------------------------------------------------------
    fwd_defs: dict[int, tuple[int, str]] = {}  # line index -> (slot, expression)
    for e in tape.events:
        if isinstance(e, BoolGuard):
            want = "True" if e.expected else "False"
            gen.guard(f"bool(v{e.slot}) is not {want}", f"bool(...) is {want} at {e.where}")
        elif e.guard:
            raw = gen.const(e.fun.fun)
            lines.append(f"    t = {raw}({gen.call_args(e)})")
            exp = e.value
            if type(exp) in (bool, np.bool_):
                gen.guard(f"t is not {gen.const(exp)}", _describe(e, exp))
            else:
                gen.guard(f"not _same(t, {gen.const(exp)})", _describe(e, exp))
        elif needed[e.slot]:
            expr = adjoints.forward(gen, e)
            if expr is None:
                expr = f"{gen.const(e.fun.fun)}({gen.call_args(e)})"
            fwd_defs[len(lines)] = (e.slot, expr)
            lines.append("")  # filled in by _inline_forward
            if not adjoints.shape_static(e):
                fname = getattr(e.fun, "__name__", "?")
                want = adjoints.shapes(e.value)
                gen.guard(f"_shapes(v{e.slot}) != {want!r}", f"shape of {fname}(...)")

    # -- backward plan -------------------------------------------------------------------
    back = [op for op in reversed(ops) if live[op.slot]]
    root_keys = _root_split(tape, back)
    plans: list[tuple[Op, list[tuple[int, int, str | None]]]] = []
    general_into: set[int] = set()
    for op in back:
        ppos = [pos for pos in sorted(op.parents) if live[op.parents[pos]]]
        exprs: list[tuple[int, int, str | None]] = []
        for pos in ppos:
            if root_keys is not None and op.parents[pos] == 0:
                exprs.append((pos, 0, "ROOTTAKE"))
            elif op.fun is _getitem and pos == 0 and _dense_array(op.args[0]):
                exprs.append((pos, op.parents[pos], "SCATTER"))
            else:
                expr = adjoints.adjoint(gen, op, pos, _G, f"v{op.slot}")
                exprs.append((pos, op.parents[pos], expr))
        if any(x is None for _, _, x in exprs):
            exprs = [(pos, p, None) for pos, p, _ in exprs]
            general_into.update(p for _, p, _ in exprs)
            _check_vjp(op, [pos for pos, _, _ in exprs])
        plans.append((op, exprs))
    # A slot that receives any general cotangent accumulates with autograd's add_outgrads.
    for i, (op, exprs) in enumerate(plans):
        if any(x == "SCATTER" and p in general_into for _, p, x in exprs):
            plans[i] = (op, [(pos, p, None) for pos, p, _ in exprs])
            _check_vjp(op, [pos for pos, _, _ in exprs])

    # -- backward code -------------------------------------------------------------------
    # Cotangent variables are recycled once consumed: fewer distinct names compile faster.
    body: list[str] = []
    started: set[int] = set()
    owned: set[int] = set()
    names: dict[int, str] = {0: "g0"}
    free: list[str] = []
    counter = [0]
    general = specialized = 0

    def name(slot: int) -> str:
        n = names.get(slot)
        if n is None:
            if free:
                n = free.pop()
            else:
                n = f"a{counter[0]}"
                counter[0] += 1
            names[slot] = n
        return n

    def release(slot: int) -> None:
        if slot:
            free.append(names.pop(slot))

    def read(slot: int) -> None:
        if slot in general_into:
            n = name(slot)
            body.append(f"{n} = {n}[0]")

    def accumulate(slot: int, expr: str) -> None:
        n = name(slot)
        if slot in general_into:
            prev = n if slot in started else "None"
            body.append(f"{n} = _add({prev}, {expr})")
        elif slot in started:
            body.append(f"{n} = {n} + ({expr})")
            if np.ndim(tape.values[slot]) > 0:
                owned.add(slot)
        else:
            body.append(f"{n} = {expr}")
        started.add(slot)

    # A cotangent with one contribution, consumed once by the very next op, is not
    # stored: its expression is substituted into the consumer (a chain becomes one line).
    contributions: dict[int, int] = {}
    for _op, exprs in plans:
        for _pos, p, _x in exprs:
            contributions[p] = contributions.get(p, 0) + 1
    fusable: set[int] = set()
    for op, exprs in plans:
        simple = exprs and all(x not in (None, "SCATTER", "ROOTTAKE") for _, _, x in exprs)
        if simple and sum(str(x).count(_G) for _, _, x in exprs) == 1:
            fusable.add(op.slot)
    pending: dict[int, tuple[str, int]] = {}  # slot -> (expression, nesting depth)
    next_slot = {plans[i][0].slot: plans[i + 1][0].slot for i in range(len(plans) - 1)}

    seed_name = name(tape.output)
    if root_keys is not None:  # one zero array per element, added into in place
        for k, key in enumerate(root_keys):
            elem = _element(tape.values[0], key)
            body.append(
                f"r{k} = _zeros({np.shape(elem)!r}, dtype={gen.const(np.result_type(elem))})"
            )
    for op, exprs in plans:
        fused = pending.pop(op.slot, None)
        if fused is not None:
            g, depth = fused
        else:
            if op.slot != tape.output:
                read(op.slot)
            g, depth = name(op.slot), 0
        if exprs and exprs[0][2] is None:
            general += 1
            maker = gen.const(primitive_vjps[op.fun])
            argnums = tuple(pos for pos, _, _ in exprs)
            argtuple = "(" + "".join(f"{gen.arg(op, i)}, " for i in range(len(op.args))) + ")"
            kw = gen.const(op.kwargs)
            temps = ", ".join(f"c{pos}" for pos in argnums)
            body.append(f"{temps}, = {maker}({argnums!r}, v{op.slot}, {argtuple}, {kw})({g})")
            for pos, p, _ in exprs:
                accumulate(p, f"c{pos}")
        else:
            specialized += 1
            for _pos, p, expr in exprs:
                if expr == "ROOTTAKE":
                    assert root_keys is not None
                    body.append(f"r{root_keys.index(op.args[1])} += {g}")
                elif expr == "SCATTER":
                    _scatter(gen, body, op, name(p), g, p, started, owned)
                else:
                    assert expr is not None
                    text = expr.replace(_G, g)
                    if (
                        len(exprs) == 1
                        and p != 0
                        and contributions[p] == 1
                        and p in fusable
                        and p not in general_into
                        and next_slot.get(op.slot) == p
                        and depth < _MAX_DEPTH
                    ):
                        pending[p] = (f"({text})", depth + 1)
                    else:
                        accumulate(p, text)
        if op.slot != tape.output and fused is None:
            release(op.slot)
    if root_keys is not None:
        elems = ", ".join(f"r{k}" for k in range(len(root_keys)))
        root = tape.values[0]
        if type(root) is dict:
            pairs = ", ".join(f"{key!r}: r{k}" for k, key in enumerate(root_keys))
            body.append(f"g0 = {{{pairs}}}")
        else:
            body.append(f"g0 = {type(root).__name__}(({elems},))")
    else:
        read(0)

    # -- transform -----------------------------------------------------------------------
    out = f"v{tape.output}"
    ans = tape.values[tape.output]
    vs = vspace(ans)
    if transform in ("grad", "value_and_grad") and vs.size != 1:
        raise Unsupported(f"{transform} needs a scalar output")  # autograd raises
    if transform == "elementwise_grad" and vs.iscomplex:
        raise Unsupported("elementwise_grad needs a real output")  # autograd raises
    if transform == "jacobian":
        basis = list(vs.standard_basis())
        for b in basis:
            b.flags.writeable = False
        jshape = tuple(vs.shape) + tuple(vspace(tape.values[0]).shape)
        lines.append("    grads = []")
        lines.append(f"    for {seed_name} in {gen.const(basis)}:")
        lines.extend("        " + b for b in body)
        lines.append("        grads.append(g0)")
        lines.append(f"    return _npreshape(_stack(grads), {jshape!r})")
    else:
        seed = vs.ones()
        lines.append(f"    {seed_name} = {gen.const(seed)}.copy()")
        lines.extend("    " + b for b in body)
        result = f"({out}, g0)" if transform == "value_and_grad" else "g0"
        lines.append(f"    return {result}")
    _inline_forward(lines, fwd_defs)
    if gen.array_guards:  # checked first: a global array changed shape or dtype in place
        checks = []
        for cond in gen.array_guards:
            checks.append(f"    if {cond}: return {len(gen.guards)}")
            gen.guards.append("shape/dtype of a global array read by the tape")
        lines[:0] = checks
    source = "def run(fn, args, kwargs):\n" + "\n".join(x for x in lines if x) + "\n"
    code = compile(source, "<ipyrefresh tape>", "exec")
    exec(code, gen.ns)
    return Compiled(gen.ns["run"], gen.guards, source, general, specialized)


_MAX_DEPTH = 12  # nesting of fused expressions (the parser allows 200 parentheses)
_VAR = re.compile(r"\bv(\d+)\b")


def _inline_forward(lines: list[str], defs: dict[int, tuple[int, str]]) -> None:
    """Fill in forward definitions: drop values nothing reads (for ``grad``, often the
    output itself), and substitute values used exactly once (by a later forward
    definition, not by the backward pass or a guard) into their user."""
    find = _VAR.findall
    uses = Counter(find("\n".join(t for i, t in enumerate(lines) if i not in defs)))
    in_defs: Counter[str] = Counter()
    live = []
    for i in sorted(defs, reverse=True):  # a value nothing reads is not computed at all
        slot, expr = defs[i]
        if uses[str(slot)]:
            live.append(i)
            found = find(expr)
            uses.update(found)
            in_defs.update(found)
    inline: dict[str, tuple[str, int]] = {}

    def sub(m: re.Match[str]) -> str:
        got = inline.pop(m.group(1), None)
        return f"({got[0]})" if got is not None else m.group(0)

    for i in reversed(live):
        slot, expr = defs[i]
        depth = 1
        if inline:
            inner = [inline[k][1] for k in find(expr) if k in inline]
            if inner:
                depth += max(inner)
                expr = _VAR.sub(sub, expr)
        key = str(slot)
        if uses[key] == 1 and in_defs[key] == 1 and depth < _MAX_DEPTH:
            inline[key] = (expr, depth)
        else:
            lines[i] = f"    v{slot} = {expr}"


def _element(root: Any, key: Any) -> Any:
    return root[key]


def _root_split(tape: Tape, back: list[Op]) -> list[Any] | None:
    """Keys of a list/tuple/dict root if every use of it is ``root[key]`` with a constant
    key and real array elements: then its cotangent is built element by element, as
    autograd's in-place container adds do, without sparse objects."""
    root = tape.values[0]
    if type(root) not in (list, tuple, dict):
        return None
    keys = list(range(len(root))) if type(root) is not dict else list(root)
    if type(root) is dict and not all(type(k) is str for k in keys):
        return None
    if not all(_real_leaf(root[k]) for k in keys):
        return None
    for op in back:
        if 0 in op.parents.values():
            if op.fun is not container_take or op.parents != {0: 0} or op.kwargs:
                return None
            if len(op.args) != 2 or op.args[1] not in keys or type(op.args[1]) is bool:
                return None
    return keys


def _real_leaf(v: Any) -> bool:
    t = type(v)
    if t is float:
        return True
    return (t is np.ndarray or isinstance(v, np.floating)) and np.result_type(v).kind == "f"


def _dense_array(v: Any) -> bool:
    return type(v) is np.ndarray and v.dtype.kind in "fc" and v.ndim > 0


def _scatter(
    gen: _Gen,
    body: list[str],
    op: Op,
    acc: str,
    g: str,
    slot: int,
    started: set[int],
    owned: set[int],
) -> None:
    """Cotangent of ``A[idx]``: add ``g`` into a zero array shaped like ``A`` (named
    ``acc``), in place."""
    a, idx = op.args
    if isinstance(idx, list) and (len(idx) == 0 or not isinstance(idx[0], slice)):
        idx = np.array(idx, dtype="int64")
    i = gen.const(idx)
    basic = adjoints.basic_index(idx)
    if slot not in started:
        body.append(f"{acc} = _zeros({tuple(a.shape)!r}, dtype={gen.const(a.dtype)})")
        body.append(f"{acc}[{i}] = {g}" if basic else f"_add_at({acc}, {i}, {g})")
        started.add(slot)
        owned.add(slot)
        return
    if slot not in owned:
        body.append(f"{acc} = {acc}.copy()")
        owned.add(slot)
    body.append(f"{acc}[{i}] += {g}" if basic else f"_add_at({acc}, {i}, {g})")


def _check_vjp(op: Op, argnums: list[int]) -> None:
    """Autograd builds each VJP while tracing; do the same once so that the same errors
    (no VJP defined, unsupported arguments) send this function to plain autograd."""
    maker = primitive_vjps.get(op.fun)
    if maker is None:
        name = getattr(op.fun, "__name__", op.fun)
        raise Unsupported(f"VJP of {name} wrt argnums {tuple(argnums)} not defined")
    try:
        maker(tuple(argnums), op.value, op.args, op.kwargs)
    except Exception as exc:
        raise Unsupported(f"VJP of {getattr(op.fun, '__name__', op.fun)}: {exc}") from None
