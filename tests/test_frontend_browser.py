"""End to end: a real JupyterLab server on a loopback port, driven in headless Debian
Chromium by Playwright. The status-bar item must report what the kernel knows.

Screenshots go to artifacts/ (statusbar-*.png).
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
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.timeout(600)]

ROOT = Path(__file__).resolve().parent.parent
ARTIFACTS = ROOT / "artifacts"
CHROMIUM = "/usr/bin/chromium"
ITEM = ".ipyrefresh-StatusItem"

G_OLD = "def g(x):\n    return np.sin(x) * x\n"
G_NEW = "def g(x):\n    return np.cos(x) * x ** 2\n"
CELLS = [
    "import autograd.numpy as np\nfrom ipyrefresh import grad\n\n"
    + G_OLD
    + "\ndef h(x):\n    return g(x) ** 2 + 1.0\n\ndh = grad(h)\nprint(repr(float(dh(0.7))))",
    G_NEW,
    "print(repr(float(dh(0.7))))",
]


def _reference(g_src: str) -> float:
    """d/dx h at 0.7, by a fresh autograd computation of the given g."""
    import autograd
    import autograd.numpy as anp

    ns: dict[str, Any] = {"np": anp}
    exec(g_src + "\ndef h(x):\n    return g(x) ** 2 + 1.0\n", ns)
    return float(autograd.grad(ns["h"])(0.7))


def _notebook(cells: list[str], kernel: str, display: str) -> dict[str, Any]:
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
            "kernelspec": {"name": kernel, "display_name": display, "language": "python"},
            "language_info": {"name": "python"},
        },
        "nbformat": 4,
        "nbformat_minor": 5,
    }


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    if not os.access(CHROMIUM, os.X_OK):
        pytest.skip(f"{CHROMIUM} missing (./dev setup installs Debian's chromium)")
    pytest.importorskip("playwright.sync_api")
    pytest.importorskip("jupyterlab")
    base = tmp_path_factory.mktemp("lab")
    root = base / "root"
    root.mkdir()
    (root / "derivs.ipynb").write_text(
        json.dumps(_notebook(CELLS, "python3-ipyrefresh", "Python 3 (ipyrefresh)"))
    )
    (root / "crash.ipynb").write_text(
        json.dumps(
            _notebook(
                [CELLS[0], G_NEW, "import os\nos._exit(1)"],
                "python3-ipyrefresh",
                "Python 3 (ipyrefresh)",
            )
        )
    )
    (root / "plain.ipynb").write_text(
        json.dumps(_notebook(["%load_ext ipyrefresh"], "python3", "Python 3 (ipykernel)"))
    )
    settings = base / "settings" / "@jupyterlab" / "apputils-extension"
    settings.mkdir(parents=True)
    # No "fetch news?" toast over the status bar.
    (settings / "notification.jupyterlab-settings").write_text(
        json.dumps({"fetchNews": "false", "checkForUpdates": False})
    )
    env = {
        **os.environ,
        "JUPYTER_CONFIG_DIR": str(base / "config"),
        "JUPYTER_RUNTIME_DIR": str(base / "runtime"),
        "JUPYTERLAB_SETTINGS_DIR": str(base / "settings"),
        "JUPYTERLAB_WORKSPACES_DIR": str(base / "workspaces"),
        "PATH": str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", ""),
    }
    port = _free_port()
    log = (base / "server.log").open("w")
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "jupyterlab",
            "--no-browser",
            f"--port={port}",
            "--ServerApp.port_retries=0",
            "--ServerApp.ip=127.0.0.1",
            "--ServerApp.token=",
            "--ServerApp.password=",
            f"--ServerApp.root_dir={root}",
            "--LabApp.extension_manager=readonly",  # no package-index look-ups
            *(["--allow-root"] if os.geteuid() == 0 else []),
        ],
        cwd=root,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            if server.poll() is not None:
                raise AssertionError((base / "server.log").read_text())
            try:
                with urllib.request.urlopen(f"{url}/api/status", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise AssertionError(
                    "JupyterLab did not start:\n" + (base / "server.log").read_text()
                )
            time.sleep(0.3)
        with urllib.request.urlopen(f"{url}/lab/api/extensions", timeout=10) as r:
            names = [e["name"] for e in json.load(r)]
        assert "ipyrefresh" in names, f"labextension not found by the server: {names}"
        yield {"url": url, "root": root, "log": base / "server.log"}
    finally:
        server.send_signal(signal.SIGTERM)  # jupyter shuts its kernels down on SIGTERM
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(timeout=10)
        log.close()


@pytest.fixture(scope="module")
def browser(lab: dict[str, Any]) -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(
            executable_path=CHROMIUM,
            headless=True,
            args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"],
        )
        try:
            yield b
        finally:
            b.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1280, "height": 720})
    pg = context.new_page()
    errors: list[str] = []
    pg.on("pageerror", lambda e: errors.append(str(e)))
    try:
        yield pg
    finally:
        context.close()
    assert not [e for e in errors if "ipyrefresh" in e], errors


def _shot(page: Any, name: str) -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    path = ARTIFACTS / f"statusbar-{name}.png"
    page.screenshot(path=str(path))
    return path


def _item_text(page: Any, pattern: str, timeout: float = 60_000) -> str:
    """Wait until the status item's text matches ``pattern``; return it."""
    item = page.locator(ITEM)
    item.wait_for(state="visible", timeout=timeout)
    deadline = time.monotonic() + timeout / 1000
    text = ""
    while time.monotonic() < deadline:
        text = item.inner_text().strip()
        if re.fullmatch(pattern, text):
            return text
        time.sleep(0.2)
    shot = _shot(page, "failure")
    raise AssertionError(f"status item says {text!r}, expected {pattern!r} (see {shot})")


