"""Recording a build: which user code ran, and which effects a replay would skip.

Static analysis cannot see ``f = fs[k]; f(x)`` or ``getattr(mod, name)(x)``; running the
code can. While a derivative is built (one trace), every user code object entered is
logged with its caller and globals, and calls with effects that a compiled replay would
not repeat are noted: printing, file and stream I/O, the clock, OS entropy, Python's
``random``, and reads of settings kept in C (the recursion limit, the locale, decimal
contexts, context variables). (numpy's generators are C code that no hook sees; the
engine compares their state around the trace instead.) Python 3.10/3.11 use
``sys.setprofile``; 3.12+ use ``sys.monitoring`` with a tool id of its own, so a
profiler such as ``%prun`` can run at the same time. Only the thread that builds is
recorded.
"""

from __future__ import annotations

import _thread
import _tracemalloc
import _weakref
import atexit
import builtins
import contextvars
import ctypes
import faulthandler
import gc
import importlib
import importlib.util
import io
import linecache
import os
import random
import sys
import threading
import time
import tokenize
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from types import BuiltinFunctionType, CodeType, FrameType, MethodDescriptorType, ModuleType
from typing import Any

import numpy as np
from autograd.tracer import Box

from . import droppedinterrupts, gcmarks
from .code import is_user_code, is_user_frame
from .gcmarks import collecting
from .interruptsafe import ENTERING, contextmanager

_MAX_WALK = 64
_TOOL_NAME = "ipyrefresh"


@dataclass(eq=False)
class CallLog:
    """What one recorded run did.

    Every code object that is not a library's counts, generated code included (a
    function ``exec``'d into a module object is as changeable as a cell's), except the
    helpers namedtuple generates. ``calls``
    maps (caller code or None, callee code) to the callee's globals; the
    caller is the nearest user frame, None when library code (autograd) called it.
    ``complete`` is False when no hook could be installed: the log then proves nothing.
    """

    calls: dict[tuple[CodeType | None, CodeType], dict[str, Any]] = field(default_factory=dict)
    #: The builtins each code ran with (a function's own, fixed when it was made: not
    #: necessarily its globals' ``__builtins__`` now).
    builtins: dict[CodeType, Any] = field(default_factory=dict)
    effects: list[str] = field(default_factory=list)
    #: Modules imported by a computed name (``importlib.import_module(name)``).
    imports: set[str] = field(default_factory=set)
    complete: bool = True
    note: str = ""
    #: The hook stopped at the first effect (3.10/3.11): the run will use plain autograd
    #: whatever else it does, so ``calls`` holds only what ran before that.
    cut_short: bool = False
    #: How many times each user code started in a frame that library code called
    #: directly (keyed by that library code, None at the recording's edge, and the user
    #: code): a transformation's own call, or one JAX may cache (a jitted callee, a
    #: ``scan`` body; see ``compilers.jax_contexts``).
    called_by_library: dict[tuple[CodeType | None, CodeType], int] = field(default_factory=dict)
    #: User code ran inside a garbage collection (a finalizer, a ``gc.callbacks``
    #: entry): not recorded as the function's, but it ran (hunt 59).
    ran_in_gc: bool = False

    def add_frame(self, frame: FrameType, boundary: FrameType | None) -> None:
        code = frame.f_code
        caller: CodeType | None = None
        back = frame.f_back
        if back is None or back is boundary or not is_user_code(back.f_code):
            key = (None if back is None or back is boundary else back.f_code, code)
            self.called_by_library[key] = self.called_by_library.get(key, 0) + 1
        for _ in range(_MAX_WALK):
            if back is None or back is boundary:
                break
            if is_user_code(back.f_code):
                caller = back.f_code
                break
            back = back.f_back
        key = (caller, code)
        if key not in self.calls:
            self.calls[key] = frame.f_globals
            self.builtins.setdefault(code, frame.f_builtins)

    def add_import(self, frame: FrameType) -> None:
        """``importlib.import_module(name, package)`` starting in ``frame``."""
        loc = frame.f_locals
        name, package = loc.get("name"), loc.get("package")
        try:
            resolved = importlib.util.resolve_name(name, package)  # type: ignore[arg-type]
        except Exception:
            self.add_effect("imports a module by a name it cannot read")
            return
        self.imports.add(resolved)

    def add_effect(self, what: str) -> None:
        if what not in self.effects:
            self.effects.append(what)

    @property
    def codes(self) -> dict[CodeType, dict[str, Any]]:
        """Every user code object that ran, with its globals."""
        return {code: globs for (_, code), globs in self.calls.items()}


# -- which calls have effects ----------------------------------------------------------------

