"""Which of the objects read are one object: a relation, checked where identity cannot be.

A guard compares numbers, strings and tuples of them by value. Code can also tell two
equal ones apart by identity: a sentinel (``CFG['mode'] is MISSING``), a string made one
object by ``sys.intern``. Equal values read in the code and data stay the very objects
they were (``nodes.relate``). Two kinds of read cannot:

- an argument: a literal passed from each cell (``step(p, x, y, 0.1)``) is a new object
  at each call. What code could see of it is which of the equal values read it is one
  object with (``f(x, MISSING)``, then an equal copy);
- a list, dict, set, deque or array: compared by contents, and held by no node (which
  would keep the user's data alive). What code could see is which of those of its kind
  read are one object (``A is B`` after ``B = list(A)``).

For those, the relation (which reads are one object, by id) is what is checked, not each
object. The walk gives each such read a slot; during a check, each node with a slot puts
the object it found in the list :data:`SEEN` holds (the compiled guard's own, or
:meth:`~ipyrefresh._src.guard.Guard.check_interpreted`'s), and :class:`IdentityCheck`
compares the relation found with the build's.
"""

from __future__ import annotations

import threading
from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .nodes import Mismatch


class _Seen(threading.local):
    #: The objects found at each slot by the check running in this thread, or None.
    objs: list[Any] | None = None


SEEN = _Seen()


def seen(slot: int, obj: Any) -> None:
    """A node with a slot found ``obj`` (outside a guard check: nothing to record)."""
    objs = SEEN.objs
    if objs is not None:
        objs[slot] = obj


def pattern(ids: Sequence[int]) -> tuple[int, ...]:
    """For each object (by its id), the position of the first one that is the same."""
    first: dict[int, int] = {}
    return tuple([first.setdefault(i, k) for k, i in enumerate(ids)])


class _Unseen:
    __slots__ = ()

    def __repr__(self) -> str:
        return "<unseen>"


#: A slot no node filled: a node the walk made and did not keep checks nothing, identity
#: included.
UNSEEN: Any = _Unseen()


class IdentityCheck:
    """The relation among the objects at ``slots`` (in that order), as the build found it
    (by their ids then: the relation holds no object)."""

    __slots__ = ("built", "expected", "mismatches", "slots")

    def __init__(self, relation: Relation, slots: Sequence[int]) -> None:
        self.slots = tuple(slots)
        self.built = tuple([relation.ids[i] for i in slots])
        self.expected = pattern(self.built)
        self.mismatches = tuple([relation.mismatches[i] for i in slots])

    def __call__(self, objs: Sequence[Any]) -> Mismatch | None:
        """``objs``: what each slot's node found (alive while this runs: the ids hold)."""
        found = [objs[i] for i in self.slots]
        if any(obj is UNSEEN for obj in found):
            kept = [k for k, obj in enumerate(found) if obj is not UNSEEN]
            got = pattern([id(found[k]) for k in kept])
            want = pattern([self.built[k] for k in kept])
        else:
            kept, got, want = list(range(len(found))), pattern(list(map(id, found))), self.expected
        if got == want:
            return None
        first = next(k for k, (a, b) in enumerate(zip(got, want, strict=True)) if a != b)
        return self.mismatches[kept[first]]


class Relation:
    """The reads with a slot: for slot ``i``, the id of the object the build found, what a
    change of the relation there is reported as, and the argument it was found in (None:
    the code and data the function reaches)."""

    __slots__ = ("arguments", "ids", "mismatches")

    def __init__(self) -> None:
        self.ids: list[int] = []
        self.mismatches: list[Mismatch] = []
        self.arguments: list[int | str | None] = []

    def add(self, obj: Any, mismatch: Mismatch, argument: int | str | None) -> int:
        """A read's slot (``obj`` is alive: the walk holds what it read until it ends)."""
        self.ids.append(id(obj))
        self.mismatches.append(mismatch)
        self.arguments.append(argument)
        return len(self.ids) - 1

    def checks(self, arguments: Collection[int | str]) -> tuple[IdentityCheck, IdentityCheck]:
        """The checks of the code and data alone, and of everything: the reads in the
        code and data, then those in ``arguments`` (the arguments the guard still checks:
        a compiler may leave some to its own cache)."""
        env = [i for i, key in enumerate(self.arguments) if key is None]
        full = env + [
            i for i, key in enumerate(self.arguments) if key is not None and key in arguments
        ]
        return IdentityCheck(self, env), IdentityCheck(self, full)
