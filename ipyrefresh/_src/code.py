"""Facts read from bytecode: what a code object loads, stores, and which parameters it reads.

These are static over-approximations used to decide *where to look* (which globals and
module attributes a guard must cover, which parameters can change the answer) and to
spot effects a compiled replay would skip (``global`` and ``nonlocal`` stores, dynamic
namespace access). They never run user code. Works on CPython 3.10 to 3.13.
"""

from __future__ import annotations

import contextlib
import dis
import os
import site
import sys
import sysconfig
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import CodeType
from typing import Any

from .quietweak import QuietWeakCache

_LOAD_GLOBAL = frozenset({"LOAD_GLOBAL", "LOAD_NAME"})
#: ``LOAD_GLOBAL``'s low bit says it loads a call's function (3.11+).
_NULL_BIT = sys.version_info >= (3, 11)
#: The strings numpy parses as the time now (``np.datetime64('now')``), in any case.
_CLOCK_WORDS = frozenset({"now", "today"})
#: ``LOAD_ATTR``'s low bit says it loads a method for a call (3.12+).
_METHOD_BIT = sys.version_info >= (3, 12)
_LOAD_ATTR = frozenset({"LOAD_ATTR", "LOAD_METHOD", "LOAD_SUPER_ATTR"})
_STORE_GLOBAL = frozenset({"STORE_GLOBAL", "DELETE_GLOBAL"})
_STORE_DEREF = frozenset({"STORE_DEREF", "DELETE_DEREF"})
_LOAD_FAST = frozenset(
    {
        "LOAD_FAST",
        "LOAD_FAST_CHECK",
        "LOAD_FAST_AND_CLEAR",
        "LOAD_FAST_LOAD_FAST",
        "STORE_FAST_LOAD_FAST",
        "LOAD_CLOSURE",
        "LOAD_DEREF",
        "LOAD_CLASSDEREF",
        "LOAD_FROM_DICT_OR_DEREF",
    }
)
_CALL = frozenset({"CALL", "CALL_FUNCTION", "PRECALL", "CALL_METHOD"})
#: Globals whose use means the code reads its namespace by computed names.
_DYNAMIC_NAMESPACE = frozenset(
    {"globals", "vars", "eval", "exec", "compile", "__import__", "getmodule"}
)
#: Attributes that are a namespace, read by computed names (``f.__globals__['c']``).
_DYNAMIC_ATTRS = frozenset({"__globals__", "f_globals", "f_builtins", "getmodule"})
#: Names whose use means the code may read its callers' local variables (through a
#: frame: the current one, a caller's, a traceback's or a generator's).
_INTROSPECTION = frozenset(
    {
        *("locals", "_getframe", "currentframe", "f_back", "f_locals", "stack"),
        *("getouterframes", "tb_frame", "gi_frame", "cr_frame", "ag_frame"),
        *("_current_frames", "_current_exceptions", "walk_stack", "walk_tb"),
        *("getargvalues", "getinnerframes"),
    }
)

#: Code-object flags of generators and coroutines (they return before running their body).
GENERATOR_FLAGS = 0x20 | 0x80 | 0x100 | 0x200
_VARARGS, _VARKEYWORDS = 0x04, 0x08


def reads_namespace_by(name: str) -> bool:
    """Whether using a global called ``name`` is already taken as reading the namespace
    or frames by computed names (``globals``, ``eval``, ``_getframe``...)."""
    return name in _DYNAMIC_NAMESPACE or name in _INTROSPECTION


