"""End to end: a real JupyterLab server on a loopback port, driven in headless Debian
Chromium by Playwright. The status-bar item must report what the kernel knows, follow
the notebook in front, and say so when something goes wrong.

Screenshots go to artifacts/ (frontend-*.png).
"""

from __future__ import annotations

import os
import re
import signal
from collections.abc import Iterator
from typing import Any

import pytest

from .frontend.harness import (
    CALL,
    G_NEW,
    G_OLD,
    ITEM,
    PANEL,
    PLAIN_KERNEL,
    POPUP,
    QUICK,
    SETUP,
    SLOW,
    Server,
    chromium,
    command_mode,
    expect_text,
    last_float,
    new_page,
    notebook,
    open_notebook,
    reference,
    require_browser,
    restart_kernel,
    run_cell,
    running,
    shot,
    wait_kernel_idle,
)

pytestmark = [pytest.mark.browser, pytest.mark.timeout(900)]

WAIT_FOR_FILE = (
    "import pathlib, time\n"
    "while not pathlib.Path('go').exists():\n"
    "    time.sleep(0.05)\n"
    "print('went')"
)


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    require_browser()
    files = {
        "derivs.ipynb": notebook([SETUP, G_NEW, CALL, WAIT_FOR_FILE]),
        "crash.ipynb": notebook([SETUP, G_NEW, "import os\nos._exit(1)"]),
        "plain.ipynb": notebook(["%load_ext ipyrefresh"], PLAIN_KERNEL),
        "stuck.ipynb": notebook([SETUP, G_NEW, "import os\nprint(os.getpid())"]),
        "notes.txt": "some text\n",
    }
    with running(Server(tmp_path_factory.mktemp("lab"), files=files)) as server:
        yield server


@pytest.fixture(scope="module")
def browser(lab: Server) -> Iterator[Any]:
    with chromium() as b:
        yield b


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    with new_page(browser) as pg:
        yield pg


def _record_labels(page: Any) -> None:
    """From the next page load on, keep every text the status item shows."""
    page.add_init_script(
        """(() => {
            window.__ipyrefreshLabels = [];
            const seen = () => {
                const item = document.querySelector('.ipyrefresh-StatusItem');
                const text = item ? item.textContent.trim() : null;
                const all = window.__ipyrefreshLabels;
                if (text && all[all.length - 1] !== text) { all.push(text); }
            };
            new MutationObserver(seen).observe(document, {
                subtree: true, childList: true, characterData: true
            });
        })()"""
    )


def test_stale_then_fresh_with_reasons_that_name_their_cell(page: Any, lab: Server) -> None:
    _record_labels(page)
    open_notebook(page, lab, "derivs.ipynb")
    item = page.locator(ITEM)
    # The "Python 3 (ipyrefresh)" kernel loads the extension itself; the front end asks.
    expect_text(item, "∂ 0 fresh · 0 stale")
    labels = page.evaluate("window.__ipyrefreshLabels")
    assert "∂ off" not in labels, f"'∂ off' flashed while the kernel started: {labels}"

    assert last_float(run_cell(page, 0)) == pytest.approx(reference(G_OLD))
    expect_text(item, "∂ 1 fresh · 0 stale")
    run_cell(page, 1)  # redefine the callee g
    expect_text(item, "∂ 0 fresh · 1 stale")
    assert "g redefined" in (item.get_attribute("title") or "")
    assert item.get_attribute("aria-label") == (
        "ipyrefresh in derivs.ipynb: 1 cached derivative, 0 fresh, 1 stale"
    )

    item.click()  # the list, with the reason, naming the cell by its place, not [2]
    popup = page.locator(POPUP)
    entry = popup.locator(".ipyrefresh-Entry[data-state='stale']")
    expect_text(entry.locator(".ipyrefresh-Entry-name"), re.escape("grad(h)"), QUICK)
    reason = entry.locator(".ipyrefresh-Entry-reason").first
    expect_text(reason, re.escape("g redefined in cell 2: def g(x):"), QUICK)
    assert "world" not in popup.inner_text()
    shot(page, "stale")

    # The reason's link selects that cell and scrolls to it; the list closes.
    page.locator(f"{PANEL} .jp-Cell").nth(3).click()  # another cell is active first
    item.click()
    reason.locator(".ipyrefresh-Entry-cell").click()
    popup.wait_for(state="detached", timeout=QUICK)
    active = page.locator(f"{PANEL} .jp-Cell.jp-mod-active")
    page.wait_for_function(
        "el => el.contains(document.activeElement)",
        arg=page.locator(f"{PANEL} .jp-Notebook").element_handle(),
        timeout=QUICK,
    )
    assert active.count() == 1
    assert "return np.cos(x) * x ** 2" in active.inner_text()

    out = run_cell(page, 2)  # call the gradient: it rebuilds from the new g
    assert last_float(out) == pytest.approx(reference(G_NEW))
    expect_text(item, "∂ 1 fresh · 0 stale")
    shot(page, "fresh")

    # Refresh from the list: fresh without a call, and a report of what it did ...
    run_cell(page, 1)
    expect_text(item, "∂ 0 fresh · 1 stale")
    item.click()
    popup.locator(".ipyrefresh-List-refreshAll").click()
    expect_text(item, "∂ 1 fresh · 0 stale", QUICK)
    expect_text(popup.locator(".ipyrefresh-List-report"), re.escape("Rebuilt grad(h)."), QUICK)
    # ... which goes once grad(h) is stale again: it no longer says what is true.
    page.keyboard.press("Escape")
    run_cell(page, 1)
    expect_text(item, "∂ 0 fresh · 1 stale")
    item.click()
    expect_text(popup.locator(".ipyrefresh-Entry-state").first, "stale", QUICK)
    assert popup.locator(".ipyrefresh-List-report").count() == 0
    page.keyboard.press("Escape")


