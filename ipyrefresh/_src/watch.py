"""The bindings watch: after a cell, which entries had a name they read rebound.

A fresh entry reads some of what it was built from through names in a namespace (the
notebook's, a module's): its target's name and the globals its build read. A cell that
rebinds or deletes one of those names (``del W``, ``W`` rebound in a loop over problem
sizes, ``def f`` again) makes the entry stale, and its variant, which still holds the old
objects, must let them go when the cell ends, not at the handle's next call.

Checking every guard after every cell costs time in proportion to the number of
entries. The watch instead compares each watched binding with the object it was bound to
when last checked, in C (``operator.itemgetter`` and ``map(operator.is_, ...)``), and
names the entries whose bindings moved; only those (and the entries that changed during
the cell) need their guards checked. What it does not see (an attribute, an item or an
array changed in place) the entry's own guard finds at its next call, and ``%stale``,
``status()`` and the status bar find by checking every guard.

The watch holds the namespaces and the objects bound in them (as the namespace does), and
the entries watching them; :meth:`Watch.update` forgets an entry that is no longer fresh.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from .entry import Entry, State
from .nodes import MISSING
from .readers import NameReader
from .targets import NameTarget


@dataclass(frozen=True)
class Binding:
    """A name in one namespace (the namespace is known by its id while a slot holds it)."""

    ns_id: int
    name: str


@dataclass(eq=False)
class _Slot:
    ns: dict[str, Any]
    name: str
    entries: set[Entry] = field(default_factory=set)


@dataclass(eq=False)
class _Group:
    """The watched names of one namespace, read in one C call."""

    ns: dict[str, Any]
    slots: list[_Slot]
    read: Callable[[dict[str, Any]], tuple[Any, ...]]
    expected: tuple[Any, ...] = ()

    def now(self) -> tuple[Any, ...]:
        ns = self.ns
        if type(ns) is dict:  # (a subclass's __getitem__ could run user code)
            try:
                return self.read(ns)
            except KeyError:  # a watched name is not bound (now, or when watched)
                pass
        values = [dict.get(ns, slot.name, MISSING) for slot in self.slots]
        return (*values, values[0])  # (the shape ``read`` gives)


class Watch:
    """See the module docstring."""

    def __init__(self) -> None:
        self._slots: dict[Binding, _Slot] = {}
        self._of_entry: dict[Entry, tuple[Binding, ...]] = {}
        self._groups: list[_Group] | None = []

    def __len__(self) -> int:
        return len(self._slots)

    def update(self, entries: Iterable[Entry]) -> None:
        """Watch what these entries read now (nothing, for an entry no longer fresh)."""
        for entry in entries:
            for binding in self._of_entry.pop(entry, ()):
                slot = self._slots.get(binding)
                if slot is not None:
                    slot.entries.discard(entry)
                    if not slot.entries:
                        del self._slots[binding]
                self._groups = None
            if entry.state is not State.FRESH:
                continue
            found = {}
            for variant in entry.variants:
                found.update(_readers(variant.guard.env))
            target = entry.target
            if isinstance(target, NameTarget):
                found[Binding(id(target.ns), target.name)] = (target.ns, target.name)
            for binding, (ns, name) in found.items():
                slot = self._slots.get(binding)
                if slot is None:
                    slot = self._slots[binding] = _Slot(ns, name)
                slot.entries.add(entry)
            self._of_entry[entry] = tuple(found)
            self._groups = None

    def moved(self) -> set[Entry]:
        """The entries some of whose watched names are bound to another object now."""
        suspects: set[Entry] = set()
        for group in self._compiled():
            now = group.now()
            if all(map(operator.is_, now, group.expected)):
                continue
            # (the values end with the first one again: see _group)
            for slot, was, value in zip(group.slots, group.expected, now, strict=False):
                if value is not was:
                    suspects.update(slot.entries)
        return suspects

    def commit(self) -> None:
        """Take the objects bound now as the ones to compare with (after the entries
        watching a moved name were checked)."""
        for group in self._compiled():
            group.expected = group.now()

    def clear(self) -> None:
        self._slots.clear()
        self._of_entry.clear()
        self._groups = []

    def _compiled(self) -> list[_Group]:
        groups = self._groups
        if groups is None:
            by_ns: dict[int, list[_Slot]] = {}
            for binding, slot in self._slots.items():
                by_ns.setdefault(binding.ns_id, []).append(slot)
            groups = [_group(slots) for slots in by_ns.values()]
            for group in groups:
                group.expected = group.now()
            self._groups = groups
        return groups


def _readers(env: Iterable[tuple[Any, Any]]) -> dict[Binding, tuple[dict[str, Any], str]]:
    return {
        Binding(id(reader.ns), reader.name): (reader.ns, reader.name)
        for reader, _ in env
        if isinstance(reader, NameReader)
    }


def _group(slots: list[_Slot]) -> _Group:
    names = [slot.name for slot in slots]
    # (itemgetter of one name gives the value, not a 1-tuple: ask for it twice)
    read: Callable[[dict[str, Any]], tuple[Any, ...]] = operator.itemgetter(*names, *names[:1])
    return _Group(slots[0].ns, slots, read)
