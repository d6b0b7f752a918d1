"""The reference compiler: plain autograd on every call. Always right, never fast.

It is also the fallback of the tape compiler: a function with effects a replay would
skip (printing, random draws, mutating what it reads) runs here, exactly as autograd
would run it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import autograd

from ..guard import Guard
from .base import PythonVariant, Request, Traced, Transform, Variant

TRANSFORMS: dict[Transform, Callable[..., Any]] = {
    Transform.GRAD: autograd.grad,
    Transform.VALUE_AND_GRAD: autograd.value_and_grad,
    Transform.ELEMENTWISE_GRAD: autograd.elementwise_grad,
    Transform.JACOBIAN: autograd.jacobian,
    Transform.HESSIAN: autograd.hessian,
}


def reference(fn: Any, request: Request, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """A fresh autograd computation: the oracle every compiler must agree with."""
    return _op(request.transform)(fn, request.argnum)(*args, **kwargs)


def _op(transform: Transform) -> Callable[..., Any]:
    op = TRANSFORMS.get(transform)
    if op is None:
        raise TypeError(f"{transform.value} needs the JAX backend (ipyrefresh.jax)")
    return op


def plain(request: Request) -> Callable[[Any, tuple[Any, ...], dict[str, Any]], Any]:
    op = _op(request.transform)
    argnum = request.argnum

    def run(fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        return op(fn, argnum)(*args, **kwargs)

    return run


class AutogradCompiler:
    """Registered as "autograd"."""

    name = "autograd"
    needs_guard = False

    def trace(
        self,
        fn: Any,
        request: Request,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        *,
        may_write: bool = False,  # (its one run is autograd's: nothing leaks from it)
    ) -> Traced:
        return Traced(reference(fn, request, args, kwargs), unsupported="plain autograd")

    def fallback(self, request: Request, guard: Guard, why: str) -> Variant:
        return PythonVariant(plain(request), guard, why, "plain autograd")

    def runs_first_sight(self, request: Request) -> bool:
        return False  # (it has no variants to miss)

    def defers_first_build(self, request: Request) -> bool:
        return False  # (a build is a plain run)