@dataclass(frozen=True)
class CodeFacts:
    """What one code object (with the comprehensions and lambdas nested in it) does."""

    globals: frozenset[str]  # names loaded from the globals (or builtins)
    attrs: frozenset[str]  # attribute names loaded anywhere
    #: Attribute chains from a global (``("mymod", "sub", "f")``) or from a module
    #: imported inside the code (``("import:os.path", "join")``).
    chains: frozenset[tuple[str, ...]]
    stores_globals: bool  # `global x; x = ...` or `del x`
    stores_free: frozenset[str]  # `nonlocal` stores into cells of an enclosing function
    dynamic_namespace: bool  # globals()[computed], vars(), eval, exec
    introspects: bool  # locals(), frame objects
    loaded_locals: frozenset[str]  # local (and cell) variables that are read
    #: String constants that are identifiers: attribute names used through ``getattr(x,
    #: 'name')``, ``attrgetter('name')`` or ``object.__getattribute__(x, 'name')``.
    const_names: frozenset[str]
    #: It (or code nested in it) stores an item or attribute of some object, or calls a
    #: method that changes its object in place (``log.append``, ``memo.setdefault``): of a
    #: local object or not, the code does not say.
    writes_objects: bool = False
    #: Globals (or builtins) loaded as values, not as the function of a call of their
    #: own: handed to other code (``map(print, xs)``, ``partial(print)``, ``print.__call__``),
    #: which may call them from C, where no hook sees the call. (3.11+: ``LOAD_GLOBAL``
    #: says when it loads a call's function; 3.10: :func:`_called_310`.)
    held: frozenset[str] = frozenset()
    #: Attribute chains from a global whose last attribute is loaded as a value, not as
    #: the method of a call (``map(warnings.warn, msgs)``): see :func:`_held_chains`.
    held_chains: frozenset[tuple[str, ...]] = frozenset()
    #: It holds the string ``'now'`` or ``'today'`` (any case): numpy's C code reads the
    #: clock when it parses one as a date (``np.datetime64('now')``, ``astype('M8[s]')``),
    #: a call of a type, where no hook sees a clock function called.
    names_the_clock: bool = False

    def may_write(self) -> bool:
        """Whether running it may change anything outside its own frame, or run code
        found only as it runs (by a computed name, an import), which may."""
        return (
            self.stores_globals
            or bool(self.stores_free)
            or self.writes_objects
            or self.dynamic_namespace
            or not _WRITING_NAMES.isdisjoint(self.globals)
            or any(chain[0].startswith("import:") for chain in self.chains)
        )

    def reads_past_views(self) -> bool:
        """Whether it may read an array's memory beyond the array's own elements: a
        view's owner (``W.base``), or past the view (``as_strided(W, ...)``), or an
        attribute by a name not written in it (``getattr(v, name)``: hunt 50)."""
        attrs = self.attrs | self.const_names
        calls = self.globals | attrs
        return (
            self.dynamic_namespace
            or not _PAST_VIEW_ATTRS.isdisjoint(attrs)
            or not _PAST_VIEW_CALLS.isdisjoint(calls)
        )

    def reads_by_address(self) -> str:
        """The name through which it may read memory by its address (``from_address``,
        an array's ``.ctypes``), which no guard can follow; "" if none."""
        attrs = self.attrs | self.const_names
        found = (_BY_ADDRESS & attrs) | (_BY_ADDRESS_GLOBALS & self.globals)
        return min(found) if found else ""


#: (Not a ``WeakKeyDictionary``: its Python callback, run where a function dies, is where a
#: Ctrl-C may be handled and dropped; see :mod:`.quietweak`.)
_cache: QuietWeakCache[CodeType, CodeFacts] = QuietWeakCache()


def facts(code: CodeType) -> CodeFacts:
    """The :class:`CodeFacts` of ``code``; cached per code object."""
    found = _cache.get(code)
    if found is None:
        found = _cache[code] = _scan(code)
    return found


