"""The kernel side of the front ends' status item: a comm target named ``ipyrefresh``.

The front end is a view; the engine is the source of truth (``%stale`` prints the same
facts as text). This module talks to the engine only through ``engine.status()``,
``engine.refresh(name)`` and ``engine.listeners``. Messages are small JSON dicts,
versioned by ``schema``; docs/frontend.md describes them in full.

Front end -> kernel (``data`` of ``comm_open`` or ``comm_msg``)::

    {"type": "request", "req": 3}                 # send the status now
    {"type": "refresh", "name": null, "req": 4}   # rebuild every stale derivative now
    {"type": "refresh", "name": "g", "req": 5}    # ... only those depending on g

Kernel -> front end::

    {"type": "status", "schema": 2, "instance": "9f3a0c1e", "seq": 7, "req": 3,
     "fresh": 5, "stale": 2, "failed": 0, "unbuilt": 0, "total": 7, "truncated": 0,
     "mode": "lazy", "compiler": "tape", "backend": "autograd", "internal_errors": 0,
     "entries": [{"id": 3, "name": "grad(h)", "target": "h", "state": "stale",
                  "reasons": [{"text": "g redefined in cell [12]", "what": "g redefined",
                               "subject": "g", "cell": 12, "cell_id": "a1b2"}],
                  "error": null}, ...],
     "changes": [<reasons, as above>]}
    {"type": "refreshed", "schema": 2, "req": 4, "name": null,
     "rebuilt": [...], "pending": [...], "failed": [...]}
    {"type": "error", "schema": 2, "req": 5, "message": "..."}
    {"type": "unloaded", "schema": 2}      # then the comm closes

``req`` echoes the request's number so the front end can tell that a request got its
answer (and say so when one does not); pushed messages carry ``"req": null``.

The kernel never waits for the front end: a listener on the engine only sets a flag, and
at most one status message goes out per cell (from ``post_run_cell``, and only when it
differs from the last one sent), plus one answer to each front-end request. Requests are
handled on the kernel's main thread, never on a subshell's: a refresh rebuilds
derivatives from the user's namespace, which must not happen while a cell runs.
"""

from __future__ import annotations

import contextlib
import re
import secrets
import threading
from collections import OrderedDict
from typing import Any

import comm as comm_package

from .._src.changes import Detection
from .._src.engine import Engine

TARGET = "ipyrefresh"
SCHEMA = 2
MAX_ENTRIES = 100  # entries listed in one message; the counts always cover all of them
MAX_REASONS = 3  # reasons listed per entry
MAX_TEXT = 200  # characters per reason or error
MAX_CHANGES = 5
MAX_COMMS = 16  # open comms kept (front ends: tabs and pages on this kernel)
MAX_CELLS = 2000  # execution counts whose cell id is remembered

STATES = ("fresh", "stale", "failed", "unbuilt")
_STATE_ALIASES = {"error": "failed"}  # status() version 1 called a failed rebuild "error"
_ORDER = {"failed": 0, "stale": 1, "unbuilt": 2, "fresh": 3}
_IN_CELL = re.compile(r"^(?P<what>.*) in cell \[(?P<cell>\d+)\]$", re.S)


def _clip(value: Any) -> str:
    text = str(value)
    return text if len(text) <= MAX_TEXT else text[: MAX_TEXT - 1] + "…"


def _int_or_none(x: Any) -> int | None:
    return x if isinstance(x, int) and not isinstance(x, bool) else None


def _str_or_none(x: Any) -> str | None:
    return x if isinstance(x, str) and x else None


class CellIds:
    """Which Jupyter cell (its id, sent by the front end) ran as execution count N.

    Reasons name cells by execution count, which repeats after a restart and means
    nothing on screen; the cell id lets the front end scroll to the cell. Recorded from
    ``post_run_cell`` (``result.info.cell_id``). The engine's ``status()`` version 2
    carries ``cell_id`` itself; then this only fills in what it left empty.
    """

    def __init__(self, limit: int = MAX_CELLS) -> None:
        self.limit = limit
        self._ids: OrderedDict[int, str] = OrderedDict()

    def record(self, count: Any, cell_id: Any) -> None:
        count, cell_id = _int_or_none(count), _str_or_none(cell_id)
        if count is None or cell_id is None:
            return
        self._ids[count] = cell_id
        self._ids.move_to_end(count)
        while len(self._ids) > self.limit:
            self._ids.popitem(last=False)

    def get(self, count: int | None) -> str | None:
        return None if count is None else self._ids.get(count)


