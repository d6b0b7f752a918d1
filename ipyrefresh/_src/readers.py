"""Readers: where a guarded value is found at check time.

A guard node says what a value must be; its reader says where to look for it at the
call: the function being differentiated, a name in a namespace, an argument, or an
object reached once (a class, a primitive's function).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from .nodes import GONE, MISSING


class Reader:
    """How to find a root value at check time; ``label`` names it in reasons."""

    __slots__ = ()

    def read(self, fn: Any, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> Any:
        raise NotImplementedError


class TargetReader(Reader):
    """The function being differentiated, as the handle resolved it for this call."""

    __slots__ = ()

    def read(self, fn: Any, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> Any:
        return fn


class NameReader(Reader):
    """A binding in a module's (or the notebook's) global namespace."""

    __slots__ = ("name", "ns")

    def __init__(self, ns: dict[str, Any], name: str) -> None:
        self.ns = ns
        self.name = name

    def read(self, fn: Any, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> Any:
        return dict.get(self.ns, self.name, MISSING)


class FixedReader(Reader):
    """An object reached once and checked on its own (a class, a primitive's function)."""

    __slots__ = ("get",)

    def __init__(self, get: Callable[[], Any]) -> None:
        self.get = get

    def read(self, fn: Any, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> Any:
        value = self.get()
        return MISSING if value is None or value is GONE else value


class ArgReader(Reader):
    """A positional or keyword argument of the call."""

    __slots__ = ("key",)

    def __init__(self, key: int | str) -> None:
        self.key = key

    def read(self, fn: Any, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> Any:
        key = self.key
        if isinstance(key, int):
            return args[key] if key < len(args) else MISSING
        return kwargs.get(key, MISSING)


class CallReader(Reader):
    """The call itself: its positional arguments and its keywords."""

    __slots__ = ()

    def read(
        self, fn: Any, args: tuple[Any, ...], kwargs: Mapping[str, Any]
    ) -> tuple[tuple[Any, ...], Mapping[str, Any]]:
        return args, kwargs
