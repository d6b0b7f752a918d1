"""The kernel side of the status-bar item: the ``ipyrefresh`` comm in a real kernel.

A jupyter_client speaks the comm protocol exactly as JupyterLab's front end does (comm_open
on the shell channel, comm_msg back on iopub); the numbers it gets are checked against
``ipyrefresh.status()`` in the same kernel and against a fresh autograd computation.
"""

from __future__ import annotations

import json
import queue
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from ipyrefresh.ipython.comm import MAX_ENTRIES, SCHEMA, TARGET, status_message

from .kernels import start_kernel

pytestmark = pytest.mark.kernel


class Kernel:
    def __init__(self) -> None:
        self.km, self.kc = start_kernel(timeout=60)
        self.pending: list[dict[str, Any]] = []
        self.replies: dict[str, dict[str, Any]] = {}  # shell replies read ahead of their turn

    def stop(self) -> None:
        self.kc.stop_channels()
        self.km.shutdown_kernel(now=True)

    def run(self, code: str) -> str:
        """Execute ``code``; return its stdout; fail on an error. Comm traffic is kept."""
        msg_id = self.kc.execute(code)
        out: list[str] = []
        while True:
            msg = self.kc.get_iopub_msg(timeout=60)
            if msg["parent_header"].get("msg_id") != msg_id:
                self.pending.append(msg)
                continue
            kind = msg["msg_type"]
            if kind == "stream" and msg["content"]["name"] == "stdout":
                out.append(msg["content"]["text"])
            elif kind == "error":
                raise AssertionError("\n".join(msg["content"]["traceback"]))
            elif kind in ("comm_msg", "comm_open", "comm_close"):
                self.pending.append(msg)
            elif kind == "status" and msg["content"]["execution_state"] == "idle":
                break
        reply = self.kc.get_shell_msg(timeout=60)
        assert reply["content"]["status"] == "ok", reply["content"]
        return "".join(out)

    def value(self, expr: str) -> Any:
        return json.loads(self.run(f"import json as _j; print(_j.dumps({expr}))").strip())

    def open_comm(self, data: dict[str, Any] | None = None) -> str:
        comm_id = uuid.uuid4().hex
        content = {"comm_id": comm_id, "target_name": TARGET, "data": data or {"type": "request"}}
        self.kc.shell_channel.send(self.kc.session.msg("comm_open", content))
        return comm_id

    def send(self, comm_id: str, data: dict[str, Any]) -> None:
        content = {"comm_id": comm_id, "data": data}
        self.kc.shell_channel.send(self.kc.session.msg("comm_msg", content))

    def comm_traffic(self, timeout: float = 2.0) -> Iterator[dict[str, Any]]:
        """Comm messages seen so far plus those arriving within ``timeout`` seconds."""
        while self.pending:
            msg = self.pending.pop(0)
            if msg["msg_type"].startswith("comm_"):
                yield msg
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            try:
                msg = self.kc.get_iopub_msg(timeout=left)
            except queue.Empty:
                return
            if msg["msg_type"].startswith("comm_"):
                yield msg

    def next_data(self, comm_id: str, kind: str, timeout: float = 10.0) -> dict[str, Any]:
        for msg in self.comm_traffic(timeout):
            c = msg["content"]
            if c.get("comm_id") == comm_id and c.get("data", {}).get("type") == kind:
                return dict(c["data"])
        raise AssertionError(f"no {kind!r} message on comm {comm_id}")

    def statuses(self, comm_id: str, timeout: float = 1.0) -> list[dict[str, Any]]:
        return [
            m["content"]["data"]
            for m in self.comm_traffic(timeout)
            if m["msg_type"] == "comm_msg"
            and m["content"]["comm_id"] == comm_id
            and m["content"]["data"].get("type") == "status"
        ]


@pytest.fixture
def kernel() -> Iterator[Kernel]:
    k = Kernel()
    try:
        yield k
    finally:
        k.stop()