def test_refresh_while_a_cell_runs_says_it_waits(page: Any, lab: Server) -> None:
    go = lab.root / "go"
    go.unlink(missing_ok=True)
    open_notebook(page, lab, "derivs.ipynb")
    item = page.locator(ITEM)
    expect_text(item, r"∂ \d+ fresh · \d+ stale")
    run_cell(page, 0)
    run_cell(page, 1)
    expect_text(item, "∂ 0 fresh · 1 stale")
    # A cell that runs until the test lets it finish.
    cell = page.locator(f"{PANEL} .jp-Cell").nth(3)
    cell.locator(".jp-InputArea-prompt").click()
    page.keyboard.press("Shift+Enter")
    expect_text(cell.locator(".jp-InputArea-prompt"), re.escape("[*]:"), QUICK)
    item.click()
    popup = page.locator(POPUP)
    popup.locator(".ipyrefresh-List-refreshAll").click()
    pending = popup.locator(".ipyrefresh-List-pending")
    expect_text(
        pending,
        re.escape("Refreshing stale derivatives: waiting for the running cell to finish…"),
        QUICK,
    )
    expect_text(item, re.escape("∂ 0 fresh · 1 stale · refreshing…"), QUICK)
    assert popup.locator(".ipyrefresh-List-refreshAll").is_disabled()
    go.write_text("")
    expect_text(item, "∂ 1 fresh · 0 stale")
    expect_text(popup.locator(".ipyrefresh-List-report"), re.escape("Rebuilt grad(h)."), QUICK)
    assert pending.inner_text().strip() == ""
    go.unlink()


def test_a_request_without_an_answer_says_so(page: Any, lab: Server) -> None:
    """A kernel that stops answering (here: its process stopped with SIGSTOP): the item
    must not look healthy and silent. It asks again on a new comm, then says so; the
    answer that comes once the kernel runs again is taken."""
    open_notebook(page, lab, "stuck.ipynb")
    item = page.locator(ITEM)
    expect_text(item, "∂ 0 fresh · 0 stale")
    run_cell(page, 0)
    run_cell(page, 1)
    expect_text(item, "∂ 0 fresh · 1 stale")
    pid = int(run_cell(page, 2).strip())
    item.click()
    popup = page.locator(POPUP)
    popup.wait_for()
    wait_kernel_idle(page)  # the list's own request answered: the kernel sits idle
    os.kill(pid, signal.SIGSTOP)
    try:
        popup.locator(".ipyrefresh-List-refreshAll").click()
        problem = popup.locator(".ipyrefresh-List-problem")
        expect_text(problem, r"No answer from the kernel after 10 s; asking again.*", 30_000)
        expect_text(problem, r"The kernel did not answer: it may be stuck or unreachable\..*")
        expect_text(item, re.escape("∂ 0 fresh · 1 stale · no answer"), QUICK)
        assert "does not answer" in (item.get_attribute("aria-label") or "")
        shot(page, "noanswer")
    finally:
        os.kill(pid, signal.SIGCONT)
    # The kernel runs again and answers the request it was sent again.
    expect_text(item, "∂ 1 fresh · 0 stale")
    assert popup.locator(".ipyrefresh-List-problem").count() == 0
    page.keyboard.press("Escape")


