"""User-facing configuration, as a traitlets ``Configurable``.

Set it in a notebook with ``%config IPyRefresh.mode = "eager"`` or in
``ipython_config.py`` with ``c.IPyRefresh.max_entries = 4096``.
"""

from __future__ import annotations

from traitlets import Bool, CaselessStrEnum, Int, TraitError, Unicode, validate
from traitlets.config import Configurable

from .compilers import available_compilers


class IPyRefresh(Configurable):
    """Keeps cached derivatives equal to a fresh autograd computation of current code."""

    mode = CaselessStrEnum(
        ["lazy", "eager"],
        default_value="lazy",
        help="lazy: rebuild a stale derivative at its next call. eager: rebuild after the "
        "cell that made it stale, when its last arguments were small enough to keep.",
    ).tag(config=True)

    compiler = Unicode(
        "tape",
        help="How derivatives are compiled: 'tape' (trace once, replay) or 'autograd' "
        "(plain autograd on every call).",
    ).tag(config=True)

    backend = Unicode(
        "autograd",
        help="Which library differentiates new handles (ipyrefresh.grad, %grad): "
        "'autograd', or 'jax' (jitted JAX transforms; needs pip install ipyrefresh[jax]).",
    ).tag(config=True)

    record_dynamic_edges = Bool(
        True,
        help="Record which functions actually run while a derivative is built, so that "
        "dynamic dispatch (f = fs.pop(); f(x)) is tracked.",
    ).tag(config=True)

    sync_within_cells = Bool(
        True,
        help="Also check for changes after each top-level statement of a cell, so that "
        "redefining g and calling grad(h) in the same cell is right.",
    ).tag(config=True)

    max_entries = Int(1024, help="Most cached derivatives kept (least recently used go).").tag(
        config=True
    )

    max_digest_bytes = Int(
        1 << 25,
        help="Arrays a derivative reads up to this size (32 MiB) are checked for in-place "
        "changes after each cell (a CRC, about 8 ms at the limit); larger ones by shape and "
        "dtype only, so a compiled tape that baked a value computed from one would not see "
        "it change in place.",
    ).tag(config=True)

    retain_example_bytes = Int(
        1 << 20,
        help="Keep a copy of a derivative's last arguments up to this size, so that eager "
        "mode and %refresh can rebuild it before its next call.",
    ).tag(config=True)

    verbose = Bool(False, help="Print a line whenever a derivative is rebuilt.").tag(config=True)

    @validate("compiler")
    def _check_compiler(self, proposal: dict[str, str]) -> str:
        value = proposal["value"]
        if value not in available_compilers():
            known = ", ".join(sorted(available_compilers()))
            raise TraitError(f"unknown compiler {value!r}; choose one of {known}")
        return value

    @validate("backend")
    def _check_backend(self, proposal: dict[str, str]) -> str:
        value = proposal["value"]
        if value == "jax" and "jax" not in available_compilers():
            raise TraitError("backend 'jax' needs jax: pip install ipyrefresh[jax]")
        if value not in ("autograd", "jax"):
            raise TraitError(f"unknown backend {value!r}; choose 'autograd' or 'jax'")
        return value

    @validate("max_entries")
    def _check_max_entries(self, proposal: dict[str, int]) -> int:
        if proposal["value"] < 1:
            raise TraitError("max_entries must be at least 1")
        return proposal["value"]
