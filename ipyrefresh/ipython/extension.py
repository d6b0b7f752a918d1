"""``%load_ext ipyrefresh``: hook cell execution, register magics and configuration.

Unloading leaves the shell as it was: events, magics, AST transformers and the
configurable are removed, and live handles fall back to checking their dependencies
on every call (correct, a little slower) instead of trusting the world age.
"""

from __future__ import annotations

import contextlib
import sys
from typing import Any

from .._src.config import IPyRefresh
from .._src.engine import Engine
from .._src.handles import get_engine
from .cells import SyncInserter
from .magics import IPyRefreshMagics


class Extension:
    """The glue between one IPython shell and the engine."""

    def __init__(self, shell: Any, engine: Engine) -> None:
        self.shell = shell
        self.engine = engine
        self.config = IPyRefresh(parent=shell)
        self.magics = IPyRefreshMagics(shell, engine)
        self.transformer = SyncInserter(self._sync_enabled, self._watched)
        self._warned = False
        self._sweep_pending = False  # a cell ran whose post-cell sweep has not finished
        self.extras: list[Any] = []  # things with a .close() (e.g. the front-end comm)

    # -- lifecycle -----------------------------------------------------------------------
    def load(self) -> None:
        shell = self.shell
        self.engine.use_config(self.config)
        shell.configurables.append(self.config)
        self.engine.attach(shell.user_ns)
        shell.events.register("pre_run_cell", self.pre_run_cell)
        shell.events.register("post_run_cell", self.post_run_cell)
        shell.register_magics(self.magics)
        shell.ast_transformers.append(self.transformer)
        # The JupyterLab status item's comm; registered after post_run_cell above so that
        # its once-per-cell update sees this cell's invalidations.
        from .comm import StatusChannel

        channel = StatusChannel(shell, self.engine)
        self.extras.append(channel)
        channel.open()

    def unload(self) -> None:
        shell = self.shell
        for extra in self.extras:
            with contextlib.suppress(Exception):
                extra.close()
        for event, callback in (
            ("pre_run_cell", self.pre_run_cell),
            ("post_run_cell", self.post_run_cell),
        ):
            with contextlib.suppress(ValueError):
                shell.events.unregister(event, callback)
        manager = shell.magics_manager
        for kind, names in self.magics.magics.items():
            for name in names:
                manager.magics[kind].pop(name, None)
        manager.registry.pop(type(self.magics).__name__, None)
        if self.transformer in shell.ast_transformers:
            shell.ast_transformers.remove(self.transformer)
        for configurable in (self.config, self.magics):
            if configurable in shell.configurables:
                shell.configurables.remove(configurable)
        self.engine.detach()

    # -- events --------------------------------------------------------------------------
    def pre_run_cell(self, info: Any) -> None:
        try:
            shell = self.shell
            if self.engine.user_ns is not shell.user_ns:
                self.engine.attach(shell.user_ns)
            if self._sweep_pending:  # the last cell's sweep was interrupted (Ctrl-C): redo it
                self.engine.after_cell(self.engine.cell)
            count = shell.execution_count
            self.engine.cell = count - 1 if getattr(info, "store_history", False) else count
        except Exception as exc:
            self._warn(exc)
        self._sweep_pending = True

    def post_run_cell(self, result: Any) -> None:
        try:
            if self.engine.user_ns is not self.shell.user_ns:
                self.engine.attach(self.shell.user_ns)
            self.engine.after_cell(getattr(result, "execution_count", None))
        except Exception as exc:  # the user's cell already ran; never turn it into an error
            self._warn(exc)
        self._sweep_pending = False

    def _warn(self, exc: BaseException) -> None:
        if not self._warned:
            self._warned = True
            print(
                f"ipyrefresh: internal error after a cell ({type(exc).__name__}: {exc}); "
                "derivatives stay correct but may rebuild more often.",
                file=sys.stderr,
            )

    # -- AST sync support ----------------------------------------------------------------
    def _sync_enabled(self) -> bool:
        # Not gated on what is watched now: the cell itself may build the first entry.
        return bool(self.config.sync_within_cells)

    def _watched(self, name: str) -> bool:
        ns = self.shell.user_ns
        if ("bind", id(ns), name) in self.engine.table.records:
            return True
        return callable(ns.get(name))


_extension: Extension | None = None


def load_ipython_extension(ipython: Any) -> None:
    global _extension
    if _extension is not None:
        if _extension.shell is ipython:
            return
        _extension.unload()
    _extension = Extension(ipython, get_engine())
    _extension.load()


def unload_ipython_extension(ipython: Any) -> None:
    global _extension
    if _extension is not None and _extension.shell is ipython:
        _extension.unload()
        _extension = None


def current_extension() -> Extension | None:
    return _extension
