"""The engine: the entry cache, builds, and what ``%stale``, ``%refresh`` and the status
bar are told. The path of one call (see ``handles.Derivative.__call__``)::

    handle(x) ─▶ resolve the target (the name, now) ─▶ entry for the call's signature
       │
       ▼  for each variant of the entry, newest path first          (no lock: the hot path)
    guard.check(fn, args): code, closures, globals, data the build read — unchanged?
        and the non-differentiated arguments it read — the same?
    variant.run(...): the replay, with its own guards on branches — applies?
       │ all three: the answer
       ▼ otherwise                                                  (Engine.call, locked)
    check again; drop the variants whose code or data changed (the entry goes STALE with
    a Change saying why) ─▶ build: run the function once (its answer is this call's),
    walk what it read into a new guard (``build.run_build``), install the variant

Nothing outside the call keeps answers right. The check after a cell (``after_cell``:
the entries whose names were rebound, see ``watch``) and the check of every entry
(``sweep``: ``%stale``, the status bar, eager mode) only report, and free what stale
variants held.
"""

from __future__ import annotations

import copy
import random
import sys
import threading
import warnings
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence, Set
from dataclasses import dataclass
from types import FrameType
from typing import Any, NamedTuple

import numpy as np

from . import compilers, droppedinterrupts, interruptsafe
from .build import Outcome, check_differentiable, run_build
from .cache import EntryCache
from .changes import BINDING_KINDS, CellRef, Change, ChangeKind, ChangeLog, Detection
from .compilers.base import Miss, Variant, check_variant
from .config import IPyRefresh
from .entry import Entry, State
from .guard import Guard
from .keys import EntryKey, Signature, TargetKey, is_jax_array_type
from .nodes import Mismatch
from .quietweak import QuietWeakSet
from .readers import ArgReader
from .targets import FixedTarget, Target, TargetGone, same_callable
from .watch import Watch

#: Most compiled variants (paths through value-dependent branches) per entry.
MAX_VARIANTS = 8
#: How long a call waits for the cache while another thread holds it (seconds), before
#: it answers by running the code (see :meth:`Engine.call`).
BUSY_WAIT = 1.0


class EngineBusy(RuntimeError):
    """Another thread's build holds the cache past :data:`BUSY_WAIT`: its function is
    running, and may wait for a later cell, so a request that needs the cache now
    (``status()``, ``refresh()``, ``%stale``, ``%callgraph``...) says so instead of
    hanging the kernel."""

    def __init__(self) -> None:
        super().__init__(
            "ipyrefresh: another thread is building a derivative (its function is "
            "running), so the cache cannot be checked now; try again when that call returns."
        )


#: Fixed targets without a handle whose entries stay until the cell ends (see release).
KEPT_RELEASED = 8


class _Taker(NamedTuple):
    """Who takes the engine's lock: the thread, and how often its lock was mended so far."""

    thread: int
    mends: int