def normalise_reason(reason: Any, cells: CellIds | None = None) -> dict[str, Any]:
    """One reason as the front end gets it, from ``status()`` version 1 (a plain string)
    or 2 (a dict). ``what`` is the text without its "in cell [N]" tail, for a front end
    that names the cell itself."""
    if isinstance(reason, dict):
        text = str(reason.get("text", ""))
        subject = str(reason.get("subject") or "")
        cell = _int_or_none(reason.get("cell"))
        cell_id = _str_or_none(reason.get("cell_id"))
    else:
        text, subject, cell, cell_id = str(reason), "", None, None
    what = text
    match = _IN_CELL.match(text)
    if match and (cell is None or int(match["cell"]) == cell):
        what, cell = match["what"], int(match["cell"])
    if cell_id is None and cells is not None:
        cell_id = cells.get(cell)
    return {
        "text": _clip(text),
        "what": _clip(what),
        "subject": _clip(subject),
        "cell": cell,
        "cell_id": cell_id,
    }


def _state(entry: dict[str, Any]) -> str:
    state = entry.get("state", "stale")
    state = _STATE_ALIASES.get(state, state)
    return state if state in STATES else "stale"


def status_message(
    status: dict[str, Any],
    seq: int = 0,
    instance: str = "",
    req: int | None = None,
    cells: CellIds | None = None,
) -> dict[str, Any]:
    """The small message the front end gets, derived from ``ipyrefresh.status()``
    (version 1 or 2); never more than a few kB, whatever the size of the cache."""
    entries = list(status.get("entries") or ())
    counts = dict.fromkeys(STATES, 0)
    for entry in entries:
        counts[_state(entry)] += 1
    # Failed and stale entries first: they are what the user opens the list for.
    entries.sort(key=lambda e: (_ORDER[_state(e)], e.get("id") or 0))
    shown = entries[:MAX_ENTRIES]
    return {
        "type": "status",
        "schema": SCHEMA,
        "instance": instance,
        "seq": seq,
        "req": req,
        **counts,
        "total": len(entries),
        "truncated": len(entries) - len(shown),
        "mode": str(status.get("mode") or ""),
        "compiler": str(status.get("compiler") or ""),
        "backend": str(status.get("backend") or ""),
        "internal_errors": _int_or_none(status.get("internal_errors")) or 0,
        "entries": [
            {
                "id": _int_or_none(e.get("id")) or 0,
                "name": _clip(e.get("name", "?")),
                "target": _clip(e.get("target", "")),
                "state": _state(e),
                "reasons": [
                    normalise_reason(r, cells) for r in list(e.get("reasons") or ())[:MAX_REASONS]
                ],
                "error": _clip(e["error"]) if e.get("error") else None,
            }
            for e in shown
        ],
        "changes": [
            normalise_reason(c, cells) for c in list(status.get("changes") or ())[-MAX_CHANGES:]
        ],
    }