SETUP = """
import autograd.numpy as np
from ipyrefresh import grad
def g(x):
    return np.sin(x) * x
def h(x):
    return g(x) ** 2 + 1.0
dh = grad(h)
dh(0.7)
"""


def _reference(g_src: str) -> float:
    """d/dx h at 0.7 by a fresh autograd computation of the given g."""
    import autograd
    import autograd.numpy as anp

    ns: dict[str, Any] = {"np": anp}
    exec(g_src + "\ndef h(x):\n    return g(x) ** 2 + 1.0\n", ns)
    return float(autograd.grad(ns["h"])(0.7))


def test_without_ipyrefresh_the_kernel_refuses_the_comm(kernel: Kernel) -> None:
    comm_id = kernel.open_comm()
    closes = [
        m
        for m in kernel.comm_traffic(5.0)
        if m["msg_type"] == "comm_close" and m["content"]["comm_id"] == comm_id
    ]
    assert closes, "a kernel without ipyrefresh must close the comm (the front end shows off)"


def test_status_after_cells_stale_reason_and_fresh_again(kernel: Kernel) -> None:
    kernel.run("%load_ext ipyrefresh")
    # %load_ext in a kernel announces itself: the kernel opens a comm of its own.
    opens = [m for m in kernel.comm_traffic(2.0) if m["msg_type"] == "comm_open"]
    assert opens and opens[0]["content"]["target_name"] == TARGET
    assert opens[0]["content"]["data"]["type"] == "status"

    comm_id = kernel.open_comm()
    first = kernel.next_data(comm_id, "status")
    assert first["schema"] == SCHEMA
    assert (first["fresh"], first["stale"], first["total"]) == (0, 0, 0)

    kernel.run(SETUP)
    [after_setup] = kernel.statuses(comm_id)
    assert (after_setup["fresh"], after_setup["stale"]) == (1, 0)
    assert after_setup["entries"][0]["name"] == "grad(h)"

    # Redefine the callee: one message after the cell says grad(h) is stale, and why.
    kernel.run("def g(x):\n    return np.cos(x) * x\n")
    msgs = kernel.statuses(comm_id)
    assert len(msgs) == 1, msgs  # at most one update per cell, whatever the engine did
    stale = msgs[0]
    assert (stale["fresh"], stale["stale"]) == (0, 1)
    [entry] = stale["entries"]
    assert entry["state"] == "stale"
    assert any(r["what"] == "g redefined" for r in entry["reasons"]), entry
    # The same numbers as ipyrefresh.status() in the kernel (the source of truth).
    truth = kernel.value("__import__('ipyrefresh').status()")
    assert (truth["fresh"], truth["stale"]) == (stale["fresh"], stale["stale"])

    # Calling the derivative rebuilds it; the next message says fresh, and the value is
    # that of a fresh autograd computation of the new code.
    value = kernel.value("float(dh(0.7))")
    assert value == pytest.approx(_reference("def g(x):\n    return np.cos(x) * x\n"))
    fresh = kernel.statuses(comm_id)[-1]
    assert (fresh["fresh"], fresh["stale"]) == (1, 0)
    assert fresh["seq"] > stale["seq"]

    # A cell that changes nothing sends nothing.
    kernel.run("1 + 1")
    assert kernel.statuses(comm_id) == []


IN_PLACE = """
import autograd.numpy as np
from ipyrefresh import grad
W = np.ones(3)
P = {"scale": np.ones(3)}
class Model:
    pass
m = Model()
m.w = np.ones(3)
def f_w(x):
    return np.sum(W * x ** 2)
def f_p(x):
    return np.sum(P["scale"] * x ** 2)
def f_m(x):
    return np.sum(m.w * x ** 2)
handles = [grad(f_w), grad(f_p), grad(f_m)]
x0 = np.arange(1.0, 4.0)
_ = [d(x0) for d in handles]
"""


