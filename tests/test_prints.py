"""The printer behind argument sightings and the tape's kept constants: equal values print
alike, any change a later comparison must see prints differently, and each reach refuses
what it cannot print rather than printing it partly."""

from __future__ import annotations

import array
import collections
import copy
import types
from typing import Any

import numpy as np
import pytest

from ipyrefresh._src.prints import ARGUMENTS, CONSTANTS, Reach, Unprintable, key_print, print_of


class Config:
    def __init__(self) -> None:
        self.scale = 2.0
        self.table = [1, 2, 3]


def _values() -> list[tuple[Any, Any]]:
    """Pairs (value, an equal-looking value with one difference)."""
    base = np.arange(6.0)
    return [
        (0.0, -0.0),
        (1, True),
        (1.5, 1.5 + 2**-50),
        (complex(1, 0.0), complex(1, -0.0)),
        ("a" * 100, "a" * 99 + "b"),
        (b"x" * 100, b"x" * 99 + b"y"),
        (np.arange(4.0), np.nextafter(np.arange(4.0), 9.0)),
        (np.arange(4.0), np.arange(4.0).astype(np.float32)),
        (np.arange(4.0), np.arange(4.0).reshape(2, 2)),
        (base[::2], base[1::2]),
        (np.float64(1.0), np.float32(1.0)),
        ([1.0, [2.0, 3.0]], [1.0, [2.0, 3.5]]),
        ((1, 2), [1, 2]),
        ({"a": 1.0, "b": 2.0}, {"b": 2.0, "a": 1.0}),
        ({"w": np.ones(3)}, {"w": np.r_[1.0, 1.0, 2.0]}),
    ]


@pytest.mark.parametrize("reach", [ARGUMENTS, CONSTANTS], ids=["arguments", "constants"])
@pytest.mark.parametrize("pair", _values(), ids=lambda p: type(p[0]).__name__)
def test_a_difference_changes_the_print_and_an_equal_copy_does_not(
    reach: Reach, pair: tuple[Any, Any]
) -> None:
    a, b = pair
    assert print_of(a, reach) != print_of(b, reach)
    copied = a.copy() if hasattr(a, "copy") else a
    assert print_of(copied, reach) == print_of(a, reach)


@pytest.mark.parametrize(
    "value",
    [
        collections.deque([1.0, 2.0]),
        array.array("d", [1.0, 2.0]),
        bytearray(b"ab"),
        np.ma.masked_array([1.0, 2.0]),
        {1: 2.0},
        Config(),
        list(range(300)),
        [[[[[1.0]]]]],
    ],
    ids=lambda v: type(v).__name__,
)
def test_only_the_wide_reach_prints_these(value: Any) -> None:
    with pytest.raises(Unprintable):
        print_of(value, ARGUMENTS)
    print_of(value, CONSTANTS)


def test_the_wide_reach_sees_changes_inside_objects_and_buffers() -> None:
    cfg = Config()
    before = print_of(cfg, CONSTANTS)
    cfg.table.append(4)
    assert print_of(cfg, CONSTANTS) != before
    buf = array.array("i", [1, 2])
    before = print_of(buf, CONSTANTS)
    buf[0] = 7
    assert print_of(buf, CONSTANTS) != before
    # The same bytes with another typecode are another value.
    assert print_of(array.array("h", [1, 0, 2, 0]), CONSTANTS) != print_of(
        array.array("i", [1, 2]), CONSTANTS
    )


@pytest.mark.parametrize(
    "value",
    [np.array([object()]), [object()], types.SimpleNamespace, print, np.sin, [1.0, object()]],
    ids=lambda v: type(v).__name__,
)
def test_what_has_no_print_is_refused_by_both(value: Any) -> None:
    for reach in (ARGUMENTS, CONSTANTS):
        with pytest.raises(Unprintable):
            print_of(value, reach)


def test_depth_limits_refuse_rather_than_truncate() -> None:
    deep: Any = 1.0
    for _ in range(20):
        deep = [deep]
    with pytest.raises(Unprintable):
        print_of(deep, CONSTANTS)


class Loud(dict):
    """A dict subclass whose own iteration must not run while it is printed."""

    def items(self) -> Any:
        raise AssertionError("the printer called an overridden items()")

    def __iter__(self) -> Any:
        raise AssertionError("the printer called an overridden __iter__()")


@pytest.mark.parametrize(
    "make",
    [
        lambda: collections.OrderedDict(w=np.ones(2)),
        lambda: collections.defaultdict(float, w=np.ones(2)),
        lambda: Loud(w=np.ones(2)),
    ],
    ids=["OrderedDict", "defaultdict", "dict subclass"],
)
def test_the_wide_reach_prints_a_dict_subclass_by_its_items(make: Any) -> None:
    d = make()
    before = print_of(d, CONSTANTS)
    dict.__setitem__(d, "w", np.full(2, 5.0))
    assert print_of(d, CONSTANTS) != before
    with pytest.raises(Unprintable):
        print_of(d, ARGUMENTS)


def test_the_wide_reach_prints_list_and_tuple_subclasses_by_their_items() -> None:
    class Row(list[float]):
        pass

    pair = collections.namedtuple("pair", "w v")
    row, nt = Row([1.0, 2.0]), pair([1.0], 2.0)
    before = (print_of(row, CONSTANTS), print_of(nt, CONSTANTS))
    row[0] = 5.0
    nt.w[0] = 5.0
    assert print_of(row, CONSTANTS) != before[0]
    assert print_of(nt, CONSTANTS) != before[1]
    row.label = "x"  # (an attribute of the instance is part of its print)
    assert print_of(row, CONSTANTS) != print_of(Row([5.0, 2.0]), CONSTANTS)


@pytest.mark.parametrize(
    "a, b", [(1, True), (1, 1.0), (1, np.int64(1)), (0.0, -0.0), ((1, 2), (True, 2))]
)
def test_dict_keys_equal_but_not_alike_print_differently(a: Any, b: Any) -> None:
    assert a == b
    assert key_print(a) != key_print(b)
    assert print_of({a: 1.0}, CONSTANTS) != print_of({b: 1.0}, CONSTANTS)
    assert key_print(a) == key_print(copy.copy(a))


class _Named:
    """Equal by name alone, as a user's key class may be."""

    def __init__(self, name: str, w: Any) -> None:
        self.name, self.w = name, w

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Named) and other.name == self.name

    def __hash__(self) -> int:
        return hash(self.name)


def test_object_keys_print_what_their_equality_ignores() -> None:
    a, b = _Named("dense", 1.0), _Named("dense", 2.0)
    assert a == b
    assert key_print(a) != key_print(b)
    assert key_print(a) == key_print(_Named("dense", 1.0))
    before = key_print(a)
    a.w = 2.0  # (the same key object, changed in place)
    assert key_print(a) != before
    assert key_print(a) == key_print(b)
    a.w = types.SimpleNamespace(f=lambda: 0)  # (state without a print: equal to no other)
    assert key_print(a) != key_print(a)