_THREAD_STARTS = ("start_new_thread", "start_new", "start_joinable_thread")
_CLOCK = {
    getattr(time, n)
    for n in (
        "time",
        "time_ns",
        "perf_counter",
        "perf_counter_ns",
        "monotonic",
        "monotonic_ns",
        "process_time",
        "process_time_ns",
        "thread_time",
        "thread_time_ns",
        "clock_gettime",
        "clock_gettime_ns",
        "localtime",
        "gmtime",
        "ctime",
        "asctime",
        "strftime",
    )
    if hasattr(time, n)
}
_FUNCTIONS: dict[Any, str] = {
    builtins.print: "prints",
    builtins.input: "reads input",
    builtins.open: "opens files",
    builtins.breakpoint: "stops in a debugger",
    os.urandom: "draws OS entropy",
    np.fromfile: "reads files",
    **{f: "reads the clock" for f in _CLOCK},
}
if hasattr(os, "getrandom"):
    _FUNCTIONS[os.getrandom] = "draws OS entropy"
if sys.version_info < (3, 12):  # (the call recorder's own hook; 3.12+ records otherwise)
    _FUNCTIONS[sys.setprofile] = "replaces the profile hook (sys.setprofile)"
#: What runs in a thread the function starts is not recorded (its reads, its effects).
_FUNCTIONS.update(
    (f, "starts a thread (what runs there is not recorded)")
    for f in (getattr(_thread, n, None) for n in _THREAD_STARTS)
    if f is not None
)
#: The interpreter's settings and counters, which no Python object the guard reads shows.
#: Only user code's own calls count: libraries read them as bounds, not as data
#: (``inspect.unwrap``, which ``inspect.signature`` calls, reads the recursion limit).
_INTERPRETER: dict[Any, str] = {
    f: f"reads the interpreter's state ({module.__name__}.{f.__name__})"
    for module, names in (
        (
            sys,
            (
                "getrecursionlimit",
                "getswitchinterval",
                "get_int_max_str_digits",
                "getrefcount",
                "getallocatedblocks",
                "is_finalizing",
                "getprofile",  # (while recording on 3.11: the hook is ipyrefresh's)
                "gettrace",
                "exc_info",  # (the exception being handled where it is called)
                "exception",
            ),
        ),
        (_weakref, ("getweakrefs",)),
        (gc, ("get_threshold", "isenabled", "get_count", "get_debug", "get_freeze_count")),
        (gc, ("get_objects", "get_referrers", "get_referents", "get_stats", "collect")),
        (gc, ("is_tracked", "is_finalized")),
        (_tracemalloc, ("get_traced_memory", "get_tracemalloc_memory", "is_tracing")),
        (_tracemalloc, ("_get_traces", "_get_object_traceback", "get_traceback_limit")),
        (faulthandler, ("is_enabled",)),
        (_thread, ("stack_size",)),
    )
    for f in (getattr(module, n, None) for n in names)
    if f is not None
}
#: ... and what changes them, or registers what the interpreter calls later: a replay
#: would skip the change (made again by plain autograd at every call, after whatever undid
#: it in between). User code's own calls only, as above: libraries set them for a while
#: (``gc.disable()`` around their own work) or register handlers as they are imported.
_INTERPRETER.update(
    (f, f"changes the interpreter's state ({module.__name__}.{f.__name__})")
    for module, names in (
        (sys, ("setrecursionlimit", "setswitchinterval", "set_int_max_str_digits")),
        (gc, ("enable", "disable", "set_threshold", "set_debug", "freeze", "unfreeze")),
        (atexit, ("register", "unregister")),
        (faulthandler, ("enable", "disable")),
    )
    for f in (getattr(module, n, None) for n in names)
    if f is not None
)
_DATETIME_NOW = {"now", "utcnow", "today", "fromtimestamp"}
#: C modules whose functions ask the operating system (files, directories, the working
#: directory, processes, users, the terminal): a replay would keep the first answer.
_OS_MODULES = frozenset(
    {"posix", "nt", "pwd", "grp", "spwd", "resource", "fcntl", "termios", "select", "mmap"}
    | {"_socket", "_posixsubprocess", "_winapi", "msvcrt", "_signal"}
)
#: ... except those that only compute from their arguments.
_OS_PURE = frozenset({"fspath", "strerror", "major", "minor", "makedev"})
#: Modules whose objects' methods read or write outside the process (files, sockets,
#: databases): ``conn.execute(...)`` answers what the database holds now.
_IO_MODULES = frozenset({"_io", "io", "sqlite3", "_sqlite3", "socket", "_socket", "ssl", "_ssl"})
_IO_MODULES |= {"select", "mmap", "_dbm", "_gdbm", "dbm", "_multiprocessing", "_queue"}
#: ... and their module functions that only compute from their arguments.
_IO_PURE = frozenset({"text_encoding", "complete_statement"})
#: C classes whose construction has an effect of its own (opening the file creates or
#: truncates it), made by a call of a type: no hook looks at those, so the code that
#: names one is refused as it is read (:func:`type_effect`).
_EFFECT_TYPES: dict[type, str] = {io.FileIO: "opens files (io.FileIO)"}
_WARN = frozenset({warnings.warn, warnings.warn_explicit})
#: Module functions whose effect depends on who calls them (never noted as effect-free).
_CALLER_MATTERS = frozenset({builtins.__import__, *_WARN, *_INTERPRETER})
#: C modules whose functions compute with state kept in C, per thread or process.
_STATE_MODULES = {
    "_decimal": "computes with decimal numbers (their context is the thread's)",
    "decimal": "computes with decimal numbers (their context is the thread's)",  # (<3.13)
    "_locale": "reads the process's locale",
    "_uuid": "reads the clock (uuid1)",
}
_PLAIN_OWNERS = frozenset({list, dict, tuple, set, frozenset, str, bytes, int, float, complex})