def test_arrays_changed_in_place_reach_the_status_bar(kernel: Kernel) -> None:
    # The status bar must not call fresh a derivative whose next answer is not its cached
    # one: an array it reads, changed in place (a global, a dict's item, an attribute),
    # makes it stale as the cell ends, as ipyrefresh.status() says.
    kernel.run("%load_ext ipyrefresh\n" + IN_PLACE)
    comm_id = kernel.open_comm()
    first = kernel.next_data(comm_id, "status")
    assert (first["fresh"], first["stale"]) == (3, 0)
    changes = [
        ("W[0] = 5.0", "grad(f_w)"),
        ('P["scale"][1] = 3.0', "grad(f_p)"),
        ("m.w[:] = 2.0", "grad(f_m)"),
    ]
    for n, (change, name) in enumerate(changes, start=1):
        kernel.run(change)
        [msg] = kernel.statuses(comm_id)
        assert (msg["fresh"], msg["stale"]) == (3 - n, n), (change, msg)
        stale = {e["name"]: e for e in msg["entries"] if e["state"] == "stale"}
        assert name in stale and "changed in place" in str(stale[name]["reasons"]), msg
        truth = kernel.value("__import__('ipyrefresh').status()")
        assert (truth["fresh"], truth["stale"]) == (msg["fresh"], msg["stale"])
    # The answers are those of a fresh autograd computation of the data of now.
    got = kernel.value("[d(x0).tolist() for d in handles]")
    want = kernel.value("[__import__('autograd').grad(f)(x0).tolist() for f in (f_w, f_p, f_m)]")
    assert got == want and got[0] != [2.0, 4.0, 6.0]  # (W as it was: stale)


def test_refresh_from_the_front_end(kernel: Kernel) -> None:
    kernel.run("%load_ext ipyrefresh\n" + SETUP)
    comm_id = kernel.open_comm()
    kernel.next_data(comm_id, "status")
    kernel.run("def g(x):\n    return np.tanh(x) * x\n")
    assert kernel.statuses(comm_id)[-1]["stale"] == 1

    kernel.send(comm_id, {"type": "refresh", "name": None})
    report = kernel.next_data(comm_id, "refreshed")
    assert report["rebuilt"] == ["grad(h)"] and report["failed"] == []
    status = kernel.next_data(comm_id, "status")
    assert (status["fresh"], status["stale"]) == (1, 0)
    # The refreshed artifact gives the new code's derivative without another rebuild.
    before = kernel.value("__import__('ipyrefresh').status()['rebuilds']")
    value = kernel.value("float(dh(0.7))")
    assert value == pytest.approx(_reference("def g(x):\n    return np.tanh(x) * x\n"))
    assert kernel.value("__import__('ipyrefresh').status()['rebuilds']") == before

    kernel.send(comm_id, {"type": "request"})
    assert kernel.next_data(comm_id, "status")["fresh"] == 1
    kernel.send(comm_id, {"type": "bogus"})
    assert "bogus" in kernel.next_data(comm_id, "error")["message"]
    # (Hunt 61: a name that is not a string refreshed every stale derivative.)
    kernel.run("def g(x):\n    return np.sin(x) * x\n")
    for name in (123, ["h"]):
        kernel.send(comm_id, {"type": "refresh", "name": name})
        assert "string" in kernel.next_data(comm_id, "error")["message"]
    assert kernel.value("__import__('ipyrefresh').status()['stale']") == 1


def test_unload_says_so_and_closes(kernel: Kernel) -> None:
    kernel.run("%load_ext ipyrefresh")
    comm_id = kernel.open_comm()
    kernel.next_data(comm_id, "status")
    kernel.run("%unload_ext ipyrefresh")
    traffic = list(kernel.comm_traffic(2.0))
    kinds = [
        (m["msg_type"], m["content"].get("data", {}).get("type"))
        for m in traffic
        if m["content"].get("comm_id") == comm_id
    ]
    assert ("comm_msg", "unloaded") in kinds
    assert any(k == "comm_close" for k, _ in kinds)
    # Unloaded: the target is gone, a new comm is refused.
    again = kernel.open_comm()
    assert any(
        m["msg_type"] == "comm_close" and m["content"]["comm_id"] == again
        for m in kernel.comm_traffic(5.0)
    )