class Engine:
    """Owns the cache, the configuration and the change log; one per process."""

    def __init__(self, config: IPyRefresh | None = None) -> None:
        self.config = config or IPyRefresh()
        self.cache = EntryCache(self.config.max_entries, self._evicted)
        self.lock = threading.RLock()
        #: Per thread: how often :meth:`mend_lock` released what a Ctrl-C left held.
        self._mended = threading.local()
        self.cell: CellRef | None = None
        self.attached = False  # loaded in an IPython shell (cells are numbered)
        self.changes = ChangeLog()
        self.stats = {
            "builds": 0,
            "rebuilds": 0,
            "variants": 0,
            "unbuilt_calls": 0,
            "calls_before_build": 0,
            "busy_calls": 0,
            "busy_cells": 0,
            "busy_requests": 0,
            "interrupted_locks": 0,
            "internal_errors": 0,
        }
        self.listeners: list[Callable[[], None]] = []
        self._targets: dict[TargetKey, Target] = {}
        self._dead: list[TargetKey] = []
        self._released: dict[TargetKey, None] = {}  # (see _let_go)
        #: Weak references whose object died: handles (a fixed target lost a holder) and
        #: fixed targets' objects. Their callback is this list's own ``append``, a C method:
        #: a pending Ctrl-C is handled where bytecode runs next, and CPython drops what a
        #: weakref callback raises, so a Python callback lost the user's interrupt (hunt 61).
        #: The next hook or request that purges takes them (:meth:`_collect_gone`).
        self._gone: list[weakref.ref[Any]] = []
        #: A handle's weakref: its target's (weakly: a name's target holds its namespace,
        #: which may hold the handle, and nothing would free the three).
        self._holding: dict[weakref.ref[Any], weakref.ref[Target]] = {}
        #: Names' targets that may have been left with no handle and no binding (see
        #: :meth:`_forget_orphans`): those a handle let go of, and those of the entries
        #: the watch saw a name of move in the cell.
        self._maybe_orphans: dict[TargetKey, None] = {}
        self._watching: dict[weakref.ref[Any], TargetKey] = {}  # a fixed target's object's
        self._warned: set[str] = set()
        #: Entries whose variants changed since the last check after a cell.
        self._changed: QuietWeakSet[Entry] = QuietWeakSet()
        #: Housekeeping asked for while another thread's build held the cache (``%reset``,
        #: ``%unload_ext``, ``%config``): done, in order, by the next hook or request
        #: that holds it (see :meth:`_when_free`).
        self._deferred: list[Callable[[], None]] = []
        self.watch = Watch()
        self._observe(self.config)

    # -- configuration -------------------------------------------------------------------
    def _observe(self, config: IPyRefresh) -> None:
        def resize(change: dict[str, Any]) -> None:
            self._when_free(lambda: self._resize(change["new"]))

        config.observe(resize, names="max_entries")

    def _resize(self, max_entries: int) -> None:
        self.cache.max_entries = max_entries
        self.cache.shrink()

    def use_config(self, config: IPyRefresh) -> None:
        """Adopt the shell's configurable (``%config IPyRefresh...``)."""
        self.config = config  # (read by calls without the lock: one reference, swapped)
        self._observe(config)
        self._when_free(lambda: self._resize(config.max_entries))

    def _when_free(self, job: Callable[[], None]) -> None:
        """Do ``job`` with the cache held: now, or (another thread's build holding it past
        :data:`BUSY_WAIT`) when the next hook or request holds it. Its function may wait
        for a later cell, so ``%reset`` or ``%config`` must not wait for it."""
        with self.lock_for_hook() as held:
            self._deferred.append(job)
            if held:
                self._run_deferred()

    def _run_deferred(self) -> None:
        while self._deferred:
            self._deferred.pop(0)()

    # -- targets and entries ---------------------------------------------------------------
    def target(self, target: Target) -> Target:
        """The shared target for ``target``'s key (handles on one name share entries).

        While another thread holds the lock past :data:`BUSY_WAIT` (a build whose function
        waits for the thread making this handle), ``target`` itself: the handle's calls
        then answer without the cache until it is free, and its entries replace those of
        the shared target (:meth:`entry_for`)."""
        locked = self.lock.acquire(timeout=BUSY_WAIT)
        try:
            if locked:
                self._purge_dead()
                known = self._targets.get(target.key)
                if known is not None and not _replaced(known, target):
                    return known
                self._targets[target.key] = target
            if isinstance(target, FixedTarget):
                watched = target.watch(self._gone.append)
                if watched is not None:
                    self._watching[watched] = target.key
            return target
        finally:
            if locked:
                self.lock.release()

    def entry_for(self, target: Target, key: EntryKey) -> Entry:
        """The cached entry for ``key``; a new one outside the cache while another thread
        holds the lock past :data:`BUSY_WAIT` (:meth:`call` then answers without it)."""
        if not self.lock.acquire(timeout=BUSY_WAIT):
            return Entry(key, target)
        try:
            entry = self.cache.get(key)
            if entry is None or entry.target is not target:
                if entry is not None:
                    self.cache.remove(entry)
                entry = Entry(key, target, self._changed)
                self.cache.add(entry)
            return entry
        finally:
            self.lock.release()

    def hold(self, target: Target, handle: object) -> None:
        """``handle`` holds ``target`` while it lives (see :meth:`_let_go`)."""
        # (Past BUSY_WAIT without the lock, as _collect_gone counts: see target().)
        locked = self.lock.acquire(timeout=BUSY_WAIT)
        try:
            target.holders += 1
            self._holding[weakref.ref(handle, self._gone.append)] = weakref.ref(target)
        finally:
            if locked:
                self.lock.release()

    def _collect_gone(self) -> None:
        """Take the handles and fixed targets' objects that died since (see ``_gone``)."""
        gone = self._gone
        while gone:
            ref = gone.pop()
            held = self._holding.pop(ref, None)
            if held is not None:
                target = held()
                if target is not None:
                    self._let_go(target)
                continue
            key = self._watching.pop(ref, None)
            if key is not None:
                self._dead.append(key)

    def _let_go(self, target: Target) -> None:
        """A handle on ``target`` is gone. When no handle holds a fixed target, its entries
        go: their guards hold the function's namespace, so its weakref would never fire.
        (A name's go when the name is gone too: :meth:`_forget_orphans`.)

        In a cell they go when the cell ends (the most recent ``KEPT_RELEASED`` targets;
        older ones at the next purge): ``grad(loglike)(r)`` written inside a function makes
        and drops a handle on the same function at every call, and must not trace it every
        time."""
        target.holders -= 1
        if target.holders > 0:
            return
        if not isinstance(target, FixedTarget):
            self._maybe_orphans[target.key] = None
            return
        key = target.key
        if self.attached:
            released = self._released
            released.pop(key, None)
            released[key] = None
            if len(released) <= KEPT_RELEASED:
                return
            key = next(iter(released))
            released.pop(key, None)
        self._dead.append(key)

    def cell_ended(self) -> None:
        """Drop the entries of fixed targets no handle has held since during the cell."""
        self._collect_gone()
        released = self._released
        while released:
            try:
                key = next(iter(released))
                del released[key]
            except (StopIteration, KeyError, RuntimeError):  # (a finalizer raced us)
                continue
            self._dead.append(key)
        with self.lock_for_hook() as held:
            if held:
                self._purge_dead()
                self._forget_orphans()

    def _forget_orphans(self) -> None:
        """Drop the entries of names that are gone and that no handle follows: nothing can
        call them again (a new handle on the name, once it is bound again, builds anew
        anyway), and reports would call them stale for ever (hunt 61)."""
        while self._maybe_orphans:
            key = next(iter(self._maybe_orphans))
            del self._maybe_orphans[key]
            target = self._targets.get(key)
            if target is None or isinstance(target, FixedTarget) or target.holders > 0:
                continue
            try:
                target.resolve()
            except TargetGone:
                del self._targets[key]
                for entry in [e for e in self.cache if e.target is target]:
                    self.cache.remove(entry)
            except Exception:  # (``model.loss`` raising now: the name is still there)
                continue

    def _purge_dead(self) -> None:
        self._collect_gone()
        while self._dead:
            key = self._dead.pop()
            known = self._targets.get(key)
            if isinstance(known, FixedTarget) and (known.dead or known.holders <= 0):
                del self._targets[key]
            for entry in self.cache:
                target = entry.target
                if (
                    entry.key.target == key
                    and isinstance(target, FixedTarget)
                    and (target.dead or target.holders <= 0)
                ):
                    self.cache.remove(entry)

    # -- the slow path of a call -----------------------------------------------------------
    def call(
        self,
        entry: Entry,
        fn: Any,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        missed: Sequence[ArgumentMiss] = (),
    ) -> tuple[Entry, Any]:
        """Check ``entry``'s variants (dropping stale ones), else build; return the entry
        actually used (a new one if it was evicted) and the answer. ``missed``: variants
        the caller found failing on an argument's value at this call (not checked again:
        the same arguments fail them again; a change of code or data since is found at
        the next call).

        Another thread may hold the lock for as long as its build runs the user's code,
        and that code may wait for this thread (``sum(pool.map(d_inner, xs))`` inside a
        differentiated function): past :data:`BUSY_WAIT` this call runs the code (plain
        autograd), touching no entry, rather than wait for ever."""
        if not self.lock.acquire(timeout=BUSY_WAIT):
            self.stats["busy_calls"] += 1
            why = "another thread held the cache"
            plain = compilers.get(entry.key.backend).fallback(entry.request, Guard(), why)
            return entry, plain.run(fn, args, kwargs)
        try:
            self._purge_dead()
            if entry not in self.cache:
                entry = self.entry_for(entry.target, entry.key)
            read: set[int | str] = set()
            for variant in entry.variants:
                miss = next((m.mismatch for m in missed if m.variant is variant), None)
                if miss is None:
                    answer = self._try(entry, variant, fn, args, kwargs)
                else:
                    answer = _argument_miss(miss)
                if answer is _ARGS:
                    argnums = entry.request.argnums
                    read.update(k for k in argument_keys(variant.guard) if k not in argnums)
                elif type(answer) is not Miss:
                    entry.hit(variant, self.cell)
                    entry.mark("cache hit")
                    return entry, answer
            if self._defers_build(entry):
                return entry, self._run_before_build(entry, fn, args, kwargs)
            if (
                read
                and entry.state is State.FRESH
                and compilers.get(entry.key.backend).runs_first_sight(entry.request)
                and entry.first_sight(read, args, kwargs)
            ):
                return entry, self._run_unbuilt(entry, fn, args, kwargs)
            return entry, self._build(entry, fn, args, kwargs)
        finally:
            self.lock.release()

    def _run_unbuilt(
        self, entry: Entry, fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        """Arguments the variants read have values not seen before: run the code (plain
        autograd) for this call. A value that changes every call (a new
        minibatch, Newton's next estimate) would otherwise trace a path per call, each
        never used again; a value seen a second time gets its own traced path."""
        self.stats["unbuilt_calls"] += 1
        first = entry.variants[0]
        why = "new values of arguments it reads; a path is traced when they come again"
        fallback = compilers.get(entry.key.backend).fallback(entry.request, first.guard, why)
        entry.mark("ran the code: " + why)
        return fallback.run(fn, args, kwargs)

    def _defers_build(self, entry: Entry) -> bool:
        """A never-built entry whose first calls run the fallback (``build_at_call``)."""
        return (
            entry.state is State.UNBUILT
            and entry.calls_before_build + 1 < self.config.build_at_call
            and compilers.get(entry.key.backend).defers_first_build(entry.request)
        )

    def _run_before_build(
        self, entry: Entry, fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        """A new derivative's first call (before ``build_at_call``): run the code (plain
        autograd). A derivative called once costs what autograd costs; the build, worth
        several runs, is paid by one that is called again (at that call)."""
        check_differentiable(fn, entry.target.label)
        why = f"a derivative is built at its call {self.config.build_at_call}"
        compiler = compilers.get(entry.key.backend)
        try:
            answer = compiler.fallback(entry.request, Guard(), why).run(fn, args, kwargs)
        except BaseException:
            self._forget_unanswered(entry)
            raise
        self.stats["calls_before_build"] += 1
        entry.ran_before_build("ran the code: " + why)
        return answer

    def _forget_unanswered(self, entry: Entry) -> None:
        """A call of a new entry raised (the user's code did, for these arguments: a
        typo's wrong arity, a string): nothing was cached, and nothing should be listed
        as stale or failed for a derivative no call can reach again."""
        if not entry.answered:
            self.cache.remove(entry)

    def _try(
        self, entry: Entry, variant: Variant, fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        bad = check_variant(variant, fn, args, kwargs)
        if bad is not None:
            if not bad.arg:  # the code or data changed: this variant is stale
                entry.drop(variant, self._change(bad, Detection.AT_CALL, entry))
                return _NO
            return _argument_miss(bad)
        return variant.run(fn, args, kwargs)

    def _build(self, entry: Entry, fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """(Re)build ``entry`` from the current code; return the answer for ``args``."""
        label = entry.target.label
        check_differentiable(fn, label)
        stale = entry.state is not State.FRESH
        if not stale and len(entry.variants) >= MAX_VARIANTS:
            return self._overflow(entry, fn, args, kwargs)
        why = "; ".join(c.describe() for c in entry.reasons) if stale and entry.builds else ""
        compiler = compilers.get(entry.key.backend)
        try:
            outcome = run_build(
                compiler, fn, label, entry.request, args, kwargs, entry.drawn_between_calls
            )
        except KeyboardInterrupt:
            if stale:
                entry.invalidate(Change(ChangeKind.INTERRUPTED, cell=self.cell))
            raise
        except BaseException as exc:
            # The user's code raised for these arguments. A new path of a fresh entry
            # failing leaves the paths it has valid (they answer other arguments).
            if stale and entry.answered:
                entry.fail(describe_error(exc))
                self._notify()
            elif stale:
                self._forget_unanswered(entry)
            raise
        if outcome.raced is not None:
            # Another thread changed what the run read before the guard was made: the
            # variant holds this run's values and its guard the new ones. This call gets
            # the run's answer; the variant is never installed, not even for the moment
            # between an install and a drop, when another thread's call (which takes no
            # lock) could find it (hunt 53).
            if outcome.failure is not None:
                self.internal_error("reading what a derivative reads", outcome.failure, label)
            if stale:
                raced = outcome.raced
                entry.invalidate(Change(raced.kind, raced.subject, self.cell))
            self._notify()
            return outcome.result
        self._install(entry, outcome, stale, why)
        donates = any(name == "donate_argnums" and n for name, n in entry.key.options)
        budget = 0 if donates else self.config.retain_example_bytes
        entry.keep_example(_retain(args, kwargs, budget))
        target = entry.target
        if target.follows:
            try:
                current = target.resolve()
            except Exception:
                current = None
            if not same_callable(current, fn):
                # Rebound while it ran (by the function itself, or another thread): this
                # answer is for the function of this call; later calls must not reuse it.
                entry.invalidate(Change(ChangeKind.REBOUND, target.label, self.cell))
        self._notify()
        return outcome.result

    def _install(self, entry: Entry, outcome: Outcome, stale: bool, why: str) -> None:
        outcome.variant.guard.interpret = self.config.compile_guard_after
        if outcome.failure is not None:
            self.internal_error("reading what a derivative reads", outcome.failure, entry.name)
        if stale:
            self.stats["builds"] += 1
            rebuilt = entry.builds > 0
            event = f"rebuilt ({why}); {outcome.event}" if rebuilt and why else outcome.event
            entry.install(outcome.variant, outcome.info, event, self.cell)
            if rebuilt:
                self.stats["rebuilds"] += 1
                if self.config.verbose:
                    print(f"ipyrefresh: rebuilt {entry.name}: {why}")
        else:
            self.stats["variants"] += 1
            entry.add_variant(outcome.variant, "traced a new path; " + outcome.event)

    def _overflow(
        self, entry: Entry, fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        """Past MAX_VARIANTS, calls no variant fits run the fallback, checked like the
        first variant's code and data (not its arguments)."""
        first = entry.variants[-1]
        compiler = compilers.get(entry.key.backend)
        guard = copy.copy(first.guard)
        guard.args = []
        note = f"more than {MAX_VARIANTS} traced paths; other inputs run the code every call"
        fallback = compiler.fallback(entry.request, guard, note)
        entry.add_variant(fallback, note)
        warnings.warn(f"ipyrefresh: {entry.name} has {note}", RuntimeWarning, stacklevel=4)
        return fallback.run(fn, args, kwargs)

    def _change(
        self, bad: Mismatch, detection: Detection, entry: Entry, witnessed: Iterable[str] = ()
    ) -> Change:
        """The change ``bad`` says, noticed now. Its cell is known when the entry was
        known right earlier in this cell, or when the watch saw the subject's binding move
        in this cell (then it was right at the watch's commit as the cell started)."""
        start = self.watch.committed
        seen = bad.kind in BINDING_KINDS and bad.subject in witnessed
        since = start if seen and start is not None and start.count is not None else entry.verified
        change = Change(bad.kind, bad.subject, self.cell, detection, since=since)
        self.changes.record(change)
        return change

    def _evicted(self, entry: Entry) -> None:
        entry.invalidate(Change(ChangeKind.EVICTED))
        entry.keep_example(None)

    # -- reporting -------------------------------------------------------------------------
    def sweep(self, deep: bool = False, detection: Detection = Detection.AFTER_CELL) -> int:
        """Check every fresh entry's code and data now (arrays' contents too if ``deep``);
        mark the changed ones stale. Returns how many went stale. Reporting only: calls
        check for themselves."""
        with self.lock_for_request():
            self._purge_dead()
            return self._check(self.cache, deep, detection)

    @interruptsafe.contextmanager
    def lock_for_request(self) -> Iterator[None]:
        """The lock, for what the user asks now (``status()``, ``refresh()``, the magics,
        the status bar's requests): past :data:`BUSY_WAIT` another thread's build still
        holds it, and :class:`EngineBusy` says so."""
        taker = self._taker()
        if not self.lock.acquire(timeout=BUSY_WAIT):
            self.stats["busy_requests"] += 1
            raise EngineBusy()
        try:
            self._run_deferred()
            yield
        finally:
            self._release(taker)

    @interruptsafe.contextmanager
    def lock_for_hook(self) -> Iterator[bool]:
        """The lock, for a hook of the shell's between cells: True if it is held. Another
        thread may hold it for as long as its build runs the user's code, which may wait
        for the next cell (a training thread waiting for the notebook's go: hunt 53).
        Past :data:`BUSY_WAIT` the hook does its work another time: it only reports and
        frees (calls check for themselves), and the cell must end."""
        taker = self._taker()
        held = self.lock.acquire(timeout=BUSY_WAIT)
        if not held:
            self.stats["busy_cells"] += 1
        try:
            if held:
                self._run_deferred()
            yield held
        finally:
            if held:
                self._release(taker)

    def _taker(self) -> _Taker:
        return _Taker(threading.get_ident(), getattr(self._mended, "count", 0))

    def _release(self, taker: _Taker) -> None:
        """Release what ``taker`` took, unless it is not this thread's, or
        :meth:`mend_lock` has released it since: a generator a Ctrl-C left suspended in
        its ``with`` runs its cleanup later, from a finalizer, in any thread."""
        if self._taker() == taker:
            self.lock.release()

    def mend_lock(self) -> None:
        """Release what this thread holds of the lock, when no frame of the engine's runs in
        it (a cell starts). ``locked = lock.acquire(timeout=...)`` has no ``with`` to undo
        it: a Ctrl-C that CPython raises as the ``acquire`` returns, before its frame has
        noted the lock, leaves it held for ever (about 1 in 20 interrupts that land on such
        a line, measured). Other threads would wait :data:`BUSY_WAIT` at every call and
        answer without the cache, and the status bar's requests would say busy."""
        frame: FrameType | None = sys._getframe(1)
        while frame is not None:
            if frame.f_code.co_filename == __file__:
                return  # (a cell run by code that the engine runs: its frames hold the lock)
            frame = frame.f_back
        left = False
        while True:
            try:
                self.lock.release()
            except RuntimeError:  # not held by this thread: the usual case
                break
            left = True
        if left:
            self.stats["interrupted_locks"] += 1
            self._mended.count = getattr(self._mended, "count", 0) + 1

    def before_cell(self, cell: CellRef) -> None:
        """A cell starts. What a callback, a thread or a silent cell rebound since the
        last cell ended is checked now, with no cell to name; the watch then takes the
        bindings of now as the cell's start (a move it sees after the cell happened in
        it)."""
        with self.lock_for_hook() as held:
            if not held:
                self.cell = cell
                return
            self.cell = None
            moved = self.watch.moved()
            self._maybe_orphans.update(dict.fromkeys(e.target.key for e in moved))
            suspects = self._suspects(moved)
            if suspects:  # (moved, or built or changed by a callback since the cell ended)
                self._check(suspects, False, Detection.BEFORE_CELL)
            self._watch_changed()
            self.watch.commit(cell, reread=bool(moved))
            self.cell = cell

    def after_cell(self) -> int:
        """The check after a cell: only the entries that a name they read was rebound
        under in the cell (see ``watch``), and those whose variants changed during it;
        the stale ones let go of what they held, and so do handles only they held (their
        targets' entries go too). Returns how many went stale. Then the time between
        cells starts: no cell is current."""
        with self.lock_for_hook() as held:
            if not held:
                return 0
            self._purge_dead()
            moved = self.watch.moved()
            self._maybe_orphans.update(dict.fromkeys(e.target.key for e in moved))
            suspects = self._suspects(moved)
            went = self._check(suspects, False, Detection.AFTER_CELL, moved)
            self.cell_ended()
            self._watch_changed()
            self.watch.commit(None, reread=bool(moved))
            return went

    def _suspects(self, moved: Mapping[Entry, object]) -> list[Entry]:
        """The cached entries to check: those the watch saw a name of move, and those
        whose variants changed since the last check (the journal)."""
        return [e for e in {**dict.fromkeys(self._changed), **moved} if e in self.cache]

    def between_cells(self) -> None:
        """The cell is over (every per-cell hook has run): what happens now, in a
        callback or a thread, happens in no cell."""
        self.cell = None

    def _watch_changed(self) -> None:
        changed = list(self._changed)
        self._changed.clear()
        self.watch.update(changed)

    def attach(self) -> None:
        """A shell loaded the extension: cells are numbered, and the fresh entries (kept
        from an earlier load) are checked and watched from the next cell on."""
        self.attached = True
        self._when_free(lambda: self._changed.update(self.cache))

    def detach(self) -> None:
        """The shell is gone (the extension unloaded): no more cells, nothing watched."""
        self.attached = False
        self.cell = None
        self._when_free(self._forget_cells)

    def _forget_cells(self) -> None:
        self.cell_ended()
        self.watch.clear()
        self._changed.clear()

    def _check(
        self,
        entries: Iterable[Entry],
        deep: bool,
        detection: Detection,
        witnessed: Mapping[Entry, Set[str]] | None = None,
    ) -> int:
        """Check these entries' guards (without array contents unless ``deep``); drop
        the variants whose code or data changed. ``witnessed``: for each entry, the
        subjects whose binding the watch saw move since its last commit (a mismatch of
        one of them happened in this cell)."""
        went = 0
        for entry in entries:
            if entry.state is not State.FRESH:
                continue
            seen = witnessed.get(entry, ()) if witnessed is not None else ()
            try:
                fn = entry.target.resolve()
            except Exception as exc:  # the name is gone, or model.loss raises now
                gone = isinstance(exc, TargetGone)
                kind = ChangeKind.DELETED if gone else ChangeKind.UNREADABLE
                label = entry.target.label
                gone_bad = Mismatch(label, kind)
                if label.partition(".")[0] in seen:  # (``model.loss``: ``model`` moved)
                    seen = {*seen, label}
                entry.invalidate(self._change(gone_bad, detection, entry, seen))
                went += 1
                continue
            for variant in entry.variants:
                try:
                    bad = variant.guard.check_env(fn, deep and not variant.replays_python)
                except Exception as exc:
                    self.internal_error("checking a guard", exc)
                    continue
                if bad is not None:
                    entry.drop(variant, self._change(bad, detection, entry, seen))
            if entry.state is not State.FRESH:
                went += 1
            else:
                entry.checked(self.cell)
        return went

    def refresh(
        self,
        name: str | None = None,
        force: bool = False,
        eager: bool = False,
        which: Callable[[Entry], bool] | None = None,
    ) -> dict[str, Any]:
        """Rebuild stale entries now (those depending on ``name``, if given, or those
        ``which`` selects: a handle's own); ``force`` rebuilds fresh ones too. Entries
        whose last arguments were not kept are left to rebuild at their next call.
        ``eager`` (after a cell, unasked) skips functions whose last build had effects
        (they would print, draw or count behind the user's back). Either way the global
        random generators are put back as they were."""
        report: dict[str, Any] = {"rebuilt": [], "pending": [], "failed": [], "matched": 0}
        with self.lock_for_request():
            self.sweep(deep=True, detection=Detection.ON_REQUEST)
            for entry in self.cache:
                if which is not None and not which(entry):
                    continue
                if name is not None and not mentions(entry, name):
                    continue
                report["matched"] += 1
                if eager and (entry.info.note or entry.builds == 0):
                    continue
                if entry.state is State.UNBUILT:
                    continue  # (never built: nothing to rebuild; see ``build_at_call``)
                if entry.state is State.FRESH:
                    if not force:
                        continue
                    entry.invalidate(Change(ChangeKind.REFRESH, cell=self.cell))
                if entry.example is None:
                    report["pending"].append(entry.name)
                    continue
                args, kwargs = entry.example
                reasons = entry.reasons
                try:
                    with _global_random_kept():  # (a rebuild is not a draw of the user's)
                        self._build(entry, entry.target.resolve(), args, kwargs)
                except KeyboardInterrupt:
                    raise
                except BaseException as exc:
                    # (Unasked, even ``sys.exit`` in the user's code must not end the cell
                    # or the kernel: the user's next call says whether it raises.)
                    if not (eager or isinstance(exc, Exception)):
                        raise
                    report["failed"].append([entry.name, describe_error(exc)])
                    if eager:
                        entry.retry_later(reasons)
                else:
                    report["rebuilt"].append(entry.name)
        self._notify()
        return report

    def clear(self) -> None:
        """Forget every cached derivative (``%reset`` does this; while another thread's
        build holds the cache, the next cell does: calls check for themselves)."""
        self._when_free(self._forget_all)

    def _forget_all(self) -> None:
        self.cache.clear()
        self._targets.clear()
        self._changed.clear()
        self.watch.clear()

    def status(self, check: bool = True) -> dict[str, Any]:
        """A plain, JSON-serialisable picture of the cache. ``check`` runs every guard
        first (arrays' contents included), so that "fresh" means fresh now. Raises
        :class:`EngineBusy` while another thread's build holds the cache."""
        with self.lock_for_request():
            if check:
                self.sweep(deep=True, detection=Detection.ON_REQUEST)
            entries = [entry_status(e) for e in self.cache]
            count = {s.value: 0 for s in State}
            for e in entries:
                count[e["state"]] += 1
            return {
                "version": 2,
                "attached": self.attached,
                "mode": self.config.mode,
                "backend": self.config.backend,
                "compiler": self.config.backend,
                "fresh": count["fresh"],
                "stale": count["stale"],
                "failed": count["failed"],
                "unbuilt": count["unbuilt"],
                "entries_total": len(entries),
                "builds": self.stats["builds"],
                "rebuilds": self.stats["rebuilds"],
                "variants": self.stats["variants"],
                "unbuilt_calls": self.stats["unbuilt_calls"],
                "calls_before_build": self.stats["calls_before_build"],
                "busy_calls": self.stats["busy_calls"],
                "busy_cells": self.stats["busy_cells"],
                "busy_requests": self.stats["busy_requests"],
                "interrupted_locks": self.stats["interrupted_locks"],
                "interrupts_raised_again": droppedinterrupts.sent_again(),
                "evictions": self.cache.evictions,
                "internal_errors": self.stats["internal_errors"],
                "entries": entries,
                "changes": [c.as_dict() for c in self.changes.recent()],
            }

    def internal_error(self, what: str, exc: BaseException, where: str = "") -> None:
        """Count a failure of ipyrefresh's own machinery; warn once per kind (``what``, a
        fixed phrase, and the exception's type: ``where`` names the derivative but keys
        nothing, or the set would grow by one per failing derivative). Never raises."""
        self.stats["internal_errors"] += 1
        key = f"{what}:{type(exc).__name__}"
        if key not in self._warned:
            self._warned.add(key)
            of = f", for {where}" if where else ""
            print(
                f"ipyrefresh: internal error while {what}{of} ({type(exc).__name__}: {exc}); "
                "answers stay correct (calls check for themselves). Counted in status().",
                file=sys.stderr,
            )

    def _notify(self) -> None:
        for listener in list(self.listeners):
            try:
                listener()
            except Exception as exc:  # a broken listener must never break a cell
                self.internal_error("notifying a listener", exc)


_NO = Miss("guard")
_ARGS = Miss("arguments")


def _argument_miss(bad: Mismatch) -> Miss:
    """Another value of an argument a variant read (``_ARGS``: a path may be traced for
    it), or another shape, kind or arity (``_NO``)."""
    return _NO if bad.kind is ChangeKind.RESHAPED else _ARGS


@dataclass(frozen=True, slots=True)
class ArgumentMiss:
    """A variant whose guard failed on an argument's value, found by a handle before it
    took the engine's lock."""

    variant: Variant
    mismatch: Mismatch


def argument_keys(guard: Guard) -> Iterator[int | str]:
    """The positions and keywords of the arguments ``guard`` checks."""
    for reader, _ in guard.args:
        if isinstance(reader, ArgReader):
            yield reader.key


@interruptsafe.contextmanager
def _global_random_kept() -> Iterator[None]:
    """numpy's and Python's global generators end as they started."""
    np_state = np.random.get_state()
    py_state = random.getstate()
    try:
        yield
    finally:
        np.random.set_state(np_state)
        random.setstate(py_state)


def _replaced(known: Target, new: Target) -> bool:
    """A fixed target whose object died and whose id now belongs to another object."""
    return isinstance(known, FixedTarget) and known.dead


def mentions(entry: Entry, name: str) -> bool:
    """``entry`` depends on the top-level name ``name`` (for ``%refresh name``)."""
    if entry.target.label.split(".")[0] == name:
        return True
    if any(c.root_name == name for c in entry.reasons):
        return True
    return any(r == name or r.startswith((f"{name}.", f"{name}[")) for r in entry.info.reads)


def describe_error(exc: BaseException) -> str:
    try:
        text = str(exc)
    except Exception:
        text = "<unprintable error>"
    return f"{type(exc).__name__}: {text}"[:500]


def entry_status(entry: Entry) -> dict[str, Any]:
    key = entry.key
    variants = entry.variants
    note = entry.info.note or next((v.note for v in variants if v.note), "")
    return {
        "id": entry.id,
        "name": entry.name,
        "target": entry.target.label,
        "follows": entry.target.follows,
        "transform": key.transform.value,
        "argnum": list(key.argnum) if isinstance(key.argnum, tuple) else key.argnum,
        "signature": repr(key.signature),
        "state": entry.state.value,
        "reasons": [c.as_dict() for c in entry.reasons] if entry.state is not State.FRESH else [],
        "error": entry.error,
        "builds": entry.builds,
        "calls_before_build": entry.calls_before_build,
        "rebuilds": entry.rebuilds,
        "hits": entry.hits,
        "compiler": key.backend,
        "runs": [v.describe() for v in variants],
        "fallback": note,
        "notes": list(entry.info.notes),
        "deps": list(entry.info.reads),
        "last_event": entry.last_event,
    }


def _small_copy(value: Any, budget: list[int]) -> Any:
    """A private copy of plain numeric arguments, or raise ValueError if too big or odd.
    Immutable scalars and strings are kept as they are, at their size (a string of text
    data is as big as an array)."""
    t = type(value)
    if t in (float, int, bool, complex, str, type(None)):
        budget[0] -= sys.getsizeof(value)
        if budget[0] < 0:
            raise ValueError
        return value
    if t is np.ndarray or issubclass(t, np.generic):
        budget[0] -= value.nbytes
        if budget[0] < 0 or value.dtype.hasobject:
            raise ValueError
        return value.copy()
    if is_jax_array_type(t) and t.__name__ == "ArrayImpl":  # a concrete jax Array
        budget[0] -= value.nbytes
        if budget[0] < 0 or value.is_deleted():  # (donated to a jax.jit: gone)
            raise ValueError
        return value  # immutable (entries that donate their arguments keep no example)
    if t in (tuple, list):
        return t(_small_copy(v, budget) for v in value)
    if t is dict:
        return {k: _small_copy(v, budget) for k, v in value.items() if type(k) is str}
    raise ValueError


def _retain(
    args: tuple[Any, ...], kwargs: dict[str, Any], budget: int
) -> tuple[tuple[Any, ...], dict[str, Any]] | None:
    try:
        left = [budget]
        return tuple(_small_copy(a, left) for a in args), {
            k: _small_copy(v, left) for k, v in kwargs.items()
        }
    except (ValueError, TypeError, copy.Error):
        return None


# -- the current engine ------------------------------------------------------------------------

_current: list[Engine] = []


def current() -> Engine:
    """The process's engine (created on first use)."""
    if not _current:
        _current.append(Engine())
    return _current[-1]


@interruptsafe.contextmanager
def using(engine: Engine) -> Iterator[Engine]:
    """Make ``engine`` the current one inside the block (tests use a fresh engine)."""
    _current.append(engine)
    try:
        yield engine
    finally:
        _current.remove(engine)


__all__ = ["MAX_VARIANTS", "Engine", "Signature", "current", "describe_error", "using"]
