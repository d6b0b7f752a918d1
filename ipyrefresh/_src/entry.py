"""A cache entry: one derivative of one target for one call signature, and its states.

::

    UNBUILT ──install──▶ FRESH ──a guard fails / evicted / refresh──▶ STALE ──install──▶ FRESH
                           ▲                                         │
                           └────────── a build raised: FAILED ◀──────┘ (install clears it)

A FRESH entry holds one or more *variants* (compiled artifacts with their guards); a
call takes the first whose guard holds. A STALE entry holds no variant and no user
object, only why it went stale (:class:`~ipyrefresh._src.changes.Change`). Only the
methods below change an entry's fields; the engine calls them under its lock.
"""

from __future__ import annotations

import enum
import itertools
from collections.abc import Iterable, MutableSet
from dataclasses import dataclass, field
from typing import Any

from .changes import CellRef, Change, ChangeKind
from .compilers.base import Request, Variant
from .keys import EntryKey, Transform
from .sightings import Sightings
from .targets import Target

_ids = itertools.count(1)


class State(enum.Enum):
    UNBUILT = "unbuilt"
    FRESH = "fresh"
    STALE = "stale"
    FAILED = "failed"


@dataclass
class BuildInfo:
    """What ``%callgraph`` and ``status()`` show of a build; labels only, no user objects."""

    reads: list[str] = field(default_factory=list)  # the globals and attributes it read
    edges: dict[tuple[str, str], str] = field(default_factory=dict)  # (caller, callee) -> kind
    note: str = ""  # why it runs on a fallback, if it does
    notes: list[str] = field(default_factory=list)  # smaller caveats (identity-only checks)


class Entry:
    """See the module docstring."""

    __slots__ = (
        "__weakref__",
        "builds",
        "calls_before_build",
        "drawn_between_calls",
        "error",
        "example",
        "hits",
        "id",
        "info",
        "journal",
        "key",
        "last_event",
        "reasons",
        "request",
        "sightings",
        "state",
        "target",
        "variants",
        "verified",
    )

    def __init__(
        self, key: EntryKey, target: Target, journal: MutableSet[Entry] | None = None
    ) -> None:
        self.id = next(_ids)
        #: Where the entry notes itself when its variants change (see ``watch``).
        self.journal = journal
        self.key = key
        self.target = target
        self.request = Request(key.transform, key.argnum, key.options)
        self.state = State.UNBUILT
        self.variants: tuple[Variant, ...] = ()
        self.reasons: tuple[Change, ...] = (Change(ChangeKind.NOT_BUILT),)
        self.info = BuildInfo()
        self.error = ""
        self.builds = 0
        #: Calls answered by the fallback before the first build (see ``build_at_call``).
        self.calls_before_build = 0
        #: A generator a variant reached was drawn from between calls: builds run the code.
        self.drawn_between_calls = False
        self.hits = 0
        self.example: tuple[tuple[Any, ...], dict[str, Any]] | None = None
        self.last_event = ""
        self.sightings = Sightings()
        #: The cell in which the entry was last known right (built, hit or checked).
        self.verified: CellRef | None = None

    @property
    def name(self) -> str:
        key = self.key
        argnum = (
            "" if key.argnum == 0 or key.transform is Transform.JIT else f", argnum={key.argnum}"
        )
        return f"{key.transform.value}({self.target.label}{argnum})"

    @property
    def answered(self) -> bool:
        """It answered a call once (a build, or the code run before its build)."""
        return self.builds > 0 or self.calls_before_build > 0

    @property
    def rebuilds(self) -> int:
        return max(self.builds - 1, 0)

    # -- transitions ---------------------------------------------------------------------
    def install(self, variant: Variant, info: BuildInfo, event: str, cell: CellRef | None) -> None:
        """A build succeeded (in ``cell``): its variant becomes the first to answer."""
        if cell is not None:
            self.verified = cell
        self.variants = (variant,) if self.state is not State.FRESH else (variant, *self.variants)
        self.state = State.FRESH
        self.reasons = ()
        self.error = ""
        self.info = info
        self.builds += 1
        self.last_event = event
        self._changed()

    def add_variant(self, variant: Variant, event: str) -> None:
        """Another path through the same code (a guard on the arguments failed)."""
        self.variants = (variant, *self.variants)
        self.last_event = event
        self._changed()

    def drop(self, variant: Variant, change: Change) -> None:
        """One variant's code or data changed; the entry is stale when none is left."""
        if change.kind is ChangeKind.DRAWN_FROM:
            self.drawn_between_calls = True
        remaining = tuple(v for v in self.variants if v is not variant)
        if remaining:
            self.variants = remaining
            self._changed()
        else:
            self.invalidate(change)

    def invalidate(self, change: Change) -> None:
        """Stale: drop every variant (and the user objects they hold), keep the reason.

        The state changes before the variants go (and ``install`` sets variants before
        the state), so an interrupt between the two never leaves a FRESH entry without a
        variant; a variant briefly kept by a stale entry is still checked by its guard.
        """
        if change.kind is ChangeKind.DRAWN_FROM:
            self.drawn_between_calls = True
        was = self.state
        if self.state is not State.FAILED:
            self.state = State.STALE
        if was is State.FRESH or was is State.UNBUILT:
            self.reasons = ()
        if change not in self.reasons and len(self.reasons) < 8:
            self.reasons = (*self.reasons, change)
        self.variants = ()
        self._changed()

    def fail(self, error: str) -> None:
        """A build raised (the user's code did): the entry answers nothing until rebuilt."""
        self.state = State.FAILED
        self.variants = ()
        self.error = error
        self.reasons = (Change(ChangeKind.FAILED, detail=error),)
        self._changed()

    def retry_later(self, reasons: tuple[Change, ...]) -> None:
        """A rebuild nobody called for (eager mode) raised: stale again, for the reasons
        it had; the next call builds, and raises for the user if it still does."""
        self.state = State.STALE
        self.variants = ()
        self.error = ""
        self.reasons = reasons
        self._changed()

    def _changed(self) -> None:
        journal = self.journal
        if journal is not None:
            journal.add(self)

    def first_sight(
        self, keys: Iterable[int | str], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> bool:
        """The arguments at ``keys`` have values this entry meets for the first time (see
        ``sightings``): run the code for them rather than trace a path."""
        return self.sightings.first(keys, args, kwargs)

    def ran_before_build(self, event: str) -> None:
        """The fallback answered a call of this never-built entry (see ``build_at_call``)."""
        self.calls_before_build += 1
        self.last_event = event

    def hit(self, variant: Variant, cell: CellRef | None) -> None:
        """``variant`` answered a call (in ``cell``): count it, try it first next time."""
        self.hits += 1
        self.last_event = "cache hit"
        if cell is not None:
            self.verified = cell
        variants = self.variants  # (another thread may have dropped them meanwhile)
        if variants and variants[0] is not variant and variant in variants:
            first = (variant, *(v for v in variants if v is not variant))
            if self.variants is variants:  # (a drop since then must not be undone)
                self.variants = first

    def checked(self, cell: CellRef | None) -> None:
        """Every guard held when checked in ``cell`` (by a sweep)."""
        if cell is not None:
            self.verified = cell

    def keep_example(self, example: tuple[tuple[Any, ...], dict[str, Any]] | None) -> None:
        self.example = example

    def mark(self, event: str) -> None:
        self.last_event = event