def test_status_message_is_small_and_puts_stale_first() -> None:
    entries = [
        {"id": i, "name": f"grad(f{i})", "target": f"f{i}", "state": "fresh", "reasons": []}
        for i in range(3 * MAX_ENTRIES)
    ]
    entries[250]["state"] = "stale"
    entries[250]["reasons"] = ["x" * 1000, "b", "c", "d", "e"]
    entries[7]["state"] = "error"
    entries[7]["error"] = "TypeError: nope"
    msg = status_message({"entries": entries, "world": 3, "changes": ["a"] * 50}, seq=4)
    assert (msg["fresh"], msg["stale"], msg["failed"], msg["total"]) == (298, 1, 1, 300)
    assert [e["state"] for e in msg["entries"][:2]] == ["failed", "stale"]
    assert len(msg["entries"]) == MAX_ENTRIES and msg["truncated"] == 200
    reasons = msg["entries"][1]["reasons"]
    assert len(reasons) == 3 and len(reasons[0]["text"]) <= 200
    assert len(msg["changes"]) == 5
    assert len(json.dumps(msg)) < 20_000


def test_terminal_ipython_loads_and_unloads_without_a_trace(bare_shell: Any) -> None:
    """Without a kernel there is no front end: the comm target is there, nothing is sent,
    and unloading removes the target, the engine listener and the cell callback."""
    import comm

    from ipyrefresh._src.engine import current as get_engine

    shell = bare_shell.shell
    manager = comm.get_comm_manager()
    callbacks = list(shell.events.callbacks["post_run_cell"])
    listeners = list(get_engine().listeners)

    bare_shell.run("%load_ext ipyrefresh")
    from ipyrefresh.ipython.extension import current_extension

    ext = current_extension()
    assert ext is not None
    [channel] = [x for x in ext.extras if type(x).__name__ == "StatusChannel"]
    assert TARGET in manager.targets
    assert channel.comms == []  # no kernel: no announcement
    bare_shell.run(SETUP)
    assert channel.dirty  # the build marked it; with nobody listening nothing was sent
    assert channel.sent == 0

    bare_shell.run("%unload_ext ipyrefresh")
    assert TARGET not in manager.targets
    assert list(get_engine().listeners) == listeners
    assert list(shell.events.callbacks["post_run_cell"]) == callbacks


def test_comms_of_pages_that_went_away_are_bounded(kernel: Kernel) -> None:
    """Each page load opens a comm; a page closed without closing it leaves it open. The
    kernel keeps at most MAX_COMMS, closing the oldest, so per-cell traffic stays bounded."""
    from ipyrefresh.ipython.comm import MAX_COMMS

    kernel.run("%load_ext ipyrefresh")
    ids = [kernel.open_comm() for _ in range(MAX_COMMS + 3)]
    traffic = list(kernel.comm_traffic(5.0))
    closed = {m["content"]["comm_id"] for m in traffic if m["msg_type"] == "comm_close"}
    assert set(ids[:3]) <= closed and not closed & set(ids[3:])
    kernel.run(SETUP)
    updated = {
        m["content"]["comm_id"]
        for m in kernel.comm_traffic(2.0)
        if m["msg_type"] == "comm_msg" and m["content"]["data"]["type"] == "status"
    }
    assert updated == set(ids[3:])


