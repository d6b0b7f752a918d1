from typing import Any

def __getattr__(name: str) -> Any: ...

container_take: Any
