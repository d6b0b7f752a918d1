"""JAX derivatives, and ``jax.jit``, that stay right after redefinitions and stay compiled.

>>> import ipyrefresh.jax as rj
>>> dh = rj.grad(h)          # jax.jit(jax.grad(h)), following the name h and what h reads
>>> step = rj.jit(train_step, static_argnums=(2,))   # a drop-in jax.jit
>>> def g(x): ...            # redefine something h or train_step calls
>>> dh(x), step(...)         # only what reaches g is traced and compiled again

``jax.jit(jax.grad(h))`` keys its cache on ``h`` itself, so it keeps answering with the
old ``g`` (jax issue 28225) and with the values of the global arrays it baked in, and
``jax.clear_caches()`` recompiles everything. Each call of these handles first checks
that the code and data the compiled function was traced from are unchanged; answers
agree with a fresh, unjitted ``jax.grad`` (``jax.value_and_grad``, ``jax.jacobian``,
``jax.hessian``) of the current code, and ``rj.jit`` with a fresh ``jax.jit``.

Needs the optional extra: ``pip install ipyrefresh[jax]``. Importing ``ipyrefresh``
itself never imports jax; importing ``ipyrefresh.jax`` imports jax and sets the backend
up. ``%config IPyRefresh.backend = "jax"`` makes ``ipyrefresh.grad`` and ``%grad`` use
JAX too.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

from ._src import compilers
from ._src.handles import Derivative
from ._src.keys import Transform

if "jax" not in compilers.available():  # pragma: no cover - depends on the environment
    raise ImportError(f"ipyrefresh.jax {compilers.UNAVAILABLE.get('jax', 'needs jax')}")

# Set the backend up now, not at the first build: it makes a JAX context of its own, and
# a new context changes the keys of JAX's trace caches. Made later, it would send the
# user's own jax.jit functions compiled in between to trace again, with the code and
# globals of that moment (a jax.jit that baked in c = 1.0 would start answering c = 4.0).
compilers.get("jax")

__all__ = ["elementwise_grad", "grad", "hessian", "jacobian", "jit", "value_and_grad"]


def _make(transform: Transform, fun: Any, argnum: Any, options: Any = ()) -> Derivative:
    return Derivative(transform, fun, argnum, "jax", frame=sys._getframe(2), options=options)


def grad(fun: Any, argnum: Any = 0) -> Derivative:
    """``jax.jit(jax.grad(fun, argnum))`` that follows what ``fun`` means and reads."""
    return _make(Transform.GRAD, fun, argnum)


def value_and_grad(fun: Any, argnum: Any = 0) -> Derivative:
    """``(fun(*args), grad)`` from one compiled computation, like ``jax.value_and_grad``."""
    return _make(Transform.VALUE_AND_GRAD, fun, argnum)


def jacobian(fun: Any, argnum: Any = 0) -> Derivative:
    """Full Jacobian (reverse mode, like ``jax.jacobian``), of shape ``out.shape + x.shape``."""
    return _make(Transform.JACOBIAN, fun, argnum)


def hessian(fun: Any, argnum: Any = 0) -> Derivative:
    """Hessian of a scalar-valued ``fun``, like ``jax.hessian``."""
    return _make(Transform.HESSIAN, fun, argnum)


def elementwise_grad(fun: Any, argnum: Any = 0) -> Derivative:
    """Gradient of ``sum(fun(x))``: the derivative of an elementwise function."""
    return _make(Transform.ELEMENTWISE_GRAD, fun, argnum)


def jit(
    fun: Any,
    static_argnums: int | Sequence[int] | None = None,
    static_argnames: str | Sequence[str] | None = None,
    donate_argnums: int | Sequence[int] = (),
) -> Derivative:
    """A drop-in ``jax.jit`` for whole functions (a training step) that follows the name
    it was given and recompiles exactly when something the function read has changed."""
    import jax  # (available: checked as this module was imported)

    # What jax.jit refuses (a position or a name the function has not), refused here too.
    jax.jit(
        fun,
        static_argnums=static_argnums,
        static_argnames=static_argnames,
        donate_argnums=donate_argnums,
    )
    options = (
        ("static_argnums", _ints(static_argnums)),
        ("static_argnames", _names(static_argnames)),
        ("donate_argnums", _ints(donate_argnums) or ()),
    )
    return _make(Transform.JIT, fun, 0, options)


def _ints(value: int | Sequence[int] | None) -> tuple[int, ...] | None:
    if value is None:
        return None
    return (value,) if isinstance(value, int) else tuple(value)


def _names(value: str | Sequence[str] | None) -> tuple[str, ...] | None:
    if value is None:
        return None
    return (value,) if isinstance(value, str) else tuple(value)
