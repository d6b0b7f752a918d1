"""``%grad``, ``%stale``, ``%refresh`` and ``%callgraph``, parsed with IPython's
``magic_arguments`` (``%grad?`` shows the usage)."""

from __future__ import annotations

import argparse
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from IPython.core import magic_arguments as _magic_arguments
from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_magic, magics_class

from .._src import compilers
from .._src.compilers.base import Transform
from .._src.engine import Engine, EngineBusy
from .._src.handles import Derivative, refresh_in
from .._src.targets import TargetGone, target_in
from .gradline import (
    GradLineError,
    check_inputs,
    explain_failure,
    parse_argnum,
    parse_call,
    split_options,
)
from .report import stale_report

_F = TypeVar("_F", bound=Callable[..., Any])


class _Decorator(Protocol):
    def __call__(self, fn: _F, /) -> _F: ...


# IPython's magic_arguments, with the types its decorators have (it declares none).
magic_arguments: Callable[[], _Decorator] = _magic_arguments.magic_arguments
argument: Callable[..., _Decorator] = _magic_arguments.argument
parse_argstring: Callable[[Any, str], argparse.Namespace] = _magic_arguments.parse_argstring


def _parse(name: str, line: str) -> argparse.Namespace:
    """Parse the arguments of ``%name`` with the parser its decorators declared. A ``#``
    outside quotes starts a comment, as in the cell around it (IPython passes the rest of
    the line to a line magic, comment included)."""
    try:
        line = shlex.join(shlex.split(line, comments=True))
        return parse_argstring(getattr(IPyRefreshMagics, name), line)
    except UsageError as exc:
        raise UsageError(f"%{name}: {exc}") from None
    except ValueError as exc:  # shlex, splitting the line: an unclosed quote
        raise UsageError(f"%{name}: cannot split the line into arguments: {exc}") from None