@dataclass(frozen=True)
class PythonEffect:
    """What calling a library's Python function does that a replay would skip, and who
    must call it for that to count: user code (``library_caller=False``), or a library
    (``True``: what the guard cannot see, user code's own reads of the same object being
    guarded)."""

    what: str
    library_caller: bool = False


#: What user code calls to read a file through linecache (which is the warnings
#: machinery's when the warnings module calls it).
_LINECACHE_READS = (linecache.getline, linecache.getlines, linecache.updatecache)


#: How code gets C functions through ctypes as it runs (a call of one is no event here;
#: the guard's walk refuses those it reaches before the run).
_FOREIGN_LOADS = (
    ctypes.CDLL.__init__,
    ctypes.CDLL.__getattr__,
    ctypes.CDLL.__getitem__,
    ctypes.LibraryLoader.LoadLibrary,
)


def _python_effects() -> dict[CodeType, PythonEffect]:
    """Python functions that change how the primitives' own errors and warnings come out
    while the function runs (``with np.errstate(divide='raise')``, ``catch_warnings``):
    what a replay would skip; autograd's own methods that read a traced value's number
    into a plain Python value (``str(x)``, ``v in xs``), which a replay would keep from
    the first run; and the environment variables read through a library (``os.getenv``,
    ``os.path.expanduser``), which no guard sees."""
    from autograd import builtins as abuiltins
    from autograd.tracer import getval

    found: dict[CodeType, PythonEffect] = {}
    numeric = "changes numpy's floating-point error handling while it runs"
    settings = "reads numpy's floating-point settings (np.geterr, getbufsize, geterrcall)"
    text = "turns a traced value into text (str, print, an f-string): a replay keeps its digits"
    compares = "looks a traced value up in a traced sequence (in, index)"
    seq = abuiltins.SequenceBox
    for fn, what in (
        (getattr(getattr(np, "errstate", None), "__enter__", None), numeric),
        (getattr(np, "seterr", None), numeric),
        (getattr(np, "seterrcall", None), numeric),
        *((getattr(np, name, None), settings) for name in ("geterr", "getbufsize", "geterrcall")),
        (warnings.catch_warnings.__enter__, "catches or filters warnings while it runs"),
        (warnings.simplefilter, "catches or filters warnings while it runs"),
        (warnings.filterwarnings, "catches or filters warnings while it runs"),
        (Box.__str__, text),
        (getval, "reads traced values directly (getval)"),
        (seq.__contains__, compares),
        (seq.index, compares),
        *((f, "reads source files (linecache)") for f in _LINECACHE_READS),
        *((f, "calls C code through ctypes (its state is not read)") for f in _FOREIGN_LOADS),
        (importlib.reload, "runs a module's file again (importlib.reload)"),
        (_exec_module(), "runs a module's file (exec_module)"),
    ):
        code = getattr(fn, "__code__", None)
        if type(code) is CodeType:
            found[code] = PythonEffect(what)
    environ = PythonEffect(
        "reads environment variables where no guard sees it (os.getenv, os.environ.get)", True
    )
    for name in ("__getitem__", "__iter__", "__len__"):
        code = getattr(getattr(type(os.environ), name, None), "__code__", None)
        if type(code) is CodeType:
            found[code] = environ
    return found


def _exec_module() -> Any:
    """The import system's ``exec_module`` of source and bytecode files (the loader's
    method a user calls after ``importlib.util.spec_from_file_location``)."""
    import importlib.machinery

    return getattr(importlib.machinery.SourceFileLoader, "exec_module", None)


_PY_EFFECTS = _python_effects()


def _notrace() -> tuple[CodeType, frozenset[Any]]:
    """The code of autograd's ``notrace_primitive`` wrapper (it unboxes its arguments and
    calls the raw function: a traced number, read as a plain one), and the raw functions
    autograd wraps so that read only shapes and types."""
    import autograd.builtins as abuiltins
    import autograd.numpy.numpy_wrapper as wrapper
    from autograd.tracer import notrace_primitive

    code = notrace_primitive(len).__code__
    safe: set[Any] = {np.ndim, np.shape, np.iscomplexobj, np.result_type}
    for fn in (wrapper.metadata, wrapper.parse_einsum_input, abuiltins.isinstance, abuiltins.type):
        raw = getattr(fn, "__wrapped__", None)
        if raw is not None:
            safe.add(raw)
    return code, frozenset(safe)


_NOTRACE, _NOTRACE_SAFE = _notrace()


