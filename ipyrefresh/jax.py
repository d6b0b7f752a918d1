"""JAX derivatives that stay right after redefinitions, and stay compiled.

>>> %load_ext ipyrefresh
>>> from ipyrefresh.jax import grad
>>> dh = grad(h)          # jax.jit(jax.grad(h)), following the name h and what h calls
>>> dh(x)                 # compiled once; later calls run the XLA executable
>>> def g(x): ...         # redefine something h calls
>>> dh(x)                 # only the derivatives that reach g are traced and compiled again

``jax.jit(jax.grad(h))`` keys its cache on ``h`` itself, so it keeps answering with the
old ``g`` (jax issue 28225), and ``jax.clear_caches()`` recompiles everything. These
handles record which Python functions ran while JAX traced them and rebuild only the
compiled derivatives whose code changed. Results agree with a fresh, unjitted
``jax.grad`` (``jax.value_and_grad``, ``jax.jacobian``, ``jax.hessian``) of the current code.

Needs the optional extra: ``pip install ipyrefresh[jax]``. Importing ``ipyrefresh``
itself never imports jax; ``%config IPyRefresh.backend = "jax"`` makes
``ipyrefresh.grad`` and ``%grad`` use JAX too.
"""

from __future__ import annotations

from typing import Any

from ._src.compilers import available_compilers
from ._src.handles import Derivative

if "jax" not in available_compilers():  # pragma: no cover - depends on the environment
    raise ImportError("ipyrefresh.jax needs jax: pip install ipyrefresh[jax]")

__all__ = ["elementwise_grad", "grad", "hessian", "jacobian", "value_and_grad"]


def grad(fun: Any, argnum: Any = 0) -> Derivative:
    """``jax.jit(jax.grad(fun, argnum))`` that follows redefinitions of what ``fun`` reaches."""
    return Derivative("grad", fun, argnum, compiler="jax")


def value_and_grad(fun: Any, argnum: Any = 0) -> Derivative:
    """``(fun(*args), grad)`` from one compiled computation, like ``jax.value_and_grad``."""
    return Derivative("value_and_grad", fun, argnum, compiler="jax")


def jacobian(fun: Any, argnum: Any = 0) -> Derivative:
    """Full Jacobian (reverse mode, like ``jax.jacobian``), of shape ``out.shape + x.shape``."""
    return Derivative("jacobian", fun, argnum, compiler="jax")


def hessian(fun: Any, argnum: Any = 0) -> Derivative:
    """Hessian of a scalar-valued ``fun``, like ``jax.hessian``."""
    return Derivative("hessian", fun, argnum, compiler="jax")


def elementwise_grad(fun: Any, argnum: Any = 0) -> Derivative:
    """Gradient of ``sum(fun(x))``: the derivative of an elementwise function."""
    return Derivative("elementwise_grad", fun, argnum, compiler="jax")
