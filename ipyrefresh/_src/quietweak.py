"""A set and a cache that hold their members weakly, with no Python weakref callback.

``weakref.WeakSet`` and ``weakref.WeakKeyDictionary`` forget a dead member in a Python
callback, run wherever the member dies: that is where a pending Ctrl-C may be handled, and
CPython drops what a weakref callback raises (hunt 61). The set forgets the dead when it is
read; the cache queues them with a callback written in C and forgets them at its next read
or write.
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

    def __len__(self) -> int:
        """How many live keys it holds."""
        return sum(1 for ref, _ in list(self._items.values()) if ref() is not None)

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