@magics_class
class IPyRefreshMagics(Magics):
    """Magics that compute, show and rebuild cached derivatives."""

    def __init__(self, shell: Any, engine: Engine) -> None:
        super().__init__(shell)
        self.engine = engine

    @magic_arguments()
    @argument("-a", "--argnum", default="0", help="the argument to differentiate: 1, or 0,1")
    @argument("--hessian", action="store_true", help="the Hessian (one of these four)")
    @argument("--jacobian", action="store_true", help="the Jacobian")
    @argument("--value", action="store_true", help="value_and_grad: the value and the gradient")
    @argument("--elementwise", action="store_true", help="elementwise_grad")
    @argument("-v", "--verbose", action="store_true", help="say how the answer was computed")
    @argument("--backend", default=None, help="tape, autograd or jax")
    @argument("call", nargs="*", help="the call to differentiate, e.g. f(1.0, 2.0)")
    @line_magic
    def grad(self, line: str) -> Any:
        """Differentiate a call with the current code: ``%grad [options] f(args)``."""
        try:
            request = parse_grad_line(line)
            transform, argnum, backend = request.transform, request.argnum, request.backend
            assert self.shell is not None
            call = parse_call(request.expr, self.shell.user_ns)
            check_inputs(call, argnum)
            try:
                target = target_in(self.shell.user_ns, call.name, call.fn)
                handle = Derivative(transform, call.fn, argnum, backend, target=target)
            except TypeError as exc:
                raise GradLineError(str(exc)) from None
            try:
                result = handle(*call.args, **call.kwargs)
            except TargetGone as exc:
                raise GradLineError(str(exc)) from None
            except Exception as exc:
                raise GradLineError(explain_failure(exc, call, transform.value)) from None
        except GradLineError as exc:
            raise UsageError(f"%grad: {exc}") from None
        if request.verbose:
            for entry in handle.entries:
                runs = ", ".join(v.describe() for v in entry.variants) or "nothing cached"
                print(f"{entry.name} [{entry.key.backend}]: {entry.last_event}; runs {runs}")
        return result

    @magic_arguments()
    @line_magic
    def stale(self, line: str) -> None:
        """Which cached derivatives would be rebuilt at their next call, and why
        (every guard is checked now, array contents included): ``%stale``."""
        _parse("stale", line)
        try:
            print(stale_report(self.engine.status(check=True)))
        except EngineBusy as exc:  # (another thread's build: its function may wait for us)
            print(exc)

    @magic_arguments()
    @argument("--all", action="store_true", help="rebuild fresh derivatives too")
    @argument(
        "name",
        nargs="?",
        default=None,
        help="only derivatives depending on NAME (a handle's name: that handle's own)",
    )
    @line_magic
    def refresh(self, line: str) -> None:
        """Rebuild stale derivatives now: ``%refresh [name] [--all]``."""
        opts = _parse("refresh", line)
        ns = self.shell.user_ns if self.shell is not None else {}
        handle = ns.get(opts.name) if opts.name is not None else None
        try:  # (a handle's name: its own derivatives)
            what = handle if isinstance(handle, Derivative) else opts.name
            report = refresh_in(self.engine, what, opts.all)
        except EngineBusy as exc:
            print(exc)
            return
        rebuilt, pending, failed = report["rebuilt"], report["pending"], report["failed"]
        if isinstance(handle, Derivative) and not report["matched"]:
            print(f"Nothing to refresh: {opts.name} ({handle.label}) has not been called yet.")
            return
        if opts.name is not None and not report["matched"]:
            print(f"Nothing to refresh: no cached derivative depends on {opts.name!r}.")
            return
        if not (rebuilt or pending or failed):
            print("Nothing to refresh: no derivative is stale.")
            return
        parts = [f"rebuilt {len(rebuilt)}"]
        if pending:
            parts.append(f"{len(pending)} will rebuild at their next call (arguments not kept)")
        if failed:
            parts.append(f"{len(failed)} failed")
        print("Refresh: " + ", ".join(parts) + ".")
        for name, error in failed:
            print(f"  {name}: {error}")

    @magic_arguments()
    @argument("--text", action="store_true", help="print the dependency tree as text")
    @argument("--svg", action="store_true", help="draw the picture (needs ipyrefresh[callgraph])")
    @argument("name", help="a function, or a derivative handle")
    @line_magic
    def callgraph(self, line: str) -> None:
        """What the cached derivatives of a function depend on: ``%callgraph f``."""
        from .callgraph import CallgraphError, run

        opts = _parse("callgraph", line)
        if opts.text and opts.svg:
            raise UsageError("%callgraph: --text or --svg, not both")
        form = "text" if opts.text else "svg" if opts.svg else "auto"
        try:
            run(self.shell, self.engine, opts.name, form)
        except (CallgraphError, EngineBusy) as exc:
            raise UsageError(f"%callgraph: {exc}") from None


#: ``%grad``'s flags for the other derivatives (the gradient is the default).
_TRANSFORM_FLAGS = {
    "hessian": "hessian",
    "jacobian": "jacobian",
    "value": "value_and_grad",
    "elementwise": "elementwise_grad",
}


@dataclass(frozen=True)
class GradRequest:
    """A parsed ``%grad`` line: options, and the call expression verbatim."""

    transform: Transform
    argnum: int | tuple[int, ...]
    backend: str | None
    verbose: bool
    expr: str


def parse_grad_line(line: str) -> GradRequest:
    """Parse a ``%grad`` line (``UsageError`` for bad options, ``GradLineError`` else)."""
    options, expr = split_options(line)
    opts = _parse("grad", options)
    chosen = [flag for flag in _TRANSFORM_FLAGS if getattr(opts, flag)]
    if len(chosen) > 1:
        flags = " and ".join(f"--{flag}" for flag in chosen)
        raise UsageError(f"%grad: {flags} ask for different derivatives: choose one")
    if not expr:
        raise GradLineError("nothing to differentiate: %grad [options] f(args)")
    return GradRequest(
        Transform(_TRANSFORM_FLAGS[chosen[0]] if chosen else "grad"),
        parse_argnum(opts.argnum),
        _backend(opts.backend),
        bool(opts.verbose),
        expr,
    )


def _backend(name: str | None) -> str | None:
    if name in (None, "", "default"):
        return None
    if name not in compilers.available():
        raise GradLineError(
            f"unknown backend {name!r}; available: {', '.join(compilers.available())}"
        )
    return name
