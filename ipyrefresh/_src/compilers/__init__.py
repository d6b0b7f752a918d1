"""The compilers, by name. ``base`` declares what a compiler and its variants are.

* ``tape`` (the default): autograd's first answer, a generated numpy replay after;
* ``autograd``: plain autograd on every call (the reference, and the tape's fallback);
* ``jax``: ``jax.jit`` of the JAX transform, per cache entry (``pip install ipyrefresh[jax]``).
"""

from __future__ import annotations

import importlib.util
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


_FACTORIES: dict[str, Callable[[], Compiler]] = {"tape": _tape, "autograd": AutogradCompiler}
if _installed("jax"):  # the optional extra: ipyrefresh[jax]
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
            raise ValueError(f"unknown backend {name!r}; choose one of {available()}") from None
        compiler = _made[name] = factory()
    return compiler
