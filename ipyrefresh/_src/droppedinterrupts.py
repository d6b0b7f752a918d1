"""A Ctrl-C that the recorder's hook took and CPython then dropped: raised again.

A pending signal is handled where bytecode runs next. While a build records, the recorder's
hook (Python code) runs at places where the user's code runs none: on 3.10 and 3.11 the
profile hook is called for the close of a generator that was left half-way
(``any(x for x in xs)``), from the generator's finalizer. A KeyboardInterrupt raised there
is one that CPython drops ("Exception ignored in ..."), as it drops whatever a finalizer, a
weakref callback or a gc callback raises, through ``sys.unraisablehook``: the cell ran on
(CI, 3.10: one Ctrl-C in a hundred, in builds).

While a recording runs, :func:`watch` puts a hook there that sends such a KeyboardInterrupt
again, when one of the recorder's hooks is on its traceback, as a second Ctrl-C a moment
later would: a new thread calls ``_thread.interrupt_main``. (Called from the hook itself,
the interrupt would be handled at once, inside the hook, and dropped again.) It arrives when
that thread next gets the interpreter, and at the latest when the recording ends:
:func:`settle` waits for it there, in the build's own code, so a short build cannot end its
cell first and leave the interrupt to land in whatever runs next. A KeyboardInterrupt that
the user's own finalizer raises stays dropped, as it is without ipyrefresh. Everything else
goes to the hook that was there before.
"""

from __future__ import annotations

import _thread
import sys
import threading
from collections.abc import Callable
from types import CodeType
from typing import Any


class _Watch:
    """What :func:`watch` replaced, and what it looks for."""

    previous: Callable[[Any], Any] | None = None
    hooks: frozenset[CodeType] = frozenset()
    raised_again = 0
    #: Held until the interrupt being sent again is sent.
    sending: _thread.LockType | None = None


def watch(hooks: frozenset[CodeType]) -> None:
    """Raise again the KeyboardInterrupts that CPython drops with one of ``hooks`` (the code
    of the recorder's hooks) on their traceback, until :func:`unwatch`."""
    current = sys.unraisablehook  # (read once: two threads may come here at once)
    _Watch.hooks = hooks
    if current is not _hook:
        _Watch.previous = current
        sys.unraisablehook = _hook


def unwatch() -> None:
    """Put back the hook :func:`watch` replaced (unless another has replaced ours since)."""
    if sys.unraisablehook is _hook:
        sys.unraisablehook = _Watch.previous or sys.__unraisablehook__
    _Watch.previous = None


def settle() -> None:
    """In the main thread: wait until the interrupt being sent again (if any) is sent; it is
    raised here, at the latest."""
    sent = _Watch.sending
    if sent is None or threading.current_thread() is not threading.main_thread():
        return
    _Watch.sending = None
    if sent.acquire(timeout=1.0):
        sent.release()


def raised_again() -> int:
    """How many dropped KeyboardInterrupts were raised again."""
    return _Watch.raised_again


def _hook(unraisable: Any) -> None:
    if _taken_by_a_hook(unraisable):
        sent = _thread.allocate_lock()
        sent.acquire()
        try:
            _thread.start_new_thread(_send, (sent,))
        except RuntimeError:  # (no new threads: the interpreter is shutting down)
            pass
        else:
            _Watch.sending = sent
            _Watch.raised_again += 1
            return
    (_Watch.previous or sys.__unraisablehook__)(unraisable)


def _send(sent: _thread.LockType) -> None:
    """(In a thread of its own, where no signal is handled.)"""
    try:
        _thread.interrupt_main()
    finally:
        sent.release()


def _taken_by_a_hook(unraisable: Any) -> bool:
    kind = unraisable.exc_type
    if not (isinstance(kind, type) and issubclass(kind, KeyboardInterrupt)):
        return False
    if threading.current_thread() is not threading.main_thread():
        return False  # (signals are handled in the main thread only)
    tb = unraisable.exc_traceback
    while tb is not None:
        if tb.tb_frame.f_code in _Watch.hooks:
            return True
        tb = tb.tb_next
    return False
