"""One build: run the function once, learn what it read, and decide how later calls run.

1. Walk what the function can reach *before* it runs (``snapshot.Walker``).
2. Run it once under the compiler, in the call recorder (``recorder.record``): the
   answer of this run is the answer of this call.
3. Look for effects a compiled replay would skip: calls that print, read the clock or
   draw OS entropy (from the recorder), numpy generators whose state moved, values the
   run changed (the walk of step 1 no longer holds), ``global``/``nonlocal`` stores.
4. Walk again, now including every user function that ran (``f = fs[k]; f(x)``), into
   the :class:`~ipyrefresh._src.snapshot.Guard` that every later call checks first; then
   check step 1's walk once more: another thread may have changed what the run read
   while this walk took it (the variant then answers this call only).
5. The compiled variant if nothing stands in the way; otherwise the compiler's fallback
   (the user's code on every call), with the reason.
"""

from __future__ import annotations

import ctypes
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import CodeType, FunctionType, MethodType
from typing import Any

import numpy as np
from autograd.tracer import Box, getval

from . import code as codefacts
from .changes import ChangeKind
from .compilers.base import Compiler, Request, Traced, Variant
from .entry import BuildInfo
from .guard import Guard
from .nodes import MISSING, Function, Identity, Method, Mismatch, Node, Ref
from .readers import FixedReader, TargetReader
from .recorder import CallLog, record, recording_possible
from .snapshot import Unguardable, Walker, rng_state, rules_of

_GLOBAL_RNG = np.random.mtrand._rand
_PY_RANDOM = random._inst  # the module's functions draw from it


@dataclass
class Outcome:
    """What a build produced: this call's answer, the variant for later calls, and what
    status and ``%callgraph`` show of it."""

    result: Any
    variant: Variant
    info: BuildInfo
    event: str
    #: What another thread changed after the run read it and before the guard was made:
    #: the guard holds the new value and the variant the old, so it must not answer again.
    raced: Mismatch | None = None
    #: ipyrefresh's own failure to read what the function reads (an object whose
    #: ``__class__`` or ``__getattribute__`` is its own): the variant runs the code, and
    #: the engine counts the failure.
    failure: Exception | None = None


@dataclass
class _Walked:
    guard: Guard
    #: Why the guard cannot hold all the function reads ("" if it can).
    unguardable: str = ""
    failure: Exception | None = None
    #: The user code the walk reached (the function's, its callees', closures').
    codes: frozenset[CodeType] = frozenset()
    #: The walk met an object code can store into (``Walker.reaches_mutable``).
    reaches_mutable: bool = False
    #: The labels of its roots that are gradient rules (``Walker.rules``).
    rule_labels: frozenset[str] = frozenset()


def check_differentiable(fn: Any, label: str) -> None:
    """Reject what autograd can never differentiate, with a message that says why."""
    if not callable(fn):
        raise TypeError(f"'{label}' is not callable (it is a {type(fn).__name__})")
    if type(fn) is FunctionType and fn.__code__.co_flags & codefacts.GENERATOR_FLAGS:
        kind = "an async function" if fn.__code__.co_flags & 0x280 else "a generator function"
        raise TypeError(f"'{label}' is {kind}; derivatives need a function that returns a value")


def run_build(
    compiler: Compiler,
    fn: Any,
    label: str,
    request: Request,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    drawn_between_calls: bool = False,
) -> Outcome:
    """See the module docstring. ``drawn_between_calls``: a generator an earlier build of
    this entry reached was drawn from between its calls (see :class:`_RandomState`)."""
    if not compiler.needs_guard:
        traced = compiler.trace(fn, request, args, kwargs)
        variant = compiler.fallback(request, Guard(), "")
        return Outcome(traced.answer(), variant, BuildInfo(), "built")
    if _traced_elsewhere(args, kwargs):  # (no trace of ours: nothing of it would be used)
        why = "called inside another autograd computation"
        variant = compiler.fallback(request, Guard(), why)
        return Outcome(variant.run(fn, args, kwargs), variant, BuildInfo(note=why), "built")
    call = _Call(fn, label, request, args, kwargs)
    walked = _walk(call, None, past_views=False)  # 1
    run = _Run.recorded(compiler, call, walked)  # 2, 3
    run.compile_again(walked)
    ran = {*walked.codes, *run.log.codes}
    past_views = any(codefacts.facts(c).reads_past_views() for c in ran)
    after = _walk(call, run.log, past_views, run.traced.primitives)  # 4
    return _decide(compiler, call, walked, run, after, drawn_between_calls)  # 5


