"""Dynamic call edges: which user functions actually ran while a derivative was built.

Static analysis cannot see ``f = fs.pop(); f(1, 2)``; running the code can. We record
only during a build (one trace), so the steady-state replay pays nothing: with
``sys.setprofile`` on Python 3.11, with ``sys.monitoring`` PY_START events on 3.12+.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import CodeType, FrameType
from typing import Any

from .analysis import is_user_code, is_user_frame

_MAX_WALK = 64


@dataclass(eq=False)
class CallLog:
    """User code entered during a build: ``(caller code or None, callee code, globals)``."""

    calls: dict[tuple[CodeType | None, CodeType], dict[str, Any]] = field(default_factory=dict)
    active: bool = True
    note: str = ""

    def add(self, frame: FrameType, boundary: FrameType | None) -> None:
        code = frame.f_code
        caller: CodeType | None = None
        back = frame.f_back
        for _ in range(_MAX_WALK):
            if back is None or back is boundary:
                break
            if is_user_frame(back.f_code, back.f_globals):
                caller = back.f_code
                break
            back = back.f_back
        key = (caller, code)
        if key not in self.calls:
            self.calls[key] = frame.f_globals


_local = threading.local()


def _active() -> list[tuple[CallLog, FrameType]]:
    stack: list[tuple[CallLog, FrameType]] | None = getattr(_local, "stack", None)
    if stack is None:
        stack = _local.stack = []
    return stack


def _profile(frame: FrameType, event: str, arg: Any) -> None:
    if event == "call" and is_user_frame(frame.f_code, frame.f_globals):
        for log, boundary in _active():
            log.add(frame, boundary)


def reset_if_idle() -> None:
    """Remove a recording left behind in this thread by an interrupted build.

    Called between cells, when no build runs in this thread: a KeyboardInterrupt that
    lands in ``record_calls``'s cleanup would otherwise leave the profile hook on for
    the rest of the session (every Python call 10x slower, and logged).
    """
    if getattr(_local, "stack", None):
        _local.stack = []
    if sys.getprofile() is _profile:
        sys.setprofile(None)
    if sys.version_info >= (3, 12):  # pragma: no cover - exercised on 3.12+
        mon = sys.monitoring  # type: ignore[attr-defined]
        if mon.get_tool(mon.PROFILER_ID) == "ipyrefresh":
            mon.set_events(mon.PROFILER_ID, 0)
            mon.register_callback(mon.PROFILER_ID, mon.events.PY_START, None)
            mon.free_tool_id(mon.PROFILER_ID)


@contextmanager
def record_calls(enabled: bool = True) -> Iterator[CallLog]:
    """Record the user functions entered in this thread inside the ``with`` block.

    Builds can nest (a derivative called inside a function being differentiated); the
    inner recording then shares the hook with the outer one.
    """
    log = CallLog(active=enabled)
    if not enabled:
        yield log
        return
    boundary = sys._getframe(2)  # the frame that opened the recording; callers above are not ours
    stack = _active()
    if sys.version_info >= (3, 12):  # pragma: no cover - exercised on 3.12+
        with _monitoring(log, boundary):
            yield log
        return
    previous = sys.getprofile()
    if previous is not None and previous is not _profile:
        # Another profiler (cProfile, a debugger) owns the hook; don't disturb it.
        log.active = False
        log.note = "dynamic edges not recorded: another profiler is active"
        yield log
        return
    stack.append((log, boundary))
    if previous is None:
        sys.setprofile(_profile)
    try:
        yield log
    finally:
        for i, (other, _) in enumerate(stack):
            if other is log:
                del stack[i]
                break
        if not stack:
            sys.setprofile(None)


@contextmanager
def _monitoring(log: CallLog, boundary: FrameType) -> Iterator[None]:  # pragma: no cover - 3.12+
    mon = sys.monitoring  # type: ignore[attr-defined]
    tool = mon.PROFILER_ID
    if mon.get_tool(tool) is not None:
        log.active = False
        log.note = "dynamic edges not recorded: another profiler is active"
        yield
        return
    mon.use_tool_id(tool, "ipyrefresh")

    def on_start(code: CodeType, offset: int) -> Any:
        if is_user_code(code):
            frame = sys._getframe(1)
            if frame.f_code is code and is_user_frame(code, frame.f_globals):
                log.add(frame, boundary)
        return None

    mon.register_callback(tool, mon.events.PY_START, on_start)
    mon.set_events(tool, mon.events.PY_START)
    try:
        yield
    finally:
        mon.set_events(tool, 0)
        mon.register_callback(tool, mon.events.PY_START, None)
        mon.free_tool_id(tool)