def _notrace_call(frame: FrameType) -> None:
    """``notrace_primitive(f)`` entered in ``frame``: an unbox, unless ``f`` is one of
    autograd's own shape readers or no argument is traced."""
    back = frame.f_back
    if back is not None and id(back.f_code) in _LIBRARY_CODE:
        return  # autograd's own calls (metadata for every vjp)
    loc = frame.f_locals
    raw, args = loc.get("f_raw"), loc.get("args", ())
    try:
        if raw in _NOTRACE_SAFE or not any(isinstance(a, Box) for a in args):
            return
        name = getattr(raw, "__name__", "?")
    except Exception:
        name = "?"
    for log, _ in _active():
        log.add_effect(f"reads traced values directly (notrace_primitive {name})")


#: A module's C functions (``len``, ``isinstance``, numpy's) found to have no effect: the
#: hooks' next look at one is a single lookup. Half the C calls of a JAX trace are these.
#: (What a module function does cannot change; the caller matters only for those kept
#: out, :data:`_CALLER_MATTERS`.) Cleared when full.
_NO_EFFECT: dict[Any, None] = {}
_NO_EFFECT_MAX = 10_000


def effect_of(fn: Any, caller: CodeType) -> str | None:
    """The effect of ``caller`` calling the C function ``fn``, if it is one a replay
    would skip. Anything but a builtin function or method is not looked at (no user code
    runs)."""
    if type(fn) is not BuiltinFunctionType or fn in _NO_EFFECT:
        return None
    owner = fn.__self__
    kind = type(owner)
    if kind in _PLAIN_OWNERS:  # list.append, dict.get...: the most common C calls
        return None
    what = _effect(fn, owner, caller)
    # (An extension's function bound to no object, ``__self__`` None: jaxlib's safe_map
    # and safe_zip, a third of a JAX trace's C calls, are one function each, like a
    # module's.)
    if what is None and (kind is ModuleType or owner is None) and fn not in _CALLER_MATTERS:
        if len(_NO_EFFECT) >= _NO_EFFECT_MAX:
            _NO_EFFECT.clear()
        _NO_EFFECT[fn] = None
    return what


def value_effect(fn: Any) -> str | None:
    """The effect of calling the C function ``fn`` that user code holds as a value:
    ``partial(time.time)()``, ``map(os.urandom, ...)``, ``defaultdict(time.time)``,
    ``iter(time.monotonic_ns, None)`` call it from C, where no hook sees the call."""
    if fn is builtins.__import__ or fn in _WARN:  # (seen when called, by its caller)
        return None
    return effect_of(fn, _USER_CALLER)


def held_effect(fn: Any) -> str | None:
    """:func:`value_effect` for a C function that user code loads as a value and hands on
    (``map(warnings.warn, msgs)``, ``partial(__import__, name)``): what it is handed to
    calls it for the user, so those whose caller matters count too."""
    return effect_of(fn, _USER_CALLER)


#: What ``value_effect`` passes as the caller: the user's code (its own reads count).
_USER_CALLER = value_effect.__code__.replace(co_filename="<user code>")


def type_effect(cls: type) -> str | None:
    """The effect of making an object of the C class ``cls`` (:data:`_EFFECT_TYPES`)."""
    return _EFFECT_TYPES.get(cls)


def method_effect(method: Any, owner: Any, caller: CodeType) -> str | None:
    """:func:`effect_of` for a method called unbound, with its object (what
    ``sys.monitoring`` reports for ``db.execute(q)``): never bound here."""
    if type(owner) in _PLAIN_OWNERS or not isinstance(owner, method.__objclass__):
        return None
    return _effect(method, owner, caller)


def _effect(fn: Any, owner: Any, caller: CodeType) -> str | None:
    if fn is builtins.__import__:  # (the user's own: libraries import lazily as they run)
        return "imports by calling __import__" if is_user_code(caller) else None
    if fn in _WARN:  # (whatever the filters say now: a replay would not warn at all)
        return "warns (warnings.warn)" if is_user_code(caller) else None
    if fn in _INTERPRETER:
        return _INTERPRETER[fn] if is_user_code(caller) else None
    if isinstance(owner, type) and fn.__name__ == "__subclasses__":  # (a registry's)
        return "reads a class's subclasses (__subclasses__)" if is_user_code(caller) else None
    found = _FUNCTIONS.get(fn)
    if found is not None:
        return found
    if type(owner) is ModuleType:
        if owner.__name__ in _OS_MODULES:
            if fn.__name__ not in _OS_PURE:
                return f"asks the operating system ({owner.__name__}.{fn.__name__})"
            return None
        if owner.__name__ in _IO_MODULES:  # (sqlite3.connect creates its file)
            if fn.__name__ not in _IO_PURE:
                return f"does I/O ({owner.__name__}.{fn.__name__})"
            return None
        return _STATE_MODULES.get(owner.__name__)
    if isinstance(owner, random.Random):
        return "draws random numbers (random)"
    if type(owner) is contextvars.ContextVar and fn.__name__ == "get":
        # (numpy's print options are one: ``np.get_printoptions()``, ``array2string``)
        return "reads a context variable (ContextVar.get)"
    if type(owner).__module__ == "decimal":  # (a Decimal's or a Context's method)
        return _STATE_MODULES["decimal"]
    if type(owner) is np.ndarray and fn.__name__ == "tofile":
        return "writes files"
    if isinstance(owner, io.IOBase) or type(owner).__module__ in _IO_MODULES:
        return "does I/O"
    if isinstance(owner, type) and owner.__module__ == "datetime" and fn.__name__ in _DATETIME_NOW:
        return "reads the clock"
    return None


