"""Why a cached derivative stopped being valid: structured changes, rendered only at the edges.

A guard that fails at a call (or in a reporting sweep) produces a :class:`Change`: what
changed (``subject``, a source path such as ``g`` or ``params['l1']['w']``), how
(:class:`ChangeKind`), and the cell in which it was noticed. ``%stale``, ``status()`` and
the status bar turn changes into text with :meth:`Change.describe`; nothing parses it back.
"""

from __future__ import annotations

import enum
from collections import deque
from dataclasses import dataclass


class ChangeKind(enum.Enum):
    """How a dependency changed; the value is the verb phrase shown to users."""

    REDEFINED = "redefined"
    REBOUND = "rebound"
    DEFINED = "defined"
    DELETED = "deleted"
    CODE_CHANGED = "code changed in place"
    DEFAULTS_CHANGED = "defaults changed"
    CLOSURE_CHANGED = "closed-over value changed"
    ATTRIBUTES_CHANGED = "attributes changed"
    RULE_CHANGED = "gradient rule changed"
    MUTATED = "changed in place"
    DRAWN_FROM = "drawn from (its state moved)"
    RESHAPED = "changed shape or dtype"
    CLASS_CHANGED = "class changed"
    NOT_CALLABLE = "is not callable any more"
    UNREADABLE = "cannot be read any more"
    # Reasons that are not a change of the user's code or data.
    NOT_BUILT = "not built yet"
    EVICTED = "evicted from the cache"
    REFRESH = "full refresh requested"
    CONFIG = "configuration changed"
    INTERRUPTED = "interrupted while building"
    FAILED = "failed to build"
    RECORDABLE = "can be compiled now (no other profiler is running)"


#: Kinds that say what a name is bound to (the bindings watch sees them happen).
BINDING_KINDS = frozenset(
    {
        ChangeKind.REDEFINED,
        ChangeKind.REBOUND,
        ChangeKind.DEFINED,
        ChangeKind.DELETED,
        ChangeKind.NOT_CALLABLE,
    }
)

#: Kinds that describe the cache itself rather than the user's code or data.
INTERNAL = frozenset(
    {
        ChangeKind.NOT_BUILT,
        ChangeKind.EVICTED,
        ChangeKind.REFRESH,
        ChangeKind.CONFIG,
        ChangeKind.INTERRUPTED,
        ChangeKind.FAILED,
        ChangeKind.RECORDABLE,
    }
)


@dataclass(frozen=True)
class CellRef:
    """A notebook cell: its execution count (None for a cell run without one: hidden,
    not stored in the history) and, in Jupyter front ends, its cell id."""

    count: int | None
    cell_id: str | None = None


class Detection(enum.Enum):
    """Where a change was noticed."""

    BEFORE_CELL = "before the cell"  # the watch, as a cell starts: what moved between cells
    AFTER_CELL = "after the cell"  # the reporting sweep right after the cell ran
    AT_CALL = "at a call"  # a guard at the derivative's call
    ON_REQUEST = "on request"  # %stale, status(), %refresh


@dataclass(frozen=True)
class Change:
    """One observed change of something a derivative was built from."""

    kind: ChangeKind
    subject: str = ""  # a source path: "g", "mymod.SCALE", "params['l1']['w']"
    cell: CellRef | None = None  # where it was noticed
    detection: Detection = Detection.AT_CALL
    detail: str = ""
    since: CellRef | None = None  # the last cell in which the derivative was known right

    @property
    def root_name(self) -> str:
        """The top-level name the subject starts from (``params`` for ``params['l1']``)."""
        s = self.subject
        for i, ch in enumerate(s):
            if ch in ".[(' ":
                return s[:i]
        return s

    def describe(self) -> str:
        text = self.kind.value if not self.subject else f"{self.subject} {self.kind.value}"
        if self.detail:
            text = f"{text} ({self.detail})"
        if self.kind in INTERNAL:
            return text
        return text + self.when()

    def exact_cell(self) -> CellRef | None:
        """The cell the change happened in, when that is known: what changed was known
        right earlier in the same cell (``since``: a call, a check, or the bindings the
        watch took as the cell started). Between cells nothing is known right: a
        callback or a thread may change anything there."""
        cell, since = self.cell, self.since
        if cell is None or cell.count is None or since is None:
            return None
        return cell if since.count == cell.count else None

    def when(self) -> str:
        """' in cell [N]' when the cell is known, ' since cell [M]' when only a bound is."""
        exact = self.exact_cell()
        if exact is not None:
            return f" in cell [{exact.count}]"
        since = self.since
        if since is not None and since.count is not None:
            return f" since cell [{since.count}]"
        return ""

    def as_dict(self) -> dict[str, object]:
        """The JSON form used by ``status()`` and the front end."""
        cell = self.exact_cell() if self.kind not in INTERNAL else None
        since = self.since
        return {
            "text": self.describe(),
            "kind": self.kind.name.lower(),
            "subject": self.subject,
            "cell": cell.count if cell is not None else None,  # where it happened, if known
            "cell_id": cell.cell_id if cell is not None else None,
            "since": since.count if since is not None and cell is None else None,
        }


class ChangeLog:
    """A short history of the changes that invalidated something, newest last."""

    __slots__ = ("_items",)

    def __init__(self, size: int = 200) -> None:
        self._items: deque[Change] = deque(maxlen=size)

    def record(self, change: Change) -> None:
        self._items.append(change)

    def recent(self, n: int = 20) -> list[Change]:
        items = list(self._items)
        return items[-n:]

    def __len__(self) -> int:
        return len(self._items)
