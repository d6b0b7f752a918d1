"""The bindings watch: after a cell, which entries had a name they read rebound.

A fresh entry reads some of what it was built from through names in a namespace (the
notebook's, a module's): its target's name and the globals its build read. A cell that
rebinds or deletes one of those names (``del W``, ``W`` rebound in a loop over problem
sizes, ``def f`` again) makes the entry stale, and its variant, which still holds the old
objects, must let them go when the cell ends, not at the handle's next call.

Checking every guard after every cell costs time in proportion to the number of
entries. The watch instead compares the id of each object bound to a watched name with
the one bound when the cell started (and, as a cell starts, with the one bound when the
last cell ended: what a callback or a thread rebound in between), in C
(``operator.itemgetter``, then the ids as one block of memory, see ``_ids``), and names
the entries whose bindings moved, with the subjects (guard labels) read through them: a
rebinding of such a subject happened in this cell. Only those entries (and the entries
that changed during the cell) need their guards checked. What it does not see (an
attribute, an item or an array changed in place) the entry's own guard finds at its
next call, and ``%stale``, ``status()`` and the status bar find by checking every guard.

The watch holds ids, not the objects bound (a callback that rebinds a name between cells
must free the old object at once), the namespaces (as the guards do), and the entries
watching them; :meth:`Watch.update` forgets an entry that is no longer fresh. An id
reused by a new object under the same name hides a move from the watch only where no
variant held the old object (else it could not have died): nothing stays alive for it,
and the entry's guard still finds the change at its next call.
"""

from __future__ import annotations

import ctypes
import operator
import struct
from array import array
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from .changes import CellRef
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
    """One watched binding, and for each entry reading it the subjects read through it."""

    ns: dict[str, Any]
    name: str
    entries: dict[Entry, tuple[str, ...]] = field(default_factory=dict)


@dataclass(eq=False)
class _Group:
    """The watched names of one namespace, read in one C call."""

    ns: dict[str, Any]
    slots: list[_Slot]
    read: Callable[[dict[str, Any]], tuple[Any, ...]]
    expected: bytes = b""

    def now(self) -> bytes:
        """The ids of the objects bound now (``MISSING``'s for a name not bound)."""
        ns = self.ns
        if type(ns) is dict:  # (a subclass's __getitem__ could run user code)
            try:
                return _ids(self.read(ns))
            except KeyError:  # a watched name is not bound (now, or when watched)
                pass
        values = [dict.get(ns, slot.name, MISSING) for slot in self.slots]
        return _ids((*values, values[0]))  # (the shape ``read`` gives)

    def moved(self, now: bytes) -> list[_Slot]:
        """The slots bound ``now`` to another object than at the last commit."""
        # (the ids end with the first one again: see _group; zip stops before it)
        pairs = zip(array(_ID, self.expected), array(_ID, now), strict=False)
        return [slot for slot, (was, value) in zip(self.slots, pairs, strict=False) if was != value]


class Watch:
    """See the module docstring."""

    def __init__(self) -> None:
        self._slots: dict[Binding, _Slot] = {}
        self._of_entry: dict[Entry, tuple[Binding, ...]] = {}
        self._groups: list[_Group] | None = []
        #: The cell whose start the bindings were last taken at (see :meth:`commit`).
        self.committed: CellRef | None = None

    def __len__(self) -> int:
        return len(self._slots)

    def update(self, entries: Iterable[Entry]) -> None:
        """Watch what these entries read now (nothing, for an entry no longer fresh)."""
        for entry in entries:
            for binding in self._of_entry.pop(entry, ()):
                slot = self._slots.get(binding)
                if slot is not None:
                    slot.entries.pop(entry, None)
                    if not slot.entries:
                        del self._slots[binding]
                self._groups = None
            if entry.state is not State.FRESH:
                continue
            found = _bindings(entry)
            for binding, (ns, name, subjects) in found.items():
                slot = self._slots.get(binding)
                if slot is None:
                    slot = self._slots[binding] = _Slot(ns, name)
                slot.entries[entry] = tuple(subjects)
            self._of_entry[entry] = tuple(found)
            self._groups = None

    def moved(self) -> dict[Entry, set[str]]:
        """The entries some of whose watched names are bound to another object than at
        the last commit, each with the subjects read through those names."""
        suspects: dict[Entry, set[str]] = {}
        for group in self._compiled():
            now = group.now()
            if now == group.expected:
                continue
            for slot in group.moved(now):
                for entry, subjects in slot.entries.items():
                    suspects.setdefault(entry, set()).update(subjects)
        return suspects

    def commit(self, cell: CellRef | None, reread: bool = True) -> None:
        """Take the bindings of now as the ones to compare with, from ``cell`` on (None:
        between cells). ``reread=False``: nothing moved since the last comparison (the
        groups a change of entries rebuilt read the bindings anyway)."""
        groups = self._compiled()
        if reread:
            for group in groups:
                group.expected = group.now()
        self.committed = cell

    def clear(self) -> None:
        self._slots.clear()
        self._of_entry.clear()
        self._groups = []
        self.committed = None

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


def _bindings(entry: Entry) -> dict[Binding, tuple[dict[str, Any], str, set[str]]]:
    """The bindings a fresh entry reads through, with the subjects read through each:
    its target's name (the subject is that name, ``model`` of ``model.loss``) and
    each global its variants' guards read from a namespace (the root node's label)."""
    found: dict[Binding, tuple[dict[str, Any], str, set[str]]] = {}
    for variant in entry.variants:
        for reader, node in variant.guard.env:
            if isinstance(reader, NameReader):
                key = Binding(id(reader.ns), reader.name)
                found.setdefault(key, (reader.ns, reader.name, set()))[2].add(node.label)
    target = entry.target
    if isinstance(target, NameTarget):
        key = Binding(id(target.ns), target.name)
        subjects = found.setdefault(key, (target.ns, target.name, set()))[2]
        subjects.add(target.name)  # (``model`` of ``model.loss``: the name that moved)
    return found


def _group(slots: list[_Slot]) -> _Group:
    names = [slot.name for slot in slots]
    # (itemgetter of one name gives the value, not a 1-tuple: ask for it twice)
    read: Callable[[dict[str, Any]], tuple[Any, ...]] = operator.itemgetter(*names, *names[:1])
    return _Group(slots[0].ns, slots, read)


#: The array type code of an id (a pointer-sized unsigned integer).
_ID = "Q" if struct.calcsize("P") == 8 else "I"


def _ids_by_id(values: tuple[Any, ...]) -> bytes:
    return array(_ID, map(id, values)).tobytes()


def _ids_in_place(values: tuple[Any, ...]) -> bytes:
    # CPython keeps a tuple's items as an array of pointers (the ids) after its header,
    # tuple.__basicsize__ bytes in: one copy of that array, not an id() call per item
    # (2,000 names: about 1 µs against 60 µs). ``values`` stays alive meanwhile.
    return ctypes.string_at(id(values) + tuple.__basicsize__, len(values) * tuple.__itemsize__)


def _pick_ids() -> Callable[[tuple[Any, ...]], bytes]:
    """The fast reader where this interpreter lays tuples out as CPython does (checked on
    samples, as the module loads), else ``id()`` per item: both give the same bytes."""
    samples = [tuple(object() for _ in range(n)) for n in (1, 2, 7)]
    try:
        if all(_ids_in_place(t) == _ids_by_id(t) for t in samples):
            return _ids_in_place
    except Exception:  # (no ctypes, or another layout)
        pass
    return _ids_by_id


#: The ids of a tuple's items, as one bytes object (compared in C; split by ``_ID``).
_ids = _pick_ids()
