"""World ages: one counter that moves once per observed change.

As in Julia, a cached derivative remembers the world it was last validated in. If the
world has not moved since, nothing it could depend on has changed, and the cache hit
costs one integer compare. Invalidation itself is lazy: a change only marks the
entries that depend on it (the backedges); nothing is rebuilt until the next call.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

#: An entry stamped with this world is re-validated on every call. Used when no
#: namespace watcher runs (outside IPython), so that nothing can go stale unseen.
NEVER = -1


@dataclass(frozen=True)
class Change:
    """One observed change, as shown by ``%stale``."""

    world: int
    cell: int | None
    label: str
    what: str

    def describe(self) -> str:
        where = f" in cell [{self.cell}]" if self.cell is not None else ""
        return f"{self.label} {self.what}{where}"


class World:
    """The world-age counter and a short history of the changes that moved it."""

    __slots__ = ("history", "now")

    def __init__(self, history: int = 200) -> None:
        self.now = 0
        self.history: deque[Change] = deque(maxlen=history)

    def advance(self) -> int:
        self.now += 1
        return self.now

    def record(self, change: Change) -> None:
        self.history.append(change)
