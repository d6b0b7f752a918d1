"""The notebook model both differential tests share.

It keeps the source of every definition, the names each body uses, the data cells, and
which derivative entries the engine must find stale; ``change`` plays one random cell
into a real shell and into the model alike. Each backend's test subclasses it with its
own function bodies (``new_body``), custom-rule cell (``rule_cell``) and oracle.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field

N_FUNCS = 6
N_DATA = 2


@dataclass
class NotebookModel:
    """What the notebook defines, as source, and what each entry was built from."""

    rng: random.Random
    funcs: dict[str, str] = field(default_factory=dict)  # name -> source of its def
    calls: dict[str, set[str]] = field(default_factory=dict)  # name -> names its body uses
    data: dict[str, float] = field(default_factory=dict)
    w: list[float] = field(default_factory=lambda: [0.5, -0.25, 1.0])
    rule: float = 2.0
    built: dict[str, set[str]] = field(default_factory=dict)  # entry -> its deps when built
    stale: set[str] = field(default_factory=set)
    #: The names a new custom rule changes.
    rule_names: frozenset[str] = frozenset({"p"})

    def new_body(self, i: int) -> tuple[str, set[str]]:
        raise NotImplementedError

    def rule_cell(self) -> str:
        raise NotImplementedError

    def define(self, i: int, run: Callable[[str], object]) -> set[str]:
        src, uses = self.new_body(i)
        self.funcs[f"f{i}"], self.calls[f"f{i}"] = src, uses
        run(src)
        return {f"f{i}"}

    def closure(self, name: str) -> set[str]:
        """Every name ``name``'s code can reach now (statically: untaken branches count)."""
        seen: set[str] = set()
        todo = [name]
        while todo:
            n = todo.pop()
            if n not in seen:
                seen.add(n)
                if n in self.funcs:
                    todo.extend(self.calls[n])
        return seen

    def invalidate(self, changed: set[str]) -> None:
        """What the engine must do on a change: mark exactly the dependents stale."""
        for name, deps in self.built.items():
            if deps & changed:
                self.stale.add(name)

    def rebuilds(self, name: str, runs: bool) -> bool:
        """Whether a call of ``name``'s derivative now (successfully) rebuilds its entry;
        ``runs`` says whether the current code can run at all."""
        if name not in self.stale or not runs:
            return False  # a hit, or a rebuild that fails (the entry stays stale)
        self.stale.discard(name)
        self.built[name] = self.closure(name)
        return True

    def change(
        self, action: float, weights: tuple[float, ...], run: Callable[[str], object]
    ) -> set[str] | None:
        """Play one random cell: redefine a function, rebind a scalar, change an array in
        place, define a new custom rule or delete a function, with the chances
        ``weights``, by where ``action`` (in [0, 1)) falls. Returns the names changed, or
        None if ``action`` falls past them all: the caller plays a cell of its own."""
        r = self.rng
        edges = [sum(weights[: k + 1]) for k in range(5)]
        if action < edges[0]:
            return self.define(r.randrange(N_FUNCS), run)
        if action < edges[1]:
            k = r.randrange(N_DATA)
            old = self.data.get(f"a{k}")
            self.data[f"a{k}"] = round(r.uniform(-3, 3), 3)
            run(f"a{k} = {self.data[f'a{k}']!r}")
            return {f"a{k}"} if self.data[f"a{k}"] != old else set()  # an equal value is no change
        if action < edges[2]:  # in place: the array object stays the same
            j = r.randrange(3)
            old = self.w[j]
            self.w[j] = round(r.uniform(-1, 1), 3)
            run(f"w[{j}] = {self.w[j]!r}")
            return {"w"} if self.w[j] != old else set()
        if action < edges[3]:
            self.rule = round(r.uniform(-3, 3), 3)
            run(self.rule_cell())
            return set(self.rule_names)
        if action < edges[4]:
            i = r.randrange(N_FUNCS)
            if f"f{i}" not in self.funcs:
                return set()
            del self.funcs[f"f{i}"]
            run(f"del f{i}")
            return {f"f{i}"}
        return None
