"""A guard: everything one build read, checked before its artifact answers a call.

Built by the walk (``snapshot.Walker``), checked at every call of the derivative
(``handles``, ``engine``): node by node for its first checks, then as straight-line code
(``guardgen``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .identity import SEEN, UNSEEN, IdentityCheck, Relation
from .nodes import Mismatch, Node
from .readers import ArgReader, Reader

Check = Callable[[Any, tuple[Any, ...], dict[str, Any], bool], Mismatch | None]


@dataclass(eq=False)
class Guard:
    """``env`` covers the code and data the function reaches (a failure means the cached
    artifact is stale); ``args`` the non-differentiated arguments (a failure means this
    artifact does not apply to these arguments; another variant may)."""

    env: list[tuple[Reader, Node]] = field(default_factory=list)
    args: list[tuple[Reader, Node]] = field(default_factory=list)
    unguardable: str = ""
    notes: list[str] = field(default_factory=list)
    rngs: list[tuple[str, Any]] = field(default_factory=list)  # (label, generator)
    labels: list[str] = field(default_factory=list)  # what the guard covers, for %callgraph
    #: (caller, callee) labels of calls visible in the code (for %callgraph)
    edges: dict[tuple[str, str], str] = field(default_factory=dict)
    size: int = 0
    #: Arrays the walk met inside the arguments (compared by contents, not identity): a
    #: compiler copies those its artifact keeps. Emptied once the variant is made, so
    #: that a guard never keeps the caller's arrays alive.
    argument_arrays: list[Any] = field(default_factory=list)
    #: Which of the reads that cannot be checked as the very objects were one object
    #: (see ``identity.py``).
    relation: Relation | None = None
    #: Checks still to run node by node before the guard is compiled (set from
    #: ``IPyRefresh.compile_guard_after`` when a build is installed). Compiling costs as
    #: much as a few hundred interpreted checks save, and most derivatives are called
    #: fewer times than that. Both give the same verdict (the suites check it).
    interpret: int = 0
    _checks: tuple[Check, Check] | None = None

    def add(self, roots: list[tuple[Reader, Node]]) -> None:
        """More code and data to check (before the guard is first used)."""
        self.env += roots
        self._checks = None

    def compiled(self) -> tuple[Check, Check]:
        """The guard as straight-line code (compiled now if it was not yet)."""
        checks = self._checks
        if checks is None:
            from .guardgen import compile_guard

            checks = self._checks = compile_guard(self.env, self.args, self.identity_checks())
        return checks

    @property
    def is_compiled(self) -> bool:
        return self._checks is not None

    def _tier(self) -> tuple[Check, Check] | None:
        """The compiled checks, or None while the guard is still interpreted."""
        if self._checks is None and self.interpret > 0:
            self.interpret -= 1
            return None
        return self.compiled()

    def identity_checks(self) -> tuple[IdentityCheck, IdentityCheck] | None:
        """The identity relation's checks of the code and data, and of everything (the
        arguments the guard still checks: a compiler may have left some to its own
        cache), or None."""
        if self.relation is None:
            return None
        return self.relation.checks({r.key for r, _ in self.args if type(r) is ArgReader})

    def check(self, fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Mismatch | None:
        """Code, data and arguments, array contents included: may this build answer?"""
        checks = self._tier()
        if checks is None:
            return self.check_interpreted(fn, args, kwargs)
        return checks[1](fn, args, kwargs, True)

    def check_env(self, fn: Any, deep: bool = True) -> Mismatch | None:
        """Only the code and data (``deep=False``: without array contents)."""
        checks = self._tier()
        if checks is None:
            return self.check_interpreted(fn, (), {}, deep, env_only=True)
        return checks[0](fn, (), {}, deep)

    def failing_roots(self, fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> set[str]:
        """The labels of every root of the code and data that fails now (a root whose read
        raises is left out: it is checked again at the next call). Not a check of the
        identity relation, and outside any running check's list of objects found."""
        out = set()
        outer, SEEN.objs = SEEN.objs, None
        try:
            for reader, node in self.env:
                try:
                    bad = node.check(reader.read(fn, args, kwargs))
                except Exception:
                    bad = None
                if bad is not None:
                    out.add(node.label)
        finally:
            SEEN.objs = outer
        return out

    def check_interpreted(
        self,
        fn: Any,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        deep: bool = True,
        env_only: bool = False,
    ) -> Mismatch | None:
        """The same verdict as :meth:`check` (``env_only``: as :meth:`check_env`), node by
        node (the reference for tests)."""
        identity = self.identity_checks()
        outer = SEEN.objs
        objs = SEEN.objs = [UNSEEN] * len(self.relation.ids) if self.relation else None
        try:
            for reader, node in self.env:
                bad = node.check(reader.read(fn, args, kwargs), deep)
                if bad is not None:
                    return bad
            if not env_only:
                for reader, node in self.args:
                    bad = node.check(reader.read(fn, args, kwargs), deep)
                    if bad is not None:
                        return Mismatch(bad.subject, bad.kind, True)
        finally:
            SEEN.objs = outer
        if identity is None or objs is None:
            return None
        return identity[0 if env_only else 1](objs)
