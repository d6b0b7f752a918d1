"""The kernel side of the JupyterLab status-bar item: a comm target named ``ipyrefresh``.

The front end is a view; the engine is the source of truth (``%stale`` prints the same
facts as text). Messages are small JSON dicts, versioned by ``schema`` (see
docs/frontend.md for the full description).

Front end -> kernel (``data`` of ``comm_open`` or ``comm_msg``)::

    {"type": "request"}                     # send the status now
    {"type": "refresh", "name": null}       # rebuild every stale derivative now
    {"type": "refresh", "name": "g"}        # ... only those depending on g

Kernel -> front end::

    {"type": "status", "schema": 1, "instance": "9f3a0c1e", "seq": 7,
     "fresh": 5, "stale": 2, "error": 0, "total": 7,
     "world": 12, "mode": "lazy", "compiler": "tape",
     "entries": [{"id": 3, "name": "grad(h)", "target": "h", "state": "stale",
                  "reasons": ["g redefined in cell [12]"], "error": null}, ...],
     "truncated": 0, "changes": ["g redefined in cell [12]"]}
    {"type": "refreshed", "schema": 1, "rebuilt": [...], "pending": [...], "failed": [...]}
    {"type": "unloaded", "schema": 1}      # then the comm closes

The kernel never waits for the front end: a listener on the engine only sets a flag, and
at most one status message goes out per cell (from ``post_run_cell``, and only when it
differs from the last one sent), plus one right after each front-end request.
"""

from __future__ import annotations

import contextlib
import secrets
from typing import Any

import comm as comm_package

from .._src.engine import Engine

TARGET = "ipyrefresh"
SCHEMA = 1
MAX_ENTRIES = 100  # entries listed in one message; the counts always cover all of them
MAX_REASONS = 3  # reasons listed per entry
MAX_TEXT = 200  # characters per reason or error
MAX_CHANGES = 5
MAX_COMMS = 16  # open comms kept (front ends: tabs and pages on this kernel)


def _clip(text: Any) -> str:
    text = str(text)
    return text if len(text) <= MAX_TEXT else text[: MAX_TEXT - 1] + "…"


_ORDER = {"error": 0, "failed": 0, "stale": 1, "fresh": 2}


def _text(reason: Any) -> str:
    return str(reason["text"]) if isinstance(reason, dict) else str(reason)


def status_message(status: dict[str, Any], seq: int = 0, instance: str = "") -> dict[str, Any]:
    """The small message the front end gets, derived from ``ipyrefresh.status()``."""
    entries = list(status.get("entries", ()))
    counts = {"fresh": 0, "stale": 0, "error": 0}
    for entry in entries:
        state = entry.get("state", "stale")
        counts[state if state in counts else "stale"] += 1
    # Stale and failed entries first: they are what the user opens the list for.
    entries.sort(key=lambda e: (_ORDER.get(e.get("state", "stale"), 1), e.get("id", 0)))
    shown = entries[:MAX_ENTRIES]
    return {
        "type": "status",
        "schema": SCHEMA,
        "instance": instance,
        "seq": seq,
        "fresh": counts["fresh"],
        "stale": counts["stale"],
        "error": counts["error"],
        "total": len(entries),
        "world": status.get("world", 0),
        "mode": status.get("mode", ""),
        "compiler": status.get("compiler", ""),
        "entries": [
            {
                "id": e.get("id"),
                "name": _clip(e.get("name", "?")),
                "target": _clip(e.get("target", "")),
                "state": e.get("state", "stale"),
                "reasons": [_clip(_text(r)) for r in list(e.get("reasons") or ())[:MAX_REASONS]],
                "error": _clip(e["error"]) if e.get("error") else None,
            }
            for e in shown
        ],
        "truncated": len(entries) - len(shown),
        "changes": [_clip(_text(c)) for c in list(status.get("changes") or ())[-MAX_CHANGES:]],
    }


class StatusChannel:
    """Every open ``ipyrefresh`` comm of this kernel, and what was last sent on them."""

    def __init__(self, shell: Any, engine: Engine) -> None:
        self.shell = shell
        self.engine = engine
        self.comms: list[Any] = []
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
        if not self.comms:
            return
        try:  # the cell already ran; the status can wait
            self.engine.sweep(deep=False)
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
        try:
            self._handle(c, data)
        except Exception as exc:
            self._send(c, {"type": "error", "schema": SCHEMA, "message": _clip(exc)})

    def _handle(self, c: Any, data: dict[str, Any]) -> None:
        kind = data.get("type")
        if kind == "refresh":
            name = data.get("name")
            report = self.engine.refresh(name if isinstance(name, str) and name else None)
            self._send(
                c,
                {
                    "type": "refreshed",
                    "schema": SCHEMA,
                    "name": name if isinstance(name, str) else None,
                    "rebuilt": [_clip(x) for x in report.get("rebuilt", [])],
                    "pending": [_clip(x) for x in report.get("pending", [])],
                    "failed": [_clip(f"{n}: {e}") for n, e in report.get("failed", [])],
                },
            )
            self._broadcast(force=True)
        elif kind == "request":
            self._send(c, self._compute())
        else:
            self._send(
                c, {"type": "error", "schema": SCHEMA, "message": _clip(f"unknown {kind!r}")}
            )

    def _compute(self) -> dict[str, Any]:
        self.seq += 1
        return status_message(self.engine.status(check=False), self.seq, self.instance)

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
    return {k: v for k, v in a.items() if k != "seq"} == {k: v for k, v in b.items() if k != "seq"}