_WARNINGS_FILE = os.path.normcase(getattr(sys.modules["warnings"], "__file__", "") or "")
#: Showing a warning reads the source line through linecache (and tokenize's open).
_SOURCE_FILES = {os.path.normcase(getattr(m, "__file__", "") or "") for m in (linecache, tokenize)}


_IMPORT_MODULE = importlib.import_module.__code__
_IMPORTLIB_DIR = os.path.dirname(os.path.normcase(importlib.__file__ or "")) + os.sep
#: ... the import system's: ``importlib.resources`` and ``importlib.metadata`` read the
#: files the user names (a package's data, a distribution's version), which change.
_IMPORTLIB_READERS = tuple(_IMPORTLIB_DIR + n for n in ("resources", "metadata"))
#: JAX's tree utilities call the functions they are given (``tree_map(print, xs)``): their
#: frames are the caller's, neither JAX's machinery nor the user's.
_JAX_CALLERS = tuple(
    os.path.normcase(os.path.join(*p))
    for p in (("_src", "tree_util.py"), ("_src", "tree.py"), ("tree_util.py",), ("tree.py",))
)


#: The package's directory: calls made in its code are never the user's effects.
#: :class:`_CallEvent` compares a code's file with it as it comes (it must make no call);
#: :func:`_machinery` and the recording's boundary compare it ``normcase``d.
_PACKAGE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "")
_PACKAGE_LEN = len(_PACKAGE)
_OWN_DIR = os.path.normcase(_PACKAGE)
_machinery_dirs: dict[str, str] = {}


def _machinery(code: CodeType) -> bool:
    """Calls made by machinery, not effects a replay must repeat: the ``warnings``
    module's output and the source line it shows (read through ``linecache``: a replay
    warns through numpy itself, and Python shows a warning once per place anyway), the
    file reads of a first import, ipyrefresh's own work, and JAX's tracing and compiling
    (its clocks, logs and caches; what a jitted function does at run time is JAX's
    business, ``jax.debug.print`` included), except JAX's functions that do what the user
    asks of them: :func:`_jax_runs_the_users`."""
    name = os.path.normcase(code.co_filename)
    if (
        name == _WARNINGS_FILE
        or name in _SOURCE_FILES
        or name.startswith("<frozen importlib")
        or (name.startswith(_IMPORTLIB_DIR) and not name.startswith(_IMPORTLIB_READERS))
        or name.startswith(_OWN_DIR)
    ):
        return True
    for package in ("jax", "jaxlib"):
        module = sys.modules.get(package)
        if module is not None and package not in _machinery_dirs:
            path = getattr(module, "__file__", None)
            _machinery_dirs[package] = (
                os.path.dirname(os.path.normcase(path)) + os.sep if path else "\0"
            )
        prefix = _machinery_dirs.get(package)
        if prefix and name.startswith(prefix):
            return not _jax_runs_the_users(code, name[len(prefix) :])
    return False


def _jax_runs_the_users(code: CodeType, path: str) -> bool:
    """JAX's code that runs what the user names: its tree utilities call the functions
    they are given (``tree_map(print, xs)``), ``jnp.load`` reads the user's file. Their
    frames are their caller's: the walk goes on to it (JAX's own code, or the user's)."""
    if path.startswith(_JAX_CALLERS):
        return True
    load = getattr(sys.modules.get("jax.numpy"), "load", None)
    return code is getattr(load, "__code__", None)


def _called_by_machinery(code: CodeType) -> bool:
    """:func:`_by_machinery` for a ``sys.monitoring`` call event of ``code``."""
    frame = sys._getframe(3)  # (past _on_call and _CallEvent.__del__: the calling frame)
    return _by_machinery(frame) if frame.f_code is code else _machinery(code)


def _by_machinery(frame: FrameType) -> bool:
    """Whether a call made in ``frame`` is machinery's: made by machinery code itself, or
    by library code machinery called (the standard library's glob or importlib.metadata
    under JAX's backend set-up, ``os.environ`` read by JAX's config), with no user code
    (nor ipyrefresh's, which runs the user's) in between. A call user code makes itself
    is the user's, whoever called that code (JAX's tracing calls the user's function)."""
    code = frame.f_code
    if is_user_code(code):
        return False
    if _machinery(code):
        return True
    back = frame.f_back
    for _ in range(_MAX_WALK):
        if back is None:
            return False
        code = back.f_code
        if is_user_code(code) or os.path.normcase(code.co_filename).startswith(_OWN_DIR):
            return False
        if _machinery(code):
            return True
        back = back.f_back
    return False


# -- the hooks -------------------------------------------------------------------------------

_local = threading.local()


