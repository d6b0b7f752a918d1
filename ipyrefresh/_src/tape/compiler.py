"""The "tape" compiler: trace once per cache key, replay fast, retrace when a guard fails.

An artifact holds up to :data:`MAX_VARIANTS` compiled tapes for one cache key (one per
path through the function's value-dependent control flow). A call replays the first
variant whose guards hold; if none does, it retraces and adds a variant; past the bound
it runs plain autograd (with a warning, once). Whatever the tape cannot represent runs
on plain autograd from the start, and says why (``Built.fallback``).
"""

from __future__ import annotations

import ctypes
import random
import warnings
from collections.abc import Callable
from typing import Any

import autograd
import numpy as np

from ..compilers import TRANSFORMS, Built
from .replay import Compiled, generate
from .trace import Unsupported, record

MAX_VARIANTS = 8


def _mt_words() -> Any:
    """numpy's global Mersenne Twister state words (key[624], pos), read in place."""
    try:
        bitgen = np.random.mtrand._rand._bit_generator
        return (ctypes.c_uint32 * 625).from_address(bitgen.ctypes.state_address)
    except Exception:  # another numpy layout: fall back to the slow public API
        return None


_MT = _mt_words()


def _rng_state() -> tuple[Any, ...]:
    """Cheap fingerprint of the global random generators (numpy's and Python's)."""
    if _MT is not None:
        pos = _MT[624]
        numpy_part: tuple[Any, ...] = (pos, _MT[pos % 624], _MT[0])
    else:
        state: Any = np.random.get_state()
        numpy_part = (state[1][state[2] % 624], state[2])
    return (*numpy_part, random.getstate()[1][-1])


def _hessian_inner(fn: Any, argnum: Any) -> Callable[..., Any]:
    """hessian(f) is autograd's jacobian(jacobian(f)): the tape records the inner
    jacobian's whole computation (a tape of the derivative) and differentiates that."""
    inner = autograd.jacobian(fn, argnum)

    def jac(*args: Any, **kwargs: Any) -> Any:
        return inner(*args, **kwargs)

    return jac


def compile_variant(
    fn: Any, transform: str, argnum: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Compiled:
    """Trace ``fn`` on these arguments and generate its replay; raise Unsupported."""
    target = fn
    if transform == "hessian":
        target, transform = _hessian_inner(fn, argnum), "jacobian"
    rng = _rng_state()
    tape = None
    for box_leaves in (True, False):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # the replay below warns like autograd
                tape, _ = record(target, args, kwargs, argnum, box_leaves, fn)
            break
        except Unsupported:
            raise
        except Exception as exc:
            if not box_leaves:
                raise Unsupported(f"tracing raised {type(exc).__name__}: {exc}") from None
    assert tape is not None
    if _rng_state() != rng:
        raise Unsupported("it draws random numbers (a replay would repeat them)")
    if tape.unsupported:
        raise Unsupported(tape.unsupported)
    try:
        return generate(tape, transform)
    except Unsupported:
        raise
    except Exception as exc:
        raise Unsupported(f"cannot compile the tape ({type(exc).__name__}: {exc})") from None


class TapeArtifact:
    """Replays compiled variants for one cache key; ``last_event`` says what happened."""

    __slots__ = (
        "argnum",
        "fallback",
        "last_event",
        "note",
        "transform",
        "variants",
        "warned",
        "watch",
    )

    def __init__(self, transform: str, argnum: Any) -> None:
        self.transform = transform
        self.argnum = argnum
        self.variants: list[Compiled] = []
        self.fallback = ""  # why every call runs on plain autograd (set at build)
        self.note = ""  # a later call that ran on plain autograd, and why (for status)
        self.last_event = ""
        self.warned = False
        # Set by the engine: runs a retrace under its call recorder, so that functions
        # only a new path calls become dependencies too.
        self.watch: Callable[[Callable[[], Any]], Any] | None = None

    def __call__(self, fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        variants = self.variants
        failed = ""
        for i, v in enumerate(variants):
            r = v.run(fn, args, kwargs)
            if type(r) is not int:
                if i:
                    variants.insert(0, variants.pop(i))
                self.last_event = "replay"
                return r
            if not i:
                failed = v.guards[r]
        if self.fallback:
            self.last_event = f"autograd fallback: {self.fallback}"
            return self.reference(fn, args, kwargs)
        why = f"guard failed: {failed}"
        if len(variants) >= MAX_VARIANTS:
            if not self.warned:
                self.warned = True
                warnings.warn(
                    f"ipyrefresh: {self.transform} has {len(variants)} traced variants for "
                    f"one input signature; inputs that fail every guard run on plain autograd",
                    RuntimeWarning,
                    stacklevel=3,
                )
            self.last_event = f"autograd fallback: more than {MAX_VARIANTS} variants ({why})"
            self.note = f"more than {MAX_VARIANTS} traced variants; other inputs use autograd"
            return self.reference(fn, args, kwargs)
        return self.retrace(fn, args, kwargs, f"retrace: {why}")

    def retrace(self, fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any], event: str) -> Any:
        def trace() -> Compiled:
            return compile_variant(fn, self.transform, self.argnum, args, kwargs)

        try:
            variant = self.watch(trace) if self.watch is not None else trace()
        except Unsupported as exc:
            self.last_event = f"autograd fallback: {exc}"
            self.note = f"some inputs run on plain autograd: {exc}"
            variant = None
        if variant is None:  # outside the except block: no chained internal traceback
            return self.reference(fn, args, kwargs)
        r = variant.run(fn, args, kwargs)
        if type(r) is int:  # the trace's own inputs fail its guards: not deterministic
            self.last_event = (
                f"autograd fallback: guard fails on the traced inputs: {variant.guards[r]}"
            )
            return self.reference(fn, args, kwargs)
        self.variants.insert(0, variant)
        self.last_event = event
        return r

    def reference(self, fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        return TRANSFORMS[self.transform](fn, self.argnum)(*args, **kwargs)

    def describe(self) -> str:
        v = self.variants
        if not v:
            return "no tape"
        ops = v[0].general + v[0].specialized
        return (
            f"{len(v)} variant{'s' if len(v) != 1 else ''}, {ops} ops "
            f"({v[0].specialized} specialized), {len(v[0].guards)} guards"
        )


class TapeCompiler:
    """Registered as "tape"."""

    name = "tape"

    def build(
        self,
        fn: Any,
        transform: str,
        argnum: Any,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> Built:
        artifact = TapeArtifact(transform, argnum)
        try:
            variant = compile_variant(fn, transform, argnum, args, kwargs)
        except Unsupported as exc:
            artifact.fallback = str(exc)
        if artifact.fallback:
            # Outside the except block: if the user's code raises here, its traceback
            # must not be chained to our internal Unsupported.
            artifact.last_event = f"autograd fallback: {artifact.fallback}"
            result = artifact.reference(fn, args, kwargs)
            return Built(artifact, result, fallback=artifact.fallback)
        r = variant.run(fn, args, kwargs)
        if type(r) is int:
            why = f"not deterministic: guard fails on the traced inputs: {variant.guards[r]}"
            artifact.fallback = why
            artifact.last_event = f"autograd fallback: {why}"
            return Built(artifact, artifact.reference(fn, args, kwargs), fallback=why)
        artifact.variants.append(variant)
        artifact.last_event = "traced"
        return Built(artifact, r, detail=f"tape: {artifact.describe()}")