def _scan(code: CodeType) -> CodeFacts:
    names: set[str] = set()
    attrs: set[str] = set()
    chains: set[tuple[str, ...]] = set()
    loaded: set[str] = set()
    stores_globals = False
    stores_free: set[str] = set()
    dynamic = False
    introspects = False
    const_names: set[str] = set()
    writes = False
    held: set[str] = set()
    held_chains: set[tuple[str, ...]] = set()
    clock = False
    stack = [(code, True)]
    while stack:
        co, own = stack.pop()
        const_names.update(c for c in co.co_consts if type(c) is str and c.isidentifier())
        clock = clock or any(type(c) is str and c.lower() in _CLOCK_WORDS for c in co.co_consts)
        ins = list(dis.get_instructions(co))
        chains.update(_chains(ins))
        called = frozenset() if _NULL_BIT else _called_310(ins)
        held_chains.update(_held_chains(ins, called))
        for i, op in enumerate(ins):
            name = op.opname
            if name in _LOAD_GLOBAL:
                g = op.argval
                subscript = _const_subscript(ins, i) if g == "globals" else None
                if subscript is not None:
                    names.add(subscript)  # globals()['a'] reads 'a'
                elif g in _DYNAMIC_NAMESPACE:
                    dynamic = True
                if g in _INTROSPECTION or g == "vars":
                    introspects = True
                if g == "super" and own and "__class__" in co.co_freevars and co.co_varnames:
                    # Zero-argument super() reads the first argument from the frame, with
                    # no instruction that loads it (CPython 3.11).
                    loaded.add(co.co_varnames[0])
                names.add(g)
                if name == "LOAD_GLOBAL" and not (
                    (op.arg or 0) & 1 if _NULL_BIT else op.offset in called
                ):
                    held.add(g)
            elif name in _LOAD_ATTR:
                a = op.argval
                attrs.add(a)
                if a in _INTROSPECTION:
                    introspects = True
                if a in _DYNAMIC_ATTRS:
                    dynamic = True
            elif name in _LOAD_FAST:
                v = op.argval
                if own:
                    loaded.update(v if isinstance(v, tuple) else (v,))
            elif name == "IMPORT_FROM":
                attrs.add(op.argval)
            elif name in _STORE_OBJECT:
                # (``self.n = n`` in ``__init__``: the object being made, no one else's)
                writes = writes or not (own and _initialises(co, ins, i))
            elif name in _STORE_GLOBAL and own:
                stores_globals = True
            elif name in _STORE_DEREF and own and op.argval in co.co_freevars:
                stores_free.add(op.argval)
        # Nested code runs as part of this code when it is a comprehension or a lambda
        # called in place; what it loads counts here. Its stores are its own (recorded
        # separately when it runs).
        stack.extend((c, False) for c in co.co_consts if type(c) is CodeType)
    # A parameter captured by a nested function is read through its cell.
    loaded.update(code.co_cellvars)
    return CodeFacts(
        globals=frozenset(names),
        attrs=frozenset(attrs),
        chains=frozenset(chains),
        stores_globals=stores_globals,
        stores_free=frozenset(stores_free),
        dynamic_namespace=dynamic,
        introspects=introspects,
        loaded_locals=frozenset(loaded),
        const_names=frozenset(const_names),
        writes_objects=(
            writes
            or not _MUTATORS.isdisjoint(attrs)
            or not _MUTATING_FUNCTIONS.isdisjoint(attrs | names)
        ),
        held=frozenset(held),
        held_chains=frozenset(held_chains),
        names_the_clock=clock,
    )


#: Attributes that read past a view, and functions that do or read an attribute whose
#: name is data (not a variable named ``base``: hunt 52).
_PAST_VIEW_ATTRS = frozenset({"base", "__getattribute__"})
_PAST_VIEW_CALLS = frozenset({"as_strided", "getattr", "attrgetter", "methodcaller"})
#: Attributes that read memory by its address (an array's ``.ctypes.data``, a ctypes
#: type's ``from_address``), and functions that do.
_BY_ADDRESS = frozenset(
    {
        "from_address",
        "string_at",
        "wstring_at",
        "ctypes",
        "byte_bounds",
        "__array_interface__",
        "__array_struct__",
    }
)
_BY_ADDRESS_GLOBALS = frozenset({"string_at", "wstring_at", "ctypes", "byte_bounds"})

#: Builtins that write an object or run code found by name.
_WRITING_NAMES = frozenset(
    {"setattr", "delattr", "getattr", "exec", "eval", "__import__", "vars", "globals"}
)


def _initialises(code: CodeType, ins: list[dis.Instruction], i: int) -> bool:
    """``ins[i]`` stores an attribute of the object an ``__init__`` is making: its object
    was loaded from the first argument just before it."""
    if ins[i].opname != "STORE_ATTR" or code.co_name not in _INITIALISERS or i == 0:
        return False
    if not code.co_argcount or not code.co_varnames:
        return False
    loaded = ins[i - 1]
    if loaded.opname not in ("LOAD_FAST", "LOAD_FAST_LOAD_FAST", "LOAD_FAST_CHECK"):
        return False
    value = loaded.argval
    last = value[-1] if isinstance(value, tuple) else value
    return bool(last == code.co_varnames[0])