def test_status_version_1_and_2_give_the_same_message() -> None:
    """Today's engine says version 1 (reasons are strings, a world number, "error"); the
    rewrite says version 2 (reason dicts with cell ids, "failed", a backend). The front end
    gets one shape from both, and never the world number."""
    from ipyrefresh.ipython.comm import CellIds

    cells = CellIds()
    cells.record(6, "id-six")
    v1 = {
        "version": 1,
        "world": 9,
        "mode": "lazy",
        "compiler": "tape",
        "entries": [
            {"id": 1, "name": "grad(h)", "target": "h", "state": "stale",
             "reasons": ["g redefined in cell [6]"], "error": None},
            {"id": 2, "name": "grad(k)", "target": "k", "state": "error",
             "reasons": ["a rebound"], "error": "ZeroDivisionError: boom"},
        ],
        "changes": ["g redefined in cell [6]", "a rebound"],
    }  # fmt: skip
    v2 = {
        "version": 2,
        "mode": "lazy",
        "compiler": "tape",
        "backend": "autograd",
        "internal_errors": 1,
        "entries": [
            {"id": 1, "name": "grad(h)", "target": "h", "state": "stale",
             "reasons": [{"text": "g redefined in cell [6]", "subject": "g", "cell": 6,
                          "cell_id": None}], "error": ""},
            {"id": 2, "name": "grad(k)", "target": "k", "state": "failed",
             "reasons": [{"text": "a rebound", "subject": "a", "cell": None,
                          "cell_id": None}], "error": "ZeroDivisionError: boom"},
            {"id": 3, "name": "grad(m)", "target": "m", "state": "unbuilt", "reasons": [],
             "error": ""},
        ],
        "changes": [{"text": "g redefined in cell [6]", "subject": "g", "cell": 6,
                     "cell_id": "from-engine"}],
    }  # fmt: skip
    a = status_message(v1, seq=1, instance="x", req=7, cells=cells)
    b = status_message(v2, seq=2, instance="x", cells=cells)
    for msg in (a, b):
        assert "world" not in json.dumps(msg)
        assert msg["schema"] == SCHEMA == 2
        failed, stale = msg["entries"][:2]
        assert (failed["state"], stale["state"]) == ("failed", "stale")
        assert failed["error"] == "ZeroDivisionError: boom"
        [reason] = stale["reasons"]
        assert reason["text"] == "g redefined in cell [6]"
        assert reason["what"] == "g redefined"
        assert (reason["cell"], reason["cell_id"]) == (6, "id-six")
        assert failed["reasons"][0]["cell"] is None
        assert failed["reasons"][0]["cell_id"] is None
    assert (a["fresh"], a["stale"], a["failed"], a["unbuilt"], a["total"]) == (0, 1, 1, 0, 2)
    assert (b["fresh"], b["stale"], b["failed"], b["unbuilt"], b["total"]) == (0, 1, 1, 1, 3)
    assert (a["req"], b["req"]) == (7, None)
    assert a["entries"][0]["reasons"][0] == {
        "text": "a rebound", "what": "a rebound", "subject": "", "cell": None, "cell_id": None
    }  # fmt: skip
    assert b["entries"][0]["reasons"][0]["subject"] == "a"
    assert (b["backend"], b["internal_errors"]) == ("autograd", 1)
    # A cell id the engine knows wins over the one recorded here.
    assert b["changes"][0]["cell_id"] == "from-engine"


def _execute(kernel: Kernel, code: str, cell_id: str | None = None, subshell: str | None = None):
    """Send an execute_request as JupyterLab does (the cell id in the metadata); no wait."""
    content = {"code": code, "silent": False, "store_history": True, "user_expressions": {},
               "allow_stdin": False, "stop_on_error": True}  # fmt: skip
    msg = kernel.kc.session.msg(
        "execute_request", content, metadata={"cellId": cell_id} if cell_id else {}
    )
    if subshell:
        msg["header"]["subshell_id"] = subshell
    kernel.kc.shell_channel.send(msg)
    return msg["header"]["msg_id"]


def _wait_iopub(kernel: Kernel, parent: str, kind: str, timeout: float = 30.0) -> None:
    """Read IOPub until a ``kind`` message whose parent is ``parent``; keep the others."""
    deadline = time.monotonic() + timeout
    while (left := deadline - time.monotonic()) > 0:
        msg = kernel.kc.get_iopub_msg(timeout=left)
        if msg["msg_type"] == kind and msg["parent_header"].get("msg_id") == parent:
            return
        kernel.pending.append(msg)
    raise AssertionError(f"no {kind!r} for {parent}")


