"""Long sessions: thousands of redefinitions and huge namespaces stay cheap and bounded."""

from __future__ import annotations

import gc
import sys
import tracemalloc
import weakref
from types import FrameType
from typing import Any

import autograd
import numpy as onp
import pytest

import ipyrefresh
from ipyrefresh._src import code
from ipyrefresh._src.engine import current
from ipyrefresh._src.quietweak import QuietWeakSet

pytestmark = [pytest.mark.slow, pytest.mark.memory]

_PACKAGE = str(__import__("pathlib").Path(ipyrefresh.__file__).parent)


def ipyrefresh_bytes(snapshot: tracemalloc.Snapshot) -> int:
    """Memory still allocated by ipyrefresh's own code, less one table of the
    interpreter's: a ``compile()`` of a generated guard interns its names, and can be
    the call that grows the interpreter's table of interned strings (one block of a
    megabyte or two, seen after the tests whose guards had thousands of names). A leak
    is a block, or several, per cell: it is not one block."""
    traces = snapshot.filter_traces([tracemalloc.Filter(True, f"{_PACKAGE}/*")])
    sizes = [trace.size for trace in traces.traces]
    largest = max(sizes, default=0)
    return sum(sizes) - (largest if largest >= 1 << 20 else 0)


def test_thousands_of_redefinitions_keep_nothing_dead_alive(ip: Any) -> None:
    ip.run(
        "def helper(x):\n    return np.sin(x)\n"
        "def h(x):\n    return helper(x) * 2.0\n"
        "dh = grad(h)\nfrom ipyrefresh import hessian\nd2h = hessian(h)"
    )
    dead: list[weakref.ref[Any]] = []
    checkpoints: dict[int, int] = {}
    tracemalloc.start()
    try:
        for i in range(2500):
            # A new helper every cell, a new h every tenth cell, new data every 50th.
            ip.shell.run_cell(f"def helper(x):\n    return np.sin(x) * {i % 7 + 1}.0", silent=False)
            if i % 10 == 0:
                ip.shell.run_cell(f"def h(x):\n    return helper(x) * {i % 3 + 2}.0")
            if i % 50 == 0:
                ip.shell.run_cell(f"W = np.ones({i % 5 + 1})")
            ip.shell.run_cell("_r = dh(0.3); _r2 = d2h(0.3)")
            # With a callback: a weakref of its own (plain ones are shared with ipyrefresh's).
            dead.append(weakref.ref(ip.ns["helper"], lambda _: None))
            if i in (500, 2499):
                gc.collect()
                checkpoints[i] = ipyrefresh_bytes(tracemalloc.take_snapshot())
    finally:
        tracemalloc.stop()
    assert ip.ns["_r"] == autograd.grad(ip.ns["h"])(0.3)
    assert ip.ns["_r2"] == autograd.hessian(ip.ns["h"])(0.3)
    gc.collect()
    alive = [i for i, ref in enumerate(dead) if ref() is not None]
    assert alive == [len(dead) - 1], f"{len(alive)} dead helpers kept alive"
    # Memory held by ipyrefresh's code is flat between cell 500 and cell 2500.
    growth = checkpoints[2499] - checkpoints[500]
    assert growth < 64 * 1024, f"ipyrefresh holds {growth} more bytes after 2000 more cells"
    engine = current()
    assert len(engine.changes) <= 200
    assert len(engine.cache) == 2
    # No per-cell growth of module-level caches (each cell's code has its own file name).
    assert len(code._is_user_file) < 300


def test_dead_fixed_targets_leave_the_cache(engine: Any) -> None:
    """Outside IPython a handle holds its function; dropping both frees every trace of it
    (at the next handle made: a dead handle's weakref callback only queues it, see
    ``Engine._gone``)."""
    import autograd.numpy as np

    refs = []
    for i in range(300):
        ns: dict[str, Any] = {"np": np}
        exec(f"def f(x):\n    return np.sin(x) * {i}.0", ns)
        handle = ipyrefresh.grad(ns["f"])
        value = handle(0.1)  # (not inside the assert: its rewriting keeps temporaries alive)
        assert value == pytest.approx(i * onp.cos(0.1))
        refs.append(weakref.ref(ns["f"]))
        del ns, handle
    handle = ipyrefresh.grad(lambda x: x * 2.0)  # it purges dead targets' entries
    gc.collect()
    assert sum(r() is not None for r in refs) == 0
    handle(1.0)
    assert len(engine.cache) == 1


