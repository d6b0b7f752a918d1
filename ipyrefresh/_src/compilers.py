"""The compiler interface, its registry, and the reference compiler: plain autograd.

A compiler turns (function, transform, argnums, example arguments) into an *artifact*
that computes the derivative for arguments of the same signature. Artifacts are called
as ``artifact(fn, args, kwargs)`` with the current function, so that a cache entry never
has to hold the user's function itself (a fixed target is held weakly).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import autograd

Artifact = Callable[[Any, tuple[Any, ...], dict[str, Any]], Any]

TRANSFORMS: dict[str, Callable[..., Any]] = {
    "grad": autograd.grad,
    "value_and_grad": autograd.value_and_grad,
    "elementwise_grad": autograd.elementwise_grad,
    "jacobian": autograd.jacobian,
    "hessian": autograd.hessian,
}


class Direct:
    """A way to call a compiled derivative without a signature lookup.

    ``call(*args)`` computes the derivative for any positional arguments that ``types``
    holds the type of, or that ``accepts`` — not only for the build's signature — and
    runs the current code whenever it must trace again. A handle takes this path while its
    entry is current, and falls back to the full path if ``call`` raises.
    """

    __slots__ = ("accepts", "call", "types")

    def __init__(
        self, call: Callable[..., Any], types: frozenset[type], accepts: Callable[[Any], bool]
    ) -> None:
        self.call = call
        self.types = types
        self.accepts = accepts


@dataclass
class Built:
    """What a build produced: the artifact, the result for the example call, and, if the
    compiler fell back to something slower, why; ``direct``, if it offers one."""

    artifact: Artifact
    result: Any
    fallback: str = ""
    detail: str = ""
    direct: Direct | None = None


class Compiler(Protocol):
    name: str

    def build(
        self,
        fn: Any,
        transform: str,
        argnum: Any,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> Built: ...


def reference(
    fn: Any, transform: str, argnum: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    """A fresh autograd computation: the oracle every compiler must agree with."""
    return TRANSFORMS[transform](fn, argnum)(*args, **kwargs)


class AutogradCompiler:
    """No compilation: every call re-traces with autograd. Always right, never fast."""

    name = "autograd"

    def build(
        self,
        fn: Any,
        transform: str,
        argnum: Any,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> Built:
        artifact = self.build_artifact(transform, argnum)
        return Built(artifact, artifact(fn, args, kwargs))

    @staticmethod
    def build_artifact(transform: str, argnum: Any) -> Artifact:
        op = TRANSFORMS[transform]

        def artifact(fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
            return op(fn, argnum)(*args, **kwargs)

        return artifact


def _tape_compiler() -> Compiler:
    from .tape.compiler import TapeCompiler  # lazy: the tape package imports this module

    return TapeCompiler()


_REGISTRY: dict[str, Callable[[], Compiler]] = {
    "autograd": AutogradCompiler,
    "tape": _tape_compiler,
}


def register_compiler(name: str, factory: Callable[[], Compiler]) -> None:
    _REGISTRY[name] = factory


def available_compilers() -> set[str]:
    return set(_REGISTRY)


def make_compiler(name: str) -> Compiler:
    return _REGISTRY[name]()


def _jax_compiler() -> Compiler:
    from .jaxcompiler import JaxCompiler  # imports jax, which is slow: only when first used

    return JaxCompiler()


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # hidden by an import hook, or a broken install
        return False


if _installed("jax"):  # the optional extra: ipyrefresh[jax]
    register_compiler("jax", _jax_compiler)
