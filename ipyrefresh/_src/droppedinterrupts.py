"""A Ctrl-C that the recorder's hook took and CPython then dropped: made pending again.

A pending signal is handled where bytecode runs next. While a build records, the recorder's
hook (Python code) runs at places where the user's code runs none: on 3.10 and 3.11 the
profile hook is called for the close of a generator that was left half-way
(``any(x for x in xs)``), from the generator's finalizer. A KeyboardInterrupt raised there
is one that CPython drops ("Exception ignored in ..."), as it drops whatever a finalizer, a
weakref callback or a gc callback raises, through ``sys.unraisablehook``: the cell ran on
(CI, 3.10: one Ctrl-C in a hundred, in builds).

On 3.12+ the recorder's CALL hook runs this way on purpose: it is an object's ``__del__``,
because a ``sys.monitoring`` callback that raises can crash CPython (see
``recorder._CallEvent``).

While a recording runs, :func:`watch` puts a hook there that makes such a Ctrl-C (one of the
recorder's hooks on its traceback) pending again, with no check for signals after it in the
hook, and marks the recordings as missing what the hook did not finish. The next check is
where the interpreter resumes after the finalizer, in the code that was running (the
user's, often in the very statement where the Ctrl-C landed), so the user's own ``except
KeyboardInterrupt`` sees it as it would without ipyrefresh. What the user's own
finalizers raise stays dropped, as it is without ipyrefresh. Everything else goes to the
hook that was there before.

The hooks this one replaced are kept, newest last: code run during a build may read
``sys.unraisablehook`` (ours) and install its own hook that calls it, and a library may save
and restore ours after the build. Called again from such a chain, this hook passes on to the
one it replaced before that, so every hook is called once and none twice.
"""

from __future__ import annotations

import _thread
import sys
import threading
from collections import defaultdict
from collections.abc import Callable
from types import CodeType
from typing import Any


class _Watch:
    """The hooks :func:`watch` replaced (oldest first), and what it looks for."""

    replaced: list[Callable[[Any], Any]] = []
    hooks: frozenset[CodeType] = frozenset()
    cut_short: Callable[[], None] = staticmethod(lambda: None)
    sent_again = 0


#: How many replaced hooks are kept: a chain of hooks that calls ours again this many times
#: deep ends at Python's own.
_KEEP = 8

_passing = threading.local()  # (how deep in a chain of hooks that calls this one again)

#: Reading a missing key calls ``_thread.interrupt_main`` from C, which makes SIGINT
#: pending. A subscript and a return make no check for signals; a call would, and would
#: handle the signal at once, inside this hook, where CPython drops it again.
_SEND_AGAIN: defaultdict[object, None] = defaultdict(_thread.interrupt_main)


def watch(hooks: frozenset[CodeType], cut_short: Callable[[], None]) -> None:
    """Until :func:`unwatch`, make pending again each Ctrl-C that CPython drops with one of
    ``hooks`` (the code of the recorder's hooks) on its traceback, after calling
    ``cut_short`` (the hook did not finish: what it was to record is missing)."""
    current = sys.unraisablehook  # (read once: two threads may come here at once)
    _Watch.hooks, _Watch.cut_short = hooks, cut_short
    if current is _hook:
        return
    replaced = _Watch.replaced
    if not replaced or replaced[-1] is not current:
        replaced.append(current)
        del replaced[:-_KEEP]  # (a hook made per test, per task, would pile up)
    sys.unraisablehook = _hook


def unwatch() -> None:
    """Put back the hook :func:`watch` replaced, unless another has replaced ours since (it
    may call ours, which then passes on, as before)."""
    if sys.unraisablehook is _hook and _Watch.replaced:
        sys.unraisablehook = _Watch.replaced[-1]


def sent_again() -> int:
    """How many dropped Ctrl-Cs were made pending again."""
    return _Watch.sent_again


def _hook(unraisable: Any) -> None:
    depth: int = getattr(_passing, "depth", 0)
    if depth == 0 and _through_a_hook(unraisable):
        _Watch.cut_short()  # (whatever it raised, the hook did not finish)
        if _an_interrupt(unraisable):
            _Watch.sent_again += 1
            _SEND_AGAIN.clear()
            key = object()
            return _SEND_AGAIN[key]  # (the last thing this hook does; see _SEND_AGAIN)
    replaced = _Watch.replaced
    later = replaced[-1 - depth] if depth < len(replaced) else sys.__unraisablehook__
    _passing.depth = depth + 1
    try:
        later(unraisable)
    finally:
        _passing.depth = depth


def _an_interrupt(unraisable: Any) -> bool:
    kind = unraisable.exc_type
    if not (isinstance(kind, type) and issubclass(kind, KeyboardInterrupt)):
        return False
    return threading.current_thread() is threading.main_thread()  # (signals go there only)


def _through_a_hook(unraisable: Any) -> bool:
    tb = unraisable.exc_traceback
    while tb is not None:
        if tb.tb_frame.f_code in _Watch.hooks:
            return True
        tb = tb.tb_next
    return False
