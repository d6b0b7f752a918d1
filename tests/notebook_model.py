"""The notebook model both differential tests share.

It keeps the source of every definition, the names each body uses, the data cells, and
which derivative entries the engine must find stale; ``change`` plays one random cell
into a real shell and into the model alike. Each backend's test subclasses it with its
own function bodies (``new_body``), custom-rule cell (``rule_cell``) and oracle.
"""

from __future__ import annotations

import itertools
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
    #: A dict with a scalar and a nested array: ``cfg['s']``, ``cfg['inner']['v']``.
    cfg_s: float = 1.5
    cfg_v: list[float] = field(default_factory=lambda: [0.2, -0.4, 0.6])
    #: An instance attribute ``obj.scale`` and a class attribute ``Obj.k``.
    obj_scale: float = 0.5
    cls_k: float = 2.0
    #: A global int: the trip count of loops in function bodies.
    n_loop: int = 2
    built: dict[str, set[str]] = field(default_factory=dict)  # entry -> its deps when built
    stale: set[str] = field(default_factory=set)
    #: The names a new custom rule changes.
    rule_names: frozenset[str] = frozenset({"p"})
    #: What the notebook calls numpy in the data cells (``np`` for autograd's).
    np_name: str = "np"

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

    def rebuilds(self, name: str, runs: bool, key: str | None = None) -> bool:
        """Whether a call of ``name``'s derivative now (successfully) rebuilds its entry;
        ``runs`` says whether the current code can run at all. ``key`` names the entry
        when one name has several (one per call signature); it defaults to ``name``."""
        key = name if key is None else key
        if key not in self.stale or not runs:
            return False  # a hit, or a rebuild that fails (the entry stays stale)
        self.stale.discard(key)
        self.built[key] = self.closure(name)
        return True

    def data_cells(self) -> str:
        """Source that defines the container, attribute and loop-count data as they are
        now (the cell that sets them up, and part of an oracle's source)."""
        n = self.np_name
        return (
            f"cfg = {{'s': {self.cfg_s!r}, 'inner': {{'v': {n}.array({self.cfg_v!r})}}}}\n"
            "class Obj:\n"
            f"    k = {self.cls_k!r}\n"
            "    def __init__(self, scale):\n"
            "        self.scale = scale\n"
            "    def mul(self, x):\n"
            "        return self.k * self.scale * x\n"
            f"obj = Obj({self.obj_scale!r})\n"
            f"n_loop = {self.n_loop!r}\n"
        )

    def change(
        self, action: float, weights: tuple[float, ...], run: Callable[[str], object]
    ) -> set[str] | None:
        """Play one random cell, with the chances ``weights`` by where ``action`` (in
        [0, 1)) falls: 0 redefine a function, 1 rebind a scalar, 2 change an array in
        place, 3 define a new custom rule, 4 delete a function; and (for models whose
        bodies read them, see :meth:`data_cells`) 5 set ``cfg['s']``, 6 change
        ``cfg['inner']['v']`` in place, 7 set ``obj.scale``, 8 set the class attribute
        ``Obj.k``, 9 change ``w`` in place in a loop, 10 rebind the loop count
        ``n_loop``. Returns the names changed (``obj`` for both attributes), or None if
        ``action`` falls past them all: the caller plays a cell of its own."""
        edges = list(itertools.accumulate(weights))
        kind = next((k for k, edge in enumerate(edges) if action < edge), None)
        if kind is None:
            return None
        play: Callable[[Callable[[str], object]], set[str]] = getattr(self, _CHANGES[kind].__name__)
        return play(run)  # (through the instance: subclasses may refine a change)

    def _redefine(self, run: Callable[[str], object]) -> set[str]:
        return self.define(self.rng.randrange(N_FUNCS), run)

    def _rebind(self, run: Callable[[str], object]) -> set[str]:
        r = self.rng
        k = r.randrange(N_DATA)
        old = self.data.get(f"a{k}")
        self.data[f"a{k}"] = round(r.uniform(-3, 3), 3)
        run(f"a{k} = {self.data[f'a{k}']!r}")
        return {f"a{k}"} if self.data[f"a{k}"] != old else set()  # an equal value is no change

    def _in_place(self, run: Callable[[str], object]) -> set[str]:
        r = self.rng  # the array object stays the same
        j = r.randrange(3)
        old = self.w[j]
        self.w[j] = round(r.uniform(-1, 1), 3)
        run(f"w[{j}] = {self.w[j]!r}")
        return {"w"} if self.w[j] != old else set()

    def _rule(self, run: Callable[[str], object]) -> set[str]:
        self.rule = round(self.rng.uniform(-3, 3), 3)
        run(self.rule_cell())
        return set(self.rule_names)

    def _delete(self, run: Callable[[str], object]) -> set[str]:
        i = self.rng.randrange(N_FUNCS)
        if f"f{i}" not in self.funcs:
            return set()
        del self.funcs[f"f{i}"]
        run(f"del f{i}")
        return {f"f{i}"}

    def _dict_item(self, run: Callable[[str], object]) -> set[str]:
        old, self.cfg_s = self.cfg_s, round(self.rng.uniform(-2, 2), 3)
        run(f"cfg['s'] = {self.cfg_s!r}")
        return {"cfg"} if self.cfg_s != old else set()

    def _nested_in_place(self, run: Callable[[str], object]) -> set[str]:
        j = self.rng.randrange(len(self.cfg_v))
        old, self.cfg_v[j] = self.cfg_v[j], round(self.rng.uniform(-1, 1), 3)
        run(f"cfg['inner']['v'][{j}] = {self.cfg_v[j]!r}")
        return {"cfg"} if self.cfg_v[j] != old else set()

    def _attribute(self, run: Callable[[str], object]) -> set[str]:
        old, self.obj_scale = self.obj_scale, round(self.rng.uniform(-2, 2), 3)
        run(f"obj.scale = {self.obj_scale!r}")
        return {"obj"} if self.obj_scale != old else set()

    def _class_attribute(self, run: Callable[[str], object]) -> set[str]:
        old, self.cls_k = self.cls_k, round(self.rng.uniform(-2, 2), 3)
        run(f"Obj.k = {self.cls_k!r}")
        return {"obj"} if self.cls_k != old else set()

    def _loop_in_place(self, run: Callable[[str], object]) -> set[str]:
        old = list(self.w)
        self.w = [round(self.rng.uniform(-1, 1), 3) for _ in old]
        run(f"for _j, _v in enumerate({self.w!r}):\n    w[_j] = _v")
        return {"w"} if self.w != old else set()

    def _loop_count(self, run: Callable[[str], object]) -> set[str]:
        old, self.n_loop = self.n_loop, self.rng.randint(1, 3)
        run(f"n_loop = {self.n_loop!r}")
        return {"n_loop"} if self.n_loop != old else set()


_CHANGES: list[Callable[[NotebookModel, Callable[[str], object]], set[str]]] = [
    NotebookModel._redefine,
    NotebookModel._rebind,
    NotebookModel._in_place,
    NotebookModel._rule,
    NotebookModel._delete,
    NotebookModel._dict_item,
    NotebookModel._nested_in_place,
    NotebookModel._attribute,
    NotebookModel._class_attribute,
    NotebookModel._loop_in_place,
    NotebookModel._loop_count,
]
