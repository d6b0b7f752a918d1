"""A set that holds its members weakly, with no weakref callback (see :class:`QuietWeakSet`)."""

from __future__ import annotations

import weakref
from collections.abc import Iterable, Iterator, MutableSet
from typing import TypeVar

_T = TypeVar("_T")


class QuietWeakSet(MutableSet[_T]):
    """A set that holds its members weakly with no callback: ``weakref.WeakSet`` removes a
    dead member from a Python callback, which is where a pending Ctrl-C may be handled,
    and CPython drops what a weakref callback raises (hunt 61). A dead member here is
    skipped, and forgotten, when the set is read."""

    def __init__(self) -> None:
        self._refs: dict[int, weakref.ref[_T]] = {}

    def add(self, value: _T) -> None:
        self._refs[id(value)] = weakref.ref(value)

    def discard(self, value: _T) -> None:
        ref = self._refs.get(id(value))
        if ref is not None and ref() is value:
            del self._refs[id(value)]

    def __contains__(self, value: object) -> bool:
        ref = self._refs.get(id(value))
        return ref is not None and ref() is value

    def __iter__(self) -> Iterator[_T]:
        for key, ref in list(self._refs.items()):
            value = ref()
            if value is None:
                self._refs.pop(key, None)
            else:
                yield value

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def clear(self) -> None:
        self._refs.clear()

    def update(self, values: Iterable[_T]) -> None:
        for value in values:
            self.add(value)
