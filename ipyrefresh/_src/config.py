"""User-facing configuration, as a traitlets ``Configurable``.

In a notebook: ``%config IPyRefresh.backend = "autograd"``; in ``ipython_config.py``:
``c.IPyRefresh.max_entries = 4096``.
"""

from __future__ import annotations

from typing import Any

from traitlets import Bool, CaselessStrEnum, Int, TraitError, Unicode, validate
from traitlets.config import Configurable

from . import compilers


class IPyRefresh(Configurable):
    """Keeps cached derivatives equal to a fresh computation of the current code."""

    backend = Unicode(
        "tape",
        help="What differentiates new handles (ipyrefresh.grad, %grad): 'tape' (autograd, "
        "compiled to a replay), 'autograd' (plain autograd on every call), or 'jax' "
        "(jitted JAX transforms; pip install ipyrefresh[jax]).",
    ).tag(config=True)

    mode = CaselessStrEnum(
        ["lazy", "eager"],
        default_value="lazy",
        help="lazy: a derivative whose code or data changed is rebuilt at its next call. "
        "eager: also right after the cell that changed it, when its last arguments were "
        "small enough to keep (retain_example_bytes).",
    ).tag(config=True)

    max_entries = Int(1024, help="Most cached derivatives kept (least recently used go).").tag(
        config=True
    )

    retain_example_bytes = Int(
        1 << 20,
        help="Keep a copy of a derivative's last arguments up to this size in all (numbers "
        "and strings count as their size in memory), so that eager mode and %refresh can "
        "rebuild it before its next call. 0 keeps none.",
    ).tag(config=True)

    build_at_call = Int(
        2,
        help="Which call of a new derivative builds it (the tape backend). The calls before "
        "run plain autograd: a derivative called once, to look at a value, costs what "
        "autograd costs, and a build (several autograd calls' worth) is paid only by one "
        "that is called again. 1 builds at the first call.",
    ).tag(config=True)

    compile_guard_after = Int(
        100,
        help="How many checks of a build's guard (one at each call) run node by node before "
        "the guard is compiled to straight-line code. Compiling costs about what a few "
        "hundred checks save: a derivative called a few times never pays for it. 0 "
        "compiles at the first check.",
    ).tag(config=True)

    verbose = Bool(False, help="Print a line whenever a derivative is rebuilt.").tag(config=True)

    @validate("backend")
    def _check_backend(self, proposal: dict[str, Any]) -> str:
        value = str(proposal["value"]).lower()
        if value in compilers.UNAVAILABLE:
            raise TraitError(f"the {value!r} backend {compilers.UNAVAILABLE[value]}")
        if value not in compilers.available():
            known = ", ".join(repr(c) for c in compilers.available())
            raise TraitError(f"unknown backend {value!r}; choose one of {known}")
        return value

    @validate("max_entries")
    def _check_max_entries(self, proposal: dict[str, Any]) -> int:
        if proposal["value"] < 1:
            raise TraitError("max_entries must be at least 1")
        return int(proposal["value"])

    @validate("retain_example_bytes")
    def _check_retain_example_bytes(self, proposal: dict[str, Any]) -> int:
        if proposal["value"] < 0:
            raise TraitError("retain_example_bytes must be 0 (keep no arguments) or more")
        return int(proposal["value"])

    @validate("build_at_call")
    def _check_build_at_call(self, proposal: dict[str, Any]) -> int:
        if proposal["value"] < 1:
            raise TraitError("build_at_call must be at least 1 (the first call)")
        return int(proposal["value"])

    @validate("compile_guard_after")
    def _check_compile_guard_after(self, proposal: dict[str, Any]) -> int:
        if proposal["value"] < 0:
            raise TraitError("compile_guard_after must be 0 (compile at once) or more")
        return int(proposal["value"])
