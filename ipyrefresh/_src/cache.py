"""The bounded, least-recently-used table of cache entries."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterator

from .entry import Entry
from .keys import EntryKey


class EntryCache:
    """Entries by key, least recently used first; at most ``max_entries``."""

    def __init__(self, max_entries: int, on_evict: Callable[[Entry], None]) -> None:
        self.max_entries = max_entries
        self._entries: OrderedDict[EntryKey, Entry] = OrderedDict()
        self._on_evict = on_evict
        self.evictions = 0

    def __len__(self) -> int:
        return len(self._entries)

    def __iter__(self) -> Iterator[Entry]:
        return iter(list(self._entries.values()))

    def __contains__(self, entry: Entry) -> bool:
        return self._entries.get(entry.key) is entry

    def get(self, key: EntryKey) -> Entry | None:
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

    def clear(self) -> None:
        entries = list(self._entries.values())
        self._entries.clear()
        for entry in entries:
            self._on_evict(entry)
