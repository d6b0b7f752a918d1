"""Live derivative handles: ``grad``, ``value_and_grad``, ``elementwise_grad``,
``jacobian``, ``hessian``.

``dh = grad(h)`` follows the *name* ``h`` it was given (see ``targets.py``): redefine
``h``, or anything ``h`` reads, and the next ``dh(x)`` answers for the code and data of
that moment. Every call checks, before answering, that what its cached artifact was
built from is unchanged (``snapshot.Guard``); so a handle is right in IPython, in plain
Python, in threads and in widget callbacks alike.
"""

from __future__ import annotations

import sys
import warnings
from types import FrameType
from typing import Any

from . import compilers
from .build import check_differentiable
from .compilers.base import Miss, Request, Transform, Variant, check_variant
from .engine import ArgumentMiss, Engine, current
from .entry import Entry
from .guard import Guard
from .keys import EntryKey, Signature, Unkeyable, call_signature, check_argnum
from .pickling import dask_token, reduce_handle
from .targets import FixedTarget, Target, label_of, target_for

_MAX_HANDLE_ENTRIES = 64
_CHECK_FAILED = Miss("guard")


def _answer(
    variant: Variant,
    fn: Any,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    missed: list[ArgumentMiss],
) -> Any:
    """``variant``'s answer if its guard holds (a :class:`Miss` if not, or if it declines
    the call); a guard failing on an argument's value is noted in ``missed``, so that
    neither this call nor the engine checks it again.

    A variant that ``starts_first`` is started before its guard is checked, so that the
    check runs while JAX computes (a check made first delays the start past the moment
    XLA's idle worker threads stop spinning: waking them costs ~30 µs); its answer is
    returned only if the guard then holds."""
    if variant.starts_first():
        try:
            started = variant.run(fn, args, kwargs)
        except Exception:  # (the guard decides: if it holds, the plain order raises it)
            started = _CHECK_FAILED
        bad = check_variant(variant, fn, args, kwargs)
        if bad is None:
            return started if started is not _CHECK_FAILED else variant.run(fn, args, kwargs)
    else:
        bad = check_variant(variant, fn, args, kwargs)
        if bad is None:
            return variant.run(fn, args, kwargs)
    if bad.arg:
        missed.append(ArgumentMiss(variant, bad))
    return _CHECK_FAILED


def _traced_by_jax(args: tuple[Any, ...]) -> bool:
    """An argument is a tracer of a JAX transformation the user applied around the call
    that stages it into a kept trace (``jax.jit``, ``lax.scan``; not ``jax.vmap`` or an
    unjitted ``jax.grad``, which trace again at each call), and not one of ipyrefresh's
    own (an outer handle follows changes itself)."""
    tracer = _jax_tracer()
    if tracer is None or not any(isinstance(a, tracer) for a in args):
        return False
    ours = sys.modules.get("ipyrefresh._src.compilers.jax")
    if ours is not None and ours.traced_by_ipyrefresh():
        return False
    staged = getattr(sys.modules.get("jax._src.core"), "unsafe_am_i_under_a_jit", None)
    return not callable(staged) or bool(staged())  # (another JAX: warn for any tracer)


def _jax_tracer() -> type | None:
    """JAX's tracer class, looked up once JAX is imported (``jax.core`` resolves names
    lazily, through a module ``__getattr__``)."""
    if _TRACER:
        return _TRACER[0]
    jax = sys.modules.get("jax")
    tracer = getattr(getattr(jax, "core", None), "Tracer", None)
    if not isinstance(tracer, type):
        return None
    _TRACER.append(tracer)
    return tracer


_TRACER: list[type] = []


