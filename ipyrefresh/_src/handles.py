"""Live derivative handles: ``grad``, ``jacobian``, ``hessian`` and friends.

``dh = grad(h)`` in IPython follows the *name* ``h``: redefine ``h`` (or anything it
reaches) and the next ``dh(x)`` answers for the new code. Outside IPython a handle is
bound to the function it was given, like autograd's, and checks that function's
recorded dependencies on every call, so it never answers stale silently either.

A call looks up its entry by argument signature, unless the handle's last entry offers a
direct path (``compilers.Direct``: JAX entries do) and is still current: then it is only a
world compare and a type check away from the compiled function.
"""

from __future__ import annotations

import weakref
from collections.abc import Hashable
from types import FunctionType
from typing import Any

from .analysis import type_name
from .cache import Entry
from .engine import Engine, check_differentiable
from .signature import arg_signature, call_signature, shape_free_signature
from .targets import Target

_MAX_HANDLE_ENTRIES = 64

_engine: Engine | None = None


def get_engine() -> Engine:
    """The process-wide engine (created on first use)."""
    global _engine
    if _engine is None:
        _engine = Engine()
    return _engine


def _argnum_key(argnum: Any) -> int | tuple[int, ...]:
    if type(argnum) is int:
        return argnum
    if type(argnum) in (tuple, list) and all(type(a) is int for a in argnum):
        return tuple(argnum)
    raise TypeError(f"argnum must be an int or a tuple of ints, not {argnum!r}")


class Derivative:
    """A callable derivative that stays equal to autograd on the current code."""

    __slots__ = (
        "__weakref__",
        "_engine",
        "_entries",
        "_fun",
        "_hot",
        "_key",
        "_world",
        "argnum",
        "compiler",
        "target",
        "transform",
    )

    def __init__(
        self, transform: str, fun: Any, argnum: Any = 0, compiler: str | None = None
    ) -> None:
        engine = get_engine()
        self.argnum = _argnum_key(argnum)
        label = fun.__name__ if type(fun) is FunctionType else type_name(type(fun))
        check_differentiable(fun, label)
        self.transform = transform
        self.compiler = compiler or (engine.config.backend == "jax" and "jax") or None
        # jax.jit dispatches on shapes itself: one JAX entry serves them all.
        self._key = shape_free_signature if self.compiler == "jax" else arg_signature
        self._engine = engine
        self._world = engine.world
        self.target: Target = engine.target_for(fun)
        # The handle keeps a fixed target alive, as autograd's grad(f) does; the cache
        # itself holds it only weakly.
        self._fun = None if self.target.follows else fun
        if not self.target.follows:
            engine.hold(self.target)
            weakref.finalize(self, engine.release, self.target)
        self._entries: dict[Hashable, Entry] = {}
        # The last entry used, if its compiler gave it a direct path (``Built.direct``).
        self._hot: Entry | None = None

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        hot = self._hot
        if hot is not None and not kwargs and hot.world == self._world.now:
            # The direct path: no signature, no lookup. It takes arguments of the types
            # it declares; the compiled function dispatches on shapes itself.
            direct = hot.direct
            if direct is not None:  # else: invalidated by another thread
                types = direct.types
                for a in args:
                    if type(a) not in types and not direct.accepts(a):
                        break
                else:
                    try:
                        result = direct.call(*args)
                    except Exception:
                        # The full path below answers, or explains; this entry is not
                        # taken directly again (a failed retrace can cost milliseconds).
                        hot.direct = self._hot = None
                    else:
                        hot.hits += 1
                        return result
        sig = call_signature(args, kwargs, self._key)
        entry = self._entries.get(sig)
        if entry is not None and entry.world == self._world.now:
            artifact, ref = entry.artifact, entry.fn
            if artifact is not None and ref is not None:  # else: invalidated by another thread
                entry.hits += 1
                entry.last_event = "cache hit"
                self._hot = entry if entry.direct is not None else None
                return artifact(ref(), args, kwargs)
        if entry is None:
            if len(self._entries) >= _MAX_HANDLE_ENTRIES:
                self._entries.clear()
            entry = self._engine.entry_for(
                self.target, self.transform, self.argnum, sig, self.compiler
            )
        entry, result = self._engine.call(entry, args, kwargs)
        self._entries[sig] = entry
        self._hot = entry if entry.direct is not None else None
        return result

    @property
    def fun(self) -> Any:
        """The function this derivative currently differentiates."""
        return self.target.resolve()

    @property
    def __name__(self) -> str:
        return f"{self.transform}_of_{self.target.label}"

    def __repr__(self) -> str:
        follows = f"follows '{self.target.label}'" if self.target.follows else "fixed function"
        argnum = "" if self.argnum == 0 else f", argnum={self.argnum}"
        return f"<ipyrefresh {self.transform}({self.target.label}{argnum}), {follows}>"


def grad(fun: Any, argnum: Any = 0) -> Derivative:
    """Gradient of a scalar-valued ``fun`` with respect to positional argument ``argnum``."""
    return Derivative("grad", fun, argnum)


def value_and_grad(fun: Any, argnum: Any = 0) -> Derivative:
    """``(fun(*args), grad(fun)(*args))`` from one trace."""
    return Derivative("value_and_grad", fun, argnum)


def elementwise_grad(fun: Any, argnum: Any = 0) -> Derivative:
    """Sum of each column of the Jacobian: the derivative of an elementwise function."""
    return Derivative("elementwise_grad", fun, argnum)


def jacobian(fun: Any, argnum: Any = 0) -> Derivative:
    """Full Jacobian, of shape ``out.shape + x.shape``."""
    return Derivative("jacobian", fun, argnum)


def hessian(fun: Any, argnum: Any = 0) -> Derivative:
    """Hessian of a scalar-valued ``fun``."""
    return Derivative("hessian", fun, argnum)


def status() -> dict[str, Any]:
    """Counts of fresh and stale derivatives, rebuilds, and each entry's state and reasons."""
    return get_engine().status()


def refresh(name: str | None = None) -> dict[str, Any]:
    """Rebuild stale derivatives now (those depending on ``name``, if given)."""
    return get_engine().refresh(name)
