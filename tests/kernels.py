"""Real kernels for the tests, each on its own IPC socket files.

jupyter_client picks TCP ports by binding to port 0 and letting go; a kernel started at the
same moment by another pytest worker can take a port in between, and the kernel dies with
"Address already in use" before it replies. Sockets named by a path unique to each kernel
cannot collide. The kernel, ipykernel and the messages are the ones users run; only the
transport under ZMQ differs. The socket files live in one directory per test process, removed
when it exits (a kernel shut down in a hurry may leave its files).
"""

from __future__ import annotations

import os
import tempfile
import uuid

from jupyter_client.blocking.client import BlockingKernelClient
from jupyter_client.manager import KernelManager

_SOCKETS = tempfile.TemporaryDirectory(prefix="ipyrefresh-kernels-")


def kernel_manager() -> KernelManager:
    """A manager for a ``python3`` kernel whose sockets no other kernel can take."""
    prefix = os.path.join(_SOCKETS.name, uuid.uuid4().hex[:12])
    return KernelManager(kernel_name="python3", transport="ipc", ip=prefix)


def start_kernel(timeout: float = 60) -> tuple[KernelManager, BlockingKernelClient]:
    """Start a kernel and a client on it, ready (as ``jupyter_client.start_new_kernel``)."""
    km = kernel_manager()
    km.start_kernel()
    kc = km.client()
    kc.start_channels()
    try:
        kc.wait_for_ready(timeout=timeout)
    except RuntimeError:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
        raise
    return km, kc
