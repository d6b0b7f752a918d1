from collections.abc import Callable, Container
from typing import Any

from .core import VJPNode

class Box:
    _value: Any
    _trace: int
    _node: VJPNode
    type_mappings: dict[type, type]
    types: set[type]
    def __init__(self, value: Any, trace: int, node: VJPNode) -> None: ...

def getval(x: Any) -> Any: ...
def isbox(x: Any) -> bool: ...
def trace(start_node: VJPNode, fun: Callable[..., Any], x: Any) -> tuple[Any, VJPNode | None]: ...

# a defaultdict(set); autograd only asks ``f in notrace_primitives[type(node)]``
notrace_primitives: dict[type, Container[Callable[..., Any]]]
primitive_boxes: dict[type, set[Callable[..., Any]]]

def notrace_primitive(f_raw: Callable[..., Any]) -> Callable[..., Any]: ...
