"""The bindings watch's reading of ids (``watch._ids``): one copy of a tuple's item
pointers where CPython lays tuples out so, ``id()`` per item elsewhere; both must give
the ids, in order, of the objects bound now."""

from __future__ import annotations

import sys
from array import array
from typing import Any

import pytest

from ipyrefresh._src import watch
from ipyrefresh._src.nodes import MISSING


def _values(n: int) -> tuple[Any, ...]:
    kinds = [None, 3, 10**30, 1.5, "a", object(), MISSING, [1.0], (), watch]
    return tuple(kinds[i % len(kinds)] if i % 3 else object() for i in range(n))


@pytest.mark.parametrize("n", [1, 2, 3, 64, 2003])
def test_ids_are_the_ids_in_order(n: int) -> None:
    values = _values(n)
    expected = [id(v) for v in values]
    assert list(array(watch._ID, watch._ids(values))) == expected
    assert list(array(watch._ID, watch._ids_by_id(values))) == expected


@pytest.mark.skipif(sys.implementation.name != "cpython", reason="CPython's tuple layout")
def test_cpython_reads_ids_in_place() -> None:
    assert watch._ids is watch._ids_in_place


def test_a_group_finds_the_one_name_rebound_among_thousands() -> None:
    ns: dict[str, Any] = {f"w{i}": object() for i in range(2000)}
    slots = [watch._Slot(ns, name) for name in ns]
    group = watch._group(slots)
    group.expected = group.now()
    assert group.now() == group.expected
    ns["w1234"] = object()
    assert [slot.name for slot in group.moved(group.now())] == ["w1234"]
    del ns["w7"]  # a name no longer bound reads as MISSING
    assert array(watch._ID, group.now())[7] == id(MISSING)