_INITIALISERS = frozenset({"__init__", "__post_init__"})
_STORE_OBJECT = frozenset(
    {"STORE_SUBSCR", "DELETE_SUBSCR", "STORE_ATTR", "DELETE_ATTR", "STORE_SLICE"}
)
_INPLACE = "add and concat floordiv lshift matmul mod mul or pow rshift sub truediv xor"
#: Methods of the builtin containers (and files, queues) that change their object, and
#: ``operator``'s and ``importlib``'s that write or reach other code. Not ``add``: in JAX
#: code it is functional (``x.at[i].add(v)``), and a set cannot hold a tracer.
_MUTATORS = frozenset(
    {
        "append",
        "extend",
        "extendleft",
        "update",
        "setitem",
        "delitem",
        "setattr",
        "delattr",
        "import_module",
        "insert",
        "pop",
        "popitem",
        "popleft",
        "appendleft",
        "remove",
        "clear",
        "setdefault",
        "discard",
        "sort",
        "reverse",
        "rotate",
        "__setitem__",
        "__delitem__",
        "__setattr__",
        "__delattr__",
        "put",
        "put_nowait",
        "write",
        "send",
        "fill",
        "resize",
        "itemset",
        "setfield",
    }
)


#: Library functions that change their first argument, by the name they are called
#: through: an attribute, or a global (``from heapq import heappush``). Hunt 55: heapq's
#: and bisect's C code gave a list jax.jit's tracers.
_MUTATING_FUNCTIONS = frozenset(
    {
        "heappush",
        "heappop",
        "heappushpop",
        "heapreplace",
        "heapify",
        "insort",
        "insort_left",
        "insort_right",
        "shuffle",
        "copyto",
        "place",
        "putmask",
        "__init__",
        *(f"i{op}" for op in _INPLACE.split()),
        *(f"__i{op}__" for op in _INPLACE.split()),
    }
)


_CHAIN_SKIP = frozenset({"CACHE", "PUSH_NULL", "EXTENDED_ARG", "NOP"})
_STORE_LOCAL = frozenset({"STORE_FAST", "STORE_NAME", "STORE_DEREF", "STORE_GLOBAL"})


def _chains(ins: list[dis.Instruction]) -> set[tuple[str, ...]]:
    """Attribute chains rooted at a global or at a module imported in the code."""
    found: set[tuple[str, ...]] = set()
    imported: dict[str, tuple[str, ...]] = {}  # local name -> ("import:mod", attrs...)
    for i, op in enumerate(ins):
        if op.opname == "IMPORT_NAME" and type(op.argval) is str:
            # `import a.b` (no fromlist) pushes the top package `a`; `from a.b import c`
            # pushes `a.b` itself.
            fromlist = ins[i - 1].argval if i and ins[i - 1].opname == "LOAD_CONST" else None
            level = ins[i - 2].argval if i > 1 and ins[i - 2].opname == "LOAD_CONST" else 0
            module = op.argval if fromlist else op.argval.split(".")[0]
            if type(level) is int and level > 0:  # `from . import m`: resolved at the walk
                module = "." * level + module
            found.add((f"import:{module}",))  # the import answers sys.modules[module]
            j = i + 1
            path: list[str] = []
            while j < len(ins) and ins[j].opname in ("IMPORT_FROM", "LOAD_ATTR", "SWAP", "COPY"):
                if ins[j].opname in ("IMPORT_FROM", "LOAD_ATTR"):
                    path.append(ins[j].argval)
                if j + 1 < len(ins) and ins[j + 1].opname in _STORE_LOCAL:
                    imported_chain = (f"import:{module}", *path)
                    imported[ins[j + 1].argval] = imported_chain
                    found.add(imported_chain)
                    path = []
                    j += 2
                    continue
                j += 1
            if j < len(ins) and ins[j].opname in _STORE_LOCAL and not path:
                imported.setdefault(ins[j].argval, (f"import:{module}",))
    ops = [op for op in ins if op.opname not in _CHAIN_SKIP]
    for i, op in enumerate(ops[:-1]):  # `m = mod`: an alias of a global (a module)
        if op.opname in _LOAD_GLOBAL and ops[i + 1].opname == "STORE_FAST":
            imported.setdefault(ops[i + 1].argval, (op.argval,))
    found |= _getattr_chains(ops, imported)
    chain: list[str] = []
    for op in ins:
        name = op.opname
        if name in _CHAIN_SKIP:
            continue
        if name in _LOAD_GLOBAL:
            start: tuple[str, ...] | None = (op.argval,)
        elif name in _LOAD_FAST and _last_loaded(op.argval) in imported:
            start = imported[_last_loaded(op.argval)]
        else:
            start = None
        if start is not None:
            if len(chain) > 1:
                found.add(tuple(chain))
            chain = list(start)
            continue
        if name in _LOAD_ATTR and chain:
            chain.append(op.argval)
            continue
        if len(chain) > 1:
            found.add(tuple(chain))
        chain = []
    if len(chain) > 1:
        found.add(tuple(chain))
    return found


