"""Notebook 7 (the ``notebook`` package, built on JupyterLab components) has no status bar:
the same item sits in each notebook's toolbar, from the same wheel. A real Notebook 7
server, headless Chromium, a real kernel."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest

from .frontend.harness import (
    FOCUS_LOG,
    G_NEW,
    ITEM,
    PANEL,
    POPUP,
    QUICK,
    SETUP,
    TOOLBAR_ITEM,
    Server,
    chromium,
    expect_text,
    last_float,
    new_page,
    notebook,
    open_notebook,
    reference,
    require_browser,
    run_cell,
    running,
    shot,
    wait_for_focus,
)

pytestmark = [pytest.mark.browser, pytest.mark.timeout(600)]

# Make the first focusable item of our item's <jp-toolbar> that is not ours its active item;
# true when our item is one of the toolbar's focusable items (arrow keys reach it).
ACTIVATE_ANOTHER_ITEM = """selector => {
  const item = document.querySelector(selector);
  const toolbar = item.closest('jp-toolbar');
  const items = toolbar.focusableElements;
  toolbar.activeIndex = items.findIndex(element => element !== item);
  return items.includes(item) && items[toolbar.activeIndex] !== item;
}"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    require_browser()
    pytest.importorskip("notebook", minversion="7")
    files = {"nb7.ipynb": notebook([SETUP, G_NEW, "print(repr(float(dh(0.7))))"])}
    with running(Server(tmp_path_factory.mktemp("nb7"), app="notebook", files=files)) as s:
        yield s


def test_notebook7_toolbar_item(server: Server) -> None:
    with chromium() as browser, new_page(browser) as page:
        _check(page, server)


def _check(page: Any, server: Server) -> None:
    open_notebook(page, server, "nb7.ipynb")
    item = page.locator(TOOLBAR_ITEM)
    expect_text(item, "∂ 0 fresh · 0 stale")
    assert page.locator(".jp-StatusBar-Widget:visible").count() == 0
    assert page.locator(ITEM).count() == 0  # no status bar, no status item

    run_cell(page, 0)
    run_cell(page, 1)
    expect_text(item, "∂ 0 fresh · 1 stale")
    assert item.get_attribute("aria-label") == (
        "ipyrefresh in nb7.ipynb: 1 cached derivative, 0 fresh, 1 stale"
    )

    # Notebook 7's toolbar is a roving-tabindex toolbar (<jp-toolbar>): focus that comes
    # from outside it is sent on to its active item. Which item is active after loading
    # depends on the order the items rendered in; make it another item than ours, so the
    # focus given back as the popup closes must land on our item all the same.
    assert page.evaluate(ACTIVATE_ANOTHER_ITEM, TOOLBAR_ITEM)

    # Keyboard: Enter opens the list below the toolbar with the focus in it; Escape
    # closes it and gives the focus back.
    page.evaluate(FOCUS_LOG)
    item.focus()
    page.keyboard.press("Enter")
    popup = page.locator(POPUP)
    popup.wait_for(timeout=QUICK)
    assert page.evaluate(
        "document.querySelector('.ipyrefresh-Popup').contains(document.activeElement)"
    )
    box, anchor = popup.bounding_box(), item.bounding_box()
    assert box and anchor and box["y"] >= anchor["y"] + anchor["height"] - 1, (box, anchor)
    reason = popup.locator(".ipyrefresh-Entry-reason").first
    expect_text(reason, re.escape("g redefined in cell 2: def g(x):"), QUICK)
    shot(page, "notebook7-stale")
    page.keyboard.press("Escape")
    popup.wait_for(state="detached", timeout=QUICK)
    # (the focus returns as the popup closes; waited for, as a status push may be on its way)
    wait_for_focus(page, TOOLBAR_ITEM, QUICK)

    # The reason's link selects its cell; the refresh button rebuilds.
    item.click()
    reason.locator(".ipyrefresh-Entry-cell").click()
    popup.wait_for(state="detached", timeout=QUICK)
    active = page.locator(f"{PANEL} .jp-Cell.jp-mod-active")
    assert "return np.cos(x) * x ** 2" in active.inner_text()
    item.click()
    popup.locator(".ipyrefresh-List-refreshAll").click()
    expect_text(item, "∂ 1 fresh · 0 stale", QUICK)
    expect_text(popup.locator(".ipyrefresh-List-report"), re.escape("Rebuilt grad(h)."), QUICK)
    shot(page, "notebook7-refreshed")
    page.keyboard.press("Escape")
    assert last_float(run_cell(page, 2)) == pytest.approx(reference(G_NEW))