@pytest.mark.parametrize("backend", ["autograd", "jax"])
@pytest.mark.parametrize("make", ["grad", "hessian", "jacobian"])
def test_a_dropped_handle_dies_at_once_without_a_collection(
    engine: Any, backend: str, make: str
) -> None:
    """A handle whose derivative was built dies when its last name goes, by reference
    counting: a build left no cycle that holds it (3.12: the tape's recorder kept the frames
    of ``sys._current_frames()`` in a cycle with its own frame, and with them every caller's
    locals, the handle and its function, until the next collection). (The function itself
    needs a collection: its namespace holds it.)"""
    ns: dict[str, Any] = {}
    if backend == "jax":
        jnp = pytest.importorskip("jax.numpy")
        from ipyrefresh import jax as module

        ns["np"] = jnp
    else:
        import autograd.numpy as np

        module = ipyrefresh
        ns["np"] = np
    exec("def f(x):\n    return np.sum(np.sin(x) * 2.0)", ns)
    x = onp.array([0.1, 0.2])
    enabled = gc.isenabled()
    gc.disable()
    try:
        handle = getattr(module, make)(ns["f"])
        for _ in range(3):  # built, then answered from the cache
            value = handle(x)
        assert len(engine.cache) == 1
        dead = weakref.ref(handle)
        del handle, ns
        assert dead() is None, "the handle outlived its last name"
        _ = module.grad(lambda y: y * 2.0)  # (a new handle purges dead targets' entries)
        assert len(engine.cache) == 0, "its entry outlived the handle"
    finally:
        if enabled:
            gc.enable()
    assert onp.shape(value) in {(2,), (2, 2)}


class CallCounter:
    """Counts Python and C function calls made inside a block (sys.setprofile)."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, frame: FrameType, event: str, arg: Any) -> None:
        if event in ("call", "c_call"):
            self.calls += 1

    def __enter__(self) -> CallCounter:
        sys.setprofile(self)
        return self

    def __exit__(self, *exc: Any) -> None:
        sys.setprofile(None)


def test_huge_namespace_per_cell_work_is_independent_of_its_size(ip: Any) -> None:
    ext = __import__("ipyrefresh.ipython.extension", fromlist=["x"]).current_extension()
    assert ext is not None
    ip.run("def g(x):\n    return np.sin(x)\ndef h(x):\n    return g(x) * 2.0\ndh = grad(h)")
    ip.run("dh(0.5)")

    def hook_calls() -> int:
        result = ip.shell.run_cell("pass")  # what a cell costs ipyrefresh: its post-cell hook
        with CallCounter() as counter:
            ext.post_run_cell(result)
        return counter.calls

    small = hook_calls()
    ns = ip.ns
    for i in range(100_000):
        ns[f"v{i}"] = i if i % 3 else (lambda y, i=i: y + i)
    ip.run("pass")
    big = hook_calls()
    # A scan over the namespace would make at least one call per name (100,000).
    assert big <= small + 50, (small, big)
    # The control: such a scan really is visible to the counter.
    with CallCounter() as counter:
        [id(v) for v in list(ns.values())]
    assert counter.calls > 100_000
    # And changes among the 100k names are still seen, in the cell and after it.
    ip.run("def g(x):\n    return np.cos(x)\nr = dh(0.5)")
    assert ip.ns["r"] == pytest.approx(-2 * onp.sin(0.5))
    ip.run("v5 = 1.0\ndef h(x):\n    return g(x) * v5\nr = dh(0.5)")
    assert ip.ns["r"] == pytest.approx(-onp.sin(0.5))
    ip.run("v5 = 3.0")
    ip.run("r = dh(0.5)")
    assert ip.ns["r"] == pytest.approx(-3 * onp.sin(0.5))


def test_handles_made_per_call_free_their_function_when_the_cell_ends(ip: Any) -> None:
    """Entries of a function whose handles are gone outlive the handle until the cell
    ends or the function dies (a handle made per call reuses the build), then go with
    everything they hold."""
    ip.run(
        """