def unbracket_gc() -> None:
    """Take the garbage collection marks (:mod:`.gcmarks`) out of ``gc.callbacks`` (the
    extension unloaded), and the watch for dropped interrupts (:mod:`.droppedinterrupts`)
    off ``sys.unraisablehook``, unless a recording runs now; the next recording puts them
    back."""
    if _idle():
        gcmarks.unbracket()
        droppedinterrupts.unwatch()


#: Recordings running now, per thread (they need the garbage collection marks).
_recording_threads: dict[int, int] = {}


def _idle() -> bool:
    """No thread records now, and none of the recorder's hooks is left on (a Ctrl-C in a
    recording's cleanup can leave one: what it takes must still be made pending again)."""
    return (
        not any(_recording_threads.values())
        and _Monitor.tool is None
        and sys.getprofile() is not _profile
    )


def _active() -> list[tuple[CallLog, FrameType | None]]:
    stack: list[tuple[CallLog, FrameType | None]] | None = getattr(_local, "stack", None)
    if stack is None:
        stack = _local.stack = []
    return stack


#: Code objects of library files that the hook has nothing to do with: their "call"
#: events cost one lookup. (Code from files only: generated code comes and goes with
#: cells. Cleared when full.) Keyed by ``id``: hashing a code object hashes its bytecode
#: and constants, several times the cost of the lookup, on every call of a build; the
#: value holds the code, so no other code object can take its ``id`` while it is here.
_LIBRARY_CODE: dict[int, CodeType] = {}
_LIBRARY_CODE_MAX = 200_000


def _library(code: CodeType) -> None:
    """Remember ``code`` (not user code, not one the hooks act on) if it is a file's."""
    if not code.co_filename.startswith("<"):
        if len(_LIBRARY_CODE) >= _LIBRARY_CODE_MAX:
            _LIBRARY_CODE.clear()
        _LIBRARY_CODE[id(code)] = code


def _profile(frame: FrameType, event: str, arg: Any) -> None:
    # The hook runs for every Python and C call of the build (a million for a function
    # that loops through helpers): the common cases come first and cost a lookup.
    if event == "call":
        code = frame.f_code
        if id(code) in _LIBRARY_CODE:
            return
        if collecting():
            _ran_in_gc(code)
            return
        if is_user_frame(code, frame.f_globals):
            for log, boundary in _active():
                log.add_frame(frame, boundary)
        elif code is _IMPORT_MODULE:
            for log, _ in _active():
                log.add_import(frame)
        elif code in _PY_EFFECTS:
            _python_effect(frame)
        elif code is _NOTRACE:
            _notrace_call(frame)
        elif not is_user_code(code):
            _library(code)
    elif (
        event == "c_call"
        and type(arg) is BuiltinFunctionType
        and type(arg.__self__) not in _PLAIN_OWNERS  # (as effect_of says, with no call)
        and arg not in _NO_EFFECT
    ):
        what = effect_of(arg, frame.f_code)
        if what is not None and not collecting() and not _by_machinery(frame):
            for log, _ in _active():
                log.add_effect(what)
            _stop_if_decided()


def _ran_in_gc(code: CodeType) -> None:
    if is_user_code(code):
        for log, _ in _active():
            log.ran_in_gc = True


def _stop_if_decided() -> None:
    """Every recording running in this thread has found an effect: each will run plain
    autograd, whatever else the code does, and the profile hook costs several times
    the run (a 40,000-op simulation that prints first). Remove it; what ran before the
    effect stays recorded (its guard then says when to try a build again)."""
    stack = _active()
    if stack and all(log.effects for log, _ in stack) and sys.getprofile() is _profile:
        sys.setprofile(None)
        for log, _ in stack:
            log.cut_short = True


def _python_effect(frame: FrameType) -> None:
    """One of :data:`_PY_EFFECTS` starts in ``frame``: an effect if the caller its
    :class:`PythonEffect` names called it."""
    caller = frame.f_back
    if caller is None:
        return
    effect = _PY_EFFECTS[frame.f_code]
    by_user = is_user_code(caller.f_code)
    if effect.library_caller:
        if by_user or _by_machinery(caller):
            return
    elif not by_user:
        return
    for log, _ in _active():
        log.add_effect(effect.what)
    _stop_if_decided()  # (3.12+: the hook is sys.monitoring's, and this does nothing)


def effects_so_far() -> list[str]:
    """The effects list of this thread's innermost recording, which grows as its run goes
    on (a new empty list when nothing records here)."""
    stack = _active()
    return stack[-1][0].effects if stack else []


def reset_if_idle() -> None:
    """Remove a recording left behind in this thread by an interrupted build.

    Called between cells, when no build runs: a KeyboardInterrupt that lands in
    ``record``'s cleanup would otherwise leave the hook on for the rest of the session.
    """
    if getattr(_local, "stack", None):
        _local.stack = []
    _recording_threads.pop(threading.get_ident(), None)
    if sys.getprofile() is _profile:
        sys.setprofile(None)
    _Monitor.reset()
    if _idle():
        droppedinterrupts.unwatch()


