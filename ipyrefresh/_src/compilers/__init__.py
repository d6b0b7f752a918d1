"""The compilers, by name. ``base`` declares what a compiler and its variants are.

* ``tape`` (the default): autograd's first answer, a generated numpy replay after;
* ``autograd``: plain autograd on every call (the reference, and the tape's fallback);
* ``jax``: ``jax.jit`` of the JAX transform, per cache entry (``pip install ipyrefresh[jax]``).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import re
from collections.abc import Callable

from .autograd import AutogradCompiler
from .base import Compiler


def _tape() -> Compiler:
    from .tape.compiler import TapeCompiler

    return TapeCompiler()


def _jax() -> Compiler:
    from .jax import JaxCompiler  # imports jax, which is slow: only when first used

    return JaxCompiler()


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # hidden by an import hook, or a broken install
        return False


#: The JAX releases the "jax" compiler is tested with (pyproject's jax extra): it uses JAX
#: internals (trace caches, dtype canonicalization), which older releases lay out otherwise.
JAX_RANGE = ((0, 10, 2), (0, 11))


def _jax_problem() -> str:
    """Why the "jax" compiler cannot be used here ("" if it can)."""
    if not _installed("jax"):
        return "needs jax: pip install ipyrefresh[jax] (Python 3.11+)"
    try:
        found = importlib.metadata.version("jax")
    except importlib.metadata.PackageNotFoundError:
        return ""  # a source checkout of jax: trust it
    numbers = tuple(int(n) for n in re.findall(r"\d+", found)[:3])
    low, high = JAX_RANGE
    if not low <= numbers < high:
        return (
            f"needs jax >= {'.'.join(map(str, low))}, < {'.'.join(map(str, high))} "
            f"(jax {found} is installed): pip install 'ipyrefresh[jax]'"
        )
    return ""


_FACTORIES: dict[str, Callable[[], Compiler]] = {"tape": _tape, "autograd": AutogradCompiler}
#: Why a known compiler is unavailable here.
UNAVAILABLE: dict[str, str] = {}
if _problem := _jax_problem():  # the optional extra: ipyrefresh[jax]
    UNAVAILABLE["jax"] = _problem
else:
    _FACTORIES["jax"] = _jax

_made: dict[str, Compiler] = {}


def available() -> list[str]:
    """Names of the compilers that can be used here."""
    return list(_FACTORIES)


def get(name: str) -> Compiler:
    """The compiler called ``name`` (one instance per process)."""
    compiler = _made.get(name)
    if compiler is None:
        try:
            factory = _FACTORIES[name]
        except KeyError:
            if name in UNAVAILABLE:
                raise ValueError(f"the {name!r} backend {UNAVAILABLE[name]}") from None
            raise ValueError(f"unknown backend {name!r}; choose one of {available()}") from None
        compiler = _made[name] = factory()
    return compiler
