"""The watch table: every dependency of every fresh entry, with its backedges.

Each dependency is watched once however many entries share it. A sweep probes each
watched dependency (cost: O(watched), independent of the namespace's size); a changed
one advances the world once and marks exactly its dependents stale, Julia-style.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

from .deps import Dep, Probe

if TYPE_CHECKING:
    from .cache import Entry


class Record:
    """A watched dependency: its last seen state and the entries that depend on it."""

    __slots__ = ("dep", "dependents", "probe")

    def __init__(self, dep: Dep, probe: Probe) -> None:
        self.dep = dep
        self.probe = probe
        self.dependents: set[Entry] = set()


class Changed:
    """A dependency whose state moved: what it was, what it is, who is affected."""

    __slots__ = ("dependents", "new", "old", "record")

    def __init__(self, record: Record, old: Probe, new: Probe) -> None:
        self.record = record
        self.old = old
        self.new = new
        self.dependents = list(record.dependents)

    @property
    def label(self) -> str:
        return self.record.dep.label

    @property
    def what(self) -> str:
        return self.record.dep.describe(self.old, self.new)


class DepTable:
    """Dependency key -> :class:`Record`."""

    def __init__(self) -> None:
        self.records: dict[Hashable, Record] = {}

    def __len__(self) -> int:
        return len(self.records)

    def subscribe(self, entry: Entry, deps: Iterable[Dep], extend: bool = False) -> list[Changed]:
        """Make ``entry`` depend on ``deps`` (in addition to what it has, if ``extend``).

        A dependency already watched whose state differs from what we last saw has
        changed since the last sweep (mid-cell, or by the build itself): that is
        returned as a change so that its *other* dependents are invalidated too.
        """
        changed: list[Changed] = []
        # Record each key before subscribing to it, so that an interrupt (Ctrl-C) midway
        # leaves dep_keys naming exactly what unsubscribe() must undo.
        keys: list[Hashable] = entry.dep_keys if extend else []
        have = set(keys)
        entry.dep_keys = keys
        for dep in deps:
            if dep.key in have:
                continue
            probe = dep.probe()
            keys.append(dep.key)
            rec = self.records.get(dep.key)
            if rec is None:
                rec = self.records[dep.key] = Record(dep, probe)
            elif rec.probe.state != probe.state:
                change = Changed(rec, rec.probe, probe)
                rec.probe = probe
                if change.dependents:
                    changed.append(change)
            rec.dependents.add(entry)
        return changed

    def unsubscribe(self, entry: Entry) -> None:
        """Drop ``entry``'s backedges; forget dependencies nobody needs any more."""
        for key in entry.dep_keys:
            rec = self.records.get(key)
            if rec is None:
                continue
            rec.dependents.discard(entry)
            if not rec.dependents:
                del self.records[key]
        entry.dep_keys = []

    def check(self, keys: Iterable[Hashable] | None = None) -> list[Changed]:
        """Probe the given dependencies (default: all); return and absorb the changes."""
        records: Iterator[Record]
        if keys is None:
            records = iter(list(self.records.values()))
        else:
            records = (r for r in (self.records.get(k) for k in keys) if r is not None)
        changed = []
        for rec in records:
            if rec.dep.same(rec.probe):
                continue
            probe = rec.dep.probe()
            if probe.state != rec.probe.state:
                changed.append(Changed(rec, rec.probe, probe))
            rec.probe = probe
        return changed

    def keys_for_names(self, ns: dict[str, Any], names: Iterable[str]) -> list[Hashable]:
        """Keys of the records that a rebinding of ``names`` in ``ns`` could affect."""
        keys: list[Hashable] = []
        nsid = id(ns)
        for name in names:
            keys.append(("bind", nsid, name))
            value = ns.get(name)
            if value is not None:
                keys.append(("fn", id(value)))
                keys.append(("content", id(value)))
                keys.append(("rule", id(value)))  # defvjp(prim, ...) mentions prim
        return keys