def recording_possible() -> bool:
    """Whether :func:`record` can install its hook in this thread now."""
    if sys.version_info >= (3, 12):
        return _Monitor.tool is not None or _Monitor._free_tool() is not None
    return sys.getprofile() in (None, _profile)


@contextmanager
def record(enabled: bool = True) -> Iterator[CallLog]:
    """Record the user code entered in this thread inside the ``with`` block.

    Recordings nest (a derivative called inside a function being differentiated); the
    inner one shares the hook with the outer one.
    """
    log = CallLog()
    if not enabled:
        log.complete = False
        log.note = "recording is turned off"
        yield log
        return
    boundary = sys._getframe(1)  # the frame that opened the recording, past the entry's
    while boundary.f_code in ENTERING and boundary.f_back is not None:
        boundary = boundary.f_back
    # (No lock: a KeyboardInterrupt landing while one was held left it held for good.
    # Only this thread writes its own count; one lost to an interrupt only keeps the gc
    # callbacks in place until the next cell's reset_if_idle.)
    me = threading.get_ident()
    _recording_threads[me] = _recording_threads.get(me, 0) + 1
    try:
        gcmarks.bracket()
        droppedinterrupts.watch(_HOOKS, _hook_cut_short)
        yield from _recorded(log, boundary)
    finally:
        left = _recording_threads.get(me, 1) - 1
        if left > 0:
            _recording_threads[me] = left
        else:
            _recording_threads.pop(me, None)
            if _idle():
                droppedinterrupts.unwatch()


def _recorded(log: CallLog, boundary: FrameType) -> Iterator[CallLog]:
    """:func:`record`'s recording, its hook installed in this thread."""
    stack = _active()
    _prune(stack)
    if sys.version_info >= (3, 12):
        with _Monitor.session(log, boundary, stack):
            yield log
        return
    previous = sys.getprofile()
    if previous is not None and previous is not _profile:
        # Another profiler (cProfile, a debugger) owns the hook; don't disturb it.
        log.complete = False
        log.note = "another profiler is active"
        yield log
        return
    stack.append((log, boundary))
    if previous is None:
        sys.setprofile(_profile)
    try:
        yield log
    finally:
        _remove(stack, log)
        hook = sys.getprofile()
        if hook is not _profile and not (hook is None and log.cut_short):
            # (cProfile run inside the function)
            log.add_effect("replaces the profile hook that records its calls (a profiler)")
        elif not stack:
            sys.setprofile(None)


def _prune(stack: list[tuple[CallLog, FrameType | None]]) -> None:
    """Forget recordings an interrupt (Ctrl-C in their cleanup) left behind: those whose
    opening frame is no longer on this thread's stack."""
    if not stack:
        return
    live = set()
    frame: FrameType | None = sys._getframe()
    while frame is not None:
        live.add(id(frame))
        frame = frame.f_back
    stack[:] = [(log, b) for log, b in stack if b is None or id(b) in live]
    if not stack:
        if sys.getprofile() is _profile:
            sys.setprofile(None)
        _Monitor.reset()


def _remove(stack: list[tuple[CallLog, FrameType | None]], log: CallLog) -> None:
    for i, (other, _) in enumerate(stack):
        if other is log:
            del stack[i]
            return


class _Monitor:
    """``sys.monitoring`` (3.12+): PY_START for user code, CALL for effects."""

    tool: int | None = None
    thread: int | None = None
    depth = 0

    @classmethod
    def _free_tool(cls) -> int | None:
        mon = sys.monitoring  # type: ignore[attr-defined,unused-ignore]
        for tool in (4, 3, 5):
            if mon.get_tool(tool) is None:
                return tool
        return None

    @classmethod
    @contextmanager
    def session(
        cls, log: CallLog, boundary: FrameType, stack: list[tuple[CallLog, FrameType | None]]
    ) -> Iterator[None]:
        mon = sys.monitoring  # type: ignore[attr-defined,unused-ignore]
        me = threading.get_ident()
        if cls.depth and cls.thread != me:
            # Another thread is building; its hooks are global. Record nothing here
            # rather than mix the two runs: the build falls back, correctly.
            log.complete = False
            log.note = "another thread was recording"
            yield
            return
        if not cls.depth:
            tool = cls._free_tool()
            if tool is None:
                log.complete = False
                log.note = "no free sys.monitoring tool id"
                yield
                return
            # (the tool is claimed before it is known here: a Ctrl-C in between leaves a
            # tool by our name, which reset() finds by that name)
            cls.tool, cls.thread = tool, me
            try:
                mon.use_tool_id(tool, _TOOL_NAME)
                mon.register_callback(tool, mon.events.PY_START, cls._start_callback(me))
                mon.register_callback(tool, mon.events.CALL, _CallEvent)
                mon.set_events(tool, mon.events.PY_START | mon.events.CALL)
            except BaseException:
                cls.reset()
                raise
        cls.depth += 1
        stack.append((log, boundary))
        try:
            yield
        finally:
            _remove(stack, log)
            cls.depth -= 1
            if not cls.depth:
                cls.reset()

    @staticmethod
    def _start_callback(thread: int) -> Callable[[CodeType, int], Any]:
        def on_start(code: CodeType, offset: int) -> Any:
            if id(code) in _LIBRARY_CODE:
                return None
            if code is _IMPORT_MODULE or code in _PY_EFFECTS or code is _NOTRACE:
                frame = sys._getframe(1)
                if threading.get_ident() != thread or frame.f_code is not code or collecting():
                    return None
                if code is _IMPORT_MODULE:
                    for log, _ in _active():
                        log.add_import(frame)
                elif code is _NOTRACE:
                    _notrace_call(frame)
                else:
                    _python_effect(frame)
                return None
            if not is_user_code(code):
                _library(code)
                return None
            if threading.get_ident() != thread:
                return None
            if collecting():
                _ran_in_gc(code)
                return None
            frame = sys._getframe(1)
            if frame.f_code is code and is_user_frame(code, frame.f_globals):
                for log, boundary in _active():
                    log.add_frame(frame, boundary)
            return None

        return on_start

    @classmethod
    def reset(cls) -> None:
        """Stop monitoring: every tool id registered by our name is freed (an interrupt can
        land between claiming a tool and noting which one it is)."""
        if sys.version_info < (3, 12):
            return
        mon = sys.monitoring  # type: ignore[attr-defined,unused-ignore]
        cls.tool, cls.thread, cls.depth = None, None, 0
        for tool in range(6):
            if mon.get_tool(tool) == _TOOL_NAME:
                mon.set_events(tool, 0)
                mon.register_callback(tool, mon.events.PY_START, None)
                mon.register_callback(tool, mon.events.CALL, None)
                mon.free_tool_id(tool)