def test_off_then_load_ext_then_restart_then_shut_down(page: Any, lab: Server) -> None:
    _record_labels(page)
    open_notebook(page, lab, "plain.ipynb")
    item = page.locator(ITEM)
    # A plain kernel has no ipyrefresh: the item says off (after the kernel refused).
    expect_text(item, "∂ off")
    assert page.evaluate("window.__ipyrefreshLabels")[0] == "∂ …"
    assert "%load_ext ipyrefresh" in (item.get_attribute("title") or "")
    run_cell(page, 0)  # %load_ext: the kernel announces itself
    expect_text(item, "∂ 0 fresh · 0 stale")

    # Restart: the plain kernel does not load ipyrefresh by itself, so it says off.
    restart_kernel(page)
    expect_text(item, "∂ off")

    # Shut the kernel down: the item says there is no kernel, not "not loaded".
    page.evaluate("window.jupyterapp.commands.execute('notebook:shutdown-kernel')")
    expect_text(item, "∂ no kernel")
    assert "not loaded" not in (item.get_attribute("title") or "")
    assert "no kernel" in (item.get_attribute("title") or "")

    # Pick the "Python 3 (ipyrefresh)" kernel: the item follows the new one.
    page.locator(f"{PANEL} .jp-Toolbar-kernelName").click()
    dialog = page.locator(".jp-Dialog")
    dialog.wait_for(timeout=QUICK)
    dialog.locator("select").select_option(label="Python 3 (ipyrefresh)")
    dialog.locator("button.jp-mod-accept").click()
    expect_text(item, "∂ 0 fresh · 0 stale")


def test_other_tabs_and_a_kernel_that_dies(page: Any, lab: Server) -> None:
    open_notebook(page, lab, "crash.ipynb")
    item = page.locator(ITEM)
    expect_text(item, "∂ 0 fresh · 0 stale")
    run_cell(page, 0)
    run_cell(page, 1)
    expect_text(item, "∂ 0 fresh · 1 stale")

    # A Launcher in front: it has no kernel; the item must not show crash.ipynb's numbers.
    page.evaluate("window.jupyterapp.commands.execute('launcher:create')")
    page.locator(".jp-Launcher").wait_for(timeout=QUICK)
    item.wait_for(state="hidden", timeout=QUICK)
    # The "Python 3 (ipyrefresh)" kernel has its logo in the Launcher.
    card = page.locator(".jp-LauncherCard[title='Python 3 (ipyrefresh)']").first
    logo = card.locator("img")
    logo.wait_for(timeout=QUICK)
    assert logo.evaluate("img => img.complete && img.naturalWidth >= 32")
    assert "kernelspecs/python3-ipyrefresh/logo" in (logo.get_attribute("src") or "")
    shot(page, "launcher")

    # A text file in front: hidden too; back to the notebook: its numbers again.
    page.locator(".jp-DirListing-item[title^='Name: notes.txt']").dblclick()
    page.locator(".lm-TabBar-tab.lm-mod-current:has-text('notes.txt')").wait_for()
    item.wait_for(state="hidden", timeout=QUICK)
    page.locator(".lm-TabBar-tab:has-text('crash.ipynb')").click()
    expect_text(item, "∂ 0 fresh · 1 stale", QUICK)

    # Another notebook, another kernel (plain, no ipyrefresh): the item follows the tab.
    page.locator(".jp-DirListing-item[title^='Name: plain.ipynb']").dblclick()
    page.locator(".lm-TabBar-tab.lm-mod-current:has-text('plain.ipynb')").wait_for()
    expect_text(item, r"∂ off|∂ 0 fresh · 0 stale|∂ no kernel")
    assert "plain.ipynb" in (item.get_attribute("aria-label") or "")
    page.locator(".lm-TabBar-tab:has-text('crash.ipynb')").click()
    expect_text(item, "∂ 0 fresh · 1 stale", QUICK)

    # The kernel dies; the server restarts it; the new process autoloads ipyrefresh afresh.
    cell = page.locator(f"{PANEL} .jp-Cell").nth(2)
    cell.locator(".jp-InputArea-prompt").click()
    page.keyboard.press("Shift+Enter")
    dialog = page.locator(".jp-Dialog")
    dialog.wait_for(timeout=SLOW)  # "The kernel ... appears to have died"
    shot(page, "died")
    dialog.locator("button").last.click()
    expect_text(item, "∂ 0 fresh · 0 stale")
    assert item.get_attribute("data-phase") == "on"
    command_mode(page)
