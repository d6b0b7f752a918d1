"""Targets: what a derivative differentiates — the name the user passed, or a fixed object.

``dg2 = grad(g2)`` follows the *name* ``g2``: redefine ``g2`` (or rebind it to another
function) and the next call answers for what ``g2`` means then. The name is read from
the call site (in a cell's straight-line code, from the call's own source span; else with
``executing``, the library IPython's tracebacks use), so ``g2 = g; grad(g2)`` follows
``g2``, not ``g``. ``grad(model.loss)`` follows ``model`` and reads
``.loss`` from it at each call. Anything else (a lambda, ``fs[0]``, a local variable)
is a fixed target: the object itself, held weakly by the cache.
"""

from __future__ import annotations

import ast
import dis
import linecache
import sys
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from itertools import islice
from types import CodeType, FrameType, FunctionType, MethodType, ModuleType
from typing import Any

from .keys import TargetKey
from .nodes import MISSING


class TargetGone(NameError):
    """The name a derivative follows is no longer bound (or its object was collected)."""


class Target:
    """What a handle differentiates; ``resolve()`` gives the callable it means now."""

    key: TargetKey
    label: str
    follows: bool

    def resolve(self) -> Any:
        raise NotImplementedError


class NameTarget(Target):
    """A binding ``ns[name]``, optionally followed by attributes (``model.loss``)."""

    follows = True

    def __init__(self, ns: dict[str, Any], name: str, attrs: tuple[str, ...] = ()) -> None:
        self.ns = ns
        self.name = name
        self.attrs = attrs
        self.key = TargetKey("name", id(ns), (name, *attrs))
        self.label = ".".join((name, *attrs))

    def resolve(self) -> Any:
        value = dict.get(self.ns, self.name, MISSING)
        if value is MISSING:  # (then, as Python looks a global up, the builtins)
            found = dict.get(self.ns, "__builtins__", MISSING)
            builtin = found.__dict__ if type(found) is ModuleType else found
            value = dict.get(builtin, self.name, MISSING) if type(builtin) is dict else MISSING
        if value is MISSING:
            raise TargetGone(
                f"name '{self.name}' is not defined any more; this derivative follows it"
            )
        for attr in self.attrs:
            value = getattr(value, attr)
        return value


class FixedTarget(Target):
    """One object, held weakly when it can be (the handle holds it strongly)."""

    follows = False

    def __init__(self, obj: Any, label: str) -> None:
        self.key = TargetKey("object", id(obj))
        self.label = label
        self.holders = 0  # live handles on this target (the engine drops its entries at 0)
        self._callbacks: list[Callable[[TargetKey], None]] = []
        try:
            self._ref: Callable[[], Any] = weakref.ref(obj, self._died)
        except TypeError:  # not weakly referenceable: entries hold it, bounded by the LRU
            self._ref = lambda: obj

    def _died(self, _: Any) -> None:
        for callback in self._callbacks:
            callback(self.key)

    def on_death(self, callback: Callable[[TargetKey], None]) -> None:
        self._callbacks.append(callback)

    @property
    def dead(self) -> bool:
        return self._ref() is None

    def resolve(self) -> Any:
        value = self._ref()
        if value is None:
            raise TargetGone(f"the function '{self.label}' no longer exists")
        return value


def label_of(fun: Any) -> str:
    if type(fun) is FunctionType:
        return fun.__name__
    if type(fun) is MethodType:
        return f"{type(fun.__self__).__name__}.{fun.__func__.__name__}"
    from .handles import Derivative  # (handles import this module)

    if type(fun) is Derivative:  # a handle of a handle: jit(grad(f))
        return fun.label
    name = type.__dict__["__name__"].__get__(type(fun))
    return name if type(name) is str else "callable"


def same_callable(a: Any, b: Any) -> bool:
    """``a is b``, or the same bound method (``obj.m`` makes a new method object)."""
    if a is b:
        return True
    if type(a) is MethodType and type(b) is MethodType:
        return a.__func__ is b.__func__ and a.__self__ is b.__self__
    return False


