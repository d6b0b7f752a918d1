"""Cache entries and the bounded, least-recently-used derivative cache."""

from __future__ import annotations

import itertools
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator
from typing import TYPE_CHECKING, Any

from .world import NEVER

if TYPE_CHECKING:
    from .compilers import Direct

_ids = itertools.count(1)


class Entry:
    """One compiled derivative: a target, a transform, argnums and an input signature.

    ``world`` is the world it was last validated in; a call whose world matches is a
    cache hit with no further checks. A stale entry keeps no compiled artifact and no
    backedges, only why it went stale, so stale entries hold no user objects alive.
    """

    __slots__ = (
        "__weakref__",
        "argnum",
        "artifact",
        "builds",
        "compiler",
        "dep_keys",
        "direct",
        "error",
        "example",
        "fallback",
        "fn",
        "graph",
        "hits",
        "id",
        "key",
        "last_event",
        "pinned",
        "reasons",
        "signature",
        "stale",
        "target",
        "transform",
        "world",
    )

    def __init__(
        self, key: Hashable, target: Any, transform: str, argnum: Any, signature: Hashable
    ) -> None:
        self.id = next(_ids)
        self.key = key
        self.target = target
        self.transform = transform
        self.argnum = argnum
        self.signature = signature
        self.artifact: Callable[..., Any] | None = None
        self.direct: Direct | None = None
        self.fn: Any = None
        self.world = NEVER
        self.stale = True
        self.reasons: list[str] = ["not built yet"]
        self.dep_keys: list[Hashable] = []
        self.graph: Any = None
        self.compiler = ""
        self.pinned: str | None = None  # a compiler the handle asked for, else the default
        self.fallback = ""
        self.error = ""
        self.example: tuple[tuple[Any, ...], dict[str, Any]] | None = None
        self.builds = 0
        self.hits = 0
        self.last_event = ""

    @property
    def rebuilds(self) -> int:
        return max(self.builds - 1, 0)

    def mark_stale(self, reason: str) -> None:
        """Drop the artifact (and the old function it holds); remember why."""
        if not self.stale:
            self.reasons = []
        self.stale = True
        self.world = NEVER
        self.artifact = None
        self.direct = None
        self.fn = None
        if reason not in self.reasons and len(self.reasons) < 8:
            self.reasons.append(reason)


class DerivativeCache:
    """Entries by key, least recently used first; bounded by ``max_entries``."""

    def __init__(self, max_entries: int, on_evict: Callable[[Entry], None]) -> None:
        self.max_entries = max_entries
        self._entries: OrderedDict[Hashable, Entry] = OrderedDict()
        self._on_evict = on_evict
        self.evictions = 0

    def __len__(self) -> int:
        return len(self._entries)

    def __iter__(self) -> Iterator[Entry]:
        return iter(list(self._entries.values()))

    def get(self, key: Hashable) -> Entry | None:
        entry = self._entries.get(key)
        if entry is not None:
            self._entries.move_to_end(key)
        return entry

    def add(self, entry: Entry) -> None:
        self._entries[entry.key] = entry
        self.shrink()

    def remove(self, entry: Entry) -> None:
        if self._entries.get(entry.key) is entry:
            del self._entries[entry.key]
        self._on_evict(entry)

    def shrink(self) -> None:
        while len(self._entries) > self.max_entries:
            _, entry = self._entries.popitem(last=False)
            self.evictions += 1
            self._on_evict(entry)
