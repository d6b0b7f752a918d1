from collections.abc import Callable
from typing import Any

def unary_to_nary(
    unary_operator: Callable[..., Any],
) -> Callable[..., Callable[..., Any]]: ...
