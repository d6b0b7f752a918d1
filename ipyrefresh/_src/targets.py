"""Targets: what a derivative differentiates — a name it follows, or a fixed callable."""

from __future__ import annotations

import weakref
from collections.abc import Callable, Hashable, Mapping
from typing import Any

from .deps import MISSING


class TargetGone(NameError):
    """The name a derivative follows is no longer bound (or its function was collected)."""


class Target:
    """A followed binding ``ns[name]``, or a fixed callable held weakly when possible.

    A followed target is what makes ``dh = grad(h)`` see a redefined ``h``. Fixed targets
    (outside IPython, closures, bound methods) are held weakly so that no cache entry
    keeps a dead function alive; the handle holds the strong reference.
    """

    __slots__ = ("__weakref__", "entry_keys", "holders", "key", "label", "name", "ns", "ref")

    def __init__(
        self,
        key: Hashable,
        label: str,
        ns: Mapping[str, Any] | None = None,
        name: str = "",
        ref: Callable[[], Any] | None = None,
    ) -> None:
        self.key = key
        self.label = label
        self.ns = ns
        self.name = name
        self.ref = ref
        self.entry_keys: set[Hashable] = set()
        self.holders = 0  # live handles on a fixed target (see Engine.release)

    @classmethod
    def followed(cls, ns: Mapping[str, Any], name: str) -> Target:
        return cls(("name", id(ns), name), name, ns=ns, name=name)

    @classmethod
    def fixed(cls, fn: Any, label: str, on_death: Callable[[Target], None]) -> Target:
        target = cls(("obj", id(fn)), label)
        try:
            target_ref = weakref.ref(target)

            def died(_: Any) -> None:
                t = target_ref()
                if t is not None:
                    on_death(t)

            target.ref = weakref.ref(fn, died)
        except TypeError:  # not weakly referenceable: the entry holds it, bounded by the LRU
            target.ref = lambda: fn
        return target

    @property
    def follows(self) -> bool:
        return self.ns is not None

    def resolve(self) -> Any:
        """The callable this target currently means."""
        if self.ns is not None:
            value = self.ns.get(self.name, MISSING)
            if value is MISSING:
                raise TargetGone(
                    f"name '{self.name}' is not defined any more; this derivative follows it"
                )
            return value
        assert self.ref is not None
        value = self.ref()
        if value is None:
            raise TargetGone(f"the function '{self.label}' no longer exists")
        return value
