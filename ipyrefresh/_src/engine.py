"""The engine: world ages, the watch table and the derivative cache, working together.

Data flow for one call of a derivative handle (see ``handles.Derivative.__call__``)::

    entry.world == world.now ──yes──▶ run the artifact            (fast path, no lock)
            │no
            ▼  (engine.call, under the lock)
    entry stale? ──no──▶ stamp entry with the current world, run
            │yes
            ▼
    rebuild this entry only: analyse, trace under the call recorder, subscribe deps

and for one cell (``after_cell``): probe every watched dependency; if any changed,
advance the world once and mark exactly the dependents of the changed ones stale.
"""

from __future__ import annotations

import contextlib
import copy
import threading
import weakref
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping
from types import CodeType, FunctionType
from typing import Any

import numpy as np

from .analysis import Analyzer, DepGraph, type_name
from .cache import DerivativeCache, Entry
from .compilers import AutogradCompiler, Built, Compiler, make_compiler
from .config import IPyRefresh
from .deps import MISSING, BindingDep, ContentDep
from .recorder import CallLog, record_calls, reset_if_idle
from .signature import _JAX_TYPES
from .table import Changed, DepTable
from .targets import Target
from .world import NEVER, Change, World

#: Compilers whose artifacts re-run the user's Python code on every call.
_REPLAYS_PYTHON = {"autograd"}
_GENERATOR_FLAGS = (
    0x20 | 0x80 | 0x100 | 0x200
)  # generator, coroutine, iterable coroutine, async gen


def check_differentiable(fn: Any, label: str) -> None:
    """Reject what autograd can never differentiate, with a message that says why."""
    if not callable(fn):
        raise TypeError(f"'{label}' is not callable (it is a {type_name(type(fn))})")
    if type(fn) is FunctionType and fn.__code__.co_flags & _GENERATOR_FLAGS:
        kind = "an async function" if fn.__code__.co_flags & 0x280 else "a generator function"
        raise TypeError(f"'{label}' is {kind}; derivatives need a function that returns a value")


def _small_copy(value: Any, budget: list[int]) -> Any:
    """A private copy of plain numeric arguments, or raise ValueError if too big/odd."""
    t = type(value)
    if t in (float, int, bool, complex, str, type(None)):
        return value
    if t is np.ndarray or issubclass(t, np.generic):
        budget[0] -= value.nbytes
        if budget[0] < 0 or value.dtype.hasobject:
            raise ValueError
        return value.copy()
    if _JAX_TYPES.get(t) and t.__name__ == "ArrayImpl":  # a concrete jax Array: immutable
        budget[0] -= value.nbytes
        if budget[0] < 0:
            raise ValueError
        return value
    if t in (tuple, list):
        return t(_small_copy(v, budget) for v in value)
    if t is dict:
        return {k: _small_copy(v, budget) for k, v in value.items() if type(k) is str}
    raise ValueError