@dataclass(frozen=True)
class _Call:
    """The call a build answers."""

    fn: Any
    label: str
    request: Request
    args: tuple[Any, ...]
    kwargs: dict[str, Any]


@dataclass
class _Run:
    """The build's run (step 2) and what it did that a compiled replay would not (3)."""

    traced: Traced
    result: Any
    log: CallLog
    #: The random generators whose states were taken before the run, with those states.
    rngs: list[tuple[str, Any]]
    states: list[Any]
    effects: list[str]
    #: What the run changed of what the walk before it read (None: nothing, or that walk
    #: stopped and could not tell).
    changed: Mismatch | None

    @classmethod
    def recorded(
        cls,
        compiler: Compiler,
        call: _Call,
        walked: _Walked,
    ) -> _Run:
        fn, args, kwargs = call.fn, call.args, call.kwargs
        before, stopped = walked.guard, walked.unguardable
        rngs = [("numpy.random", _GLOBAL_RNG), ("random", _PY_RANDOM), *before.rngs]
        states = [_rng_state(g) for _, g in rngs]
        # (a walk that stopped saw only part of the code: it may write anything)
        may_write = (
            bool(stopped)
            or walked.reaches_mutable
            or any(codefacts.facts(c).may_write() for c in walked.codes)
        )
        with record() as log:
            traced = compiler.trace(fn, call.request, args, kwargs, may_write=may_write)
        result = traced.answer()
        effects = list(log.effects)
        for (name, gen), state in zip(rngs, states, strict=True):
            if _rng_state(gen) != state:
                effects.append(f"draws random numbers ({name})")
        changed = None
        if not stopped:
            changed = before.check_interpreted(fn, args, kwargs)
            if changed is not None:
                effects.append(f"changes {changed.subject} while it runs")
        effects += _stores(log) + _addresses(log)
        if traced.retrace is not None and not stopped:  # (a stopped walk says why)
            unseen = [
                c for c in log.codes if c not in walked.codes and codefacts.facts(c).may_write()
            ]
            if unseen:
                effects.append(f"{codefacts.qualname(unseen[0])}, found as it ran, may write")
        return cls(traced, result, log, rngs, states, effects, changed)

    def compile_again(self, walked: _Walked) -> None:
        """For a run made only to answer (its code may write outside itself): the
        compiling trace, if that run changed nothing the guard read and no code the walk
        before it could not see (a module reached by a computed name) may have written
        elsewhere. Made before the walk after the run, so that the guard holds what it
        read. Compiled, it answers this call as it will answer the next ones (jax.jit's
        bits, not unjitted JAX's)."""
        traced = self.traced
        if traced.retrace is None or self.effects or walked.unguardable:
            return
        second = traced.retrace()
        if second.compile is not None and not second.unsupported:
            compiled = second.answer()
            if not second.unsupported:
                self.result = compiled
        traced.compile, traced.unsupported = second.compile, second.unsupported
        traced.primitives = [*traced.primitives, *second.primitives]