def _open(page: Any, lab: dict[str, Any], name: str) -> None:
    # ?reset: a clean workspace, not the tabs an earlier test left open
    page.goto(f"{lab['url']}/lab/tree/{name}?reset", wait_until="domcontentloaded")
    page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Cell").first.wait_for(timeout=120_000)


def _run_cell(page: Any, index: int) -> str:
    """Run cell ``index`` of the active notebook with Shift+Enter; return its output text."""
    panel = page.locator(".jp-NotebookPanel:not(.lm-mod-hidden)")
    cell = panel.locator(".jp-Cell").nth(index)
    cell.locator(".jp-InputArea-prompt").click()
    page.keyboard.press("Shift+Enter")
    prompt = cell.locator(".jp-InputArea-prompt")
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        text = prompt.inner_text().strip()
        if re.fullmatch(r"\[\d+\]:", text):
            break
        time.sleep(0.2)
    else:
        raise AssertionError(f"cell {index} did not finish: prompt {text!r}")
    errors = cell.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']")
    out = cell.locator(".jp-OutputArea-output").all_inner_texts()
    assert errors.count() == 0 or "Traceback" not in " ".join(out), out
    return "\n".join(out)


def test_status_item_follows_stale_and_fresh(page: Any, lab: dict[str, Any]) -> None:
    _open(page, lab, "derivs.ipynb")
    # The "Python 3 (ipyrefresh)" kernel loads the extension itself; the front end asks.
    _item_text(page, r"∂ 0 fresh · 0 stale", timeout=120_000)

    out = _run_cell(page, 0)
    assert float(out.strip().splitlines()[-1]) == pytest.approx(_reference(G_OLD))
    _item_text(page, r"∂ 1 fresh · 0 stale")

    _run_cell(page, 1)  # redefine the callee g
    _item_text(page, r"∂ 0 fresh · 1 stale")
    item = page.locator(ITEM)
    assert "g redefined" in (item.get_attribute("title") or "")

    item.click()  # the list, with the reason
    entry = page.locator(".ipyrefresh-Entry[data-state='stale']")
    entry.wait_for(timeout=10_000)
    assert entry.locator(".ipyrefresh-Entry-name").inner_text() == "grad(h)"
    reason = entry.locator(".ipyrefresh-Entry-reason").first.inner_text()
    assert re.search(r"\bg redefined in cell \[\d+\]", reason), reason
    _shot(page, "stale")
    page.keyboard.press("Escape")
    item.click()  # toggles the list closed
    page.locator(".ipyrefresh-StatusList").wait_for(state="detached", timeout=10_000)

    out = _run_cell(page, 2)  # call the gradient: it rebuilds from the new g
    assert float(out.strip().splitlines()[-1]) == pytest.approx(_reference(G_NEW))
    _item_text(page, r"∂ 1 fresh · 0 stale")
    _shot(page, "fresh")

    # The refresh button: make it stale again, refresh from the list, fresh without a call.
    _run_cell(page, 1)
    _item_text(page, r"∂ 0 fresh · 1 stale")
    item.click()
    page.locator(".ipyrefresh-refresh-all").click()
    _item_text(page, r"∂ 1 fresh · 0 stale")
    report = page.locator(".ipyrefresh-StatusList-report")
    report.wait_for(timeout=10_000)
    assert "rebuilt grad(h)" in report.inner_text()
    _shot(page, "refreshed")


