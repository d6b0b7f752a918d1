"""ipyrefresh: derivatives that never go stale in IPython and Jupyter.

>>> %load_ext ipyrefresh          # magics and the status bar; handles work anywhere
>>> from ipyrefresh import grad
>>> dh = grad(h)                  # follows the name h, and everything h reads
"""

from __future__ import annotations

from typing import Any

from ._src.config import IPyRefresh
from ._src.engine import EngineBusy
from ._src.handles import (
    Derivative,
    elementwise_grad,
    grad,
    hessian,
    jacobian,
    refresh,
    status,
    value_and_grad,
)
from ._src.targets import TargetGone

__version__ = "0.2.0"

__all__ = [
    "Derivative",
    "EngineBusy",
    "IPyRefresh",
    "TargetGone",
    "elementwise_grad",
    "grad",
    "hessian",
    "jacobian",
    "load_ipython_extension",
    "refresh",
    "status",
    "unload_ipython_extension",
    "value_and_grad",
]


def load_ipython_extension(ipython: Any) -> None:
    """Called by ``%load_ext ipyrefresh``."""
    from .ipython.extension import load_ipython_extension as load

    load(ipython)


def unload_ipython_extension(ipython: Any) -> None:
    """Called by ``%unload_ext ipyrefresh``."""
    from .ipython.extension import unload_ipython_extension as unload

    unload(ipython)


def _jupyter_labextension_paths() -> list[dict[str, str]]:
    """Where JupyterLab finds the status-bar extension (``jupyter labextension develop``)."""
    return [{"src": "labextension", "dest": "ipyrefresh"}]
