"""End to end in a real Jupyter kernel, driven over ZMQ by jupyter_client."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from .kernels import start_kernel

pytestmark = pytest.mark.kernel


class Kernel:
    def __init__(self) -> None:
        self.km, self.kc = start_kernel(timeout=60)

    def run(self, code: str) -> dict[str, Any]:
        """Execute a cell; collect stdout, the result's text, and any error."""
        out: dict[str, Any] = {"stdout": "", "stderr": "", "result": None, "error": None}

        def hook(msg: dict[str, Any]) -> None:
            kind, content = msg["msg_type"], msg["content"]
            if kind == "stream":
                out[content["name"]] += content["text"]
            elif kind == "execute_result":
                out["result"] = content["data"].get("text/plain")
            elif kind == "error":
                out["error"] = (content["ename"], content["evalue"])

        # Each cell stands alone, as a user runs them: after an error cell, ipykernel (6.x)
        # aborts requests that reach it before its abort window closes, a race with the next
        # cell of a test.
        reply = self.kc.execute_interactive(code, output_hook=hook, timeout=60, stop_on_error=False)
        out["status"] = reply["content"]["status"]
        return out

    def value(self, code: str) -> Any:
        out = self.run(code)
        assert out["error"] is None and out["status"] == "ok", out
        return json.loads(out["stdout"].strip().splitlines()[-1])

    def close(self) -> None:
        self.kc.stop_channels()
        self.km.shutdown_kernel(now=True)


@pytest.fixture(scope="module")
def kernel() -> Iterator[Kernel]:
    k = Kernel()
    yield k
    k.close()


def test_issue_example_in_a_real_kernel(kernel: Kernel) -> None:
    k = kernel
    assert k.run("%load_ext ipyrefresh")["error"] is None
    k.run("from ipyrefresh import grad\nimport autograd.numpy as np\nimport json")
    k.run("def h(x): return 2 * x")
    k.run("dh = grad(h)")
    assert k.value("print(json.dumps(float(dh(1.0))))") == 2.0
    k.run("def h(x): return 10 * x")
    assert k.value("print(json.dumps(float(dh(1.0))))") == 10.0
    k.run("def g(x): return 2 * x")
    k.run("def h(x): return 2 * g(x)")
    assert k.value("print(json.dumps(float(dh(1.0))))") == 4.0
    k.run("def g(x): return 10 * x")
    stale = k.run("%stale")["stdout"]
    assert "grad(h)" in stale and "g redefined in cell [" in stale
    assert k.value("print(json.dumps(float(dh(1.0))))") == 20.0
    k.run("a = 3.0\ndef kk(x): return a * np.sin(x)")
    assert k.value("print(json.dumps(float(grad(kk)(0.0))))") == 3.0
    k.run("a = 5.0")
    assert k.value("print(json.dumps(float(grad(kk)(0.0))))") == 5.0
    out = k.run("%grad h(1.0)")
    assert out["result"] is not None and "20.0" in out["result"], out
    k.run("def f(x, y): return x * y ** 3")
    assert "12.0" in k.run("%grad -a 1 f(1.0, 2.0)")["result"]
    err = k.run("%grad h(")
    # IPython shows a UsageError as one line on stderr, without a traceback.
    assert err["status"] == "error"
    assert err["stderr"].strip().splitlines() == [
        "UsageError: %grad: could not parse 'h(': '(' was never closed"
    ]
    # The kernel is still fine after the error.
    assert k.value("print(json.dumps(float(dh(1.0))))") == 20.0
    status = k.value("import ipyrefresh; print(json.dumps(ipyrefresh.status()))")
    names = {e["name"] for e in status["entries"]}
    assert {"grad(h)", "grad(kk)"} <= names
    assert status["rebuilds"] >= 3 and status["attached"] is True


def test_refresh_and_status_in_a_kernel(kernel: Kernel) -> None:
    k = kernel
    k.run("%load_ext ipyrefresh")
    k.run("from ipyrefresh import grad, hessian\nimport json")
    k.run("def u(x): return x ** 3\ndef v(x): return u(x) * 2")
    assert k.value("print(json.dumps(float(hessian(v)(1.0))))") == 12.0
    k.run("def u(x): return x ** 4")
    out = k.run("%refresh v")["stdout"]
    assert "rebuilt 1" in out
    assert k.value("print(json.dumps(float(hessian(v)(1.0))))") == 24.0