def _wait_reply(kernel: Kernel, parent: str, timeout: float = 60.0) -> dict[str, Any]:
    """The shell reply to ``parent``; replies to other requests are kept for their turn."""
    replies = kernel.replies
    deadline = time.monotonic() + timeout
    while parent not in replies:
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(f"no reply to {parent}")
        msg = kernel.kc.get_shell_msg(timeout=left)
        replies[msg["parent_header"].get("msg_id")] = dict(msg["content"])
    return dict(replies.pop(parent))


def test_reasons_name_the_cell_by_its_id(kernel: Kernel) -> None:
    kernel.run("%load_ext ipyrefresh\n" + SETUP)
    comm_id = kernel.open_comm({"type": "request", "req": 1})
    assert kernel.next_data(comm_id, "status")["req"] == 1
    parent = _execute(kernel, "def g(x):\n    return np.cos(x) * x\n", cell_id="the-g-cell")
    assert _wait_reply(kernel, parent)["status"] == "ok"
    [stale] = kernel.statuses(comm_id)
    [reason] = stale["entries"][0]["reasons"]
    assert reason["what"] == "g redefined" and reason["cell_id"] == "the-g-cell", reason
    assert reason["text"] == f"g redefined in cell [{reason['cell']}]"


def _create_subshell(kernel: Kernel) -> str:
    import importlib.metadata

    major = int(importlib.metadata.version("ipykernel").split(".")[0])
    if major < 7:  # the kernel runs in this environment
        pytest.skip("kernel subshells need ipykernel 7 (earlier kernels have none to use)")
    kernel.kc.control_channel.send(kernel.kc.session.msg("create_subshell_request", {}))
    reply = kernel.kc.get_control_msg(timeout=30)
    assert reply["content"]["status"] == "ok", reply["content"]
    return str(reply["content"]["subshell_id"])


def test_a_refresh_sent_over_a_subshell_waits_for_the_running_cell(kernel: Kernel) -> None:
    """JupyterLab may send comm messages over a kernel subshell, whose thread runs beside
    the user's cell. A refresh must not rebuild derivatives from the namespace while the
    cell is changing it: the kernel queues it on the main thread until the cell is done."""
    kernel.run("%load_ext ipyrefresh\n" + SETUP + "\nimport threading\ngate = threading.Event()")
    comm_id = kernel.open_comm()
    kernel.next_data(comm_id, "status")
    kernel.run("def g(x):\n    return np.tanh(x) * x\n")
    assert kernel.statuses(comm_id)[-1]["stale"] == 1
    subshell = _create_subshell(kernel)

    cell = _execute(kernel, "assert gate.wait(60)")  # the main thread is busy in a cell
    _wait_iopub(kernel, cell, "execute_input")
    refresh = kernel.kc.session.msg(
        "comm_msg", {"comm_id": comm_id, "data": {"type": "refresh", "name": None, "req": 9}}
    )
    refresh["header"]["subshell_id"] = subshell
    kernel.kc.shell_channel.send(refresh)
    # The subshell handles messages in order: once it runs the next one, it has handled
    # the refresh, and anything that refresh sent is on IOPub before this cell's input.
    probe = _execute(kernel, "pass", subshell=subshell)
    _wait_iopub(kernel, probe, "execute_input")
    early = [
        m for m in kernel.pending
        if m["msg_type"] == "comm_msg" and m["content"]["data"].get("type") == "refreshed"
    ]  # fmt: skip
    assert early == [], "the refresh ran beside the running cell"

    opener = _execute(kernel, "gate.set()", subshell=subshell)
    assert _wait_reply(kernel, opener)["status"] == "ok"
    assert _wait_reply(kernel, cell)["status"] == "ok"
    report = kernel.next_data(comm_id, "refreshed")
    assert report["req"] == 9 and report["rebuilt"] == ["grad(h)"], report
    assert kernel.next_data(comm_id, "status")["stale"] == 0
