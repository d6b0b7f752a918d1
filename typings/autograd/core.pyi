from collections.abc import Callable, Iterator, Sequence
from typing import Any

class Node:
    @classmethod
    def new_root(cls, *args: Any, **kwargs: Any) -> Any: ...

class VJPNode(Node):
    parents: Sequence[VJPNode]
    vjp: Callable[[Any], Any]
    def __init__(
        self,
        value: Any,
        fun: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        parent_argnums: tuple[int, ...],
        parents: Sequence[VJPNode],
    ) -> None: ...
    def initialize_root(self) -> None: ...

class VSpace:
    shape: tuple[int, ...]
    size: int
    ndim: int
    dtype: Any
    iscomplex: bool
    def zeros(self) -> Any: ...
    def ones(self) -> Any: ...
    def standard_basis(self) -> Iterator[Any]: ...
    def add(self, x: Any, y: Any) -> Any: ...
    def mut_add(self, x: Any, y: Any) -> Any: ...

def vspace(value: Any) -> VSpace: ...
def backward_pass(g: Any, end_node: VJPNode) -> Any: ...
def add_outgrads(prev_g_flagged: tuple[Any, bool] | None, g: Any) -> tuple[Any, bool]: ...

primitive_vjps: dict[Any, Callable[..., Any]]
primitive_jvps: dict[Any, Callable[..., Any]]
