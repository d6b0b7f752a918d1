"""What the browser tests share: a real Jupyter server (JupyterLab, or Notebook 7 from the
``notebook`` package) on a free loopback port with its own config, data, runtime, settings
and IPython directories, headless Debian Chromium driven by Playwright, and the few page
gestures the tests make (open a notebook, run a cell, restart the kernel).

Every wait is a wait for a condition with a timeout (Playwright's ``expect`` or
``wait_for_function``); the timeouts are generous because CI runs the whole suite on a
loaded two-core machine.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from ..conftest import write_suite_profile

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "artifacts"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking"]
KERNEL = ("python3-ipyrefresh", "Python 3 (ipyrefresh)")
PLAIN_KERNEL = ("python3", "Python 3 (ipykernel)")

ITEM = ".ipyrefresh-StatusItem"
TOOLBAR_ITEM = ".ipyrefresh-ToolbarItem"
POPUP = ".ipyrefresh-Popup"
PANEL = ".jp-NotebookPanel:not(.lm-mod-hidden)"

# A kernel start, a restart or a first page load can take long on a loaded machine.
SLOW = 120_000
QUICK = 20_000

G_OLD = "def g(x):\n    return np.sin(x) * x\n"
G_NEW = "def g(x):\n    return np.cos(x) * x ** 2\n"
SETUP = (
    "import autograd.numpy as np\nfrom ipyrefresh import grad\n\n"
    + G_OLD
    + "\ndef h(x):\n    return g(x) ** 2 + 1.0\n\ndh = grad(h)\nprint(repr(float(dh(0.7))))"
)
CALL = "print(repr(float(dh(0.7))))"


def reference(g_src: str) -> float:
    """d/dx h at 0.7, by a fresh autograd computation of the given g."""
    import autograd
    import autograd.numpy as anp

    ns: dict[str, Any] = {"np": anp}
    exec(g_src + "\ndef h(x):\n    return g(x) ** 2 + 1.0\n", ns)
    return float(autograd.grad(ns["h"])(0.7))


def notebook(cells: list[str], kernel: tuple[str, str] = KERNEL) -> dict[str, Any]:
    """An nbformat 4.5 notebook whose code cells have the ids cell0, cell1, ..."""
    name, display = kernel
    return {
        "cells": [
            {
                "cell_type": "code",
                "execution_count": None,
                "id": f"cell{i}",
                "metadata": {},
                "outputs": [],
                "source": src,
            }
            for i, src in enumerate(cells)
        ],
        "metadata": {
            "kernelspec": {"name": name, "display_name": display, "language": "python"},
            "language_info": {"name": "python"},
        },
        "nbformat": 4,
        "nbformat_minor": 5,
    }


def require_browser() -> None:
    if not os.access(CHROMIUM, os.X_OK):
        pytest.skip(f"{CHROMIUM} missing (./dev setup installs Debian's chromium)")
    pytest.importorskip("playwright.sync_api")
    pytest.importorskip("jupyterlab")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    """A Jupyter server of its own: ``app`` is "lab" (JupyterLab) or "notebook"."""

    def __init__(
        self,
        base: Path,
        app: str = "lab",
        files: dict[str, Any] | None = None,
        settings: dict[str, dict[str, Any]] | None = None,
    ) -> None:
        self.base = base
        self.app = app
        self.root = base / "root"
        self.root.mkdir(parents=True)
        for name, content in (files or {}).items():
            text = content if isinstance(content, str) else json.dumps(content)
            (self.root / name).write_text(text)
        self.settings_dir = base / "settings"
        # No "fetch news?" toast over the status bar, whatever else a test sets.
        all_settings = {
            "@jupyterlab/apputils-extension:notification": {
                "fetchNews": "false",
                "checkForUpdates": False,
            },
            **(settings or {}),
        }
        for plugin, values in all_settings.items():
            package, name = plugin.split(":")
            folder = self.settings_dir / package
            folder.mkdir(parents=True, exist_ok=True)
            (folder / f"{name}.jupyterlab-settings").write_text(json.dumps(values))
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = base / "server.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        write_suite_profile(self.base / "ipython")
        env = {
            **os.environ,
            "JUPYTER_CONFIG_DIR": str(self.base / "config"),
            "JUPYTER_DATA_DIR": str(self.base / "data"),
            "JUPYTER_RUNTIME_DIR": str(self.base / "runtime"),
            "JUPYTERLAB_SETTINGS_DIR": str(self.settings_dir),
            "JUPYTERLAB_WORKSPACES_DIR": str(self.base / "workspaces"),
            "IPYTHONDIR": str(self.base / "ipython"),
            "PATH": str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", ""),
        }
        module = "jupyterlab" if self.app == "lab" else "notebook"
        cls = "LabApp" if self.app == "lab" else "JupyterNotebookApp"
        self._log = self.log_path.open("w")
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                module,
                "--no-browser",
                f"--port={self.port}",
                "--ServerApp.port_retries=0",
                "--ServerApp.ip=127.0.0.1",
                "--ServerApp.token=",
                "--ServerApp.password=",
                f"--ServerApp.root_dir={self.root}",
                f"--{cls}.expose_app_in_browser=True",  # tests read the kernel's settings
                f"--{cls}.user_settings_dir={self.settings_dir}",
                "--LabApp.extension_manager=readonly",  # no package-index look-ups
                *(["--allow-root"] if os.geteuid() == 0 else []),
            ],
            cwd=self.root,
            env=env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + 90
        while True:
            if self.proc.poll() is not None:
                raise AssertionError(f"the server exited:\n{self.log()}")
            try:
                with urllib.request.urlopen(f"{self.url}/api/status", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise AssertionError(f"the server did not start:\n{self.log()}")
            time.sleep(0.3)  # polling the server's status endpoint, not standing in for it
        with urllib.request.urlopen(f"{self.url}/lab/api/extensions", timeout=10) as r:
            names = [e["name"] for e in json.load(r)]
        assert "ipyrefresh" in names, f"labextension not found by the server: {names}"

    def stop(self) -> None:
        if self.proc is None:
            return
        self.proc.send_signal(signal.SIGTERM)  # jupyter shuts its kernels down on SIGTERM
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)  # its own session: itself and its kernels
            self.proc.wait(timeout=10)
        self._log.close()
        self.proc = None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def notebook_url(self, name: str) -> str:
        if self.app == "lab":
            return f"{self.url}/lab/tree/{name}?reset"  # a clean workspace every time
        return f"{self.url}/notebooks/{name}"


@contextmanager
def running(server: Server) -> Iterator[Server]:
    server.start()
    try:
        yield server
    finally:
        server.stop()


@contextmanager
def chromium() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


@contextmanager
def new_page(browser: Any, **context_options: Any) -> Iterator[Any]:
    """A page in a fresh browser context; fails the test on an uncaught ipyrefresh error."""
    context = browser.new_context(**{"viewport": {"width": 1280, "height": 720}, **context_options})
    context.set_default_timeout(QUICK)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    try:
        yield page
    finally:
        context.close()
    assert not [e for e in errors if "ipyrefresh" in e], errors


FOCUS_LOG = """() => {
    if (window.__focusLog) { return; }
    const log = window.__focusLog = [];
    const name = el => !el || !el.tagName ? String(el) : el.tagName.toLowerCase() +
        (el.className ? '.' + String(el.className).split(' ').join('.') : '');
    for (const type of ['focusin', 'focusout']) {
        document.addEventListener(type, e => log.push(`${(performance.now() / 1000).toFixed(3)}` +
            ` ${type} ${name(e.target)} -> ${name(e.relatedTarget)}`), true);
    }
}"""


def wait_for_focus(page: Any, selector: str, timeout: float) -> None:
    """Wait until the element ``selector`` has the focus; on a timeout, fail with where the
    focus is and the focus events since ``page.evaluate(FOCUS_LOG)`` started the log."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    try:
        page.wait_for_function(
            "s => document.activeElement === document.querySelector(s)",
            arg=selector,
            timeout=timeout,
        )
    except PlaywrightTimeout:
        where = page.evaluate(
            "() => [document.activeElement && document.activeElement.outerHTML.slice(0, 200),"
            " document.hasFocus(), (window.__focusLog || []).slice(-40)]"
        )
        raise AssertionError(f"the focus is not on {selector}: {where}") from None