#: 3.10's calls, whose function's load carries no mark of it: how many stack items each
#: takes above the function (the arguments; the keyword names; the ``*``/``**`` values).
_CALLS_310: dict[str, Callable[[int], int]] = {
    "CALL_FUNCTION": lambda arg: arg,
    "CALL_FUNCTION_KW": lambda arg: arg + 1,
    "CALL_FUNCTION_EX": lambda arg: 1 + (arg & 1),
}


def _called_310(ins: list[dis.Instruction]) -> frozenset[int]:
    """The offsets of the loads whose value is the function of a call (3.10). From each
    call, back over straight-line code: the function is what the last instruction that
    left the stack at its depth pushed (an argument's code never goes below the depth
    it started at). A load this cannot place (a jump in between: ``f(a if c else b)``) is
    left out, the safe side: it counts as a value handed on."""
    called = set()
    for i, op in enumerate(ins):
        above = _CALLS_310.get(op.opname)
        if above is None:
            continue
        target, depth = -above(op.arg or 0), 0  # (depths after each instruction, from D)
        for k in range(i - 1, -1, -1):
            prev = ins[k]
            if ins[k + 1].is_jump_target or prev.opcode in _JUMPS:
                break
            if depth <= target:
                if depth == target:
                    called.add(prev.offset)
                break
            arg = prev.arg if prev.opcode >= dis.HAVE_ARGUMENT else None
            try:
                depth -= dis.stack_effect(prev.opcode, arg, jump=False)
            except ValueError:  # (an opcode dis cannot size: leave this call out)
                break
    return frozenset(called)


_JUMPS = frozenset(dis.hasjrel) | frozenset(dis.hasjabs)


def _held_chains(ins: list[dis.Instruction], called: frozenset[int]) -> set[tuple[str, ...]]:
    """Chains whose last attribute is loaded as a value: by ``LOAD_ATTR`` (3.10 and 3.11,
    whose calls of a method load it by ``LOAD_METHOD``, except 3.10's calls with keywords:
    ``called``, see :func:`_called_310`) without its low bit (3.12+, where that bit says a
    method is loaded for a call). From a global, or from a module imported in the code
    (``import warnings as w; map(w.warn, ms)``); and a module's attribute the code imports
    (``from warnings import warn``) loaded as a value (``map(warn, ms)``): not right after
    (3.11, 3.12) or before (3.13+) the ``PUSH_NULL`` of a call of its own (on 3.10: not
    ``called``)."""
    found: set[tuple[str, ...]] = set()
    modules: dict[str, tuple[str, ...]] = {}  # local name -> ("import:mod",)
    members: dict[str, tuple[str, ...]] = {}  # local name -> ("import:mod", attr)
    ops = [op for op in ins if op.opname not in _CHAIN_SKIP or op.opname == "PUSH_NULL"]
    chain: list[str] = []
    source: str | None = None  # the module of the IMPORT_FROMs being read
    for i, op in enumerate(ops):
        name = op.opname
        if name == "IMPORT_NAME" and type(op.argval) is str:
            source = op.argval
            fromlist = ops[i - 1].argval if i and ops[i - 1].opname == "LOAD_CONST" else None
            after = ops[i + 1] if i + 1 < len(ops) else None
            if fromlist is None and after is not None and after.opname in _STORE_LOCAL:
                modules[after.argval] = (f"import:{op.argval.split('.')[0]}",)
            chain = []
            continue
        if name == "IMPORT_FROM" and source is not None:
            after = ops[i + 1] if i + 1 < len(ops) else None
            if after is not None and after.opname in _STORE_LOCAL:
                members[after.argval] = (f"import:{source}", op.argval)
            chain = []
            continue
        if name == "LOAD_GLOBAL":
            chain = [op.argval]
        elif name in _LOAD_FAST and type(op.argval) is str and op.argval in modules:
            chain = list(modules[op.argval])
        elif name in _LOAD_FAST and type(op.argval) is str and op.argval in members:
            before = ops[i - 1].opname if i else ""
            after_name = ops[i + 1].opname if i + 1 < len(ops) else ""
            own_call = "PUSH_NULL" in (before, after_name) if _NULL_BIT else op.offset in called
            if not own_call:
                found.add(members[op.argval])
            chain = []
        elif name in _LOAD_ATTR and chain:
            chain.append(op.argval)
            method = (
                name != "LOAD_ATTR"
                or (_METHOD_BIT and (op.arg or 0) & 1)
                or (not _NULL_BIT and op.offset in called)
            )
            if not method:
                found.add(tuple(chain))
        else:
            chain = []
    return found


