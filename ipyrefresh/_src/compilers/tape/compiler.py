"""The "tape" compiler: autograd's answer on the first call, a compiled replay after.

The first call runs autograd itself while recording a tape (``record.py``); the answer
is autograd's. The replay is generated (``emit.py``) only when a second call reuses the
build, so one-off derivatives (``%grad f(x)``) never pay for code generation. A replay
whose guard on the differentiated value fails (a branch went the other way) returns a
:class:`~ipyrefresh._src.compilers.base.Miss`; the engine then tries another variant or
traces again. What the tape cannot represent runs on plain autograd, and says why.
"""

from __future__ import annotations

import threading
from typing import Any

from ...guard import Guard
from ...recorder import effects_so_far
from ..autograd import plain, reference
from ..base import PythonVariant, Request, Traced, Transform, Variant
from . import patches
from .emit import Compiled, generate
from .record import OpGuard, Tape, Unsupported, arrays_in, transform


def _root(request: Request) -> str:
    if isinstance(request.argnum, int):
        return f"args[{request.argnum}]"
    return "(" + "".join(f"args[{i}], " for i in request.argnum) + ")"


class TapeVariant:
    """A tape, generated into Python at its first replay."""

    replays_python = False
    any_shapes = False

    def __init__(self, tape: Tape, request: Request, guard: Guard) -> None:
        self.guard = guard
        self.note = ""
        self._tape: Tape | None = tape
        self._request = request
        self._compiled: Compiled | None = None
        self._fallback: Any = None

    def run(self, fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        compiled = self._compiled
        if compiled is None:
            if self._fallback is None:
                self._compile()
            compiled = self._compiled
            if compiled is None:
                return self._fallback(fn, args, kwargs)
        try:
            return compiled.run(args, kwargs)
        except Exception:
            pass
        # A primitive raised for these inputs (a Cholesky factor of a matrix that is not
        # positive definite...): the function, run by autograd, may catch it. autograd's
        # answer, or its error, is the answer: run outside the ``except`` block, so that
        # autograd's error is not chained to the replay's (hunt 51).
        self.note = "a replay raised an error; autograd answered that call"
        return plain(self._request)(fn, args, kwargs)

    def _compile(self) -> None:
        """Generate the replay, once (threads calling the handle may race to its first
        compiled call: the others wait, then use what the first made)."""
        with _COMPILING:
            if self._compiled is None and self._fallback is None:
                self._generate()

    def _generate(self) -> None:
        tape, self._tape = self._tape, None
        if tape is None:  # pragma: no cover - guarded by _compile
            raise RuntimeError("the tape was already compiled")
        kind = self._request.transform
        if kind is Transform.HESSIAN:  # jacobian(jacobian(f)): the tape is the outer one's
            kind = Transform.JACOBIAN
        try:
            self._compiled = generate(tape, kind, _root(self._request))
        except Unsupported as exc:
            self.note = str(exc)
            self._fallback = plain(self._request)

    @property
    def source(self) -> str:
        if self._compiled is None and self._fallback is None:
            self._compile()
        return self._compiled.source if self._compiled is not None else ""

    def starts_first(self) -> bool:
        return False

    def describe(self) -> str:
        c = self._compiled
        if c is None:
            return "plain autograd" if self._fallback is not None else "tape (not compiled yet)"
        return f"tape: {c.ops} ops ({c.direct} direct), {len(c.guards)} guards"


#: Held while a replay is generated (rare: at a variant's second call).
_COMPILING = threading.Lock()


class TapeCompiler:
    """Registered as "tape" (the default)."""

    name = "tape"
    needs_guard = True

    def trace(
        self,
        fn: Any,
        request: Request,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        *,
        may_write: bool = False,  # (its one run is autograd's: nothing leaks from it)
    ) -> Traced:
        if request.transform is Transform.JIT:
            raise TypeError("jit needs the JAX backend (ipyrefresh.jax.jit)")
        broken = patches.install()
        if broken:
            return Traced(reference(fn, request, args, kwargs), unsupported=broken)
        tape = Tape(effects=effects_so_far())
        with patches.spying():
            result = transform(request.transform, tape)(fn, request.argnum)(*args, **kwargs)
        tape.finish()
        # The arrays in plain containers, differentiated ones included (the guard's walk
        # skips those), as the trace saw them: the build makes the variant before it
        # returns, and nothing runs the caller's code in between.
        arrays = arrays_in((*args, *kwargs.values()))
        prims = [op.fun for op in tape.ops]
        prims += [e.fun for e in tape.events if type(e) is OpGuard]

        def compile_variant(guard: Guard) -> Variant:
            # (with those the guard's walk met: any depth, any object)
            tape.own_argument_arrays([*arrays, *guard.argument_arrays])
            arrays.clear()
            return TapeVariant(tape, request, guard)

        # (a tape stopped at an effect holds part of the run: it never compiles)
        compile = None if tape.effects else compile_variant
        return Traced(result, compile, tape.unsupported, prims)

    def fallback(self, request: Request, guard: Guard, why: str) -> Variant:
        return PythonVariant(plain(request), guard, why, "plain autograd")

    def runs_first_sight(self, request: Request) -> bool:
        return True  # (a build costs several runs of plain autograd)

    def defers_first_build(self, request: Request) -> bool:
        return True  # (the same)