def target_for(fun: Any, frame: FrameType | None) -> Target:
    """The target for ``grad(fun)`` called from ``frame``.

    The call site decides: a global name (or ``name.attr`` chain) that means ``fun`` now is
    followed; any other expression — a lambda, ``fs[0]``, a local, a loop or comprehension
    variable — is the fixed object. Only when the source cannot be read (``exec``'d code)
    is a unique global name bound to ``fun`` guessed."""
    if frame is None:
        return FixedTarget(fun, label_of(fun))
    site = passed_expression(frame, fun)
    if site is None:
        target = _by_identity(frame, fun)
    elif site.path is None or _is_local(frame, site.path[0]):
        target = None
    else:
        target = _follow(frame.f_globals, site.path, fun)
    return target or FixedTarget(fun, label_of(fun))


def target_in(ns: dict[str, Any], expression: str, fun: Any) -> Target:
    """The target for ``expression`` evaluated in ``ns`` (``%grad``): the name, for a
    plain name that still means ``fun``; else ``fun`` itself. (``model.loss`` is read
    once, as Python reads a call's callee: a property may answer otherwise next time.)"""
    path = _path(expression)
    target = _follow(ns, path, fun) if path is not None and len(path) == 1 else None
    return target or FixedTarget(fun, expression)


def _path(name: str) -> tuple[str, ...] | None:
    parts = tuple(name.split("."))
    return parts if all(p.isidentifier() for p in parts) else None


def _follow(ns: dict[str, Any], path: tuple[str, ...], fun: Any) -> Target | None:
    """Follow ``path`` in the namespace ``ns``, if it means ``fun`` there now."""
    target = NameTarget(ns, path[0], path[1:])
    try:
        current = target.resolve()
    except Exception:
        return None
    return target if same_callable(current, fun) else None


def _is_local(frame: FrameType, name: str) -> bool:
    """``name`` is local where ``frame`` runs: a variable of its function (read from the
    code object: touching an optimized frame's ``f_locals`` would keep a snapshot of every
    local alive until 3.13), or bound in a class body's (or ``exec``'s own) namespace."""
    code = frame.f_code
    if code.co_flags & _CO_OPTIMIZED:
        return name in code.co_varnames or name in code.co_cellvars or name in code.co_freevars
    # Module level, a class body, exec with locals: the namespace itself — except inside an
    # inlined comprehension (PEP 709), where each read of f_locals makes a new snapshot
    # (3.12) or proxy. There a name the comprehension does not bind (the call site's syntax
    # tells) is global: a class body's comprehension does not see the class's names.
    namespace = frame.f_locals
    if namespace is not frame.f_locals:
        return False
    return namespace is not frame.f_globals and name in namespace


_CO_OPTIMIZED = 0x1


def _by_identity(frame: FrameType, fun: Any) -> Target | None:
    """No source to read (``exec``'d code): a global name bound to ``fun`` that the code
    reads and never rebinds (a loop variable, or a name a loop rebinds, is no name to
    follow), if there is exactly one."""
    ns = frame.f_globals
    reads = frame.f_code.co_names
    while frame.f_code.co_name in _COMPREHENSION_CODE and frame.f_back is not None:
        frame = frame.f_back  # (before 3.12, a comprehension's own frame)
    code = frame.f_code
    if code.co_flags & _CO_OPTIMIZED or code.co_name != "<module>" or frame.f_globals is not ns:
        return None
    namespace = frame.f_locals  # (a new snapshot at each read in an inlined comprehension)
    if namespace is not ns and namespace is frame.f_locals:
        return None
    rebound = _rebound_names(code)
    names = [
        k
        for k, v in list(ns.items())
        if v is fun and type(k) is str and k in reads and k not in rebound
    ]
    return NameTarget(ns, names[0]) if len(names) == 1 else None


_COMPREHENSION_CODE = frozenset({"<listcomp>", "<setcomp>", "<dictcomp>"})  # run at once
_STORES = frozenset({"STORE_NAME", "STORE_GLOBAL", "DELETE_NAME", "DELETE_GLOBAL"})


def _rebound_names(code: CodeType) -> set[str]:
    """Global names ``code`` (or code nested in it) assigns or deletes."""
    out: set[str] = set()
    todo = [code]
    while todo:
        c = todo.pop()
        out.update(str(i.argval) for i in dis.get_instructions(c) if i.opname in _STORES)
        todo.extend(k for k in c.co_consts if isinstance(k, CodeType))
    return out


