"""The JAX context a build traces in: one shared by builds while it holds no trace of
the user's code, else a new one.

A JAX context value is part of the keys of JAX's trace, lowering and compile caches. A
build must not be answered from a trace of the user's code cached earlier (a jitted
callee or a ``scan`` body whose callee or global has changed since), nor touch the
user's own cached traces; a new context for every build does both, but then JAX traces
and lowers its own jitted helpers (``jnp`` functions) anew at every build as well: two
thirds of a small function's trace. A shared context keeps those.

It stays sound by one invariant: **the shared context holds no trace of user code**. A
build traces in it while recorded; if any user code ran that library code called
directly, other than the build's own function called once by the transformation (a
jitted callee, a ``scan`` or ``custom_vjp`` body, a pytree class's flatten, a second
call), JAX may have cached a trace of it there, and the context is retired: the next
build gets a new one. So a build in the shared context misses every user-code trace,
and runs the current code. One build at a time holds it (a nested or another thread's
build gets a context of its own, as does one that cannot be recorded). User code that
runs in it unrecorded retires it too: a finalizer run by a garbage collection during the
build (seen as user code starting in the collection, or, where no hook sees it, as a
trace JAX makes in it), and a host callback the traced function will run at each
execution (hunt 59).
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Iterator
from types import CodeType, FunctionType, MethodType
from typing import Any

from jax._src import monitoring as _monitoring

from ..gcmarks import collecting
from ..interruptsafe import contextmanager
from ..recorder import CallLog, record

Context = Callable[[], Any]


class BuildContexts:
    """Hands out the context a build traces in (see the module's docstring)."""

    def __init__(self, make: Callable[[Any], Any]) -> None:
        self._make = make
        self._keys = itertools.count(1)
        self._shared = self._key()
        self._lock = threading.Lock()
        self._tainted = False
        self.retired = 0  # (tests and benchmarks read it)
        self._traces = threading.local()
        _monitoring.register_event_duration_secs_listener(self._on_event)

    def _on_event(self, event: str, duration_secs: float, **kwargs: str | int) -> None:
        if event == _TRACE_EVENT:
            self._traces.count = getattr(self._traces, "count", 0) + 1
            if collecting():  # (a finalizer: a hook may not see it run, hunt 59 on 3.12)
                self._traces.in_gc = getattr(self._traces, "in_gc", 0) + 1

    @contextmanager
    def running(self, context: Context) -> Iterator[None]:
        """Lower, compile and run a build's trace in ``context``, unrecorded: if anything
        is traced meanwhile (a JAX event listener of the user's that calls a jitted
        function at the compile), it may be user code, and a shared context is retired."""
        before = getattr(self._traces, "count", 0)
        try:
            with context():
                yield
        finally:
            if getattr(self._traces, "count", 0) != before:
                self.retire(context)

    def retire(self, context: Context) -> None:
        """No build gets ``context`` again, if it is the shared one."""
        if getattr(context, "key", None) == self._shared:
            self._retire_shared()

    def _retire_shared(self) -> None:
        self._shared = self._key()
        self.retired += 1

    def _key(self) -> tuple[str, int]:
        return ("ipyrefresh build", next(self._keys))

    def fresh(self) -> Context:
        """A context of its own (call it for a ``with`` block)."""
        return self._partial(self._key())

    def _partial(self, key: tuple[str, int]) -> Context:
        return _Keyed(self._make, key)

    @contextmanager
    def for_build(self, fn: Any) -> Iterator[Context]:
        """The shared context while the block traces ``fn``, if free; else a fresh one.
        What runs in the block is recorded; the shared context is retired unless the only
        user code library code called was ``fn``'s, once."""
        if not self._lock.acquire(blocking=False):
            yield self.fresh()
            return
        keeps = False
        self._tainted = False
        in_gc_before = getattr(self._traces, "in_gc", 0)
        try:
            with record() as log:
                yield self._partial(self._shared)
            traced_in_gc = getattr(self._traces, "in_gc", 0) != in_gc_before
            keeps = not (self._tainted or traced_in_gc) and _kept_clean(log, _code_of(fn))
        finally:
            if not keeps:
                self._retire_shared()
            self._lock.release()

    def taint(self) -> None:
        """What the build traced will run user code later, unrecorded, in its context
        (a ``pure_callback``, ``io_callback`` or ``jax.debug.callback`` runs at every
        execution): the shared context is retired when the build ends."""
        self._tainted = True


def _code_of(fn: Any) -> CodeType | None:
    if type(fn) is MethodType:
        fn = fn.__func__
    return fn.__code__ if type(fn) is FunctionType else None


def _kept_clean(log: CallLog, code: CodeType | None) -> bool:
    """Whether the recorded run left no trace of user code in the context. JAX's event
    listeners (``jax.monitoring``) are called, not traced: JAX caches no trace of one
    (what one calls that JAX traces is called by JAX's own code, and counts)."""
    if not log.complete or log.cut_short or log.ran_in_gc or code is None:
        return False
    called = [
        (callee, n)
        for (caller, callee), n in log.called_by_library.items()
        if caller is None or caller.co_filename != _MONITORING
    ]
    return not called or called == [(code, 1)]


#: The file JAX calls its event listeners from (a compile counter, a profiler's hook).
_MONITORING = _monitoring.__file__
#: The event JAX records at each trace of a function to a jaxpr.
_TRACE_EVENT = "/jax/core/compile/jaxpr_trace_duration"


class _Keyed:
    """A context: call it for a ``with`` block under ``key``."""

    __slots__ = ("key", "make")

    def __init__(self, make: Callable[[Any], Any], key: tuple[str, int]) -> None:
        self.make = make
        self.key = key

    def __call__(self) -> Any:
        return self.make(self.key)
