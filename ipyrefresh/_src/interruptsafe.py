"""``contextmanager`` whose generator a Ctrl-C cannot leave half-entered.

``contextlib``'s ``__enter__`` runs the generator to its ``yield`` with ``next(gen)``, and
CPython checks for signals when that call returns. A Ctrl-C handled there raises in
``__enter__`` after the generator has set its state up: the ``with`` never began, so its
``__exit__`` never runs. The generator stays suspended at its ``yield`` until it is
collected, and its ``finally`` then runs from a finalizer, at any later moment: in another
cell, in another build, inside a garbage collection. It released the engine's lock that a
later request held, left the tape's spy on for every later autograd trace, and walked the
thread's frames while a collection tore one down (a segfault, CI on 3.12 and 3.13). What it
raised there, a later Ctrl-C among others, CPython dropped ("Exception ignored in ...").

Here ``__enter__`` closes the generator at once when it raises, so its ``finally`` runs
then, in the ``with``'s own thread and frame, before the interrupt goes on to the caller.
``__exit__`` does the same: a Ctrl-C handled as ``contextlib``'s ``__exit__`` starts left
the generator suspended too. (One check remains: as this module's own ``__exit__`` starts.)
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from types import TracebackType
from typing import Generic, ParamSpec, TypeVar

P = ParamSpec("P")
T = TypeVar("T")


class _Entered(Generic[T]):
    """``contextlib``'s context manager, its generator closed if ``__enter__`` raises."""

    __slots__ = ("_made",)

    def __init__(self, made: contextlib._GeneratorContextManager[T]) -> None:
        self._made = made

    def __enter__(self) -> T:
        try:
            return self._made.__enter__()
        except BaseException:
            self._made.gen.close()  # (a no-op if the exception came from the generator)
            raise

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        try:
            return self._made.__exit__(kind, value, tb)
        except BaseException:
            self._made.gen.close()  # (cut short before it resumed the generator)
            raise


#: The code of the ``__enter__`` frames between a generator and its ``with`` statement.
ENTERING = frozenset(
    {contextlib._GeneratorContextManager.__enter__.__code__, _Entered.__enter__.__code__}
)


def contextmanager(func: Callable[P, Iterator[T]]) -> Callable[P, _Entered[T]]:
    """:func:`contextlib.contextmanager`, safe from a Ctrl-C at the block's entry."""
    made = contextlib.contextmanager(func)

    @functools.wraps(func)
    def helper(*args: P.args, **kwargs: P.kwargs) -> _Entered[T]:
        return _Entered(made(*args, **kwargs))

    return helper


__all__ = ["ENTERING", "contextmanager"]
