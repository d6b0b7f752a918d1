"""A set and a cache that hold their members weakly, with no weakref callback.

``weakref.WeakSet`` and ``weakref.WeakKeyDictionary`` forget a dead member in a Python
callback, run wherever the member dies: that is where a pending Ctrl-C may be handled, and
CPython drops what a weakref callback raises (hunt 61). These forget the dead when they are
read (the set) or when they have doubled since they last did (the cache).
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable, Iterator, MutableSet
from typing import Generic, TypeVar

_T = TypeVar("_T")
_K = TypeVar("_K")
_V = TypeVar("_V")


class QuietWeakSet(MutableSet[_T]):
    """A set that holds its members weakly, with no callback: a dead member is skipped,
    and forgotten, when the set is read."""

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


class QuietWeakCache(Generic[_K, _V]):
    """A cache keyed by the identity of objects it holds weakly, with no callback: a dead
    key's value stays until the cache has doubled in size since it last swept the dead out
    (so it holds at most about twice what its live keys need)."""

    def __init__(self) -> None:
        self._items: dict[int, tuple[weakref.ref[_K], _V]] = {}
        self._sweep_at = _FIRST_SWEEP

    def get(self, key: _K) -> _V | None:
        item = self._items.get(id(key))
        if item is not None and item[0]() is key:
            return item[1]
        return None

    def __setitem__(self, key: _K, value: _V) -> None:
        self._items[id(key)] = (weakref.ref(key), value)
        if len(self._items) > self._sweep_at:
            live = {k: item for k, item in list(self._items.items()) if item[0]() is not None}
            self._items = live
            self._sweep_at = max(_FIRST_SWEEP, 2 * len(live))

    def __len__(self) -> int:
        """How many live keys it holds."""
        return sum(1 for ref, _ in list(self._items.values()) if ref() is not None)


_FIRST_SWEEP = 256