class Engine:
    """Owns the world, the watch table and the cache; one per process."""

    def __init__(self, config: IPyRefresh | None = None) -> None:
        self.world = World()
        self.table = DepTable()
        self.config = config or IPyRefresh()
        self.cache = DerivativeCache(self.config.max_entries, self._evicted)
        self.lock = threading.RLock()
        self.user_ns: dict[str, Any] | None = None
        self.cell: int | None = None
        self.stats = {"builds": 0, "rebuilds": 0, "invalidations": 0, "sweeps": 0}
        self.listeners: list[Callable[[], None]] = []
        self._targets: dict[Hashable, Target] = {}
        self._compilers: dict[str, Compiler] = {}
        self._observe_config()

    # -- configuration and attachment ---------------------------------------------------
    def _observe_config(self) -> None:
        def resize(change: dict[str, Any]) -> None:
            with self.lock:
                self.cache.max_entries = change["new"]
                self.cache.shrink()

        def recompile(change: dict[str, Any]) -> None:
            # Entries built by the old default compiler must not answer any more.
            self.clear()

        self.config.observe(resize, names="max_entries")
        self.config.observe(recompile, names="compiler")

    def use_config(self, config: IPyRefresh) -> None:
        self.config = config
        self.cache.max_entries = config.max_entries
        self.cache.shrink()
        self._observe_config()

    @property
    def attached(self) -> bool:
        """True while a namespace watcher guarantees that changes are seen."""
        return self.user_ns is not None

    def attach(self, user_ns: dict[str, Any]) -> None:
        with self.lock:
            self.user_ns = user_ns
            self.world.advance()  # every entry re-validates once under the new regime

    def detach(self) -> None:
        with self.lock:
            self.user_ns = None
            self.world.advance()
            for entry in self.cache:
                entry.world = NEVER
            self._targets = {k: t for k, t in self._targets.items() if not t.follows}

    # -- targets ---------------------------------------------------------------------------
    def target_for(self, fun: Any) -> Target:
        """Follow the name ``fun`` is bound to in the user namespace, if IPython is attached."""
        ns = self.user_ns
        name = _bound_name(ns, fun) if ns is not None else None
        if ns is not None and name is not None:
            key: Hashable = ("name", id(ns), name)
            target = self._targets.get(key)
            if target is None:
                target = self._targets[key] = Target.followed(ns, name)
            return target
        label = fun.__name__ if type(fun) is FunctionType else type_name(type(fun))
        key = ("obj", id(fun))
        target = self._targets.get(key)
        if target is not None and target.ref is not None and target.ref() is fun:
            return target
        target = self._targets[key] = Target.fixed(fun, label, self._target_died)
        return target

    def hold(self, target: Target) -> None:
        """A handle on the fixed ``target`` was made (see :meth:`release`)."""
        with self.lock:
            target.holders += 1

    def release(self, target: Target) -> None:
        """The last handle on a fixed target is gone: drop its entries now.

        Its watched dependencies hold the function (and its globals) strongly, so the
        function's own weakref would never fire while they are subscribed.
        """
        with self.lock:
            target.holders -= 1
            if target.holders <= 0 and not target.follows:
                self._target_died(target)

    def _target_died(self, target: Target) -> None:
        with self.lock:
            if self._targets.get(target.key) is target:
                del self._targets[target.key]
            for key in list(target.entry_keys):
                entry = self.cache.get(key)
                if entry is not None and entry.target is target:
                    self.cache.remove(entry)

    # -- the call path -------------------------------------------------------------------
    def entry_for(
        self,
        target: Target,
        transform: str,
        argnum: Any,
        sig: Hashable,
        compiler: str | None = None,
    ) -> Entry:
        """The cache entry for this key, created (unbuilt) if needed.

        ``compiler`` pins a backend (``ipyrefresh.jax`` handles do); ``None`` means the
        configured default.
        """
        name = compiler or self.config.compiler
        key = (target.key, transform, argnum, sig, name)
        entry = self.cache.get(key)
        if entry is None or entry.target is not target:
            if entry is not None:
                self.cache.remove(entry)
            entry = Entry(key, target, transform, argnum, sig)
            entry.compiler = name
            entry.pinned = compiler
            self.cache.add(entry)
            target.entry_keys.add(key)
        return entry

    def call(
        self, entry: Entry, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> tuple[Entry, Any]:
        """The slow path: validate ``entry``, rebuild it if stale, and compute the result.

        Returns the entry actually used (a new one if ``entry`` was evicted) and the result.
        """
        with self.lock:
            if self.cache.get(entry.key) is not entry:
                entry = self.entry_for(
                    entry.target, entry.transform, entry.argnum, entry.signature, entry.pinned
                )
            if not self.attached and not entry.stale:
                with self._all_or_nothing():
                    changes = self.table.check(entry.dep_keys)
                    if changes:
                        self._invalidate(changes)
            if entry.stale or entry.artifact is None:
                return entry, self._build(entry, args, kwargs)
            entry.world = self.world.now if self.attached else NEVER
            entry.hits += 1
            entry.last_event = "cache hit (validated)"
            artifact, fn = entry.artifact, entry.fn()
        return entry, artifact(fn, args, kwargs)

    def _compiler(self, name: str) -> Compiler:
        compiler = self._compilers.get(name)
        if compiler is None:
            compiler = self._compilers[name] = make_compiler(name)
        return compiler

    def _build(self, entry: Entry, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """(Re)build ``entry`` from the current code; return the result for ``args``."""
        target = entry.target
        fn = target.resolve()
        check_differentiable(fn, target.label)
        self.table.unsubscribe(entry)
        was_built = entry.builds > 0
        why = "; ".join(entry.reasons) if was_built else ""
        graph = DepGraph()
        analyzer = Analyzer(graph, self.config.max_digest_bytes)
        root = target.label
        if target.ns is not None:
            graph.add(BindingDep(target.ns, target.name, root))
        if type(fn) is FunctionType:
            analyzer.function(fn, root)
        else:
            analyzer.value(fn, root, root, "static", data=False)
        compiler = self._compiler(entry.compiler)
        watched = [d for d in graph.deps.values() if type(d) in (ContentDep, BindingDep)]
        before = [d.probe().state for d in watched]
        try:
            with record_calls(self.config.record_dynamic_edges) as log:
                built = compiler.build(fn, entry.transform, entry.argnum, args, kwargs)
        except BaseException as exc:
            entry.error = _describe_error(exc)
            entry.stale = True
            raise
        mutated = [d.label for d, s in zip(watched, before, strict=True) if d.probe().state != s]
        effects = [f"it changes {', '.join(mutated)} while it runs"] if mutated else []
        effects += graph.side_effects
        if effects and compiler.name not in _REPLAYS_PYTHON:
            # A compiled replay would skip the side effect; plain autograd re-runs it.
            built = Built(
                AutogradCompiler.build_artifact(entry.transform, entry.argnum),
                built.result,
                fallback="; ".join(effects),
            )
        _absorb_calls(analyzer, log, root, fn)
        if hasattr(built.artifact, "watch"):
            built.artifact.watch = self._retrace_watcher(entry)
        with self._all_or_nothing():
            changes = self.table.subscribe(entry, graph.deps.values())
            if changes:  # something changed mid-cell, or the build itself mutated it
                self._invalidate(changes)
        entry.graph = _Summary(graph, log.note)
        entry.artifact = built.artifact
        entry.direct = built.direct
        entry.fn = _ref_to(fn) if target.follows else target.ref
        entry.compiler = compiler.name
        entry.fallback = built.fallback
        entry.error = ""
        entry.stale = False
        entry.reasons = []
        entry.builds += 1
        entry.world = self.world.now if self.attached else NEVER
        entry.example = _retain(args, kwargs, self.config.retain_example_bytes)
        self.stats["builds"] += 1
        if was_built:
            self.stats["rebuilds"] += 1
            entry.last_event = f"rebuilt ({why})" if why else "rebuilt"
            if self.config.verbose:
                print(f"ipyrefresh: rebuilt {describe_entry(entry)}: {why}")
        else:
            entry.last_event = "built (first call)"
        if built.detail:
            entry.last_event += f"; {built.detail}"
        if target.ns is not None and target.ns.get(target.name, MISSING) is not fn:
            # The name was rebound while we built (by the function itself, or by a cell
            # in another thread) and the watch table saw only the new binding: this
            # answer is for the old function, later calls must not reuse it.
            self.table.unsubscribe(entry)
            entry.mark_stale(f"{target.name} rebound while its derivative was built")
        self._notify()
        return built.result

    def _retrace_watcher(self, entry: Entry) -> Callable[[Callable[[], Any]], Any]:
        """Record what a compiled artifact's own retrace runs (a guard failed, a new path).

        The new path may call functions the build never saw; they become dependencies of
        the entry too, or redefining them later would go unnoticed.
        """
        entry_ref = weakref.ref(entry)

        def watch(trace: Callable[[], Any]) -> Any:
            if not self.config.record_dynamic_edges:
                return trace()
            with record_calls(True) as log:
                result = trace()
            with self.lock:
                entry = entry_ref()
                if entry is None or entry.stale or not log.calls:
                    return result
                graph = DepGraph()
                _absorb_calls(
                    Analyzer(graph, self.config.max_digest_bytes),
                    log,
                    entry.target.label,
                    entry.fn() if entry.fn else None,
                )
                with self._all_or_nothing():
                    changes = self.table.subscribe(entry, graph.deps.values(), extend=True)
                    if changes:
                        self._invalidate(changes)
                if entry.graph is not None:
                    entry.graph.merge(graph)
            return result

        return watch

    # -- watching ----------------------------------------------------------------------------
    def after_cell(self, cell: int | None) -> list[Change]:
        """Probe every watched dependency once; invalidate along backedges."""
        with self.lock:
            reset_if_idle()  # no build runs between cells
            self.stats["sweeps"] += 1
            with self._all_or_nothing():
                changes = self.table.check()
                recorded = self._invalidate(changes, cell) if changes else []
            if self.config.mode == "eager":
                self.refresh(quiet=True)
        if recorded:
            self._notify()
        return recorded

    def sync(self, names: Iterable[str] | None) -> None:
        """Mid-cell check after a statement that bound ``names`` (None: check everything)."""
        ns = self.user_ns
        if ns is None or not self.table.records:
            return
        with self.lock:
            keys = None if names is None else self.table.keys_for_names(ns, names)
            with self._all_or_nothing():
                changes = self.table.check(keys)
                if changes:
                    self._invalidate(changes)
        if changes:
            self._notify()

    @contextlib.contextmanager
    def _all_or_nothing(self) -> Iterator[None]:
        """Absorbing new probe states and invalidating their dependents go together.

        ``table.check``/``subscribe`` record a dependency's new state before its dependents
        are marked stale; interrupted in between (Ctrl-C), that change would be missed for
        good. Then every entry is invalidated instead: correct, at the cost of rebuilds.
        """
        try:
            yield
        except BaseException:
            self.world.advance()
            for entry in self.cache:
                self.table.unsubscribe(entry)
                entry.mark_stale("interrupted while checking for changes")
            raise

    def _invalidate(self, changes: list[Changed], cell: int | None = None) -> list[Change]:
        if cell is None:
            cell = self.cell
        world = self.world.advance()
        recorded = []
        for change in changes:
            event = Change(world, cell, change.label, change.what)
            self.world.record(event)
            recorded.append(event)
            reason = event.describe()
            for entry in change.dependents:
                if not entry.stale:
                    self.table.unsubscribe(entry)
                    self.stats["invalidations"] += 1
                entry.mark_stale(reason)
        return recorded

    def _evicted(self, entry: Entry) -> None:
        self.table.unsubscribe(entry)
        entry.target.entry_keys.discard(entry.key)
        entry.mark_stale("evicted from the cache")
        entry.example = None

    # -- user commands ---------------------------------------------------------------------
    def refresh(
        self, name: str | None = None, force: bool = False, quiet: bool = False
    ) -> dict[str, Any]:
        """Rebuild stale entries now (those depending on ``name``, if given).

        ``force`` rebuilds fresh entries too (a full refresh, for comparison). Entries
        whose last arguments were not kept are left to rebuild at their next call.
        """
        report: dict[str, Any] = {"rebuilt": [], "pending": [], "failed": []}
        with self.lock:
            for entry in self.cache:
                if not (entry.stale or force):
                    continue
                if name is not None and not _mentions(entry, name):
                    continue
                if force and not entry.stale:
                    self.table.unsubscribe(entry)
                    entry.mark_stale("full refresh requested")
                if entry.example is None:
                    report["pending"].append(describe_entry(entry))
                    continue
                args, kwargs = entry.example
                try:
                    self._build(entry, args, kwargs)
                except Exception as exc:
                    report["failed"].append((describe_entry(entry), _describe_error(exc)))
                else:
                    report["rebuilt"].append(describe_entry(entry))
        if not quiet:
            self._notify()
        return report

    def clear(self) -> None:
        """Forget every cached derivative (``%reset`` and unloading do this)."""
        with self.lock:
            for entry in self.cache:
                self.cache.remove(entry)
            self._targets.clear()

    def status(self) -> dict[str, Any]:
        """A plain, JSON-serialisable picture of the cache (tests and the front end read it)."""
        with self.lock:
            entries = [entry_status(e) for e in self.cache]
            fresh = sum(1 for e in entries if e["state"] == "fresh")
            return {
                "version": 1,
                "attached": self.attached,
                "world": self.world.now,
                "mode": self.config.mode,
                "compiler": self.config.compiler,
                "fresh": fresh,
                "stale": len(entries) - fresh,
                "entries_total": len(entries),
                "watched": len(self.table),
                "builds": self.stats["builds"],
                "rebuilds": self.stats["rebuilds"],
                "invalidations": self.stats["invalidations"],
                "evictions": self.cache.evictions,
                "entries": entries,
                "changes": [c.describe() for c in list(self.world.history)[-20:]],
            }

    def _notify(self) -> None:
        for listener in list(self.listeners):
            with contextlib.suppress(Exception):  # a broken listener must never break a cell
                listener()


class _Summary:
    """What ``%callgraph`` and ``%stale`` need of a build, without holding user objects."""

    __slots__ = ("deps", "edges", "note", "side_effects")

    def __init__(self, graph: DepGraph, note: str) -> None:
        self.deps = sorted({d.label for d in graph.deps.values()})
        self.edges = dict(graph.edges)
        self.side_effects = list(graph.side_effects)
        self.note = note

    def merge(self, graph: DepGraph) -> None:
        self.deps = sorted({*self.deps, *(d.label for d in graph.deps.values())})
        self.edges.update(graph.edges)


def _absorb_calls(analyzer: Analyzer, log: CallLog, root: str, fn: Any) -> None:
    """Add the dynamic edges of a recorded run to the analyzer's graph."""
    root_code = fn.__code__ if type(fn) is FunctionType else None
    labels: dict[CodeType, str] = {}
    for (caller, code), globs in log.calls.items():
        if code is root_code:
            labels[code] = root
            continue
        caller_label = None if caller is None else labels.get(caller, caller.co_qualname)
        labels[code] = analyzer.called(code, globs, caller_label, root)


def _ref_to(fn: Any) -> Callable[[], Any]:
    return lambda: fn


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


def _mentions(entry: Entry, name: str) -> bool:
    if entry.target.label == name:
        return True
    if any(r.startswith(f"{name} ") for r in entry.reasons):
        return True
    graph = entry.graph
    return graph is not None and name in graph.deps


def _describe_error(exc: BaseException) -> str:
    try:
        text = str(exc)
    except Exception:
        text = "<unprintable error>"
    return f"{type(exc).__name__}: {text}"[:500]


def _bound_name(ns: Mapping[str, Any], fun: Any) -> str | None:
    """The public name ``fun`` is bound to in ``ns``, if any (no user code is run)."""
    if type(fun) is FunctionType:
        name = fun.__name__
        if ns.get(name) is fun:
            return name
    for key, value in list(ns.items()):
        if value is fun and type(key) is str and not key.startswith("_"):
            return key
    return None


def describe_entry(entry: Entry) -> str:
    argnum = "" if entry.argnum == 0 else f", argnum={entry.argnum}"
    return f"{entry.transform}({entry.target.label}{argnum})"


def entry_status(entry: Entry) -> dict[str, Any]:
    graph = entry.graph
    state = "error" if entry.error and entry.stale else ("stale" if entry.stale else "fresh")
    return {
        "id": entry.id,
        "name": describe_entry(entry),
        "target": entry.target.label,
        "follows": entry.target.follows,
        "transform": entry.transform,
        "argnum": list(entry.argnum) if isinstance(entry.argnum, tuple) else entry.argnum,
        "signature": repr(entry.signature),
        "state": state,
        "reasons": list(entry.reasons) if entry.stale else [],
        "error": entry.error,
        "builds": entry.builds,
        "rebuilds": entry.rebuilds,
        "hits": entry.hits,
        "compiler": entry.compiler,
        "fallback": entry.fallback or getattr(entry.artifact, "note", ""),
        "deps": list(graph.deps) if graph is not None else [],
        "last_event": entry.last_event,
    }