def test_off_then_load_ext_then_restart(page: Any, lab: dict[str, Any]) -> None:
    _open(page, lab, "plain.ipynb")
    # A plain kernel has no ipyrefresh: the item says off (after the kernel refused).
    _item_text(page, r"∂ off", timeout=120_000)
    page.wait_for_function(
        "document.querySelector('.ipyrefresh-StatusItem').dataset.phase === 'off'",
        timeout=120_000,
    )
    _shot(page, "off")
    _run_cell(page, 0)  # %load_ext: the kernel announces itself
    _item_text(page, r"∂ 0 fresh · 0 stale")

    # Restart: the item goes away while the kernel restarts, then the front end asks again;
    # the plain kernel does not load ipyrefresh by itself, so it says off.
    _restart_kernel(page)
    _item_text(page, r"∂ off", timeout=120_000)

    # Change the notebook's kernel to "Python 3 (ipyrefresh)": the item follows the new one.
    page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Toolbar-kernelName").click()
    dialog = page.locator(".jp-Dialog")
    dialog.wait_for(timeout=10_000)
    dialog.locator("select").select_option(label="Python 3 (ipyrefresh)")
    dialog.locator("button.jp-mod-accept").click()
    _item_text(page, r"∂ 0 fresh · 0 stale", timeout=120_000)


def test_several_notebooks_and_a_kernel_that_dies(page: Any, lab: dict[str, Any]) -> None:
    _open(page, lab, "crash.ipynb")
    _item_text(page, r"∂ 0 fresh · 0 stale", timeout=120_000)
    _run_cell(page, 0)
    _run_cell(page, 1)
    _item_text(page, r"∂ 0 fresh · 1 stale")

    # Another notebook, another kernel (plain, no ipyrefresh): the item follows the tab.
    page.locator(".jp-DirListing-item[title^='Name: plain.ipynb']").dblclick()
    page.locator(".lm-TabBar-tab.lm-mod-current:has-text('plain.ipynb')").wait_for()
    page.wait_for_function(
        "['off', 'on'].includes(document.querySelector('.ipyrefresh-StatusItem').dataset.phase)",
        timeout=120_000,
    )
    _item_text(page, r"∂ off|∂ 0 fresh · 0 stale")
    page.locator(".lm-TabBar-tab:has-text('crash.ipynb')").click()
    _item_text(page, r"∂ 0 fresh · 1 stale")

    # The kernel dies; the server restarts it; the new process autoloads ipyrefresh afresh.
    cell = page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Cell").nth(2)
    cell.locator(".jp-InputArea-prompt").click()
    page.keyboard.press("Shift+Enter")
    dialog = page.locator(".jp-Dialog")
    dialog.wait_for(timeout=60_000)  # "The kernel ... appears to have died"
    _shot(page, "died")
    dialog.locator("button").last.click()
    _item_text(page, r"∂ 0 fresh · 0 stale", timeout=120_000)
    assert page.locator(ITEM).get_attribute("data-phase") == "on"


def _restart_kernel(page: Any) -> None:
    page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Cell").first.click()
    page.keyboard.press("Escape")
    page.keyboard.press("0")
    page.keyboard.press("0")  # command mode 0,0: restart kernel
    dialog = page.locator(".jp-Dialog")
    dialog.wait_for(timeout=10_000)
    dialog.locator("button.jp-mod-accept").click()
    dialog.wait_for(state="detached", timeout=10_000)
