"""Effects made in unusual ways, each compared with plain autograd: a derivative whose
function prints (or draws, or reads the clock) must do so at every call, as plain autograd
does, on every Python version, whichever hook (``sys.setprofile`` on 3.10/3.11,
``sys.monitoring`` on 3.12+) records the build."""

from __future__ import annotations

import time
from typing import Any

import pytest

from .conftest import Shell
from .scenario_helpers import PRELUDE


@pytest.fixture
def nb(ip: Shell) -> Shell:
    ip.run(PRELUDE)
    return ip


#: A builtin with an effect handed on as a value: what it is handed to calls it from C,
#: where neither hook sees a call.
_HANDED_ON = {
    "map": "list(map(print, ['f ran']))",
    "starmap": "list(itertools.starmap(print, [('f ran',)]))",
    "partial": "functools.partial(print, 'f ran')()",
    "dunder_call": "print.__call__('f ran')",
    "type_call": "type(print).__call__(print, 'f ran')",
    "methodcaller": "operator.methodcaller('__call__', 'f ran')(print)",
    "reduce": "functools.reduce(lambda a, p: p('f ran'), [print], 0)",
}


#: Four calls with ``sys.stdout`` a plain ``StringIO`` (a terminal's stream is C code too:
#: ``print`` writes to it with no Python frame, so no hook sees the write either, as it
#: does pytest's capture or a Jupyter kernel's stream); how many times 'f ran' printed.
_COUNT = (
    "_out, _old = io.StringIO(), sys.stdout\n"
    "sys.stdout = _out\n"
    "try:\n"
    "    for _ in range(4):\n"
    "        _ = {D}(x)\n"
    "finally:\n"
    "    sys.stdout = _old\n"
    "_out.getvalue().count('f ran')"
)


def _fallbacks(nb: Shell) -> list[str]:
    """Each cache entry's reason to run plain autograd ("" where it replays)."""
    return [e["fallback"] for e in nb.run("ipyrefresh.status()")["entries"]]


def _handle_and_autograd(nb: Shell, cell: str) -> tuple[Any, Any]:
    """What ``cell`` gives with ``{D}`` the handle ``dh``, then plain ``autograd.grad(f)``."""
    return nb.run(cell.format(D="dh")), nb.run(cell.format(D="autograd.grad(f)"))


@pytest.mark.parametrize("way", sorted(_HANDED_ON))
def test_a_builtin_that_prints_handed_on_prints_every_call(nb: Shell, way: str) -> None:
    nb.run(
        "import functools, io, itertools, operator, sys\n"
        f"def f(x):\n    {_HANDED_ON[way]}\n    return np.sum(x ** 3)\n"
        "dh = grad(f)\nx = np.ones(2)"
    )
    assert _handle_and_autograd(nb, _COUNT) == (4, 4)


@pytest.mark.parametrize(
    "call",
    [
        "print('f ran')",
        "print('f', x[0] + 1.0, sep=', ', end='\\n')",
        "print(*['f', 'ran'], **{'sep': ' '})",
        "print(*['f ran'])",
        "warnings.warn('f warned', stacklevel=2)",
        "warnings.warn(str(x[0]))",
    ],
    ids=["plain", "keywords", "star_kwargs", "star", "warn_keywords", "warn_nested"],
)
def test_print_only_in_a_branch_not_taken_keeps_the_tape(nb: Shell, call: str) -> None:
    """Calling ``print`` (or ``warnings.warn``) by its own name is seen when it happens:
    a branch not taken does not make the derivative run plain autograd. (3.10 marks no
    load as a call's function: its calls with keywords or ``*`` are found by their stack
    depths.)"""
    nb.run(
        "import warnings\nverbose = False\n"
        f"def f(x):\n    if verbose:\n        {call}\n    return np.sum(x ** 3)\n"
        "dh = grad(f)\nx = np.ones(2)\nfor _ in range(4):\n    _ = dh(x)"
    )
    assert _fallbacks(nb) == [""]


#: ``warnings.warn`` (a C function) handed on as a value; a hook sees it only when user
#: code calls it itself.
_WARN_HANDED_ON = {
    "map": "list(map(warnings.warn, ['f warned']))",
    "partial": "functools.partial(warnings.warn, 'f warned')()",
    "from_import": "list(map(warn, ['f warned']))",
    "alias": "list(map(WW, ['f warned']))",
    "in_a_dict": "list(map(D['w'], ['f warned']))",
    "a_default": "list(map(w, ['f warned']))",
    "in_a_closure": "list(map(c, ['f warned']))",
    "a_class_attribute": "list(map(C.w, ['f warned']))",
    "a_global_partial": "PW()",
    "imported_inside": "import warnings as ws\n        list(map(ws.warn, ['f warned']))",
    "from_imported_inside": "from warnings import warn as ww\n        list(map(ww, ['f warned']))",
}


@pytest.mark.parametrize("way", sorted(_WARN_HANDED_ON))
def test_warn_handed_on_warns_every_call(nb: Shell, way: str) -> None:
    default = ", w=warnings.warn" if way == "a_default" else ""
    nb.run(
        "import functools, warnings\nfrom warnings import warn\nWW = warnings.warn\n"
        "D = {'w': warnings.warn}\nPW = functools.partial(warnings.warn, 'f warned')\n"
        "class C:\n    w = staticmethod(warnings.warn)\n"
        "def make(c=warnings.warn):\n"
        f"    def f(x{default}):\n        {_WARN_HANDED_ON[way]}\n"
        "        return np.sum(x ** 3)\n    return f\n"
        "f = make()\ndh = grad(f)\nx = np.ones(2)"
    )
    count = (
        "with warnings.catch_warnings(record=True) as _seen:\n"
        "    warnings.simplefilter('always')\n"
        "    for _ in range(4):\n"
        "        _ = {D}(x)\n"
        "sum(str(w.message) == 'f warned' for w in _seen)"
    )
    assert _handle_and_autograd(nb, count) == (4, 4)