def _decide(
    compiler: Compiler,
    call: _Call,
    walked: _Walked,
    run: _Run,
    after: _Walked,
    drawn_between_calls: bool,
) -> Outcome:
    """Step 5: the guard of what the run read, and the variant that answers under it."""
    fn, args, kwargs, request = call.fn, call.args, call.kwargs, call.request
    before, before_error = walked.guard, walked.unguardable
    traced, log, effects, changed = run.traced, run.log, run.effects, run.changed
    guard, unguardable = after.guard, after.unguardable
    failure = walked.failure or after.failure
    if before_error and not unguardable:
        # The walk before the run stopped, the one after did not: the run changed what it
        # reads (loaded a lazy object, emptied a container the first walk found too big),
        # and what else it changed, no check could see (hunt 36).
        effects.append(f"changes what it reads while it runs ({before_error})")
    # The run is over and the first check held: a change now is another thread's, made
    # while the guard was walked (which then took the new value).
    raced = None if before_error or changed else before.check_interpreted(fn, args, kwargs)
    guard.add(rules_of(traced.primitives))
    known = {id(g) for _, g in run.rngs}
    reached = {id(g) for _, g in guard.rngs}
    late = [name for name, g in guard.rngs if id(g) not in known]
    if late:  # its state before the run is unknown: it may have been drawn from
        effects.append(f"reaches a random generator only at run time ({late[0]})")
    if drawn_between_calls and guard.rngs:
        # A replay checks the states of the generators it reached, and other code keeps
        # drawing from one: rebuilt at every call, it would cost more than autograd.
        name = guard.rngs[0][0]
        effects.append(f"reaches a random generator drawn from between its calls ({name})")
    effects += _unboxes(log)
    info = BuildInfo(
        reads=sorted(set(guard.labels)),
        edges=_merge(guard.edges, _edges(log, fn, call.label)),
        notes=guard.notes,
    )
    if log.cut_short:
        info.notes = [*info.notes, "calls made after its first effect were not recorded"]
    why = traced.unsupported or "; ".join(effects) or unguardable
    if not why and traced.compile is None:
        why = "its trace stopped at an effect"  # (one its own recording did not see)
    if not why and not log.complete:
        why = f"could not record the calls it makes ({log.note})"
        guard.add([(TargetReader(), _RecorderBusy("the call recorder"))])
        guard.unguardable = why  # (what ran is not all in the guard)
    try:
        if why or traced.compile is None:
            info.note = why
            if changed is not None:
                # It runs the code at every call, so its guard only says when to try a
                # build again: what the function itself changes as it runs (a counter, a
                # log, a rule it registers) would send it to a new build at every call. (The
                # guard then does not hold all it read: JAX's fallback traces afresh at
                # every call.) The rules' state matters only to a tape, which holds it.
                _drop_roots(guard, before.failing_roots(fn, args, kwargs) | after.rule_labels)
                guard.unguardable = guard.unguardable or why
            variant = compiler.fallback(request, guard, why)
            event = f"built; runs {variant.describe()}: {why}"
            return Outcome(run.result, variant, info, event, raced, failure)
        # What it read of the generators it reached (``RS.get_state()``, a
        # ``bit_generator.state``) changes whenever anyone draws: a replay holds while
        # their states are those of the run (it drew from none of them, or it would not
        # be compiled; a fallback runs the code and reads them anew).
        guard.add(
            [
                (FixedReader(Ref(gen)), _RandomState(name, state))
                for (name, gen), state in zip(run.rngs, run.states, strict=True)
                if id(gen) in reached
            ]
        )
        return Outcome(run.result, traced.compile(guard), info, "built", raced)
    finally:
        guard.argument_arrays = []


def _drop_roots(guard: Guard, labels: set[str]) -> None:
    guard.env = [(r, n) for r, n in guard.env if n.label not in labels]
    guard.add([])  # (compiled anew)