class StatusChannel:
    """Every open ``ipyrefresh`` comm of this kernel, and what was last sent on them."""

    def __init__(self, shell: Any, engine: Engine) -> None:
        self.shell = shell
        self.engine = engine
        self.comms: list[Any] = []
        self.cells = CellIds()
        self.dirty = False
        self.seq = 0
        self.instance = secrets.token_hex(4)  # lets the front end tell reloads apart
        self.sent = 0  # status messages sent (tests read it)
        self._last: dict[str, Any] | None = None
        self._closed = False

    # -- lifecycle -----------------------------------------------------------------------
    def open(self) -> None:
        """Register the comm target, listen to the engine, and announce ourselves."""
        comm_package.get_comm_manager().register_target(TARGET, self._on_open)
        self.engine.listeners.append(self._mark_dirty)
        self.shell.events.register("post_run_cell", self.post_run_cell)
        if getattr(self.shell, "kernel", None) is not None:
            # Loaded by %load_ext after the front end asked (and was told no): tell it now.
            # A front end that does not know the target just closes this comm again.
            with contextlib.suppress(Exception):
                self.engine.sweep(deep=True, detection=Detection.ON_REQUEST)
                self._add(comm_package.create_comm(target_name=TARGET, data=self._compute()))

    def close(self) -> None:
        """Unload: say so on every comm, close them, and unhook everything."""
        if self._closed:
            return
        self._closed = True
        for c in list(self.comms):
            with contextlib.suppress(Exception):
                c.send({"type": "unloaded", "schema": SCHEMA})
            with contextlib.suppress(Exception):
                c.close()
        self.comms.clear()
        with contextlib.suppress(Exception):
            comm_package.get_comm_manager().unregister_target(TARGET, self._on_open)
        with contextlib.suppress(ValueError):
            self.engine.listeners.remove(self._mark_dirty)
        with contextlib.suppress(ValueError):
            self.shell.events.unregister("post_run_cell", self.post_run_cell)

    # -- engine and cell events ----------------------------------------------------------
    def _mark_dirty(self) -> None:
        self.dirty = True  # O(1): the engine calls this after every build or invalidation

    def post_run_cell(self, result: Any = None) -> None:
        info = getattr(result, "info", None)
        self.cells.record(getattr(result, "execution_count", None), getattr(info, "cell_id", None))
        if not self.comms:
            return
        # The extension's own post_run_cell (registered before this one) checked only the
        # entries a rebound name touched (eager mode: all); the status bar counts what is
        # fresh, so every guard is checked, array contents included (a cell's changes mark
        # nothing dirty until then; an array changed in place is a change).
        try:  # the cell already ran; the status can wait
            with self.engine.lock_for_hook() as held:
                if not held:  # (another thread's build: the next cell sends it)
                    return
                if self.engine.config.mode != "eager":
                    self.engine.sweep(deep=True, detection=Detection.AFTER_CELL)
                self._broadcast()
        except Exception as exc:
            self.engine.internal_error("sending the status", exc)

    # -- comm traffic --------------------------------------------------------------------
    def _on_open(self, c: Any, msg: dict[str, Any]) -> None:
        self._add(c)
        self._on_msg(c, msg)  # the opening data is a request (or a refresh)

    def _add(self, c: Any) -> None:
        self.comms.append(c)
        if len(self.comms) > MAX_COMMS:
            # Pages closed without closing their comm leave it open here; keep the
            # per-cell traffic bounded by dropping the oldest.
            oldest = self.comms.pop(0)
            with contextlib.suppress(Exception):
                oldest.close()
        c.on_msg(lambda msg, c=c: self._on_msg(c, msg))
        c.on_close(lambda msg, c=c: self._forget(c))

    def _forget(self, c: Any) -> None:
        with contextlib.suppress(ValueError):
            self.comms.remove(c)

    def _on_msg(self, c: Any, msg: dict[str, Any]) -> None:
        data = msg.get("content", {}).get("data") or {}
        loop = self._main_loop()
        if loop is not None and threading.current_thread() is not threading.main_thread():
            # Sent over a kernel subshell, so we run beside the user's cell. Rebuilding
            # derivatives there would race with it: queue the work on the main thread,
            # which takes it once the running cell (if any) is done.
            loop.add_callback(self._dispatch, c, data)
            return
        self._dispatch(c, data)

    def _main_loop(self) -> Any:
        return getattr(getattr(self.shell, "kernel", None), "io_loop", None)

    def _dispatch(self, c: Any, data: dict[str, Any]) -> None:
        req = _int_or_none(data.get("req")) if isinstance(data, dict) else None
        try:
            self._handle(c, data if isinstance(data, dict) else {}, req)
        except Exception as exc:
            self._send(c, {"type": "error", "schema": SCHEMA, "req": req, "message": _clip(exc)})

    def _handle(self, c: Any, data: dict[str, Any], req: int | None) -> None:
        kind = data.get("type")
        if kind == "refresh":
            name = data.get("name")
            if name is not None and not isinstance(name, str):  # (not "refresh them all")
                message = _clip(f"a refresh names a function by a string, not {name!r}")
                self._send(c, {"type": "error", "schema": SCHEMA, "req": req, "message": message})
                return
            name = name or None
            report = self.engine.refresh(name)
            self._send(
                c,
                {
                    "type": "refreshed",
                    "schema": SCHEMA,
                    "req": req,
                    "name": name,
                    "rebuilt": [_clip(x) for x in report.get("rebuilt", [])],
                    "pending": [_clip(x) for x in report.get("pending", [])],
                    "failed": [_clip(f"{n}: {e}") for n, e in report.get("failed", [])],
                },
            )
            self._broadcast(force=True)
        elif kind == "request":
            # A page that opens or reloads asks between cells: check every entry first
            # (with no comm open, no cell ended with that check).
            self.engine.sweep(deep=True, detection=Detection.ON_REQUEST)
            self._send(c, self._compute(req))
        else:
            message = _clip(f"unknown request {kind!r}")
            self._send(c, {"type": "error", "schema": SCHEMA, "req": req, "message": message})

    def _compute(self, req: int | None = None) -> dict[str, Any]:
        self.seq += 1
        status = self.engine.status(check=False)  # (checked after each cell, or just now)
        return status_message(status, self.seq, self.instance, req, self.cells)

    def _broadcast(self, force: bool = False) -> None:
        """Send the status to every comm, unless they all have it already."""
        self.dirty = False
        message = self._compute()
        previous, self._last = self._last, message
        if not force and previous is not None and _same(previous, message):
            return
        for c in list(self.comms):
            self._send(c, message)

    def _send(self, c: Any, message: dict[str, Any]) -> None:
        try:
            c.send(message)
        except Exception:  # a comm whose front end went away
            self._forget(c)
            return
        if message.get("type") == "status":
            self.sent += 1


def _same(a: dict[str, Any], b: dict[str, Any]) -> bool:
    ignore = ("seq", "req")
    return {k: v for k, v in a.items() if k not in ignore} == {
        k: v for k, v in b.items() if k not in ignore
    }