def shot(page: Any, name: str) -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    path = ARTIFACTS / f"frontend-{name}.png"
    page.screenshot(path=str(path))
    return path


def expect_text(locator: Any, pattern: str, timeout: float = SLOW) -> str:
    """Wait until ``locator``'s text matches ``pattern`` in full; return the text."""
    from playwright.sync_api import expect

    expect(locator).to_have_text(re.compile(rf"^\s*(?:{pattern})\s*$"), timeout=timeout)
    return str(locator.inner_text()).strip()


def open_notebook(page: Any, server: Server, name: str) -> None:
    page.goto(server.notebook_url(name), wait_until="domcontentloaded")
    page.locator(f"{PANEL} .jp-Cell").first.wait_for(timeout=SLOW)


def wait_kernel_idle(page: Any, timeout: float = SLOW) -> None:
    """Wait until the active notebook's kernel is connected and idle."""
    page.wait_for_function(
        """() => {
            const w = window.jupyterapp.shell.currentWidget;
            const k = w && w.sessionContext && w.sessionContext.session
                && w.sessionContext.session.kernel;
            return !!k && k.connectionStatus === 'connected' && k.status === 'idle';
        }""",
        timeout=timeout,
    )


def run_cell(page: Any, index: int, timeout: float = SLOW) -> str:
    """Run cell ``index`` of the active notebook; return its output text. Fails on a traceback."""
    cell = page.locator(f"{PANEL} .jp-Cell").nth(index)
    prompt = cell.locator(".jp-InputArea-prompt")
    # The prompt shows [*]: while the cell runs, then its execution count (which can be
    # the one it showed before, after a restart): watch for both, in that order.
    prompt.evaluate(
        """el => {
            el.dataset.testRan = '';
            const seen = () => {
                const t = el.textContent.trim();
                if (t === '[*]:') { el.dataset.testRan = 'running'; }
                else if (el.dataset.testRan === 'running' && /^\\[\\d+\\]:$/.test(t)) {
                    el.dataset.testRan = 'done';
                    obs.disconnect();
                }
            };
            const obs = new MutationObserver(seen);
            obs.observe(el, {childList: true, characterData: true, subtree: true});
        }"""
    )
    prompt.click()
    page.keyboard.press("Shift+Enter")
    page.wait_for_function(
        "el => el.dataset.testRan === 'done'", arg=prompt.element_handle(), timeout=timeout
    )
    out = cell.locator(".jp-OutputArea-output").all_inner_texts()
    assert "Traceback" not in " ".join(out), out
    return "\n".join(out)


def last_float(output: str) -> float:
    return float(output.strip().splitlines()[-1])


def command_mode(page: Any) -> None:
    """Put the active notebook in command mode (for shortcuts such as 0,0)."""
    page.locator(f"{PANEL} .jp-Cell .jp-InputArea-prompt").first.click()
    page.keyboard.press("Escape")


def restart_kernel(page: Any) -> None:
    """Restart the active notebook's kernel the way a user does (0,0 and Restart)."""
    command_mode(page)
    page.keyboard.press("0")
    page.keyboard.press("0")
    dialog = page.locator(".jp-Dialog")
    dialog.wait_for(timeout=QUICK)
    dialog.locator("button.jp-mod-accept").click()
    dialog.wait_for(state="detached", timeout=QUICK)


def kernel_setting(page: Any) -> dict[str, Any]:
    """How the active notebook's kernel connection sends comm messages."""
    return dict(
        page.evaluate(
            """() => {
                const k = window.jupyterapp.shell.currentWidget.sessionContext.session.kernel;
                return {commsOverSubshells: k.commsOverSubshells,
                        supportsSubshells: k.supportsSubshells, id: k.id};
            }"""
        )
    )