def test_warn_only_in_a_branch_not_taken_keeps_the_tape(nb: Shell) -> None:
    nb.run(
        "import warnings\nfrom warnings import warn\nbad = False\n"
        "def f(x):\n    from warnings import warn as ww\n    import warnings as ws\n"
        "    if bad:\n        warnings.warn('a')\n        warn('b')\n        ww('c')\n"
        "        ws.warn('d')\n"
        "    return np.sum(x ** 3)\n"
        "dh = grad(f)\nx = np.ones(2)\nfor _ in range(4):\n    _ = dh(x)"
    )
    assert _fallbacks(nb) == [""]


def test_an_exit_handler_registered_in_the_function_is_registered_every_call(nb: Shell) -> None:
    """``atexit.register`` (C code of no module a hook knew) adds a handler at every call
    of plain autograd; a replay added none."""
    nb.run(
        "import atexit\nran = []\ndef on_exit():\n    ran.append(1)\n"
        "def f(x):\n    atexit.register(on_exit)\n    return np.sum(x ** 3)\n"
        "dh = grad(f)\nx = np.ones(2)"
    )
    count = (
        "_before = atexit._ncallbacks()\nfor _ in range(4):\n    _ = {D}(x)\n"
        "_n = atexit._ncallbacks() - _before\natexit.unregister(on_exit)\n_n"
    )
    assert _handle_and_autograd(nb, count) == (4, 4)


def test_gc_disabled_in_the_function_is_disabled_at_every_call(nb: Shell) -> None:
    """What the function changes in the interpreter, undone between calls, is changed
    again by every call."""
    nb.run(
        "import gc\ndef f(x):\n    gc.disable()\n    return np.sum(x ** 3)\n"
        "dh = grad(f)\nx = np.ones(2)"
    )
    seen = (
        "_seen = []\ntry:\n    for _ in range(4):\n        gc.enable()\n        _ = {D}(x)\n"
        "        _seen.append(gc.isenabled())\nfinally:\n    gc.enable()\n_seen"
    )
    assert _handle_and_autograd(nb, seen) == ([False] * 4, [False] * 4)


def test_a_library_setting_the_interpreter_for_a_while_keeps_the_tape(nb: Shell) -> None:
    """Only the function's own changes count: a library's ``gc.disable()``/``enable()``
    around its own work is not the function's effect."""
    nb.run(
        "import gc, os, sysconfig, types\n"
        "lib = types.ModuleType('hunt_gc_lib')\n"
        "_src = 'import gc\\ndef work():\\n    gc.disable()\\n    gc.enable()\\n'\n"
        "_file = os.path.join(sysconfig.get_paths()['purelib'], 'hunt_gc_lib.py')\n"
        "exec(compile(_src, _file, 'exec'), lib.__dict__)\n"
        "def f(x):\n    lib.work()\n    return np.sum(x ** 3)\n"
        "dh = grad(f)\nx = np.ones(2)\nfor _ in range(4):\n    _ = dh(x)"
    )
    assert _fallbacks(nb) == [""]


@pytest.mark.parametrize(
    "read",
    [
        "onp.datetime64('now', 's')",
        "onp.array(['NOW']).astype('datetime64[s]')[0]",
    ],
    ids=["datetime64", "astype"],
)
def test_a_date_parsed_from_now_is_read_at_every_call(nb: Shell, read: str) -> None:
    """numpy's C code reads the clock when it parses 'now' (a call of a type: no clock
    function is called where a hook sees it). The answers a second apart must differ as
    plain autograd's do."""
    nb.run(
        f"def f(x):\n    t = float({read}.astype('int64') % 1000)\n    return np.sum(x ** 3) * t\n"
        "dh = grad(f)\nx = np.ones(2)"
    )
    # (d/dx of sum(x ** 3) * t at x = 1 is 3t: t, the second the call read, must lie
    # between the seconds read just before and just after it, as plain autograd's does.)
    timed = (
        "_t0 = int(time.time()) % 1000\n_g = float({D}(x)[0]) / 3\n"
        "(_t0, _g, int(time.time()) % 1000)"
    )
    nb.run("import time")
    got = []
    for _ in range(2):
        for d in ("dh", "autograd.grad(f)"):
            before, t, after = nb.run(timed.format(D=d))
            assert before <= t <= after or after < before, (d, before, t, after)
            if d == "dh":
                got.append(t)
        time.sleep(1.05)
    assert got[0] != got[1]


@pytest.mark.parametrize(
    "make", ["io.FileIO(path, 'a')", "sqlite3.connect(path)"], ids=["FileIO", "sqlite3"]
)
def test_a_file_the_function_creates_is_created_every_call(
    nb: Shell, tmp_path: Any, make: str
) -> None:
    """Opening a file creates it: ``io.FileIO`` (a call of a C class, which no hook looks
    at) and ``sqlite3.connect`` (a C function of ``_sqlite3``) do at every call of plain
    autograd; a replay did not. Here the file is removed between calls."""
    nb.run(
        f"import io, os, sqlite3\npath = {str(tmp_path / 'made')!r}\n"
        f"def f(x):\n    {make}\n    return np.sum(x ** 3)\n"
        "dh = grad(f)\nx = np.ones(2)"
    )
    count = (
        "_made = 0\nfor _ in range(4):\n    if os.path.exists(path):\n        os.remove(path)\n"
        "    _ = {D}(x)\n    _made += os.path.exists(path)\n_made"
    )
    assert _handle_and_autograd(nb, count) == (4, 4)