@dataclass(frozen=True)
class CallSite:
    """What the source of a ``grad(...)`` call passed as the function: ``path`` is the
    name (or ``name.attr`` chain) a handle can follow, None for any other expression."""

    path: tuple[str, ...] | None


def passed_expression(frame: FrameType, fun: Any) -> CallSite | None:
    """The call site of the call executing in ``frame``; None if its source is unknown.
    When the line holds several statements and ``executing`` cannot tell which call
    runs, the one call on it whose argument names ``fun`` now (a global ``name`` or
    ``name.attr`` chain) is taken, if there is exactly one."""
    call = _cell_call(frame)
    if call is not None:
        return _read_site(call)
    site = _executing_site(frame, fun)
    return site if site is not None else _bytecode_site(frame)


def _executing_site(frame: FrameType, fun: Any) -> CallSite | None:
    """``passed_expression`` by ``executing``: the cell's (or file's) whole tree."""
    try:
        import executing

        ex = executing.Source.executing(frame)
        node = ex.node
        statements = ex.statements
    except Exception:
        return None
    finally:
        _bound_executing_cache(frame.f_code.co_filename)
    if node is None:
        return _unique_site(statements, frame, fun)
    if not isinstance(node, ast.Call):
        return None
    return _site_of(node)


def _cell_call(frame: FrameType) -> ast.Call | None:
    """The call a cell's top level is making, parsed from its own source span alone (the
    instruction's position, Python 3.11+), when no loop of the cell runs it; None: ask
    ``executing``, which parses the whole cell (30 ms for 400 lines) to find it and the
    loops around it. Only a cell's code: IPython keeps its source, which cannot change
    under its name (a module's file on disk may have changed since it was imported)."""
    code = frame.f_code
    if code.co_name != "<module>" or sys.version_info < (3, 11):
        return None
    cached = linecache.cache.get(code.co_filename)
    if cached is None or len(cached) != 4 or cached[1] is not None:
        return None  # (not a cell's source: a file, or a lazily read module)
    lasti = frame.f_lasti
    if lasti < 0 or _in_loop(code, lasti):
        return None
    try:
        position = next(islice(code.co_positions(), lasti // 2, None))
        first, last, col, end_col = position
        if first is None or last is None or col is None or end_col is None:
            return None
        lines = [line.encode() for line in cached[2][first - 1 : last]]
        if len(lines) != last - first + 1:
            return None
        lines[-1] = lines[-1][:end_col]
        lines[0] = lines[0][col:]
        tree = ast.parse(b"".join(lines).decode(), mode="eval")
    except (StopIteration, ValueError, SyntaxError, UnicodeDecodeError):
        return None
    return tree.body if isinstance(tree.body, ast.Call) else None


def _bytecode_site(frame: FrameType) -> CallSite | None:
    """The name a top-level call with one argument and no source passed (``%%time`` and
    ``exec`` compile cells without keeping their source), read from the instructions
    that loaded it: ``LOAD_NAME f`` (then ``LOAD_ATTR loss``...) right before the call.
    None when the call runs in a loop or passes anything else (Python 3.11+)."""
    code = frame.f_code
    lasti = frame.f_lasti
    if code.co_name != "<module>" or sys.version_info < (3, 11) or lasti < 0:
        return None
    if _in_loop(code, lasti):
        return None
    # (the last instruction at or before ``lasti``: on 3.11 ``lasti`` is the CALL's
    # last inline cache entry, which ``get_instructions`` does not list)
    before = [ins for ins in dis.get_instructions(code) if ins.offset <= lasti]
    if not before or before[-1].opname != "CALL" or before[-1].arg != 1:
        return None
    k = len(before) - 2
    if k >= 0 and before[k].opname == "PRECALL":  # (3.11)
        k -= 1
    attrs: list[str] = []
    # (the low bit of 3.12+'s LOAD_ATTR, and of LOAD_GLOBAL, pushes a method or a NULL
    # for a call: not a plain value)
    while k >= 0 and before[k].opname == "LOAD_ATTR" and _plain_load(before[k]):
        attrs.append(str(before[k].argval))
        k -= 1
    if k < 0 or before[k].opname not in ("LOAD_NAME", "LOAD_GLOBAL"):
        return None
    if not _plain_load(before[k]):
        return None
    return CallSite((str(before[k].argval), *reversed(attrs)))


def _plain_load(ins: dis.Instruction) -> bool:
    if ins.opname == "LOAD_GLOBAL" or (ins.opname == "LOAD_ATTR" and sys.version_info >= (3, 12)):
        return not (ins.arg or 0) & 1
    return True


#: Python 3.11+'s backward jumps (``JUMP_BACKWARD``, 3.11's ``POP_JUMP_BACKWARD_IF_TRUE``
#: that ends a ``while`` loop, ...): a code object with none of them has no loop.
_BACKWARD_JUMPS = frozenset(op for name, op in dis.opmap.items() if "BACKWARD" in name)
_JUMPS = frozenset(dis.hasjrel) | frozenset(dis.hasjabs)


def _in_loop(code: CodeType, lasti: int) -> bool:
    """Whether a jump after ``lasti`` goes back to it or before: a loop (or a
    comprehension, inlined since Python 3.12) runs the instruction at ``lasti``."""
    if _BACKWARD_JUMPS.isdisjoint(code.co_code[0::2]):
        return False
    return any(
        ins.opcode in _JUMPS
        and ins.offset > lasti
        and type(ins.argval) is int
        and ins.argval <= lasti
        for ins in dis.get_instructions(code)
    )


#: Cells whose source ``executing`` keeps parsed because a handle was made in them, the
#: most recent last. ``executing`` keeps every file it parsed, and every cell is a file
#: of its own: a notebook that makes handles in thousands of cells would keep every cell's
#: parsed source, tree and code objects (about 40 KB a short cell).
_CELLS_PARSED: dict[str, None] = {}
_CELLS_KEPT = 64


def _bound_executing_cache(filename: str) -> None:
    """Forget ``executing``'s copies of the cells beyond the last ``_CELLS_KEPT`` a
    handle was made in (cells only: a module's file is parsed once and stays useful)."""
    if not filename.startswith("<") and "ipykernel_" not in filename:
        return
    _CELLS_PARSED.pop(filename, None)
    _CELLS_PARSED[filename] = None
    if len(_CELLS_PARSED) <= _CELLS_KEPT:
        return
    old = next(iter(_CELLS_PARSED))
    del _CELLS_PARSED[old]
    try:
        from executing import Source
        from executing.executing import statement_containing_node

        sources = Source.__dict__.get("__source_cache_with_lines", {})
        for key in [k for k in sources if k[0] == old]:
            del sources[key]
        calls = Source.__dict__.get("__executing_cache", {})
        for key in [k for k in calls if k[0].co_filename == old]:
            del calls[key]
        # (two unbounded lru_caches: on a method, which keeps every Source with its tree,
        # and on a function of tree nodes, which keeps the nodes, and so their trees)
        Source.statements_at_line.cache_clear()
        statement_containing_node.cache_clear()
    except Exception:  # (another executing version: its caches stay as they are)
        pass


def _unique_site(statements: Any, frame: FrameType, fun: Any) -> CallSite | None:
    sites = {
        site
        for statement in statements
        for site in _sites_in(statement)
        if site.path is not None and _follow(frame.f_globals, site.path, fun)
    }
    return sites.pop() if len(sites) == 1 else None


#: What the syntax says, per node of a tree ``executing`` keeps: a handle made in a loop
#: (``for x in xs: grad(f)(x)``) meets the same nodes at every turn. The entries go with
#: the trees (see ``_bound_executing_cache``).
_SITE: weakref.WeakKeyDictionary[ast.AST, CallSite] = weakref.WeakKeyDictionary()
_SITES_IN: weakref.WeakKeyDictionary[ast.AST, tuple[CallSite, ...]] = weakref.WeakKeyDictionary()


def _sites_in(statement: ast.AST) -> tuple[CallSite, ...]:
    sites = _SITES_IN.get(statement)
    if sites is None:
        calls = (node for node in ast.walk(statement) if isinstance(node, ast.Call))
        sites = _SITES_IN[statement] = tuple(_site_of(node) for node in calls)
    return sites


def _site_of(node: ast.Call) -> CallSite:
    site = _SITE.get(node)
    if site is None:
        site = _SITE[node] = _read_site(node)
    return site


def _read_site(node: ast.Call) -> CallSite:
    arg: ast.expr | None = node.args[0] if node.args else None
    for kw in node.keywords:
        if kw.arg in ("fun", "f", "fn"):
            arg = kw.value
    parts: list[str] = []
    while isinstance(arg, ast.Attribute):
        parts.append(arg.attr)
        arg = arg.value
    if not isinstance(arg, ast.Name):
        return CallSite(None)
    path = (arg.id, *reversed(parts))
    return CallSite(None if _loop_variable(node, path) else path)


_COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)


def _loop_variable(node: ast.AST, path: tuple[str, ...]) -> bool:
    """``for fn in fs: hs.append(grad(fn))``, ``[grad(fn) for fn in fs]``, or a name (or
    ``obj.attr``) a loop rebinds (``while ...: fn = next(it); hs.append(grad(fn))``, a
    ``def`` in a loop, a walrus, a ``match`` capture): each handle means its own function,
    not whatever the name is bound to later. (Since Python 3.12 a comprehension runs in
    its enclosing frame, PEP 709, so its variable is not a local of a frame of its own:
    the syntax is what tells.)"""
    prefixes = {".".join(path[:k]) for k in range(1, len(path) + 1)}
    child, parent = node, getattr(node, "parent", None)
    while parent is not None:
        if prefixes & _names_bound_for(child, parent):
            return True
        child, parent = parent, getattr(parent, "parent", None)
    return False


def _names_bound_for(child: ast.AST, parent: ast.AST) -> set[str]:
    """The names (and ``name.attr`` chains) ``parent`` rebinds at each turn of a loop
    where ``child`` (one of its parts) runs: loop variables, and what the loop assigns."""
    if isinstance(parent, (ast.For, ast.AsyncFor)):
        if child not in parent.body:
            return set()
        return _assigned([parent.target, *parent.body])
    if isinstance(parent, ast.While):
        if child is not parent.test and child not in parent.body:
            return set()
        return _assigned([parent.test, *parent.body])
    if isinstance(parent, ast.comprehension):
        return set() if child is parent.iter else _assigned([parent.target, *parent.ifs])
    if isinstance(parent, _COMPREHENSIONS) and child is not parent.generators[0]:
        parts: list[ast.AST] = [g.target for g in parent.generators]
        parts += [i for g in parent.generators for i in g.ifs]
        parts += [g.iter for g in parent.generators[1:]]
        if isinstance(parent, ast.DictComp):
            parts += [parent.key, parent.value]
        else:
            parts.append(parent.elt)
        return _assigned(parts)
    return set()


def _assigned(nodes: list[ast.AST]) -> set[str]:
    """Names (and ``name.attr`` chains) these parts bind in their own scope, walruses in
    comprehensions included (not inside functions or classes they define, whose names
    they bind all the same)."""
    names: set[str] = set()
    todo: list[ast.AST] = list(nodes)
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
            continue
        if isinstance(node, ast.Lambda):
            continue
        if isinstance(node, ast.comprehension):  # its own variable is its own
            todo.extend((node.iter, *node.ifs))
            continue
        stored = _stored(node)
        if stored:
            names.add(stored)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).partition(".")[0] for a in node.names)
        todo.extend(ast.iter_child_nodes(node))
    return names


def _stored(node: ast.AST) -> str:
    """The name (or ``name.attr`` chain) ``node`` binds, if it is a binding target."""
    if isinstance(node, (ast.Name, ast.Attribute)) and isinstance(node.ctx, ast.Store):
        chain: list[str] = []
        while isinstance(node, ast.Attribute):
            chain.append(node.attr)
            node = node.value
        return ".".join((node.id, *reversed(chain))) if isinstance(node, ast.Name) else ""
    if isinstance(node, (ast.MatchAs, ast.MatchStar)):
        return node.name or ""
    if isinstance(node, ast.MatchMapping):
        return node.rest or ""
    return ""


def caller_frame(depth: int) -> FrameType | None:
    try:
        return sys._getframe(depth + 1)
    except ValueError:
        return None