import weakref, ipyrefresh
def fit(data):
    loglike = lambda w: np.sum(np.sin(w * data))
    step = lambda w: grad(loglike)(w)
    return [step(w) for w in np.linspace(0.1, 1.0, 5)], weakref.ref(loglike)
before = ipyrefresh.status(check=False)['builds']
out, fn_ref = fit(np.arange(1e5))
builds = ipyrefresh.status(check=False)['builds'] - before
import gc; gc.collect()  # (3.10: executing's node finder holds step's frame in a cycle)
keep = [lambda w: np.sum(np.cos(w))]  # (fs[0]: a fixed target, not a followed name)
[grad(keep[0])(w) for w in np.linspace(0.1, 1.0, 3)]
kept = [e['builds'] for e in ipyrefresh.status(check=False)['entries']]
"""
    )
    assert ip.ns["builds"] == 1
    assert ip.ns["kept"] == [1]  # keep[0] is alive: its entry stays until the cell ends
    gc.collect()
    assert ip.ns["fn_ref"]() is None
    assert len(current().cache) == 0
    data = onp.arange(1e5)
    want = [
        autograd.grad(lambda w: autograd.numpy.sum(autograd.numpy.sin(w * data)))(w)
        for w in onp.linspace(0.1, 1.0, 5)
    ]
    assert [float(a) for a in ip.ns["out"]] == [float(b) for b in want]


def test_data_a_derivative_read_dies_after_the_cell_that_let_it_go(ip: Any) -> None:
    """In lazy mode too: ``del W, f, dh`` (or ``W`` rebound in a loop over problem sizes)
    must free the arrays after the cell, not when the stale entry is next called or
    evicted (hunt 8: a 16 MB array, and 200 MiB over a sweep of sizes, stayed alive)."""
    ip.run("import numpy as onp, weakref")
    ip.run(
        "W = onp.ones(200_000)\n"
        "def f(x):\n    return np.sum(W[:2] * np.sin(x))\n"
        "dh = grad(f)\nx = onp.array([0.3, 0.4])"
    )
    ip.run("_r = dh(x)")
    ip.run("_r = dh(x)")
    old = weakref.ref(ip.ns["W"])
    ip.run("del W, f, dh, _r")
    gc.collect()
    assert old() is None
    ip.run(
        "def f(x):\n    return np.sum(np.dot(W[: x.shape[0], : x.shape[0]], np.sin(x)))\n"
        "sizes = []\n"
        "for n in range(20, 26):\n"
        "    W = onp.ones((n, 5_000))\n"
        "    sizes.append(weakref.ref(W))\n"
        "    _g = grad(f)(onp.ones(n))\n"
        "    _g = grad(f)(onp.ones(n))"
    )
    ip.run("del W")
    gc.collect()
    assert [ref() is None for ref in ip.ns["sizes"]] == [True] * 6


@pytest.mark.parametrize("calls", [3, 130], ids=["replayed", "guard_compiled"])
def test_data_a_replay_read_dies_at_del_without_a_collection(ip: Any, calls: int) -> None:
    """Hunt 51: a generated replay (and a compiled guard) lived in the namespace it holds
    as its globals, a cycle that kept its constants (a view of W) alive until a full
    garbage collection: ``del W`` freed nothing. Plain autograd frees W at once; here
    it must be freed by the cell that lets it go, with the collector off."""
    ip.run("import numpy as onp, weakref")
    ip.run(
        "W = onp.ones(200_000)\nold = weakref.ref(W)\n"
        "def g(x):\n    return np.sum(x * W[:3])\n"
        f"dg = grad(g)\nfor _ in range({calls}):\n    _r = dg(onp.ones(3))"
    )
    assert ip.ns["dg"].entries[0].variants[0].describe().startswith("tape:")
    gc.collect()
    gc.disable()
    try:
        ip.run("del W")
        ip.run("pass")
        assert ip.ns["old"]() is None
    finally:
        gc.enable()


def test_cells_that_make_handles_do_not_keep_their_parsed_source(ip: Any) -> None:
    """``executing`` (which reads the name a handle follows from the call site) keeps
    every file it parses, every cell is a file, and two unbounded lru_caches of its own
    keep the trees too: 40 KB a cell, 146 MiB over 1,500 cells (hunt 8). Only the
    parsed copies of the last 64 cells that made a handle may stay. (The handle is made
    in a loop: ``executing`` reads those call sites; a straight-line cell's call is read
    from its own source span, parsing nothing kept.)"""
    ip.run("import numpy as onp\nx = onp.array([0.3, 0.4])")

    def cells(first: int, n: int) -> None:
        for k in range(first, first + n):
            ip.run(
                f"def f(x): return np.sum(np.sin(x) * {k}.0)\nfor _k in range(1):\n"
                "    dh = grad(f)\n_ = dh(x)\n" + 30 * "y = 1\n"
            )

    cells(0, 80)
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot()
        cells(1000, 300)
        gc.collect()
        after = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    parsed = [tracemalloc.Filter(True, "*/ast.py"), tracemalloc.Filter(True, "*/executing/*")]
    grown = sum(
        s.size_diff
        for s in after.filter_traces(parsed).compare_to(before.filter_traces(parsed), "filename")
    )
    # (the 64 cells kept: 2.4 MiB on 3.11, 3.4 MiB on 3.10; unbounded, 300 cells: 14 MiB)
    assert grown < 6 * 2**20, f"{grown / 2**20:.1f} MiB of parsed cells kept over 300 cells"
    # What ipyrefresh read from the trees goes with them (one site a cell here, or a few).
    from ipyrefresh._src import callsite

    kept = len(callsite._SITE) + len(callsite._SITES_IN)
    assert 0 < kept <= 3 * callsite._CELLS_KEPT, f"call sites of {kept} nodes kept"


def test_a_cell_run_again_unchanged_does_not_pile_up_its_code(ip: Any) -> None:
    """Hunt 67 (noted): IPython and ipykernel name a cell by its source, so a cell run again
    unchanged keeps its file name, and the bound above (by name) never came. ``executing``
    keys its cache by code object: each run of the cell that made a handle kept that run's
    code, and every code object and constant in it, for the rest of the session."""
    import gc
    import weakref

    from executing import Source

    source = (
        "def f(x):\n    return x ** 3\n"
        "hs = [grad(lambda x, j=j: f(x) * j) for j in range(3)]\n"
        "r = [h(2.0) for h in hs]\n"
    )
    runs: list[weakref.ref[Any]] = []
    for _ in range(40):
        result = ip.shell.run_cell(source, store_history=False)
        assert result.error_in_exec is None and ip.ns["r"] == [0.0, 12.0, 24.0]
        runs.append(weakref.ref(ip.ns["f"].__code__))
    name = ip.ns["f"].__code__.co_filename
    assert all(r() is not None and r().co_filename == name for r in runs[-1:])
    ip.run("pass")
    gc.collect()
    calls = Source.__dict__.get("__executing_cache", {})
    kept = [k for k in calls if k[0].co_filename == name]
    assert len(kept) <= 2, f"{len(kept)} runs of one cell kept by executing's cache"
    alive = sum(r() is not None for r in runs)
    assert alive <= 3, f"the code of {alive} of 40 runs of one cell is alive"


def test_per_cell_work_does_not_grow_with_the_number_of_derivatives(ip: Any) -> None:
    """After a cell only the entries a rebound name touched are checked (see ``watch``):
    a cell that rebinds nothing they read costs the same with 300 derivatives as with 3."""
    ext = __import__("ipyrefresh.ipython.extension", fromlist=["x"]).current_extension()
    assert ext is not None
    ip.run("import numpy as onp\nx = onp.array([0.3, 0.4])")

    def define(first: int, n: int) -> None:
        for k in range(first, first + n):
            ip.run(f"def f{k}(x): return np.sum(np.sin(x) * {k}.0)\nd{k} = grad(f{k})")
            ip.run(f"_ = d{k}(x)")

    def hook_calls() -> int:
        result = ip.shell.run_cell("y = 1")
        with CallCounter() as counter:
            ext.post_run_cell(result)
        return counter.calls

    define(0, 3)
    ip.run("pass")
    small = hook_calls()
    define(3, 297)
    ip.run("pass")
    big = hook_calls()
    assert big <= small + 50, (small, big)
    # The control: checking every entry is visible to the counter.
    with CallCounter() as counter:
        current().sweep()
    assert counter.calls > 300
    # And a rebinding among the 300 is still seen after the cell, for that entry only.
    ip.run("f7 = lambda x: np.sum(np.cos(x))")
    stale = [e["name"] for e in ipyrefresh.status(check=False)["entries"] if e["state"] != "fresh"]
    assert stale == ["grad(f7)"]
    ip.run("r = d7(x)")
    want = autograd.grad(lambda x: autograd.numpy.sum(autograd.numpy.cos(x)))(onp.array([0.3, 0.4]))
    assert list(ip.ns["r"]) == list(want)


def test_names_rebound_by_calls_modules_and_later_in_the_cell_free_their_data(
    ip: Any, modules: Any
) -> None:
    """However a name a derivative read is rebound (by a function of the user's, in a
    module, later in the cell that built it), what the stale variant held dies with the
    cell; what changed in place deeper than a name (``model.W = ...``) dies by ``%stale``
    at the latest. Every answer is compared with autograd on the objects bound then."""
    ip.run("import numpy as onp, weakref\nx = onp.array([0.3, 0.4])")
    ip.run(
        "W = onp.full(100_000, 2.0)\n"
        "def f(x):\n    return np.sum(W[:2] * np.sin(x))\n"
        "def swap(n):\n    global W\n    W = onp.full(100_000, n)\n"
        "dh = grad(f)\n_ = dh(x)"
    )

    def freed(cell: str, what: str = "W") -> bool:
        ip.run(f"old = weakref.ref({what})")
        ip.run(cell)
        gc.collect()
        return ip.ns["old"]() is None

    def answer_is_right(value: float, handle: str = "dh") -> bool:
        ip.run(f"r = {handle}(x)")
        return list(ip.ns["r"]) == list(value * onp.cos(onp.array([0.3, 0.4])))

    assert freed("swap(3.0)")  # rebound by a call
    assert answer_is_right(3.0)
    assert freed("_ = dh(x)\nswap(4.0)")  # rebuilt and rebound in the same cell
    assert answer_is_right(4.0)
    assert freed("for n in range(5, 8):\n    swap(float(n))\n    _ = dh(x)")
    assert answer_is_right(7.0)

    modules(
        "heavy",
        "import numpy\nimport autograd.numpy as np\n"
        "W = numpy.full(100_000, 2.0)\n"
        "def f(x):\n    return np.sum(W[:2] * np.sin(x))\n",
    )
    ip.run("import heavy\ndm = grad(heavy.f)\n_ = dm(x)")
    assert freed("heavy.W = onp.full(100_000, 5.0)", "heavy.W")
    assert answer_is_right(5.0, "dm")

    ip.run(
        "class Model:\n    pass\nmodel = Model()\nmodel.W = onp.full(100_000, 2.0)\n"
        "def loss(x):\n    return np.sum(model.W[:2] * np.sin(x))\n"
        "dl = grad(loss)\n_ = dl(x)"
    )
    assert freed("model.W = onp.full(100_000, 6.0)\n%stale", "model.W")
    assert answer_is_right(6.0, "dl")


def test_what_the_watch_and_released_handles_held_dies_with_the_cell_or_at_once(
    ip: Any,
) -> None:
    """Hunt 9: a handle that only a stale variant held (its data lived one cell more);
    a widget-style callback that rebinds a name between cells (the watch kept the old
    object until the next cell); and ``%unload_ext`` (the watch kept it for ever)."""
    ip.run("import numpy as onp, weakref\nx = onp.ones(3)")
    ip.run(
        "def mk(A):\n    return grad(lambda x: np.sum(A * x**2))\n"
        "A0 = onp.arange(3.0) + 1\nH = mk(A0)\n_ = H(x)\n_ = H(x)\n"
        "def f(x):\n    return np.sum(H(x) * x)\ndf = grad(f)\n_ = df(x)\n_ = df(x)\n"
        "old = weakref.ref(A0)\ndel A0"
    )
    ip.run("H = None")
    gc.collect()
    assert ip.ns["old"]() is None

    ip.run(
        "W = onp.arange(100_000.0)\n"
        "def f(x):\n    return np.sum(W[:3] * x**2)\ndf = grad(f)\n_ = df(x)\n_ = df(x)\n"
        "def on_slider(v):\n    global W\n    W = onp.arange(100_000.0) + v\n    return df(x)\n"
        "old = weakref.ref(W)"
    )
    got = ip.ns["on_slider"](1.0)  # outside any cell, as an ipywidgets callback runs
    gc.collect()
    assert ip.ns["old"]() is None
    assert list(got) == [2.0, 4.0, 6.0]

    ip.run("old = weakref.ref(W)")
    ip.run("%unload_ext ipyrefresh")
    ip.run("W = onp.arange(100_000.0) + 2\nr = df(x)")
    ip.run("pass")
    gc.collect()
    assert ip.ns["old"]() is None
    assert list(ip.ns["r"]) == [4.0, 6.0, 8.0]


def test_a_gone_name_that_no_handle_follows_leaves_the_reports(ip: Any) -> None:
    """Hunt 61: after ``del dl, loss`` nothing can call the derivative again, yet %stale
    and the status bar said it would be rebuilt at its next call, and every %refresh
    reported it failed. A handle still alive keeps it (the name may come back)."""
    ip.run("import numpy as onp\nx = onp.ones(2)")
    ip.run("def loss(x):\n    return np.sum(np.sin(x))\ndl = grad(loss)\n_ = dl(x)\n_ = dl(x)")
    ip.run("def kept(x):\n    return np.sum(x ** 3)\ndk = grad(kept)\n_ = dk(x)\n_ = dk(x)")
    ip.run("def g(x):\n    return x * 3.0")
    ip.run("%grad g(1.5)")
    assert ipyrefresh.status()["entries_total"] == 3
    ip.run("del dl, loss\ndel kept\ndel g")
    status = ipyrefresh.status()
    assert [e["name"] for e in status["entries"]] == ["grad(kept)"], status["entries"]
    failed = ipyrefresh.refresh()["failed"]
    assert [name for name, _ in failed] == ["grad(kept)"], failed  # (dk may call it again)
    ip.run("def kept(x):\n    return np.sum(x ** 2)")
    assert list(ip.run("dk(x)")) == list(autograd.grad(ip.ns["kept"])(ip.ns["x"]))


def test_the_quiet_weak_set_forgets_its_dead_members_running_no_python_code() -> None:
    """The engine's set of changed entries, on the weak cache: a member's death queues it
    from C (no Python callback, where a Ctrl-C could be taken and dropped), and the next
    use forgets it, even when its ``id`` has gone to a new object."""

    class Member:
        pass

    members = [Member() for _ in range(50)]
    quiet: QuietWeakSet[Member] = QuietWeakSet()
    quiet.update(members)
    calls: list[str] = []

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        if event == "call":
            calls.append(frame.f_code.co_name)

    kept, dead = members[:10], members[10:]
    ids = {id(m) for m in dead}
    del members
    sys.setprofile(profile)
    try:
        dead.clear()
    finally:
        sys.setprofile(None)
    assert calls == [], calls  # (no Python frame ran as they died)
    newcomers = [Member() for _ in range(200)]
    reused = [m for m in newcomers if id(m) in ids]
    assert all(m not in quiet for m in reused)
    assert sorted(map(id, quiet)) == sorted(map(id, kept))
    assert len(quiet) == 10 and len(quiet._members._items) == 10
    quiet.discard(kept[0])
    assert kept[0] not in quiet and len(quiet) == 9
