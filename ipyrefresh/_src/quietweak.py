"""A set and a cache that hold their members weakly, with no Python weakref callback.

``weakref.WeakSet`` and ``weakref.WeakKeyDictionary`` forget a dead member in a Python
callback, run wherever the member dies: that is where a pending Ctrl-C may be handled, and
CPython drops what a weakref callback raises (hunt 61). Here a member's death runs a
callback written in C that queues it, and the cache (and the set made on it) forgets the
queued ones at its next read or write.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable, Iterator, MutableSet
from typing import Generic, TypeVar

_T = TypeVar("_T")
_K = TypeVar("_K")
_V = TypeVar("_V")


class _KeyRef(weakref.ref):  # type: ignore[type-arg]
    """A weak reference that knows the key (``id``) its referent was stored under."""

    __slots__ = ("key",)
    key: int


class QuietWeakCache(Generic[_K, _V]):
    """A cache keyed by the identity of objects it holds weakly. A key's death runs no
    Python code: its weakref's callback is a list's ``append`` (C), which queues it, and the
    cache forgets the queued ones at its next read or write."""

    def __init__(self) -> None:
        self._items: dict[int, tuple[weakref.ref[_K], _V]] = {}
        self._dead: list[_KeyRef] = []

    def get(self, key: _K) -> _V | None:
        if self._dead:
            self._forget_dead()
        item = self._items.get(id(key))
        if item is not None and item[0]() is key:
            return item[1]
        return None

    def __setitem__(self, key: _K, value: _V) -> None:
        if self._dead:
            self._forget_dead()
        ref = _KeyRef(key, self._dead.append)
        ref.key = id(key)
        self._items[ref.key] = (ref, value)

    def __contains__(self, key: object) -> bool:
        item = self._items.get(id(key))
        return item is not None and item[0]() is key

    def discard(self, key: _K) -> None:
        if key in self:
            self._items.pop(id(key), None)

    def keys(self) -> Iterator[_K]:
        """The live keys (of the items held when it is called)."""
        if self._dead:
            self._forget_dead()
        for ref, _ in list(self._items.values()):
            key = ref()
            if key is not None:
                yield key

    def clear(self) -> None:
        self._items.clear()
        self._dead.clear()

    def __len__(self) -> int:
        """How many live keys it holds."""
        return sum(1 for _ in self.keys())

    def _forget_dead(self) -> None:
        dead, items = self._dead, self._items
        while dead:
            try:
                ref = dead.pop()
            except IndexError:  # (another thread took the last one)
                return
            item = items.get(ref.key)
            if item is not None and item[0] is ref:
                items.pop(ref.key, None)


class QuietWeakSet(MutableSet[_T]):
    """A set that holds its members weakly: a :class:`QuietWeakCache` of them."""

    def __init__(self) -> None:
        self._members: QuietWeakCache[_T, None] = QuietWeakCache()

    def add(self, value: _T) -> None:
        self._members[value] = None

    def discard(self, value: _T) -> None:
        self._members.discard(value)

    def __contains__(self, value: object) -> bool:
        return value in self._members

    def __iter__(self) -> Iterator[_T]:
        return self._members.keys()

    def __len__(self) -> int:
        return len(self._members)

    def clear(self) -> None:
        self._members.clear()

    def update(self, values: Iterable[_T]) -> None:
        for value in values:
            self.add(value)
