"""Shared fixtures: a fresh engine and a real IPython shell with ipyrefresh loaded."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import autograd.numpy  # noqa: F401  (its rules, in the tables below)
import pytest
from autograd.core import primitive_jvps, primitive_vjps
from IPython.core.interactiveshell import InteractiveShell

from ipyrefresh._src.config import IPyRefresh
from ipyrefresh._src.engine import Engine, using

#: autograd's gradient rule tables as a fresh session has them (before any test registers
#: rules of its notebook's primitives, which stay in these global tables for good).
PRISTINE_RULES = ((primitive_vjps, dict(primitive_vjps)), (primitive_jvps, dict(primitive_jvps)))


class CellError(AssertionError):
    pass


class Shell:
    """A thin driver over a real ``InteractiveShell``: run cells like a user does."""

    def __init__(self, shell: InteractiveShell) -> None:
        self.shell = shell

    @property
    def ns(self) -> dict[str, Any]:
        return self.shell.user_ns

    def run(self, code: str) -> Any:
        """Run a cell (stored in history, so cell numbers advance); fail the test on error."""
        result = self.shell.run_cell(code, store_history=True)
        error = result.error_before_exec or result.error_in_exec
        if error is not None:
            raise CellError(f"cell failed: {type(error).__name__}: {error}\n{code}")
        return result.result

    def run_error(self, code: str) -> BaseException:
        """Run a cell that is expected to fail; return its exception."""
        result = self.shell.run_cell(code, store_history=True)
        error = result.error_before_exec or result.error_in_exec
        assert error is not None, f"cell unexpectedly succeeded:\n{code}"
        return error

    @property
    def count(self) -> int:
        """The number the next cell will get."""
        return self.shell.execution_count


def require_jax(module_level: bool = False) -> Any:
    """jax, or skip with the reason the JAX backend is unavailable here (no jax installed,
    or a release outside the tested range: ./dev installs the right one on Python 3.11+)."""
    from ipyrefresh._src import compilers

    if "jax" not in compilers.available():
        pytest.skip(compilers.UNAVAILABLE.get("jax", "needs jax"), allow_module_level=module_level)
    import jax

    return jax


@pytest.fixture
def compiles() -> Iterator[Any]:
    """Counts XLA compilations while the test runs (JAX tests only)."""
    from .jax_support import CompileCounter

    counter = CompileCounter()
    try:
        yield counter
    finally:
        counter.close()


#: The suite builds a derivative at its first call (the default is its second: see
#: ``IPyRefresh.build_at_call``), so that a scenario's first call is a build whose guard
#: the change that follows must fail. ``tests/test_first_call.py`` runs the default. The
#: in-process shell takes it from the fixtures below; kernels and terminal IPythons the
#: tests start, from the profile in their IPython directory (:func:`write_suite_profile`).
#: A guard's first check runs node by node and the later ones compiled (the default
#: compiles after ``IPyRefresh.compile_guard_after`` checks), so a scenario's changes
#: meet both.
SUITE_CONFIG = {"build_at_call": 1, "compile_guard_after": 1}


def write_suite_profile(ipython_dir: Path) -> None:
    """The default profile of ``ipython_dir``, with :data:`SUITE_CONFIG`."""
    profile = ipython_dir / "profile_default"
    profile.mkdir(parents=True, exist_ok=True)
    lines = [f"c.IPyRefresh.{name} = {value!r}" for name, value in SUITE_CONFIG.items()]
    (profile / "ipython_config.py").write_text("\n".join(lines) + "\n")


@pytest.fixture
def engine() -> Iterator[Engine]:
    """A fresh engine, current for one test."""
    with using(Engine(IPyRefresh(**SUITE_CONFIG))) as fresh:
        yield fresh


@pytest.fixture
def modules(tmp_path: Path) -> Iterator[Any]:
    """``modules(name, source)`` writes an importable module into tmp_path (each write with a
    later mtime, for autoreload); sys.path and sys.modules are restored afterwards."""
    from .scenario_helpers import module_writer

    yield from module_writer(tmp_path)


@pytest.fixture
def bare_shell(engine: Engine, request: pytest.FixtureRequest) -> Iterator[Shell]:
    """The real IPython shell, reset, without ipyrefresh loaded."""
    # ``shell.reset`` runs a full garbage collection (here and at teardown), whose cost grows
    # with everything alive in this process: the imported JAX, and the files IPython's
    # tracebacks parsed (stack_data keeps them). Freezing what is alive now keeps each
    # collection to what this test makes; what the test leaves behind is still collected.
    # The memory tests measure what the collector frees and what stays allocated: they run
    # with nothing frozen, as a user's process does.
    if request.node.get_closest_marker("memory") is None:
        gc.freeze()
    else:
        gc.unfreeze()
    shell = InteractiveShell.instance()
    # A new history session, numbered from cell 1: in the old one, cell numbers that start
    # again at 1 collide in the history database, and IPython's history thread prints a
    # notice into whatever output the test is capturing.
    shell.reset(new_session=True)
    shell.config.pop("IPyRefresh", None)  # %config in an earlier test must not leak
    for name, value in SUITE_CONFIG.items():
        setattr(shell.config.IPyRefresh, name, value)
    shell.run_line_magic("unload_ext", "ipyrefresh")
    yield Shell(shell)
    shell.run_line_magic("unload_ext", "ipyrefresh")
    if "autoreload" in shell.magics_manager.magics["line"]:
        # A test's ``%autoreload 2`` must not stay on for the next ones in this process:
        # it would check every imported module before each of their cells.
        shell.run_line_magic("autoreload", "0")
    shell.reset(new_session=False)


@pytest.fixture
def ip(bare_shell: Shell) -> Iterator[Shell]:
    """The real IPython shell with ``%load_ext ipyrefresh`` and the usual imports."""
    bare_shell.run("%load_ext ipyrefresh")
    bare_shell.run("import autograd.numpy as np\nfrom ipyrefresh import grad")
    yield bare_shell


@pytest.fixture(autouse=True)
def _no_recorder_left_behind() -> Iterator[None]:
    """A build must never leave its call recorder installed (every call would slow down)."""
    import sys

    before = sys.getprofile()
    yield
    after = sys.getprofile()
    if after is not before:
        sys.setprofile(before)
        pytest.fail(f"a profile hook was left installed: {after!r}")
    if sys.version_info >= (3, 12):
        mon = sys.monitoring
        left = [tool for tool in range(6) if mon.get_tool(tool) == "ipyrefresh"]
        if left:
            for tool in left:  # (this test fails; the ones after it must not)
                mon.set_events(tool, 0)
                mon.free_tool_id(tool)
            pytest.fail(f"sys.monitoring tool {left[0]} was left registered")


# --- Parallel runs (pytest-xdist, `./dev test` uses both cores) ---------------------------


def pytest_configure(config: pytest.Config) -> None:
    """Give this pytest process (an xdist worker, or the only process) its own IPython
    directory. The shell's history database and profile would otherwise be one SQLite file in
    ~/.ipython written by every worker and every kernel the tests start at once (kernels
    inherit the variable). Set before any shell exists: IPython reads it when it makes one."""
    import atexit
    import os
    import shutil
    import tempfile

    path = tempfile.mkdtemp(prefix="ipyrefresh-ipython-")
    os.environ["IPYTHONDIR"] = path
    write_suite_profile(Path(path))
    # atexit runs last-registered first: after the shell's own exit hook writes its history.
    atexit.register(shutil.rmtree, path, True)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under xdist (``./dev test`` hands tests out one at a time in this order): the tests
    marked ``slow`` start first, so that no minutes-long test begins while the other worker
    has nothing left to do."""
    import os

    if "PYTEST_XDIST_WORKER" in os.environ:
        items.sort(key=lambda item: item.get_closest_marker("slow") is None)  # stable
