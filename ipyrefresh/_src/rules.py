"""autograd's gradient rule tables, read: what an entry of ``primitive_vjps`` or
``primitive_jvps`` runs.

``defvjp``, ``defjvp`` and their ``_argnum`` forms register a closure of autograd's own
(``autograd.core``) that holds the rules given; ``defvjp_argnums`` registers the user's
maker itself.
"""

from __future__ import annotations

from types import FunctionType
from typing import Any

from . import code as codefacts


def registered(maker: Any, prim: Any = None) -> list[Any] | None:
    """The callables held by the closure ``maker`` is (the rules given, in order; not
    ``prim`` itself, which ``def_linear``'s closure holds); None if ``maker`` is not such
    a closure."""
    if getattr(maker, "__module__", None) != "autograd.core" or type(maker) is not FunctionType:
        return None
    functions: list[Any] = []
    for cell in maker.__closure__ or ():
        try:
            content = cell.cell_contents
        except ValueError:
            continue
        if type(content) is dict:
            functions.extend(content.values())
        elif callable(content) and content is not prim:
            functions.append(content)
    return functions


def users_rules(maker: Any) -> list[Any]:
    """The callables of the user's that ``maker`` runs: a function of theirs, a partial, a
    bound method, a callable object (not a library's function)."""
    if maker is None:
        return []
    held = registered(maker)
    return [
        rule
        for rule in ([maker] if held is None else held)
        if type(rule) is not FunctionType or codefacts.is_user_code(rule.__code__)
    ]
