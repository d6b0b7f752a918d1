"""What the JAX tests share (imported only once jax is known to be usable here)."""

from __future__ import annotations

from typing import Any

import jax


class CompileCounter:
    """Counts XLA backend compilations through JAX's own monitoring events."""

    EVENT = "/jax/core/compile/backend_compile_duration"

    def __init__(self) -> None:
        self.count = 0
        jax.monitoring.register_event_duration_secs_listener(self._listen)

    def _listen(self, event: str, duration: float, **kwargs: Any) -> None:
        if event == self.EVENT:
            self.count += 1

    def close(self) -> None:
        from jax._src import monitoring

        monitoring.unregister_event_duration_listener(self._listen)
