"""The two hooks the tape needs in autograd, installed on first use and removable.

* ``notrace_primitives[TapeNode]``: autograd asks this set whether to skip recording a
  primitive applied to traced values. For its non-differentiable primitives
  (comparisons, ``floor``, ``argmax``...) we record an :class:`OpGuard` — reading the
  call from autograd's primitive wrapper — and answer yes, exactly as for ``VJPNode``.
  It is there only while a tape records (:func:`spying`): the dict is a global of
  autograd's that cloudpickle sends, by value, with every primitive defined in a
  notebook, and a key of ours in it made the user's own payloads need ipyrefresh.
* ``Box.__bool__``: ``if x > 0`` on a traced value is recorded as a :class:`BoolGuard`.
  For boxes of any other trace it does what autograd's own ``__bool__`` does.
* The integer dtypes' constructors (``anp.int64(x)``) unbox their argument without
  recording anything; on a traced value they mark the tape unsupported.

:func:`install` checks, on a small trace, that the hooks see what they must in the
installed autograd version; if not, the tape compiler is unavailable (and says why).
"""

from __future__ import annotations

import sys
import threading
from typing import Any

import autograd.numpy as anp
from autograd.core import VJPNode
from autograd.tracer import Box, notrace_primitives

from .record import BoolGuard, OpGuard, Tape, TapeNode, user_location

# Non-differentiable primitives whose result depends only on shapes and dtypes, which
# the cache key fixes already: no guard needed.
_STATIC = {
    anp.ndim,
    anp.shape,
    anp.size,
    anp.result_type,
    anp.iscomplexobj,
    anp.isscalar,
    anp.zeros_like,
    anp.ones_like,
    anp.empty_like,
}
_INT_TYPES = ("int8", "int16", "int32", "int64", "integer")


_BOOL, _NEW = "__bool__", "__new__"  # the methods install() sets on autograd's classes


class _NotraceSpy:
    """Stands in for ``notrace_primitives[TapeNode]``; see the module docstring."""

    def __contains__(self, f: Any) -> bool:
        frame = sys._getframe(1)
        loc = frame.f_locals
        try:
            argvals, kwargs, boxed = loc["argvals"], loc["kwargs"], loc["boxed_args"]
            tape: Tape = boxed[0][1]._node.tape
        except (KeyError, IndexError, AttributeError, TypeError):
            _State.broken = "cannot read autograd's primitive call (unknown autograd version)"
            return True
        if tape.stopped():  # (as autograd's own VJPNode answers)
            return f in notrace_primitives[VJPNode]
        tape.keep_constants(argvals, kwargs, tuple(pos for pos, _ in boxed))
        if f not in notrace_primitives[VJPNode]:
            tape.pending.append((f, argvals, kwargs))  # its TapeNode takes it off, unless
            return False  # the call raises
        if f in _STATIC:
            return True
        if any(isinstance(a, Box) for a in argvals):
            tape.note(f"{getattr(f, '__name__', '?')} mixes traced values of different traces")
            return True
        try:
            value = f.fun(*argvals, **kwargs)
        except Exception:  # the real call raises the same error a moment later
            tape.note(f"the function catches an error raised by {getattr(f, '__name__', '?')}")
            return True
        argnums = tuple(pos for pos, _ in boxed)
        parents = tuple(b._node.slot for _, b in boxed)
        tape.events.append(
            OpGuard(f, tuple(argvals), dict(kwargs), argnums, parents, value, user_location(2))
        )
        return True


def _traced_bool(self: Box) -> bool:
    result = bool(self._value)
    node = self._node
    if type(node) is TapeNode and not node.tape.stopped():
        node.tape.events.append(BoolGuard(node.slot, result, user_location(2)))
    return result


def _int_new(orig: Any) -> Any:
    def __new__(*args: Any, **kwargs: Any) -> Any:
        for a in args:
            if isinstance(a, Box) and type(a._node) is TapeNode:
                a._node.tape.note("converts a traced value to an integer (anp.int64(x))")
        return orig(*args, **kwargs)

    return __new__


class _State:
    lock = threading.Lock()
    installed = False
    broken = ""
    originals: dict[str, Any] = {}
    #: Tapes recording now, in all threads (under ``spy_lock``): a token's id -> the
    #: thread and the id of the frame that opened the recording.
    recording: dict[int, tuple[int, int]] = {}
    spy_lock = threading.Lock()  # (not ``lock``: install() holds that while it probes)


