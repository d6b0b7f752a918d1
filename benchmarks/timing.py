"""Timing shared by the benchmarks: the fastest of several batches.

The minimum, not the mean: on a shared 2-core machine, noise only ever adds time.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def best(fn: Callable[[], Any], repeat: int = 7, number: int = 1) -> float:
    """Seconds per call: the fastest of ``repeat`` batches of ``number`` calls."""
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(number):
            fn()
        times.append((time.perf_counter() - t0) / number)
    return min(times)