class _CallEvent(BaseException):
    """``sys.monitoring``'s CALL callback (3.12+): the event is an object built in C, and the
    work is its ``__del__``'s, run as the monitoring drops it.

    A CALL callback that raises makes CPython (3.12.1 and 3.13.0 at least) free the iterable
    of an ``f(*iterable)`` call once too often (``INSTRUMENTED_CALL_FUNCTION_EX``'s error
    path); the frame that still holds it (autograd's ``notrace_primitive`` wrapper holds a
    ``map``) crashed the next garbage collection (CI, 3.12 and 3.13). A Python callback can
    always raise: a pending Ctrl-C is handled as it starts. Building this object runs no
    bytecode, so no signal is handled there; what ``__del__`` raises CPython reports to
    ``sys.unraisablehook``, where a Ctrl-C is made pending again and the recording marked cut
    short (:mod:`.droppedinterrupts`). A ``BaseException`` subclass: its constructor takes
    the event's four arguments as they come.

    It dies after the monitoring has let go of the thread (3.12): the calls ``__del__``
    makes are events too, whose own ``__del__`` returns at once, as ipyrefresh's own (a
    flag set and reset around the work stayed set when a debugger's trace function raised
    in the reset, and every later effect went unseen)."""

    def __del__(self) -> None:
        code, _, fn, arg0 = self.args
        if code.co_filename[:_PACKAGE_LEN] == _PACKAGE:  # (no call, so no event)
            return  # ipyrefresh's own calls: this one's among them, an event too on 3.12
        match fn:  # (no call either: most events end here, having made none)
            case BuiltinFunctionType():
                if fn in _NO_EFFECT:
                    return
            case MethodDescriptorType():
                pass
            case _:
                return
        try:
            _on_call(code, fn, arg0)
        except Exception as exc:  # (CPython would drop it: the recordings must say so)
            _recordings_missed(f"the call recorder failed ({type(exc).__name__}: {exc})")


def _on_call(code: CodeType, fn: Any, arg0: Any) -> None:
    """``code`` calls the C function ``fn``: an effect of the recordings', if it is one."""
    kind = type(fn)
    if kind is BuiltinFunctionType:
        what = effect_of(fn, code)
    elif kind is MethodDescriptorType:  # (``db.execute(q)``: the method, unbound)
        what = method_effect(fn, arg0, code)
    else:
        return
    if (
        what is not None
        and threading.get_ident() == _Monitor.thread
        and not collecting()
        and not _called_by_machinery(code)
    ):
        for log, _ in _active():
            log.add_effect(what)


# A hook a Ctrl-C left on (outside IPython, where no cell resets it) would run while the
# interpreter tears this module down.
atexit.register(_Monitor.reset)


def _hook_cut_short() -> None:
    """A Ctrl-C cut one of the hooks short."""
    _recordings_missed("a Ctrl-C cut the recorder's hook short")


def _recordings_missed(why: str) -> None:
    """An event of this thread's recordings went unseen: they prove nothing (their builds
    run plain autograd, and say ``why``)."""
    for log, _ in _active():
        log.complete = False
        log.note = why


#: The code of the recorder's hooks: a KeyboardInterrupt with one of them on its traceback
#: was taken by a hook (see :mod:`.droppedinterrupts`).
_HOOKS = frozenset(
    {
        _profile.__code__,
        _Monitor._start_callback(0).__code__,
        _CallEvent.__del__.__code__,
        _on_call.__code__,
    }
)
