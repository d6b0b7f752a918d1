"""Cell ASTs: checking for changes *within* a cell, not only after it.

A scientist often redefines ``g`` and calls ``dh(1.0)`` in the same cell, or loops over
candidate functions. The post-cell sweep alone would see those changes too late, so
this AST transformer inserts a cheap check after each top-level statement of a cell
(and after binding statements in top-level loops that rebind a watched or callable
name). Each check probes only the watched dependencies of the names involved.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterable
from typing import Any

_HOOK_MODULE = "ipyrefresh"
_HOOK_ATTR = "_sync"
#: Calls after which anything may have changed: check every watched dependency.
_DYNAMIC_CALLS = {
    "exec",
    "eval",
    "globals",
    "setattr",
    "delattr",
    "vars",
    "get_ipython",
    "reload",
    "__import__",
}


def _sync_call(names: Iterable[str] | None, like: ast.AST) -> ast.stmt:
    """``__import__("ipyrefresh")._sync(names)``: robust to ``%reset`` wiping the namespace."""
    arg: ast.expr
    if names is None:
        arg = ast.Constant(None)
    else:
        arg = ast.Tuple([ast.Constant(n) for n in sorted(names)], ast.Load())
    call = ast.Call(
        ast.Attribute(
            ast.Call(ast.Name("__import__", ast.Load()), [ast.Constant(_HOOK_MODULE)], []),
            _HOOK_ATTR,
            ast.Load(),
        ),
        [arg],
        [],
    )
    stmt = ast.Expr(call)
    ast.copy_location(stmt, like)
    ast.fix_missing_locations(stmt)
    return stmt


class _Names(ast.NodeVisitor):
    """Names a statement mentions, outside nested function and class bodies."""

    def __init__(self) -> None:
        self.loaded: set[str] = set()
        self.stored: set[str] = set()
        self.dynamic = False

    def visit_Name(self, node: ast.Name) -> None:
        (self.loaded if isinstance(node.ctx, ast.Load) else self.stored).add(node.id)

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self.stored.add(node.name)
        for d in node.decorator_list:
            self.visit(d)
        for default in (*node.args.defaults, *node.args.kw_defaults):
            if default is not None:
                self.visit(default)

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self.stored.add(node.name)
        for d in (*node.decorator_list, *node.bases):
            self.visit(d)

    def visit_Lambda(self, node: ast.Lambda) -> None:
        pass

    def visit_Attribute(self, node: ast.Attribute) -> None:
        # ``C.m = f`` / ``mod.f = g`` rebinds a name inside a class or module namespace,
        # which the names of the statement do not lead to: check everything.
        if not isinstance(node.ctx, ast.Load):
            self.dynamic = True
        self.generic_visit(node)

    def visit_Import(self, node: ast.Import | ast.ImportFrom) -> None:
        for alias in node.names:
            if alias.name == "*":
                self.dynamic = True
            else:
                self.stored.add((alias.asname or alias.name).split(".")[0])

    visit_ImportFrom = visit_Import

    def visit_Global(self, node: ast.Global) -> None:
        self.stored.update(node.names)

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        name = (
            func.id
            if isinstance(func, ast.Name)
            else (func.attr if isinstance(func, ast.Attribute) else None)
        )
        if name in _DYNAMIC_CALLS:
            self.dynamic = True
        self.generic_visit(node)


def mentioned(stmt: ast.AST) -> _Names:
    names = _Names()
    names.visit(stmt)
    return names


class SyncInserter(ast.NodeTransformer):
    """Inserts change checks into a cell's module AST (IPython ``ast_transformers``)."""

    def __init__(self, enabled: Callable[[], bool], watched: Callable[[str], bool]) -> None:
        self._enabled = enabled
        self._watched = watched

    def visit_Module(self, node: ast.Module) -> Any:
        try:
            if self._enabled():
                node.body = self._block(node.body, last_is_covered=True)
        except Exception:  # never let our transformer break or unregister itself
            pass
        return node

    def _block(self, body: list[ast.stmt], last_is_covered: bool = False) -> list[ast.stmt]:
        """Statements that run once: check after each one that mentions any name."""
        out: list[ast.stmt] = []
        last = len(body) - 1
        for i, stmt in enumerate(body):
            if isinstance(stmt, (ast.For, ast.AsyncFor, ast.While)):
                self._in_loop(stmt)
            elif isinstance(stmt, (ast.If, ast.With, ast.AsyncWith, ast.Try)):
                for part in ("body", "orelse", "finalbody"):
                    block = getattr(stmt, part, None)
                    if block:
                        setattr(stmt, part, self._block(block))
                for handler in getattr(stmt, "handlers", []):
                    handler.body = self._block(handler.body)
            out.append(stmt)
            if i == last and last_is_covered:
                break  # the post-cell sweep covers the cell's last statement
            names = mentioned(stmt)
            if names.dynamic:
                out.append(_sync_call(None, stmt))
            elif names.loaded or names.stored:
                out.append(_sync_call(names.loaded | names.stored, stmt))
        return out

    def _in_loop(self, loop: ast.For | ast.AsyncFor | ast.While) -> None:
        """Inside loops, check only bindings that can matter, to keep loops fast."""
        if isinstance(loop, (ast.For, ast.AsyncFor)):
            names = mentioned(loop.target)  # `for w[0] in ...` changes w: loaded names too
            targets = {n for n in names.stored | names.loaded if self._watched(n)}
            if targets:
                loop.body.insert(0, _sync_call(targets, loop.body[0]))
        body: list[ast.stmt] = []
        for stmt in loop.body:
            body.append(stmt)
            if isinstance(
                stmt,
                (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Import, ast.ImportFrom),
            ):
                names = mentioned(stmt)
                body.append(_sync_call(None if names.dynamic else names.stored, stmt))
            elif isinstance(stmt, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Delete)):
                stored = {n for n in mentioned(stmt).stored if self._watched(n)}
                if stored:
                    body.append(_sync_call(stored, stmt))
        loop.body = body
