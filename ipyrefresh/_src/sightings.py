"""Which values of the non-differentiated arguments an entry has met.

A variant replays what one run computed from the arguments it read; another value of
those arguments needs another trace. Tracing every new value pays a build per call for a
value that changes each call (a minibatch, Newton's next estimate) and is never met
again. An entry therefore runs the code for a value it meets the first time and traces a
path for a value it meets a second time. This module only remembers: a fingerprint of
the values, never the values (no user object is kept alive). Two values with the same
fingerprint (a 64-bit hash collision) cost at most one build: whether a variant answers
is always its guard's decision, never this module's.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Iterable, Mapping
from typing import Any

import numpy as np
import xxhash

from .digest import array_digest

#: Fingerprints remembered per entry (the oldest go first).
REMEMBERED = 64

_SCALARS = (int, bool, type(None))
_LONG = 64  # strings and bytes longer than this are hashed


class Unprintable(Exception):
    """A value without a cheap fingerprint: the entry traces it, as for a repeat."""


def fingerprint(value: Any, depth: int = 0) -> Hashable:
    """A hashable summary equal for equal values (arrays by dtype, shape and bytes)."""
    t = type(value)
    if t is float:
        return ("float", value.hex())  # tells 0.0 from -0.0, and every nan alike
    if t in _SCALARS:
        return (t.__name__, value)
    if t is complex:
        return ("complex", value.real.hex(), value.imag.hex())
    if t is str or t is bytes:
        if len(value) <= _LONG:
            return (t.__name__, value)
        data = value.encode("utf-8", "surrogatepass") if t is str else value
        return (t.__name__, len(value), xxhash.xxh3_64_intdigest(data))
    if t is np.ndarray and not value.dtype.hasobject:
        return ("array", value.shape, value.dtype.str, array_digest(value))
    if isinstance(value, np.generic) and t.__module__ == "numpy" and not value.dtype.hasobject:
        return ("scalar", value.dtype.str, value.tobytes())
    if (t is tuple or t is list) and depth < 4 and len(value) <= 256:
        return (t.__name__, *(fingerprint(v, depth + 1) for v in value))
    if t is dict and depth < 4 and len(value) <= 256:
        items = [(k, fingerprint(v, depth + 1)) for k, v in value.items() if type(k) is str]
        if len(items) != len(value):
            raise Unprintable
        return ("dict", *items)
    raise Unprintable


class Sightings:
    """The fingerprints of argument values one entry met and did not trace."""

    __slots__ = ("_seen",)

    def __init__(self) -> None:
        self._seen: OrderedDict[Hashable, None] = OrderedDict()

    def first(
        self, keys: Iterable[int | str], args: tuple[Any, ...], kwargs: Mapping[str, Any]
    ) -> bool:
        """True if the arguments at ``keys`` have values not met before (now remembered);
        False for a repeat, or for values without a fingerprint (they are traced)."""
        try:
            found = tuple(
                (k, fingerprint(_argument(k, args, kwargs)))
                for k in sorted(keys, key=lambda k: (type(k) is str, str(k)))
            )
        except Unprintable:
            return False
        seen = self._seen
        if found in seen:
            del seen[found]  # traced now: a third sight hits the new variant
            return False
        seen[found] = None
        while len(seen) > REMEMBERED:
            seen.popitem(last=False)
        return True

    def clear(self) -> None:
        self._seen.clear()


def _argument(key: int | str, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> Any:
    if isinstance(key, int):
        if key >= len(args):
            raise Unprintable
        return args[key]
    if key not in kwargs:
        raise Unprintable
    return kwargs[key]
