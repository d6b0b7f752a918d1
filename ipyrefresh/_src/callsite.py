"""Which expression a ``grad(...)`` call passed as the function: the call site.

A handle follows the *name* its call passed (``grad(h)``, ``grad(model.loss)``); any other
expression is a fixed object. Three readings, the cheapest that can be trusted first:

* a cell's straight-line top level (Python 3.11+): the call's own source span, from the
  calling instruction's position, parsed alone (0.1 ms, where parsing the cell costs
  30 ms at 400 lines);
* ``executing`` (the library IPython's tracebacks use): the whole cell's or file's tree,
  which also tells loop variables (``for fn in fs: grad(fn)``: each handle means its own
  function);
* without source (``%%time``, ``exec``), or where the source disagrees with the code, the
  instructions that pushed the call's arguments (Python 3.11+).

Each source reading must agree with those instructions (read backwards from the code's
bytes): a cell whose kept lines are not its own (IPython splits them at a form feed or
U+2028, where Python does not; nbclient's ``IPYKERNEL_CELL_NAME`` keeps every cell under
one name, so a cell that runs another finds the other's text) gives another line's call.

None of them: the caller guesses (``targets._by_identity``).
"""

from __future__ import annotations

import ast
import dis
import linecache
import re
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from itertools import islice
from types import CodeType, EllipsisType, FrameType
from typing import Any

from .quietweak import QuietWeakCache


@dataclass(frozen=True)
class CallSite:
    """What the source of a ``grad(...)`` call passed as the function: ``path`` is the
    name (or ``name.attr`` chain) a handle can follow, None for any other expression."""

    path: tuple[str, ...] | None


def passed_expression(
    frame: FrameType, means: Callable[[tuple[str, ...]], bool]
) -> CallSite | None:
    """The call site of the call executing in ``frame``; None if it cannot be read.
    ``means(path)``: whether a name (chain) means the function now, for ``executing``'s
    reading of a line of several statements it cannot tell apart (the one call on it
    whose argument means the function is taken, if there is exactly one)."""
    call = _cell_call(frame)
    if call is not None:
        site: CallSite | None = _read_site(call)
    else:
        site = _executing_site(frame, means)
        if site is None:
            site = _bytecode_site(frame)
    path = site.path if site is not None else None
    if path is not None and _stored_into(frame) == path:
        # ``h = grad(h)``, ``step = rj.jit(step)``, ``m.f = grad(m.f)``: the name will mean
        # the handle itself; it differentiates the function the name means now.
        return CallSite(None)
    return site


