"""Whether a garbage collection runs in this thread now.

A collection can start inside a build's recording, in the recording's thread, and run other
code there: finalizers, and the ``gc.callbacks`` of other libraries (Dask's distributed
times every collection). That code is not the recorded function's doing, and the
recorder's hooks ignore it. Callbacks placed first and last in ``gc.callbacks`` mark the
collection.

The marks are methods written in C, not Python functions. A pending Ctrl-C is handled
where bytecode runs next, often inside a Python gc callback, and CPython drops what a gc
callback raises ("Exception ignored in ..."): the user's KeyboardInterrupt was lost, and the
cell ran on (hunt 61). C methods run no bytecode, so no signal is handled inside them.
Each is called with ``(phase, info)``, ``phase`` being "start" or "stop":

* ``_OPENED.move_to_end`` (first) and ``_CLOSED.move_to_end`` (last) move the key ``phase``
  to the end (``info``, a non-empty dict, is true): a collection runs, in some thread, from
  the first's "start" to the last's "stop";
* ``_MINE.__setattr__`` sets the collecting thread's own ``start`` attribute to the
  collection's ``info`` dict (a new one at each phase), and ``_LATEST.__setitem__`` the
  shared one: the thread whose own start is the latest is the one collecting.
"""

from __future__ import annotations

import gc
import threading
from collections import OrderedDict
from typing import Any

_OPENED: OrderedDict[str, None] = OrderedDict.fromkeys(("start", "stop"))
_CLOSED: OrderedDict[str, None] = OrderedDict.fromkeys(("start", "stop"))
_MINE = threading.local()
_LATEST: dict[str, Any] = {}

#: The callbacks, made once (``gc.callbacks`` is searched for these very objects).
_FIRST: tuple[Any, ...] = (_OPENED.move_to_end, _MINE.__setattr__, _LATEST.__setitem__)
_LAST: Any = _CLOSED.move_to_end


def collecting() -> bool:
    """A garbage collection runs in this thread now (while the marks are in place: see
    :func:`bracket`)."""
    for _ in range(3):
        try:
            if next(reversed(_OPENED)) == "stop" and next(reversed(_CLOSED)) == "stop":
                return False
            return getattr(_MINE, "start", None) is _LATEST.get("start")
        except RuntimeError:
            # A collection started or ended while the marks were read (3.12: "OrderedDict
            # mutated during iteration"); it is over now: read them again.
            continue
    return False  # (never reached in practice; False records more, the safe side)


def bracket() -> None:
    """Put the marks first and last in ``gc.callbacks`` (again, if a library has put its
    own callbacks before or after them since). Bound methods compare by the identity of
    their object, so ``==`` and ``remove`` find these very marks."""
    callbacks = gc.callbacks
    if callbacks[: len(_FIRST)] != list(_FIRST):
        _remove(*_FIRST)
        callbacks[0:0] = _FIRST
    if callbacks[-1] != _LAST:
        _remove(_LAST)
        callbacks.append(_LAST)


def unbracket() -> None:
    """Take the marks out of ``gc.callbacks``."""
    _remove(*_FIRST, _LAST)


def _remove(*marks: Any) -> None:
    for mark in marks:
        while mark in gc.callbacks:
            gc.callbacks.remove(mark)