_SPY = _NotraceSpy()


class _Spying:
    """``notrace_primitives[TapeNode]`` is our spy inside the ``with`` block. A class, not
    a generator: a generator cut short at the block's entry runs its cleanup from its
    finalizer, and this one walks the thread's frames, which crashed CPython inside a
    garbage collection (CI on 3.12 and 3.13)."""

    __slots__ = ()

    def __enter__(self) -> None:
        opened = (threading.get_ident(), id(sys._getframe(1)))  # (the ``with``'s frame)
        with _State.spy_lock:
            _State.recording[id(self)] = opened
            notrace_primitives[TapeNode] = _SPY

    def __exit__(self, *exc: object) -> None:
        with _State.spy_lock:
            _State.recording.pop(id(self), None)
            _forget_cut_short()
            if not _State.recording:
                notrace_primitives.pop(TapeNode, None)


def spying() -> _Spying:
    """``notrace_primitives[TapeNode]`` is our spy while this tape records (see the module
    docstring; nested and other threads' recordings count). A recording a Ctrl-C cut
    short before its ``__exit__`` is forgotten once its frame has left its thread's stack,
    as the recorder forgets its own."""
    return _Spying()


def _forget_cut_short() -> None:
    """Drop the recordings whose opening frame is no longer on its thread's stack."""
    frames = sys._current_frames()
    try:
        for key, (thread, frame_id) in list(_State.recording.items()):
            frame = frames.get(thread)
            while frame is not None and id(frame) != frame_id:
                frame = frame.f_back
            if frame is None:
                del _State.recording[key]
    finally:
        # ``frames`` holds this very frame: a cycle that would keep every caller's locals
        # (the user's handle, its function) alive until the next collection.
        frames.clear()


def install() -> str:
    """Install the hooks (idempotent). Returns "" or why the tape cannot work here."""
    if _State.installed:  # every build after the first: no lock to take (or to leave held:
        return _State.broken  # Ctrl-C on the line event of a with's exit skips __exit__)
    with _State.lock:
        if _State.installed:
            return _State.broken
        _State.originals = {_BOOL: Box.__dict__.get(_BOOL)}
        setattr(Box, _BOOL, _traced_bool)
        for name in _INT_TYPES:
            cls = getattr(anp, name, None)
            orig = cls.__dict__.get("__new__") if isinstance(cls, type) else None
            if orig is not None:
                _State.originals[name] = orig
                setattr(cls, _NEW, staticmethod(_int_new(orig)))
        _State.installed = True
        _State.broken = _probe()
        return _State.broken


def uninstall() -> None:
    """Restore autograd as it was (``%unload_ext``)."""
    with _State.lock:
        if not _State.installed:
            return
        orig = _State.originals.get(_BOOL)
        if orig is not None:
            setattr(Box, _BOOL, orig)
        elif _BOOL in Box.__dict__:
            delattr(Box, _BOOL)  # autograd's Box had none: truth is object's again
        notrace_primitives.pop(TapeNode, None)
        for name in _INT_TYPES:
            cls = getattr(anp, name, None)
            if name in _State.originals and isinstance(cls, type):
                setattr(cls, _NEW, _State.originals[name])
        _State.installed = False
        _State.broken = ""


def _probe() -> str:
    """Run a small trace and check that both hooks recorded what they must."""
    from ..base import Transform
    from .record import transform

    def f(x: Any) -> Any:
        if x > 0.5 and x:  # a comparison (an OpGuard), then bool() of the box
            return x * 2.0
        return x

    tape = Tape()
    try:
        with spying():
            transform(Transform.GRAD, tape)(f)(1.0)
    except Exception as exc:  # pragma: no cover - only with an unknown autograd
        return f"the tape cannot trace with this autograd ({type(exc).__name__}: {exc})"
    kinds = [type(e).__name__ for e in tape.events]
    if _State.broken:
        return _State.broken
    if kinds[:2] != ["OpGuard", "BoolGuard"]:  # pragma: no cover - only with an unknown autograd
        return f"the tape's hooks do not work with this autograd (saw {kinds})"
    return ""
