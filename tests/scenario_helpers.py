"""Helpers shared by the adversarial scenario suites (``test_scenarios_*.py``).

The oracle of every scenario is a fresh ``autograd`` computation on the objects bound
*now*, run in the same shell right after the handle answered. Answers are compared bit
for bit: same Python type, same dtype, same shape, same bytes (so ``-0.0`` and ``0.0``
differ, and NaN equals NaN only with the same payload).
"""

from __future__ import annotations

import struct
import sys
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as onp

from .conftest import Shell

#: What every scenario notebook imports first.
PRELUDE = (
    "import autograd, autograd.numpy as np, numpy as onp, ipyrefresh\n"
    "from ipyrefresh import grad, jacobian, hessian, value_and_grad, elementwise_grad\n"
)


def diff(got: Any, want: Any, path: str = "answer") -> str:
    """ "" if ``got`` and ``want`` are bitwise the same (types included), else what differs."""
    if type(got) is not type(want):
        return f"{path}: type {type(got).__name__} != {type(want).__name__} ({got!r} vs {want!r})"
    if isinstance(want, (tuple, list)):
        if len(got) != len(want):
            return f"{path}: length {len(got)} != {len(want)}"
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            d = diff(g, w, f"{path}[{i}]")
            if d:
                return d
        return ""
    if isinstance(want, dict):
        if list(got) != list(want):
            return f"{path}: keys {list(got)} != {list(want)}"
        for k in want:
            d = diff(got[k], want[k], f"{path}[{k!r}]")
            if d:
                return d
        return ""
    if isinstance(want, (onp.ndarray, onp.generic)):
        if got.dtype != want.dtype:
            return f"{path}: dtype {got.dtype} != {want.dtype}"
        if onp.shape(got) != onp.shape(want):
            return f"{path}: shape {onp.shape(got)} != {onp.shape(want)}"
        if got.dtype.hasobject:
            return "" if onp.array_equal(got, want) else f"{path}: {got!r} != {want!r}"
        if onp.asarray(got).tobytes() != onp.asarray(want).tobytes():
            return f"{path}: values differ: {got!r} != {want!r}"
        return ""
    if type(want) is float:
        same = struct.pack("<d", got) == struct.pack("<d", want)
        return "" if same else f"{path}: {got!r} != {want!r}"
    if type(want) is complex:
        return diff((got.real, got.imag), (want.real, want.imag), path)
    try:
        equal = bool(got == want)
    except Exception:
        equal = got is want
    return "" if equal else f"{path}: {got!r} != {want!r}"


def assert_same(got: Any, want: Any, what: str = "") -> None:
    d = diff(got, want)
    assert not d, f"{what}: handle answered differently from a fresh autograd computation: {d}"


def check(ip: Shell, call: str, oracle: str, times: int = 2, what: str = "") -> Any:
    """Call the handle ``times`` times, each time followed at once by the oracle; return
    the oracle's last answer."""
    guards_agree()
    want = None
    for k in range(times):
        got, want = ip.run(f"({call}), ({oracle})")
        assert_same(got, want, f"{what} call {k + 1} of {call}")
    return want


_COMPILED_APART: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()


def _compiled_apart(guard: Any) -> Any:
    """``guard`` compiled by ``guardgen``, once, apart from its own compile (which comes
    after its first checks: this comparison must not hurry it)."""
    from ipyrefresh._src.guardgen import compile_guard

    checks = _COMPILED_APART.get(guard)
    if checks is None:
        checks = compile_guard(guard.env, guard.args, guard.identity_checks())
        _COMPILED_APART[guard] = checks
    return checks


def guards_agree() -> None:
    """Every cached variant's compiled guard gives the verdict its nodes give one by one
    (``guardgen`` emits the checks the nodes define), on the objects bound now and on the
    entry's last arguments when it kept them."""
    from ipyrefresh._src.engine import current

    def verdict(check: Any, *args: Any) -> Any:
        try:
            bad = check(*args)
        except Exception as exc:  # (a reader can raise: both must, the same way)
            return ("raised", type(exc))
        return None if bad is None else (bad.subject, bad.kind, bad.arg)

    for entry in list(current().cache):
        try:
            fn = entry.target.resolve()
        except Exception:  # the name is gone, or model.loss raises now
            continue
        for variant in entry.variants:
            guard = variant.guard
            env, full = _compiled_apart(guard)
            compiled = verdict(env, fn, (), {}, True)
            interpreted = verdict(guard.check_interpreted, fn, (), {}, True, True)
            assert compiled == interpreted, (entry.target.label, compiled, interpreted)
            if entry.example is not None:
                args, kwargs = entry.example
                compiled = verdict(full, fn, args, kwargs, True)
                interpreted = verdict(guard.check_interpreted, fn, args, kwargs)
                assert compiled == interpreted, (entry.target.label, compiled, interpreted)


def states(ip: Shell, handle: str) -> list[str]:
    """The states ``ipyrefresh.status()`` reports for the entries ``handle`` used."""
    return ip.run(
        f"[e['state'] for e in ipyrefresh.status()['entries'] "
        f"if e['id'] in {{en.id for en in {handle}.entries}}]"
    )


def status_then_call(ip: Shell, handle: str, call: str, oracle: str, what: str = "") -> Any:
    """Ask ``status()`` first (it checks every guard), then call the handle: an entry
    reported fresh must answer what a fresh computation answers now."""
    reported = states(ip, handle)
    got, want = ip.run(f"({call}), ({oracle})")
    d = diff(got, want)
    if d:
        said = "status() said fresh" if "fresh" in reported else f"status() said {reported}"
        raise AssertionError(f"{what}: {said}, then the handle answered wrongly: {d}")
    return want


def module_writer(tmp_path: Path) -> Iterator[Any]:
    """The ``modules`` fixture (conftest.py): write importable modules into tmp_path;
    sys.path and sys.modules are restored."""
    written: list[str] = []
    sys.path.insert(0, str(tmp_path))

    def write(name: str, source: str) -> Path:
        path = tmp_path / f"{name}.py"
        path.write_text(source)
        written.append(name)
        _bump_mtime(path)
        return path

    write.dir = tmp_path  # type: ignore[attr-defined]
    yield write
    while str(tmp_path) in sys.path:
        sys.path.remove(str(tmp_path))
    for name in written:
        sys.modules.pop(name, None)


_mtimes: dict[Path, float] = {}


def _bump_mtime(path: Path) -> None:
    """Give each write a strictly later mtime (autoreload compares mtimes), without sleeping."""
    import os

    last = _mtimes.get(path)
    stat = path.stat()
    new = stat.st_mtime if last is None else max(stat.st_mtime, last + 2.0)
    os.utime(path, (new, new))
    _mtimes[path] = new


def rewrite(path: Path, source: str) -> None:
    """Edit a module file on disk, as an editor would, for ``%autoreload``."""
    path.write_text(source)
    _bump_mtime(path)
    pyc = path.parent / "__pycache__"
    if pyc.exists():
        for f in pyc.glob(f"{path.stem}.*.pyc"):
            f.unlink()