class Derivative:
    """A callable derivative that answers what a fresh computation of the current code
    and data would (autograd's, or JAX's for the "jax" backend)."""

    __slots__ = (
        "__weakref__",
        "_engine",
        "_entries",
        "_fun",
        "_hot",
        "_told_traced",
        "argnum",
        "backend",
        "options",
        "target",
        "transform",
    )

    def __init__(
        self,
        transform: Transform | str,
        fun: Any,
        argnum: Any = 0,
        backend: str | None = None,
        *,
        frame: FrameType | None = None,
        target: Target | None = None,
        engine: Engine | None = None,
        options: tuple[tuple[str, Any], ...] = (),
    ) -> None:
        engine = engine or current()
        self.transform = Transform(transform)
        self.argnum = check_argnum(argnum)
        check_differentiable(fun, label_of(fun))
        self.backend = backend  # None: the configured backend at each call
        self.options = options
        self._engine = engine
        if target is None:
            try:
                target = target_for(fun, frame)
            except Exception as exc:  # (reading the call site failed: the object itself)
                engine.internal_error("reading the call site", exc, label_of(fun))
                target = FixedTarget(fun, label_of(fun))
        self.target: Target = engine.target(target)
        # A fixed target is kept alive by its handle, as autograd's grad(f) keeps f.
        self._fun = fun if isinstance(self.target, FixedTarget) else None
        engine.hold(self.target, self)  # (weakly: a name's target holds its namespace)
        self._entries: dict[tuple[str, Signature], Entry] = {}
        #: The entry that last answered; its first variant (the one that answered) is tried
        #: first. Only the entry is kept: a variant it dropped must not live on here.
        self._hot: Entry | None = None
        self._told_traced = False  # warned that the user's own jax.jit traces this handle

    def owns(self, entry: Entry) -> bool:
        """Whether ``entry`` answers this handle's calls (its target, transform, argnum and
        options: another handle made alike shares it)."""
        key = entry.key
        return (
            entry.target is self.target
            and key.transform is self.transform
            and key.argnum == self.argnum
            and key.options == self.options
        )

    def __call__(self, /, *args: Any, **kwargs: Any) -> Any:
        fn = self.target.resolve()
        if fn is self:
            raise TypeError(
                f"{self.label}: the name '{self.target.label}' now means this derivative "
                "itself (rebound to it, as in 'h, k = grad(h), grad(k)'); make the "
                "derivative under another name, or rebind the name to the function"
            )
        backend = self.backend or self._engine.config.backend
        if backend == "jax" and not self._told_traced and _traced_by_jax(args):
            self._told_traced = True
            warnings.warn(
                f"{self!r} is traced by a JAX transformation of yours (jax.jit, lax.scan): "
                "that trace keeps this derivative's answer for the code of this moment, as "
                "it would keep jax.grad's. Make the outer function an rj.jit to have it "
                "follow later changes too.",
                RuntimeWarning,
                stacklevel=2,
            )
        try:
            return self._cached(fn, backend, args, kwargs)
        except Unkeyable as exc:  # (a list that contains itself: no key, no entry)
            request = Request(self.transform, self.argnum, self.options)
            plain = compilers.get(backend).fallback(request, Guard(), str(exc))
            return plain.run(fn, args, kwargs)

    def _cached(self, fn: Any, backend: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """The answer of the cache: a variant whose guard holds, else the engine's."""
        hot = self._hot
        sig: tuple[str, Signature] | None = None
        #: Variants whose guard failed on an argument's value at this call: not checked
        #: again by this call (a new minibatch at every call would check each three times).
        missed: list[ArgumentMiss] = []
        variants = hot.variants if hot is not None else ()  # (read once: threads drop them)
        if hot is not None and variants and hot.key.backend == backend:
            # The last variant that answered: its guard checks the arguments too, so a
            # call like the last one needs no signature. One that runs the code on every
            # call (plain autograd) is checked like in ``Engine._try``: its code and data,
            # and the arguments' signature (its entry's), not their values.
            variant = variants[0]
            if variant.replays_python:
                sig = (backend, call_signature(args, kwargs, backend == "jax"))
                fits = sig[1] == hot.key.signature
            else:
                fits = True
            if fits:
                answer = _answer(variant, fn, args, kwargs, missed)
                if type(answer) is not Miss:
                    hot.hit(variant, self._engine.cell)
                    return answer
        if sig is None:
            sig = (backend, call_signature(args, kwargs, backend == "jax"))
        known = self._entries.get(sig)
        if known is not None:
            entry = known
            for variant in entry.variants:
                if any(m.variant is variant for m in missed):
                    continue
                answer = _answer(variant, fn, args, kwargs, missed)
                if type(answer) is not Miss:
                    entry.hit(variant, self._engine.cell)
                    self._remember(entry)
                    return answer
        else:
            if len(self._entries) >= _MAX_HANDLE_ENTRIES:
                self._entries.clear()
            key = EntryKey(
                self.target.key, self.transform, self.argnum, sig[1], backend, self.options
            )
            entry = self._engine.entry_for(self.target, key)
        entry, answer = self._engine.call(entry, fn, args, kwargs, missed)
        self._entries[sig] = entry
        self._remember(entry)
        return answer

    def _remember(self, entry: Entry) -> None:
        """Keep the variant that just answered (the first, after ``hit``) for the hot path,
        unless it replays the Python code (its guard does not check the arguments)."""
        variants = entry.variants
        self._hot = entry if variants and not variants[0].replays_python else None

    def entry(self, *args: Any, **kwargs: Any) -> Entry | None:
        """The cache entry a call with these arguments uses (``None`` before its first call)."""
        backend = self.backend or self._engine.config.backend
        return self._entries.get((backend, call_signature(args, kwargs, backend == "jax")))

    @property
    def fun(self) -> Any:
        """The function this derivative differentiates now."""
        return self.target.resolve()

    @property
    def entries(self) -> list[Entry]:
        """The cache entries this handle used (one per call signature)."""
        return list(self._entries.values())

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        """Pickled (for a process pool, joblib, Dask), a handle carries the function its
        target means now, by value where cloudpickle can: see ``pickling.py``."""
        return reduce_handle(self)

    def __dask_tokenize__(self) -> tuple[Any, ...]:
        return dask_token(self)

    def __copy__(self) -> Derivative:
        return self  # like a function: a handle has no state of the user's to copy

    def __deepcopy__(self, memo: dict[int, Any]) -> Derivative:
        return self

    @property
    def __name__(self) -> str:
        return f"{self.transform.value}_of_{self.target.label}"

    @property
    def label(self) -> str:
        """``grad(f)``, ``jacobian(f, argnum=1)``: how reports and outer handles name it."""
        argnum = "" if self.argnum == 0 else f", argnum={self.argnum}"
        return f"{self.transform.value}({self.target.label}{argnum})"

    def __repr__(self) -> str:
        follows = f"follows '{self.target.label}'" if self.target.follows else "fixed function"
        backend = f", {self.backend}" if self.backend else ""
        return f"<ipyrefresh {self.label}{backend}, {follows}>"


def _make(transform: Transform, fun: Any, argnum: Any, backend: str | None) -> Derivative:
    return Derivative(transform, fun, argnum, backend, frame=sys._getframe(2))


def grad(fun: Any, argnum: Any = 0) -> Derivative:
    """Gradient of a scalar-valued ``fun`` with respect to positional argument ``argnum``."""
    return _make(Transform.GRAD, fun, argnum, None)


def value_and_grad(fun: Any, argnum: Any = 0) -> Derivative:
    """``(fun(*args), grad(fun)(*args))`` from one run."""
    return _make(Transform.VALUE_AND_GRAD, fun, argnum, None)


def elementwise_grad(fun: Any, argnum: Any = 0) -> Derivative:
    """Sum of each column of the Jacobian: the derivative of an elementwise function."""
    return _make(Transform.ELEMENTWISE_GRAD, fun, argnum, None)


def jacobian(fun: Any, argnum: Any = 0) -> Derivative:
    """Full Jacobian, of shape ``out.shape + x.shape``."""
    return _make(Transform.JACOBIAN, fun, argnum, None)


def hessian(fun: Any, argnum: Any = 0) -> Derivative:
    """Hessian of a scalar-valued ``fun``."""
    return _make(Transform.HESSIAN, fun, argnum, None)


def status(check: bool = True) -> dict[str, Any]:
    """Every cached derivative: fresh or stale (and why), builds, hits, what it reads.
    ``check`` (the default) first checks each one against the current code and data.
    Raises :class:`~ipyrefresh.EngineBusy` while another thread's build holds the cache."""
    return current().status(check)


def refresh(name: str | Derivative | None = None, force: bool = False) -> dict[str, Any]:
    """Rebuild stale derivatives now: those depending on ``name``, if given, or a handle's
    own. Raises :class:`~ipyrefresh.EngineBusy` while another thread's build holds the
    cache."""
    return refresh_in(current(), name, force)


def refresh_in(engine: Engine, name: str | Derivative | None, force: bool) -> dict[str, Any]:
    """:func:`refresh` with ``engine``'s cache (``%refresh``, the shell's own)."""
    if isinstance(name, Derivative):
        return engine.refresh(force=force, which=name.owns)
    return engine.refresh(name, force)