def _getattr_chains(
    ops: list[dis.Instruction], imported: dict[str, tuple[str, ...]]
) -> set[tuple[str, ...]]:
    """``getattr(mod, 'name'[, default])`` with a constant name: the chain ``mod.name``."""
    found: set[tuple[str, ...]] = set()
    for i, op in enumerate(ops[:-3]):
        if op.opname not in _LOAD_GLOBAL or op.argval != "getattr":
            continue
        obj, attr = ops[i + 1], ops[i + 2]
        if obj.opname in _LOAD_GLOBAL:
            start: tuple[str, ...] | None = (obj.argval,)
        elif obj.opname in _LOAD_FAST:
            start = imported.get(_last_loaded(obj.argval))
        else:
            start = None
        if start is None or attr.opname != "LOAD_CONST" or type(attr.argval) is not str:
            continue
        j = i + 3
        if ops[j].opname == "LOAD_CONST":  # a default
            j += 1
        if j < len(ops) and ops[j].opname in _CALL and ops[j].argval in (2, 3):
            found.add((*start, attr.argval))
    return found


def _last_loaded(argval: Any) -> Any:
    """The name an instruction leaves on top of the stack (3.13's ``LOAD_FAST_LOAD_FAST``
    and ``STORE_FAST_LOAD_FAST`` name two)."""
    return argval[-1] if type(argval) is tuple and argval else argval


def _const_subscript(ins: list[dis.Instruction], i: int) -> str | None:
    """For ``globals()['a']`` at instruction ``i``: ``'a'``; else None."""
    j = i + 1
    while j < len(ins) and ins[j].opname in _CALL | {"PUSH_NULL", "CACHE"}:
        if ins[j].opname in ("CALL", "CALL_FUNCTION") and ins[j].argval != 0:
            return None
        j += 1
    if j + 1 < len(ins) and ins[j].opname == "LOAD_CONST" and ins[j + 1].opname == "BINARY_SUBSCR":
        key = ins[j].argval
        return key if type(key) is str else None
    return None


def parameters(code: CodeType) -> tuple[list[str], str | None, str | None, list[str]]:
    """(positional names, *args name, **kwargs name, keyword-only names) of ``code``."""
    n = code.co_argcount
    k = code.co_kwonlyargcount
    names = code.co_varnames
    positional = list(names[:n])
    kwonly = list(names[n : n + k])
    i = n + k
    star = names[i] if code.co_flags & _VARARGS else None
    i += 1 if star else 0
    dstar = names[i] if code.co_flags & _VARKEYWORDS else None
    return positional, star, dstar, kwonly