def _stored_into(frame: FrameType) -> tuple[str, ...] | None:
    """The name (or ``name.attr`` chain) the call's result is stored into right after it
    (``name = call(...)``, ``obj.attr = call(...)``), read from the code's bytes after the
    call."""
    if frame.f_lasti < 0:
        return None
    code = frame.f_code
    chain: list[str] = []
    for opname, arg in _instructions_after(code, frame.f_lasti // 2 + 1):
        if not chain:
            if opname in ("STORE_NAME", "STORE_GLOBAL"):
                return (code.co_names[arg],) if arg < len(code.co_names) else None
            if opname in ("STORE_FAST", "STORE_DEREF"):
                name = _stored_local(code, opname, arg)
                return None if name is None else (name,)
            if opname not in _NAME_LOADS:
                return None
            name = _argval(code, opname, arg)
            if type(name) is not str:
                return None
            chain.append(name)
        elif opname == "LOAD_ATTR" and _plain_load(_Ins(opname, arg, None, False)):
            chain.append(str(_argval(code, opname, arg)))
        elif opname == "STORE_ATTR":
            return (*chain, code.co_names[arg]) if arg < len(code.co_names) else None
        else:
            return None
        if len(chain) > 16:
            return None
    return None


def _instructions_after(code: CodeType, unit: int) -> Iterator[tuple[str, int]]:
    """(opname, argument) of the instructions from code unit ``unit`` on, decoded from
    the code's bytes: inline caches skipped, ``EXTENDED_ARG`` folded in."""
    raw = code.co_code
    arg = 0
    while 2 * unit < len(raw):
        op, byte = raw[2 * unit], raw[2 * unit + 1]
        unit += 1
        if op == _CACHE:
            continue
        arg = (arg << 8) | byte
        if op == _EXTENDED_ARG:
            continue
        yield dis.opname[op], arg
        arg = 0


# -- the cell's source ----------------------------------------------------------------

#: A loop anywhere in a cell (or a word that looks like one): its call sites are read by
#: ``executing``, whose tree tells a loop's variables (a loop that breaks at once leaves
#: no backward jump in the code).
_LOOP_WORDS = re.compile(r"\b(?:for|while)\b")


def _cell_source(code: CodeType) -> list[str] | None:
    """The lines IPython keeps for a cell's code (None: not a cell's, or not kept)."""
    cached = linecache.cache.get(code.co_filename)
    if cached is None or len(cached) != 4 or cached[1] is not None:
        return None  # (a file, or a lazily read module)
    lines: list[str] = cached[2]
    return lines


def _cell_call(frame: FrameType) -> ast.Call | None:
    """The call a cell's top level is making, parsed from its own source span alone (the
    instruction's position, Python 3.11+), in a cell without loops; None: ask
    ``executing``. Only a cell's code (a module's file on disk may have changed since it
    was imported), and only where the span agrees with the code's instructions."""
    code = frame.f_code
    if code.co_name != "<module>" or sys.version_info < (3, 11) or frame.f_lasti < 0:
        return None
    cell = _cell_source(code)
    if cell is None or any(_LOOP_WORDS.search(line) for line in cell):
        return None
    try:
        position = next(islice(code.co_positions(), frame.f_lasti // 2, None))
        first, last, col, end_col = position
        if first is None or last is None or col is None or end_col is None:
            return None
        lines = [line.encode() for line in cell[first - 1 : last]]
        if len(lines) != last - first + 1:
            return None
        lines[-1] = lines[-1][:end_col]
        lines[0] = lines[0][col:]
        tree = ast.parse(b"".join(lines).decode(), mode="eval")
    except (StopIteration, ValueError, SyntaxError, UnicodeDecodeError):
        return None
    call = tree.body
    return call if isinstance(call, ast.Call) and _agrees(frame, call) else None


def _agrees(frame: FrameType, call: ast.Call) -> bool:
    """Whether the call's argument, as its source says, is what the instructions before
    the call pushed: source whose lines are not the code's (a cell IPython split at a
    form feed or U+2028; another cell kept under a shared name) gives another line's
    call. An argument the instructions cannot read (a lambda, ``fs[0]``) is a fixed object
    either way. (Python 3.10's calls are not read: its source is taken as it is.)"""
    if sys.version_info < (3, 11):
        return True
    code = frame.f_code
    pushed = _passed(code, _decoded_before(code, frame.f_lasti))
    path = _argument_path(call)
    # (a call's form not read here, ``f(*args)``: the source is taken as it is)
    return pushed is _UNKNOWN or pushed == path or (pushed is ... and path is None)


def _executing_site(frame: FrameType, means: Callable[[tuple[str, ...]], bool]) -> CallSite | None:
    """``passed_expression`` by ``executing``: the cell's (or file's) whole tree."""
    try:
        import executing

        ex = executing.Source.executing(frame)
        node = ex.node
        statements = ex.statements
    except Exception:
        return None
    finally:
        _bound_executing_cache(frame.f_code.co_filename, frame.f_code)
    if node is None:
        return _unique_site(statements or (), means)
    if not isinstance(node, ast.Call) or not _agrees(frame, node):
        return None
    return _site_of(node)


def _unique_site(statements: Any, means: Callable[[tuple[str, ...]], bool]) -> CallSite | None:
    sites = {
        site
        for statement in statements
        for site in _sites_in(statement)
        if site.path is not None and means(site.path)
    }
    return sites.pop() if len(sites) == 1 else None


# -- the instructions -------------------------------------------------------------------


def _bytecode_site(frame: FrameType) -> CallSite | None:
    """The call site read from the instructions that pushed the call's arguments, Python
    3.11+: an argument loaded by name (``name``, ``name.attr``) gives its path; a constant
    or a computed one (``k if c else h``, ``map(grad, fs)``'s tuple) is a fixed object, and
    so is a name the code rebinds when a loop runs the call (a loop variable: each handle
    means its own function). None when the call's form cannot be read."""
    code = frame.f_code
    lasti = frame.f_lasti
    if sys.version_info < (3, 11) or lasti < 0:
        return None
    listed = _instructions(code)
    # (the last instruction at or before ``lasti``: on 3.11 ``lasti`` is the CALL's
    # last inline cache entry, which ``get_instructions`` does not list; EXTENDED_ARG
    # prefixes are folded into the instruction they extend, where a jump lands on them)
    before: list[_Ins] = []
    landed = False
    for i in listed:
        if i.offset > lasti:
            break
        if i.opname == "EXTENDED_ARG":
            landed = landed or i.is_jump_target
            continue
        before.append(_Ins(i.opname, i.arg or 0, i.argval, i.is_jump_target or landed))
        landed = False
    if not before:
        return None
    if before[-1].opname not in _CALLS:
        # The function came through C code this instruction ran (``dh, dk = map(grad,
        # fs)``, ``for d in map(grad, fs)``): it passed no name.
        return CallSite(None)
    path = _passed(code, before)
    if path is _UNKNOWN:
        return None
    if path is ...:
        return CallSite(None)  # (a computed argument: fixed)
    if path is not None and _in_loop(listed, lasti) and path[0] in rebound_names(code):
        return CallSite(None)
    return CallSite(path)


def _instructions(code: CodeType) -> list[dis.Instruction]:
    """``code``'s instructions, disassembled once per code object (a long cell run without
    source that makes many handles: 70 ms each at 3,000 lines)."""
    found = _DISASSEMBLED.get(code)
    if found is None:
        found = _DISASSEMBLED[code] = list(dis.get_instructions(code))
    return found


_DISASSEMBLED: QuietWeakCache[CodeType, list[dis.Instruction]] = QuietWeakCache()


#: ``_passed``: the call's form is not one read here (``f(*args)``, ``f(**{...})``).
_UNKNOWN: Any = object()
_CALLS = frozenset({"CALL", "CALL_KW", "CALL_FUNCTION_EX"})
_STORES = frozenset(
    {"STORE_NAME", "STORE_GLOBAL", "STORE_FAST", "STORE_DEREF", "DELETE_NAME", "DELETE_GLOBAL"}
    | {"DELETE_FAST", "DELETE_DEREF", "STORE_FAST_STORE_FAST", "STORE_FAST_LOAD_FAST"}
)


def rebound_names(code: CodeType, stores: frozenset[str] = _STORES) -> set[str]:
    """Names ``code`` (or code nested in it: comprehensions before 3.12) assigns or
    deletes by the instructions ``stores`` (every kind of variable, by default)."""
    out: set[str] = set()
    todo = [code]
    while todo:
        c = todo.pop()
        for ins in _instructions(c):
            if ins.opname in stores:
                value = ins.argval
                out.update(value if isinstance(value, tuple) else (str(value),))
        todo.extend(k for k in c.co_consts if isinstance(k, CodeType))
    return out


@dataclass(frozen=True, slots=True)
class _Ins:
    """An instruction as the reading below needs it (from ``dis``, or decoded here)."""

    opname: str
    arg: int
    argval: Any
    target: bool  # a jump lands on it (False: not known)


def _passed(code: CodeType, before: list[_Ins]) -> Any:
    """Given the instructions up to a call (the call last): the path of the argument it
    passes as the function (the first positional one, or ``fun=``/``f=``/``fn=``), None
    for a constant, ``...`` for a computed one (``_UNKNOWN``: a form not read here)."""
    if not before:
        return _UNKNOWN
    call = before[-1]
    k = len(before) - 2
    if call.target:  # (``f(c or h)``: a jump from inside the arguments)
        return ...
    names: tuple[str, ...] = ()
    if call.opname == "CALL_FUNCTION_EX":
        return _passed_unpacked(call, before, k)
    if call.opname == "CALL_KW" and k >= 0 and type(before[k].argval) is tuple:  # (3.13)
        names = before[k].argval
        k -= 1
    elif call.opname != "CALL":
        return _UNKNOWN
    if k >= 0 and before[k].opname == "PRECALL" and not before[k].target:  # (3.11)
        k -= 1
    if k >= 0 and before[k].opname == "KW_NAMES" and not before[k].target:  # (3.11, 3.12)
        names = code.co_consts[before[k].arg]
        k -= 1
    count = call.arg
    if type(names) is not tuple or count < len(names):
        return _UNKNOWN
    arguments: list[tuple[str, ...] | None] = []
    for _ in range(count):
        k, expression = _simple_expression(before, k)
        if expression is ...:
            return ...
        arguments.append(expression)
    if k < 0 or before[k].opname not in _CALLEE_PUSHES:
        return ...  # (``f(k if c else h)``: a branch's copy of the call, 3.12+)
    arguments.reverse()
    positional = arguments[: count - len(names)]
    chosen = positional[0] if positional else None
    for name, expression in zip(names, arguments[count - len(names) :], strict=True):
        if name in ("fun", "f", "fn"):
            chosen = expression
    return chosen


def _passed_unpacked(call: _Ins, before: list[_Ins], k: int) -> Any:
    """``f(h, **kw)``, ``rj.jit(step, **opts)`` (``CALL_FUNCTION_EX``): the positional
    arguments built into a tuple, then a mapping by name; other forms are not read."""
    if call.arg & 1:  # (keywords: ``**kw`` copied into a new dict, ``BUILD_MAP 0; kw;
        # DICT_MERGE 1``, or a mapping by name)
        merged = k >= 0 and before[k].opname == "DICT_MERGE" and before[k].arg == 1
        k, mapping = _simple_expression(before, k - 1 if merged else k)
        if mapping is ... or k < 0:
            return _UNKNOWN
        if merged:
            if before[k].opname != "BUILD_MAP" or before[k].arg != 0 or before[k].target:
                return _UNKNOWN
            k -= 1
    if k < 0 or before[k].opname != "BUILD_TUPLE" or before[k].target:
        return _UNKNOWN
    count = before[k].arg
    k -= 1
    arguments = []
    for _ in range(count):
        k, expression = _simple_expression(before, k)
        if expression is ...:
            return ...
        arguments.append(expression)
    return arguments[-1] if arguments else _UNKNOWN


def _simple_expression(
    before: list[_Ins], k: int
) -> tuple[int, tuple[str, ...] | EllipsisType | None]:
    """Read backwards from ``before[k]`` one argument pushed by a name and attribute loads
    (its path) or by a constant (None): the index before it, and the path. A jump into it
    (``a if c else b``) or any other instruction: ``(-1, ...)``."""
    attrs: list[str] = []
    while k >= 0 and before[k].opname == "LOAD_ATTR" and _plain_load(before[k]):
        if before[k].target:
            return -1, ...
        attrs.append(str(before[k].argval))
        k -= 1
    if k < 0 or before[k].target:
        return -1, ...
    ins = before[k]
    if ins.opname in _NAME_LOADS and _plain_load(ins):
        return k - 1, (str(ins.argval), *reversed(attrs))
    if ins.opname in ("LOAD_CONST", "LOAD_SMALL_INT") and not attrs:
        return k - 1, None
    return -1, ...


#: Loads of a variable's value (a function's locals and cells too: a local name is then
#: no name to follow, as its frame says).
_NAME_LOADS = frozenset(
    {"LOAD_NAME", "LOAD_GLOBAL", "LOAD_FAST", "LOAD_FAST_CHECK", "LOAD_DEREF", "LOAD_CLASSDEREF"}
)


def _decoded_before(code: CodeType, lasti: int, limit: int = 64) -> list[_Ins]:
    """The last ``limit`` instructions up to the one at ``lasti``, decoded backwards from
    the code's bytes (``dis`` decodes from the start: 14 ms for a 400-line cell). Inline
    cache entries skipped, ``EXTENDED_ARG`` prefixes folded in; where jumps land is not
    known here."""
    raw = code.co_code
    out: list[_Ins] = []
    i = lasti // 2
    while i >= 0 and len(out) < limit:
        op = raw[2 * i]
        if op == _CACHE:
            i -= 1
            continue
        arg, j, shift = raw[2 * i + 1], i - 1, 8
        while j >= 0 and raw[2 * j] == _EXTENDED_ARG:
            arg |= raw[2 * j + 1] << shift
            shift += 8
            j -= 1
        name = dis.opname[op]
        out.append(_Ins(name, arg, _argval(code, name, arg), False))
        i = j
    out.reverse()
    return out


_CACHE = dis.opmap.get("CACHE", -1)
_EXTENDED_ARG = dis.opmap["EXTENDED_ARG"]


def _argval(code: CodeType, opname: str, arg: int) -> Any:
    """What ``dis`` would give as ``argval``, for the instructions read above."""
    try:
        if opname in ("LOAD_CONST", "KW_NAMES"):
            return code.co_consts[arg]
        if (opname == "LOAD_GLOBAL" and sys.version_info >= (3, 11)) or (
            opname == "LOAD_ATTR" and sys.version_info >= (3, 12)
        ):
            return code.co_names[arg >> 1]
        if opname == "LOAD_GLOBAL":  # (3.10)
            return code.co_names[arg]
        if opname in ("LOAD_NAME", "LOAD_ATTR", "LOAD_METHOD"):
            return code.co_names[arg]
        if opname in ("LOAD_FAST", "LOAD_FAST_CHECK", "LOAD_DEREF", "LOAD_CLASSDEREF"):
            return _local_name(code, arg)
    except IndexError:
        return None
    return arg


def _local_name(code: CodeType, index: int) -> str | None:
    """The name of a local or cell variable by its index (3.11+: one numbering of
    locals, cells and free variables)."""
    names = (*code.co_varnames, *code.co_cellvars, *code.co_freevars)
    kinds = getattr(code, "_varname_from_oparg", None)
    if callable(kinds):  # (CPython 3.11+: cells of arguments share their slot)
        try:
            name: str = kinds(index)
            return name
        except (IndexError, ValueError):
            return None
    return names[index] if index < len(names) else None


def _stored_local(code: CodeType, opname: str, index: int) -> str | None:
    """The variable a STORE_FAST or STORE_DEREF stores into (3.10 numbers cells apart)."""
    if opname == "STORE_DEREF" and sys.version_info < (3, 11):
        cells = (*code.co_cellvars, *code.co_freevars)
        return cells[index] if index < len(cells) else None
    return _local_name(code, index)


#: What pushes the callee (or its NULL, or ``self``) right before a call's arguments.
_CALLEE_PUSHES = frozenset(
    {"LOAD_NAME", "LOAD_GLOBAL", "LOAD_ATTR", "LOAD_METHOD", "LOAD_DEREF", "LOAD_FAST"}
    | {"PUSH_NULL", "CALL", "BINARY_SUBSCR"}
)


def _plain_load(ins: _Ins) -> bool:
    """A load of a value (the low bit of LOAD_GLOBAL, and of 3.12+'s LOAD_ATTR, pushes a
    NULL or a method for a call instead)."""
    if (ins.opname == "LOAD_GLOBAL" and sys.version_info >= (3, 11)) or (
        ins.opname == "LOAD_ATTR" and sys.version_info >= (3, 12)
    ):
        return not ins.arg & 1
    return True


_LOOP_STARTS = frozenset({"FOR_ITER", "GET_ANEXT", "GET_AITER"})


def _in_loop(instructions: list[dis.Instruction], lasti: int) -> bool:
    """Whether a loop runs the instruction at ``lasti``: a jump after it goes back to it or
    before (a loop, or a comprehension inlined since Python 3.12), or a ``for`` loop
    around it (one that breaks at once jumps back nowhere). An ``async for`` anywhere
    counts too."""
    for ins in instructions:
        target = ins.argval
        if ins.opname in _LOOP_STARTS:
            if ins.opname != "FOR_ITER" or (
                ins.offset < lasti and type(target) is int and target > lasti
            ):
                return True
        elif (
            ins.opcode in _JUMPS and ins.offset > lasti and type(target) is int and target <= lasti
        ):
            return True
    return False


_JUMPS = frozenset(dis.hasjrel) | frozenset(dis.hasjabs)


# -- executing's trees ------------------------------------------------------------------

#: Cells whose source ``executing`` keeps parsed because a handle was made in them, the
#: most recent last, each with the ``id`` of the code that last made one there.
#: ``executing`` keeps every file it parsed, and every cell is a file of its own: a
#: notebook that makes handles in thousands of cells would keep every cell's parsed source,
#: tree and code objects (about 40 KB a short cell).
_CELLS_PARSED: dict[str, int] = {}
_CELLS_KEPT = 64


def _bound_executing_cache(filename: str, code: CodeType) -> None:
    """Forget ``executing``'s copies of the cells beyond the last ``_CELLS_KEPT`` a
    handle was made in (cells only: a module's file is parsed once and stays useful), and
    its entries for the earlier runs of a cell run again: IPython and ipykernel name a cell
    by its source, so the name stays, but each run compiles new code, and ``executing``
    keys its entries by code object (one more per run, each keeping that run's code)."""
    if not filename.startswith("<") and "ipykernel_" not in filename:
        return
    before = _CELLS_PARSED.pop(filename, None)
    _CELLS_PARSED[filename] = id(code)
    if before is not None and before != id(code):
        _forget_executing(filename, keep=code)
    if len(_CELLS_PARSED) <= _CELLS_KEPT:
        return
    old = next(iter(_CELLS_PARSED))
    del _CELLS_PARSED[old]
    _forget_executing(old, keep=None)
    try:
        from executing import Source
        from executing.executing import statement_containing_node

        sources = Source.__dict__.get("__source_cache_with_lines", {})
        for key in [k for k in sources if k[0] == old]:
            del sources[key]
        # (two unbounded lru_caches: on a method, which keeps every Source with its tree,
        # and on a function of tree nodes, which keeps the nodes, and so their trees)
        Source.statements_at_line.cache_clear()
        statement_containing_node.cache_clear()
    except Exception:  # (another executing version: its caches stay as they are)
        pass


def _forget_executing(filename: str, keep: CodeType | None) -> None:
    """Drop ``executing``'s entries for the code of ``filename`` but ``keep``."""
    try:
        from executing import Source

        calls = Source.__dict__.get("__executing_cache", {})
        for key in [k for k in calls if k[0].co_filename == filename and k[0] is not keep]:
            del calls[key]
    except Exception:  # (another executing version: its caches stay as they are)
        pass


#: What the syntax says, per node of a tree ``executing`` keeps: a handle made in a loop
#: (``for x in xs: grad(f)(x)``) meets the same nodes at every turn. The entries go with
#: the trees (see ``_bound_executing_cache``).
_SITE: QuietWeakCache[ast.AST, CallSite] = QuietWeakCache()
_SITES_IN: QuietWeakCache[ast.AST, tuple[CallSite, ...]] = QuietWeakCache()


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
    path = _argument_path(node)
    return CallSite(None if path is None or _loop_variable(node, path) else path)


def _argument_path(node: ast.Call) -> tuple[str, ...] | None:
    """The name (chain) the call passes as the function, if it passes one."""
    arg: ast.expr | None = node.args[0] if node.args else None
    for kw in node.keywords:
        if kw.arg in ("fun", "f", "fn"):
            arg = kw.value
    parts: list[str] = []
    while isinstance(arg, ast.Attribute):
        parts.append(arg.attr)
        arg = arg.value
    if not isinstance(arg, ast.Name):
        return None
    return (arg.id, *reversed(parts))


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
