"""Refresh after restarts, in a real JupyterLab and headless Chromium, with "Kernel Comms
over subshells" on (JupyterLab 4.6's default, one subshell per comm target; and one per
comm) and off.

JupyterLab keeps a subshell id across a restart that the new kernel process does not
have; the kernel then drops every comm message sent over it ("Unknown subshell_id").
The status item must get its messages through after any number of restarts, and after
a kernel that was killed and restarted by the server.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest

from .frontend.harness import (
    G_NEW,
    ITEM,
    PANEL,
    POPUP,
    QUICK,
    SETUP,
    SLOW,
    Server,
    chromium,
    expect_text,
    kernel_setting,
    new_page,
    notebook,
    open_notebook,
    require_browser,
    restart_kernel,
    run_cell,
    running,
    shot,
    wait_kernel_idle,
)

pytestmark = [pytest.mark.browser, pytest.mark.timeout(900)]

DROPPED = re.compile(r"Cannot handle comm_\w+ .*Unknown subshell_id")


@pytest.fixture(scope="module", params=["perCommTarget", "perComm", "disabled"])
def lab(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    require_browser()
    mode = request.param
    files = {"restart.ipynb": notebook([SETUP, G_NEW, "import os\nos._exit(1)"])}
    settings = {"@jupyterlab/apputils-extension:kernels-settings": {"commsOverSubshells": mode}}
    server = Server(tmp_path_factory.mktemp(f"lab-{mode}"), files=files, settings=settings)
    server.mode = mode  # type: ignore[attr-defined]
    with running(server):
        yield server


@pytest.fixture(scope="module")
def page(lab: Server) -> Iterator[Any]:
    with chromium() as browser, new_page(browser) as pg:
        open_notebook(pg, lab, "restart.ipynb")
        expect_text(pg.locator(ITEM), "∂ 0 fresh · 0 stale")
        # The test covers the setting it claims to: the kernel connection uses it, and
        # the kernel supports subshells (so "on" really sends comms over them).
        setting = kernel_setting(pg)
        assert setting["commsOverSubshells"] == lab.mode, setting  # type: ignore[attr-defined]
        assert setting["supportsSubshells"] is True, setting
        yield pg


def _make_stale(page: Any) -> None:
    wait_kernel_idle(page)
    run_cell(page, 0)
    run_cell(page, 1)
    expect_text(page.locator(ITEM), "∂ 0 fresh · 1 stale")


def _refresh_from_the_list(page: Any, row: bool) -> None:
    """Refresh with "Refresh stale" or with the row's button; the entry must turn fresh."""
    item = page.locator(ITEM)
    item.click()
    popup = page.locator(POPUP)
    if row:
        popup.locator(".ipyrefresh-Entry[data-state='stale'] .ipyrefresh-Entry-refresh").click()
    else:
        popup.locator(".ipyrefresh-List-refreshAll").click()
    expect_text(item, "∂ 1 fresh · 0 stale", QUICK)
    expect_text(popup.locator(".ipyrefresh-List-report"), re.escape("Rebuilt grad(h)."), QUICK)
    assert popup.locator(".ipyrefresh-List-problem").count() == 0
    page.keyboard.press("Escape")
    popup.wait_for(state="detached", timeout=QUICK)


def _assert_nothing_dropped(lab: Server) -> None:
    dropped = [line for line in lab.log().splitlines() if DROPPED.search(line)]
    assert dropped == [], dropped


def test_refresh_after_three_restarts_in_a_row(page: Any, lab: Server) -> None:
    _make_stale(page)
    _refresh_from_the_list(page, row=False)  # before any restart: the baseline works
    item = page.locator(ITEM)
    for _ in range(3):
        restart_kernel(page)
        expect_text(item, "∂ 0 fresh · 0 stale")  # a new kernel process, asked afresh
    _make_stale(page)
    _refresh_from_the_list(page, row=False)
    run_cell(page, 1)  # stale again; now the row's own button
    expect_text(item, "∂ 0 fresh · 1 stale")
    _refresh_from_the_list(page, row=True)
    _assert_nothing_dropped(lab)


def test_refresh_after_the_kernel_was_killed_and_restarted(page: Any, lab: Server) -> None:
    item = page.locator(ITEM)
    for attempt in range(2):
        cell = page.locator(f"{PANEL} .jp-Cell").nth(2)  # os._exit(1)
        cell.locator(".jp-InputArea-prompt").click()
        page.keyboard.press("Shift+Enter")
        dialog = page.locator(".jp-Dialog")
        dialog.wait_for(timeout=SLOW)  # "The kernel ... appears to have died"
        dialog.locator("button").last.click()
        expect_text(item, "∂ 0 fresh · 0 stale")
        _make_stale(page)
        _refresh_from_the_list(page, row=attempt == 1)
    shot(page, f"after-kill-{lab.mode}")  # type: ignore[attr-defined]
    _assert_nothing_dropped(lab)