def unread_arguments(
    code: CodeType, nargs: int, kwnames: tuple[str, ...], offset: int = 0
) -> tuple[frozenset[int], frozenset[str]]:
    """Positions and keywords of a call whose values the function provably never reads.

    ``offset`` is the number of leading parameters bound before the call's arguments (1
    for a bound method's ``self``). A parameter counts as read if any instruction loads
    it, a nested function captures it, or the code can read its locals indirectly.
    """
    f = facts(code)
    if f.introspects or f.dynamic_namespace:
        return frozenset(), frozenset()
    positional, star, dstar, kwonly = parameters(code)
    read = f.loaded_locals
    unread: set[int] = set()
    for i in range(nargs):
        p = i + offset
        if p < len(positional):
            if positional[p] not in read:
                unread.add(i)
        elif star is not None and star not in read:
            unread.add(i)
    unread_kw = set()
    named = set(positional) | set(kwonly)
    for k in kwnames:
        if k in named:
            if k not in read:
                unread_kw.add(k)
        elif dstar is not None and dstar not in read:
            unread_kw.add(k)
    return frozenset(unread), frozenset(unread_kw)


def nested(code: CodeType) -> list[CodeType]:
    """The code objects nested in ``code`` (its functions, lambdas, comprehensions and
    classes, and theirs)."""
    out: list[CodeType] = []
    stack = [code]
    while stack:
        co = stack.pop()
        for c in co.co_consts:
            if type(c) is CodeType:
                out.append(c)
                stack.append(c)
    return out


def qualname(code: CodeType) -> str:
    """``co_qualname`` (3.11+), or the plain name on 3.10."""
    q = getattr(code, "co_qualname", None)
    return q if type(q) is str else code.co_name


# -- user code versus library code ---------------------------------------------------------


def _library_prefixes() -> tuple[str, ...]:
    paths = {sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    with contextlib.suppress(AttributeError):  # some virtualenvs have no site packages
        paths.update(site.getsitepackages())
    paths.add(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # ipyrefresh itself
    return tuple(os.path.normcase(os.path.realpath(p)) + os.sep for p in paths if p)


_LIBRARY = _library_prefixes()
_is_user_file: dict[str, bool] = {}
#: File names of code ipyrefresh generates itself (guards, replays, paths).
GENERATED_FILE = "<ipyrefresh generated>"


def is_user_code(code: CodeType) -> bool:
    """True for code the user wrote: cells, ``exec``'d strings, their own modules (and
    code libraries generate: see :func:`is_user_frame` for telling those apart)."""
    filename = code.co_filename
    if filename.startswith("<"):
        if filename == "<string>" and qualname(code).startswith("__create_fn__"):
            return False  # methods generated by dataclasses
        # Not cached: IPython names every cell's code differently, so a cache of these
        # would grow by one entry per cell for the whole session.
        return not (
            filename.startswith(("<frozen", "<ipyrefresh"))
            or filename == "<__array_function__ internals>"
        )
    return is_user_file(filename)


def is_user_file(filename: str) -> bool:
    """A source file outside the standard library, site-packages and ipyrefresh."""
    known = _is_user_file.get(filename)
    if known is None:
        real = os.path.normcase(os.path.realpath(filename))
        known = not real.startswith(_LIBRARY)
        _is_user_file[filename] = known
    return known


def is_user_module(ns: Mapping[str, Any]) -> bool:
    """A module of the user's, by its namespace: from a source file outside the libraries,
    or made in the session (a notebook's ``__main__``, ``types.ModuleType(...)``); not one
    built into Python or frozen in it. (The namespace, not ``getattr``: a module's
    ``__getattr__`` is the user's code.)"""
    file = ns.get("__file__")
    if type(file) is str:
        return is_user_file(file)
    name = ns.get("__name__")
    if type(name) is str and name in sys.builtin_module_names:
        return False
    return getattr(ns.get("__spec__"), "origin", None) not in ("built-in", "frozen")


def is_user_frame(code: CodeType, globs: Mapping[str, Any]) -> bool:
    """User code running in ``globs``. Generated code (``<string>``) counts only when it
    runs in the user's namespace or a user module: libraries exec helpers too
    (namedtuple's ``__new__`` runs in a made-up ``namedtuple_Point`` module)."""
    if not is_user_code(code):
        return False
    if not code.co_filename.startswith("<"):
        return True
    try:
        name = globs.get("__name__")
    except Exception:
        return True
    if type(name) is not str or name == "__main__":
        return True
    module = sys.modules.get(name)
    if module is None:  # a module object made by hand (types.ModuleType), or namedtuple's
        return not name.startswith("namedtuple_")
    ns = object.__getattribute__(module, "__dict__")
    return type(ns) is not dict or is_user_module(ns)
