"""What a compiler is, and what it hands back: the contracts between the engine and the
compilers (``autograd``, ``tape``, ``jax``). Compilers import this module and nothing of
the engine; the engine imports compilers only through the registry in ``__init__``.

A build is two steps. :meth:`Compiler.trace` runs the user's function once, in the
engine's recording (so every user function it enters is seen), and returns the answer
of that one run with a :class:`Traced`. Then the engine, having walked what the run read
into a :class:`~ipyrefresh._src.snapshot.Guard`, asks the compiler for the
:class:`Variant` that answers later calls: the compiled artifact when nothing stands in
the way, or the compiler's fallback (re-running the Python code on every call) when the
run had effects a replay would skip or read something no guard can watch.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..guard import Guard
from ..keys import Argnum, Transform
from ..nodes import Mismatch

__all__ = ["Argnum", "Compiler", "Miss", "PythonVariant", "Request", "Traced", "Transform"]


@dataclass(frozen=True)
class Request:
    """What to differentiate: the transform and the positional argument(s)."""

    transform: Transform
    argnum: Argnum
    options_items: tuple[tuple[str, Any], ...] = ()

    @property
    def argnums(self) -> tuple[int, ...]:
        return self.argnum if isinstance(self.argnum, tuple) else (self.argnum,)

    @property
    def options(self) -> dict[str, Any]:
        """Options of ``ipyrefresh.jax.jit`` (static_argnums, donate_argnums...)."""
        return dict(self.options_items)


class Miss:
    """A variant does not apply to this call: a guard inside its replay failed."""

    __slots__ = ("what",)

    def __init__(self, what: str) -> None:
        self.what = what

    def __repr__(self) -> str:
        return f"Miss({self.what!r})"


class Variant(Protocol):
    """A compiled way to answer calls, valid while ``guard`` holds.

    ``run`` returns the answer, or a :class:`Miss` when a check inside the replay fails
    (a branch on the differentiated value went the other way): another variant, or a
    new trace, must answer. ``replays_python`` is True for variants that run the user's
    code on every call (plain autograd, unjitted JAX): they are always current.
    """

    guard: Guard
    note: str
    replays_python: bool
    #: It takes arguments of any shape and dtype itself (``jax.jit`` does, and returns a
    #: Miss rather than trace again): a handle may try it before computing a signature.
    any_shapes: bool

    def run(self, fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any: ...

    def starts_first(self) -> bool:
        """Whether its run now only starts pure work that runs apart from Python (a
        ``jax.jit`` without effects or donated arguments, under the settings it was built
        under): a handle may then start it before checking the guard, and drops the
        answer if the guard fails. The check then overlaps the computation."""
        ...

    def describe(self) -> str: ...


def check_variant(
    variant: Variant, fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Mismatch | None:
    """What keeps ``variant`` from answering this call (None: nothing). One that runs the
    code on every call is always current: its code and data (no array contents) only say
    when to try a build again, whatever the arguments' values."""
    if variant.replays_python:
        return variant.guard.check_env(fn, False)
    return variant.guard.check(fn, args, kwargs)


@dataclass
class Traced:
    """One run of the function, and how to turn it into a variant.

    ``compile(guard)`` makes the compiled variant (lazily: the engine calls it at the
    first call that reuses the build). ``unsupported`` says why this run cannot be
    compiled ("" if it can). ``primitives`` are the autograd primitives the run applied,
    whose registered VJPs the guard must watch.

    ``finish``, when given, computes ``result`` after the call recorder has stopped: the
    part of a build that runs none of the user's code (JAX's lowering, XLA's compile and
    the run of the compiled function), which would only slow the recorder's hook down.
    It may set ``unsupported`` (then ``compile`` is not used).
    """

    result: Any
    compile: Callable[[Guard], Variant] | None = None
    unsupported: str = ""
    primitives: list[Any] = field(default_factory=list)
    detail: str = ""
    finish: Callable[[], Any] | None = None
    #: For a run made only to answer (the code might change objects outside it): the
    #: compiling trace, a second run the build makes only if this one changed nothing.
    retrace: Callable[[], Traced] | None = None

    def answer(self) -> Any:
        """The run's result (finished first, once, if it has a ``finish``)."""
        finish = self.finish
        if finish is not None:
            self.finish = None
            self.result = finish()
        return self.result


class Compiler(Protocol):
    """Turns a function and a :class:`Request` into variants (see the module docstring)."""

    name: str
    #: Whether builds need to know what the run read (False: the fallback is all there is).
    needs_guard: bool

    def trace(
        self,
        fn: Any,
        request: Request,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        *,
        may_write: bool = False,
    ) -> Traced:
        """One run of ``fn`` (its answer) and how to compile it. ``may_write``: the code
        the build could see before running it may change objects outside it."""
        ...

    def fallback(self, request: Request, guard: Guard, why: str) -> Variant: ...

    def runs_first_sight(self, request: Request) -> bool:
        """Whether a value of a read argument met for the first time runs the fallback
        rather than a build (the engine's "second sight"): a value that changes at every
        call (a minibatch, Newton's next estimate) must not cost a build at every call."""
        ...

    def defers_first_build(self, request: Request) -> bool:
        """Whether a new entry's first calls (``IPyRefresh.build_at_call``) run the
        fallback rather than a build: true where a build costs several fallback runs."""
        ...


class PythonVariant:
    """A variant that runs the user's code on every call: always current, never fast."""

    replays_python = True
    any_shapes = False

    def __init__(self, call: Callable[..., Any], guard: Guard, note: str, kind: str) -> None:
        self._call = call
        self.guard = guard
        self.note = note
        self._kind = kind

    def run(self, fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        return self._call(fn, args, kwargs)

    def starts_first(self) -> bool:
        return False

    def describe(self) -> str:
        return self._kind
