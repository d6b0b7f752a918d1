"""``%load_ext ipyrefresh``: magics, configuration, cell numbers, and the status channel.

Loading adds nothing that answers depend on — every call of a derivative checks for
itself — only what makes a notebook nicer: ``%grad``, ``%stale``, ``%refresh``,
``%callgraph``, ``%config IPyRefresh``, reasons that name the cell in which a change was
noticed, eager rebuilds after cells, and the JupyterLab status item. Unloading leaves the
shell as it was.
"""

from __future__ import annotations

import contextlib
import sys
from typing import Any

from .._src.changes import CellRef, Detection
from .._src.compilers.tape import patches
from .._src.config import IPyRefresh
from .._src.engine import Engine, current
from .._src.recorder import reset_if_idle, unbracket_gc
from .magics import IPyRefreshMagics


class Extension:
    """The glue between one IPython shell and the engine."""

    def __init__(self, shell: Any, engine: Engine) -> None:
        self.shell = shell
        self.engine = engine
        self.config = IPyRefresh(parent=shell)
        self.magics = IPyRefreshMagics(shell, engine)
        self.extras: list[Any] = []  # things with a .close() (the front-end channel)
        # The shell's count when the last cell started, and whether IPython counts a cell
        # before pre_run_cell (9.x) or after it (8.x): learnt after each cell (the cell that
        # loads the extension included), so the cells are numbered as the user sees them.
        self._seen: int | None = getattr(shell, "execution_count", 0)
        self._counted_first = True
        #: The cells running, outermost first (a cell may run another: ``run_cell``).
        self._running: list[Any] = []
        self._wrapped_reset: Any = None  # an instance's own ``reset`` we wrap, if any

    # -- lifecycle -----------------------------------------------------------------------
    def load(self) -> None:
        shell = self.shell
        self.engine.use_config(self.config)
        shell.configurables.append(self.config)
        self.engine.attach()
        shell.events.register("pre_run_cell", self.pre_run_cell)
        shell.events.register("post_run_cell", self.post_run_cell)
        shell.register_magics(self.magics)
        from .comm import StatusChannel

        channel = StatusChannel(shell, self.engine)
        self.extras.append(channel)
        channel.open()  # (its post_run_cell runs after ours, and before the next one)
        shell.events.register("post_run_cell", self.cell_over)
        # IPython has no event for ``%reset``: the shell's method is wrapped (an
        # attribute of this shell only, put back at unload).
        self._wrapped_reset = vars(shell).get("reset")
        shell.reset = self._reset
        try:
            # The tape reads autograd's own rules once per process (~20 ms): now, not at
            # the first replay, in the middle of the user's computation.
            from .._src.compilers.tape.adjoints import warm

            warm()
        except Exception as exc:
            self.engine.internal_error("reading autograd's rules", exc)

    def _reset(self, *args: Any, **kwargs: Any) -> Any:
        """``%reset``: the shell forgets the user's names, and the cache what it held
        (the namespaces of handles made by ``exec`` or ``runpy`` included)."""
        try:
            shell = self.shell
            wrapped = self._wrapped_reset or type(shell).reset.__get__(shell)
            return wrapped(*args, **kwargs)
        finally:
            try:
                self.engine.clear()
            except Exception as exc:
                self.engine.internal_error("forgetting the cache at %reset", exc)

    def unload(self) -> None:
        shell = self.shell
        if vars(shell).get("reset") == self._reset:
            if self._wrapped_reset is None:
                del shell.reset
            else:
                shell.reset = self._wrapped_reset
        for extra in self.extras:
            try:
                extra.close()
            except Exception as exc:
                self.engine.internal_error("closing the status channel", exc)
        for event, callback in (
            ("pre_run_cell", self.pre_run_cell),
            ("post_run_cell", self.post_run_cell),
            ("post_run_cell", self.cell_over),
        ):
            with contextlib.suppress(ValueError):
                shell.events.unregister(event, callback)
        manager = shell.magics_manager
        for kind, names in self.magics.magics.items():
            for name in names:
                manager.magics[kind].pop(name, None)
        manager.registry.pop(type(self.magics).__name__, None)
        for configurable in (self.config, self.magics):
            if configurable in shell.configurables:
                shell.configurables.remove(configurable)
        self.engine.detach()
        patches.uninstall()
        unbracket_gc()

    # -- events --------------------------------------------------------------------------
    def pre_run_cell(self, info: Any) -> None:
        self._running.append(info)
        if len(self._running) > 1:
            return  # a cell run from inside a cell (``run_cell`` in code) is part of it
        reset_if_idle()  # no build runs between cells: drop what a Ctrl-C left behind
        try:
            self.engine.mend_lock()  # (and the cache's lock, if a Ctrl-C left it held)
            count: int | None = self.shell.execution_count
            self._seen = count
            if not getattr(info, "store_history", False):
                count = None  # a hidden cell has no number: the next visible cell takes it
            elif self._counted_first and count is not None:
                count -= 1  # IPython has counted this cell already
            self.engine.before_cell(_cell_ref(count, info))
        except Exception as exc:
            self.engine.internal_error("numbering a cell", exc)

    def _outermost(self, result: Any) -> bool:
        """Whether ``result`` ends the outermost cell: the one whose start we saw, or, when
        we saw none, a cell that started before we were loaded (or an empty one, which
        IPython ends without starting). An empty cell run inside a cell is part of it.
        ipykernel ends a cell whose run raised with ``None``."""
        running = self._running
        if not running:
            return True
        if result is None:
            return len(running) == 1
        return running[0] is getattr(result, "info", None)

    def post_run_cell(self, result: Any) -> None:
        if not self._outermost(result):
            return
        number = getattr(result, "execution_count", None)
        if isinstance(number, int) and getattr(result.info, "store_history", False):
            # IPython 9 counts a cell before pre_run_cell, IPython 8 after it: learn which.
            self._counted_first = self._seen == number + 1
        try:
            # Lazy mode too: a variant whose names were rebound (``del W``, ``def f`` again)
            # must not keep the old objects alive until its handle's next call, nor the
            # entries of handles released in the cell. Eager mode checks every entry
            # (array contents too, as the status bar does).
            stored = getattr(getattr(result, "info", None), "store_history", False)
            if self.engine.cell is None and isinstance(number, int) and stored:
                # The cell that loaded the extension (it ran no pre_run_cell of ours).
                self.engine.cell = _cell_ref(number, getattr(result, "info", None))
            went = self.engine.after_cell()
            if self.config.mode == "eager":
                with self.engine.lock_for_hook() as held:
                    if held:
                        went += self.engine.sweep(deep=True, detection=Detection.AFTER_CELL)
                        if went:
                            self.engine.refresh(eager=True)
        except KeyboardInterrupt:  # (Ctrl-C during an eager rebuild: the cell itself ran)
            print(
                "ipyrefresh: rebuilding after the cell was interrupted; what is stale "
                "rebuilds at its next call.",
                file=sys.stderr,
            )
        except BaseException as exc:  # the user's cell already ran; never turn it into an error
            self.engine.internal_error("checking or rebuilding after a cell", exc)

    def cell_over(self, result: Any = None) -> None:
        """The last of the per-cell hooks (after the status channel's)."""
        outermost = self._outermost(result)
        running = self._running
        info = getattr(result, "info", None)
        if result is None:
            if running:
                running.pop()
        elif any(started is info for started in running):
            while running.pop() is not info:  # (and any cell above it that never ended)
                pass
        if outermost:
            self.engine.between_cells()


def _cell_ref(count: int | None, info: Any) -> CellRef:
    """The cell IPython's ``info`` (an ExecutionInfo) describes, numbered ``count``."""
    cell_id = getattr(info, "cell_id", None)
    return CellRef(count, cell_id if isinstance(cell_id, str) else None)


_extension: Extension | None = None


def load_ipython_extension(ipython: Any) -> None:
    global _extension
    if _extension is not None:
        if _extension.shell is ipython:
            return
        _extension.unload()
    _extension = Extension(ipython, current())
    _extension.load()


def unload_ipython_extension(ipython: Any) -> None:
    global _extension
    if _extension is not None and _extension.shell is ipython:
        _extension.unload()
        _extension = None


def current_extension() -> Extension | None:
    return _extension
