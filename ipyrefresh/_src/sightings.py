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

from .prints import ARGUMENTS, Unprintable, print_of

#: Fingerprints remembered per entry (the oldest go first).
REMEMBERED = 64


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
                (k, print_of(_argument(k, args, kwargs), ARGUMENTS))
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
