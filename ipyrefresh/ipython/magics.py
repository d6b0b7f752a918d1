"""``%grad``, ``%stale``, ``%refresh`` and ``%callgraph``."""

from __future__ import annotations

from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_magic, magics_class

from .._src.compilers import available_compilers
from .._src.engine import Engine
from .._src.handles import Derivative
from .._src.targets import TargetGone
from .gradline import GradLineError, check_inputs, explain_failure, parse_call, parse_line


def backend_compiler(backend: str, default: str) -> str | None:
    """The compiler ``--backend`` asks for; ``None`` (no option) follows the configuration.

    ``--backend autograd`` means the autograd family even when ``IPyRefresh.backend`` is
    "jax": the configured autograd compiler (``default``, "tape" or "autograd").
    """
    if backend in ("", "default"):
        return None
    if backend == "autograd":
        return default
    if backend not in available_compilers():
        known = ", ".join(["autograd", *sorted(available_compilers() - {"autograd"})])
        raise GradLineError(f"unknown backend {backend!r}; available: {known}")
    return backend


@magics_class
class IPyRefreshMagics(Magics):
    """Magics that show and control cached derivatives."""

    def __init__(self, shell: Any, engine: Engine) -> None:
        super().__init__(shell)
        self.engine = engine

    @line_magic
    def grad(self, line: str) -> Any:
        """Differentiate a call with the current code: ``%grad [options] f(args)``.

        Options: ``-a N`` or ``-a 0,1`` (argnum), ``--hessian``, ``--jacobian``,
        ``--value`` (value and gradient), ``--elementwise``, ``-v`` (say whether the
        answer came from the cache, a build or a rebuild, and why).
        """
        try:
            request = parse_line(line)
            compiler = backend_compiler(request.backend, self.engine.config.compiler)
            assert self.shell is not None
            call = parse_call(request.expr, self.shell.user_ns)
            check_inputs(call, request.argnum)
            try:
                handle = Derivative(request.transform, call.fn, request.argnum, compiler)
            except TypeError as exc:
                raise GradLineError(str(exc)) from None
            try:
                result = handle(*call.args, **call.kwargs)
            except TargetGone as exc:
                raise GradLineError(str(exc)) from None
            except KeyboardInterrupt:
                raise
            except Exception as exc:
                raise GradLineError(explain_failure(exc, call, request.transform)) from None
        except GradLineError as exc:
            raise UsageError(f"%grad: {exc}") from None
        if request.verbose:
            entry = next(iter(handle._entries.values()), None)
            if entry is not None:
                event = entry.last_event
                detail = getattr(entry.artifact, "last_event", "")
                if detail and event.startswith("cache hit"):
                    event = f"{event}; {detail}"
                print(f"{request.transform}({call.name}) [{entry.compiler}]: {event}")
        return result

    @line_magic
    def stale(self, line: str) -> None:
        """List cached derivatives that are stale, and why."""
        status = self.engine.status()
        entries = status["entries"]
        if not entries:
            print("No derivatives cached yet.")
            return
        stale = [e for e in entries if e["state"] != "fresh"]
        total = len(entries)
        if not stale:
            which = "The only derivative is" if total == 1 else f"All {total} derivatives are"
            print(f"{which} fresh (world {status['world']}).")
        else:
            print(f"{len(stale)} of {total} derivatives stale (world {status['world']}):")
            width = max(len(e["name"]) for e in stale)
            for e in stale:
                why = e["error"] if e["state"] == "error" else "; ".join(e["reasons"])
                print(f"  {e['name']:<{width}}  {why}")
        fallbacks = [e for e in entries if e["fallback"]]
        for e in fallbacks:
            print(f"  note: {e['name']} runs on plain autograd: {e['fallback']}")

    @line_magic
    def callgraph(self, line: str) -> None:
        """Show what the cached derivatives of a function depend on: ``%callgraph f``.

        A picture in a notebook (needs ``ipyrefresh[callgraph]``), a tree in a terminal;
        ``--text`` or ``--svg`` picks one.
        """
        from .callgraph import CallgraphError, run

        try:
            run(self.shell, self.engine, line)
        except CallgraphError as exc:
            raise UsageError(f"%callgraph: {exc}") from None

    @line_magic
    def refresh(self, line: str) -> None:
        """Rebuild stale derivatives now: ``%refresh [name] [--all]``."""
        words = line.split()
        force = "--all" in words
        names = [w for w in words if not w.startswith("-")]
        unknown = [w for w in words if w.startswith("-") and w != "--all"]
        if unknown or len(names) > 1:
            raise UsageError("%refresh: usage: %refresh [name] [--all]")
        report = self.engine.refresh(names[0] if names else None, force=force)
        rebuilt, pending, failed = report["rebuilt"], report["pending"], report["failed"]
        if not (rebuilt or pending or failed):
            print("Nothing to refresh: every derivative is fresh.")
            return
        parts = [f"rebuilt {len(rebuilt)}"]
        if pending:
            parts.append(f"{len(pending)} will rebuild at their next call (arguments not kept)")
        if failed:
            parts.append(f"{len(failed)} failed")
        print("Refresh: " + ", ".join(parts) + ".")
        for name, error in failed:
            print(f"  {name}: {error}")