def _traced_elsewhere(args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> bool:
    """An argument is a box of an enclosing autograd trace (``grad(lambda w: dh(x, w))``):
    only autograd itself can answer, differentiably."""
    return any(_has_box(a) for a in (*args, *kwargs.values()))


def _has_box(a: Any, depth: int = 0) -> bool:
    if isinstance(a, Box):
        return True
    t = type(a)
    if depth < 4 and (t is list or t is tuple):
        return any(_has_box(v, depth + 1) for v in a)
    if depth < 4 and t is dict:
        return any(_has_box(v, depth + 1) for v in a.values())
    return False


def _walk(
    call: _Call, log: CallLog | None, past_views: bool, primitives: Sequence[Any] = ()
) -> _Walked:
    """The guard of everything the function reaches (and, with a log, everything that
    ran, and the gradient rules of the ``primitives`` it applied). ``past_views``: its
    code may read past a view (see ``Walker``)."""
    fn, label, request, args, kwargs = call.fn, call.label, call.request, call.args, call.kwargs
    guard = Guard()
    walker = Walker(guard, past_views=past_views)
    try:
        walker.target(fn, label)
        unread_args, unread_kw = _unread(fn, args, kwargs, log)
        for i, a in enumerate(args):
            if i not in request.argnums and i not in unread_args:
                walker.argument(i, a, f"argument {i}")
        for k, v in kwargs.items():
            if k not in unread_kw:
                walker.argument(k, v, f"argument {k}")
        walker.call(args, kwargs, request.argnums)
        for prim in dict.fromkeys(primitives):  # (before: a rule's closure is reached)
            walker.rules(prim)
        if log is not None:
            _dynamic(walker, log)
        walker.finish()
        codes = frozenset(walker.covered)
        if walker.past_views_seen and not past_views:
            return _walk(call, log, True, primitives)  # (an argument's view: its owner too)
    except Unguardable as exc:
        return _stopped(guard, fn, label, str(exc))
    except RecursionError:
        return _stopped(guard, fn, label, "what it reads is nested too deeply to check")
    except Exception as exc:
        # Reading an object ran code of the user's that refused (a proxy's ``__class__``,
        # an ``__getattribute__`` serving only the names the function reads).
        why = f"ipyrefresh failed to read what it reads ({type(exc).__name__}: {exc})"
        return _stopped(guard, fn, label, why, exc)
    return _Walked(
        guard,
        codes=codes,
        reaches_mutable=walker.reaches_mutable,
        rule_labels=frozenset(walker.rule_labels),
    )


def _stopped(
    guard: Guard, fn: Any, label: str, why: str, failure: Exception | None = None
) -> _Walked:
    """The walk stopped part-way, perhaps before the function itself was a root: its
    redefinition must still send it to a new build (which may need no fallback)."""
    guard.unguardable = why
    code = _code_node(fn, label)
    if code is not None:
        guard.add([(TargetReader(), code)])
    return _Walked(guard, why, failure)


def _code_node(fn: Any, label: str) -> Node | None:
    """The identity and code of a function or bound method, and nothing else."""
    if type(fn) is FunctionType:
        return Function(label, fn, None, None, (), None)
    if type(fn) is MethodType and type(fn.__func__) is FunctionType:
        func = Function(label, fn.__func__, None, None, (), None)
        return Method(label, fn, func, Identity(f"{label}.__self__", fn.__self__))
    return None


def _unread(
    fn: Any, args: tuple[Any, ...], kwargs: Mapping[str, Any], log: CallLog | None
) -> tuple[frozenset[int], frozenset[str]]:
    """Arguments the function provably never reads: they need no guard (a counter). None
    when user code that ran reads frames (``sys._getframe(1).f_locals``, in a callee):
    it can read any of them without loading it."""
    offset = 0
    if type(fn) is MethodType:
        fn, offset = fn.__func__, 1
    if type(fn) is not FunctionType:
        return frozenset(), frozenset()
    if log is not None and any(codefacts.facts(code).introspects for code in log.codes):
        return frozenset(), frozenset()
    return codefacts.unread_arguments(fn.__code__, len(args), tuple(kwargs), offset)


def _dynamic(walker: Walker, log: CallLog) -> None:
    """User code that ran but that the static walk did not reach."""
    for name in sorted(log.imports):
        walker.imported(name)
    codes = log.codes
    made: set[CodeType] | None = None
    for code, globs in codes.items():
        qual = codefacts.qualname(code)
        if code not in walker.covered:
            head = qual.split(".")[0]
            if not head.startswith("<") and type(globs) is dict:
                walker.global_name(globs, head, _prefix(globs) + head)  # covers C.m too
            if code not in walker.covered:
                walker.code_reads(code, globs, qual, log.builtins.get(code))
        # A closure made before this run must have been reached as a function, whose
        # cells are checked; its factory's code (what walking ``make`` covers) is not its
        # closure. Reached through a C wrapper (np.frompyfunc, cmp_to_key), it is not.
        if code.co_freevars and code not in walker.closures:
            made = _made_by_run(codes) if made is None else made
            if code not in made:
                raise Unguardable(f"it calls {qual}, a closure it cannot locate")


def _made_by_run(codes: Mapping[CodeType, Any]) -> set[CodeType]:
    """The code nested in code that ran: closures of these were made by this run."""
    return {c for other in codes for c in codefacts.nested(other)}


def _prefix(globs: Mapping[str, Any]) -> str:
    name = dict.get(globs, "__name__") if type(globs) is dict else None
    return "" if type(name) is not str or name == "__main__" else f"{name}."


def _stores(log: CallLog) -> list[str]:
    """``global x; x = ...`` and ``nonlocal`` stores into cells made before this run."""
    found = []
    codes = log.codes
    made: set[CodeType] | None = None
    for code in codes:
        facts = codefacts.facts(code)
        qual = codefacts.qualname(code)
        if facts.stores_globals:
            found.append(f"{qual} assigns a global variable")
        if not facts.stores_free:
            continue
        made = _made_by_run(codes) if made is None else made
        if code not in made:
            names = ", ".join(sorted(facts.stores_free))
            found.append(f"{qual} changes the nonlocal variable {names}")
    return found


def _addresses(log: CallLog) -> list[str]:
    """Code that may read memory by its address (by the names it uses, or a global that
    is ctypes under any name): what it reads there, no guard sees."""
    found = []
    for code, globs in log.codes.items():
        facts = codefacts.facts(code)
        name = facts.reads_by_address()
        if not name and type(globs) is dict:
            name = next((g for g in sorted(facts.globals) if dict.get(globs, g) is ctypes), "")
        if name:
            found.append(f"{codefacts.qualname(code)} may read memory by its address ({name})")
    return found


def _unboxes(log: CallLog) -> list[str]:
    """Code that reads a traced value's number directly (``getval(x)``, ``x._value``):
    autograd treats it as a constant each run; a replay would keep the first run's."""
    found = []
    for code, globs in log.codes.items():
        facts = codefacts.facts(code)
        uses_getval = any(dict.get(globs, n) is getval for n in facts.globals)
        if (
            uses_getval
            or "_value" in facts.attrs
            or "getval" in facts.attrs
            or not _PICKLING.isdisjoint(facts.attrs)
            or "_value" in facts.const_names
        ):
            found.append(f"{codefacts.qualname(code)} reads traced values directly (getval)")
    return found


#: What hands a box's state out as plain values (``x.__getstate__()[1]['_value']``).
_PICKLING = frozenset({"__getstate__", "__reduce__", "__reduce_ex__"})


def _edges(log: CallLog, fn: Any, label: str) -> dict[tuple[str, str], str]:
    if type(fn) is MethodType:
        fn = fn.__func__
    root_code = fn.__code__ if type(fn) is FunctionType else None
    names: dict[CodeType, str] = {}
    edges: dict[tuple[str, str], str] = {}
    for (caller, code), globs in log.calls.items():
        callee = label if code is root_code else codefacts.qualname(code)
        names[code] = callee
        if code is root_code or not codefacts.is_user_frame(code, globs):
            continue  # (generated helpers of libraries, namedtuple's __new__, are not shown)
        if caller is None or caller is root_code:  # called by autograd: a primitive's code
            src = label
        else:
            src = names.get(caller, codefacts.qualname(caller))
        edges[(src, callee)] = "dynamic"
    return edges


def _merge(
    a: dict[tuple[str, str], str], b: dict[tuple[str, str], str]
) -> dict[tuple[str, str], str]:
    edges = dict(a)
    for key, kind in b.items():
        edges[key] = kind if edges.get(key) in (None, kind) else "both"
    return edges


def _rng_state(gen: Any) -> Any:
    try:
        return rng_state(gen)
    except Exception:  # a generator subclass with an unusual state: compare by identity
        return id(gen)


class _RandomState(Node):
    """A random generator's state as the run found it (see :func:`_rng_state`)."""

    __slots__ = ("state",)

    def __init__(self, label: str, state: Any) -> None:
        super().__init__(label)
        self.state = state

    def check(self, value: Any, deep: bool = True) -> Mismatch | None:
        if value is MISSING or _rng_state(value) != self.state:
            return Mismatch(self.label, ChangeKind.DRAWN_FROM)
        return None


class _RecorderBusy(Node):
    """Valid while another profiler keeps the call recorder out (3.10/3.11): once it is
    gone, the entry is rebuilt and can be compiled."""

    __slots__ = ()

    def check(self, value: Any, deep: bool = True) -> Mismatch | None:
        if recording_possible():
            return Mismatch(self.label, ChangeKind.RECORDABLE)
        return None
