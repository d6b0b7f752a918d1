"""The status item and its list from the keyboard and for assistive technology, in a real
JupyterLab and headless Chromium.

Keyboard: Tab reaches the item, Enter (or Space) opens the list with the focus in it,
Escape closes it and gives the focus back; the palette command moves the focus into it.
Accessibility: axe-core (from npm, injected with Playwright) checks the item and the list
in the light, dark and high-contrast themes, idle, hovered and clicked, with stale, fresh
and failed derivatives: no serious or critical violation, and every text of ours has its
contrast actually checked (not left "incomplete").
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .frontend.harness import (
    ITEM,
    POPUP,
    QUICK,
    ROOT,
    Server,
    chromium,
    expect_text,
    new_page,
    notebook,
    open_notebook,
    require_browser,
    run_cell,
    running,
    shot,
)

pytestmark = [pytest.mark.browser, pytest.mark.timeout(900)]

AXE = ROOT / "node_modules" / "axe-core" / "axe.min.js"
THEMES = ["JupyterLab Light", "JupyterLab Dark", "JupyterLab Dark High Contrast"]
CELLS = [
    "import autograd.numpy as np\nfrom ipyrefresh import grad\n\n"
    "def g(x):\n    return np.sin(x) * x\n\n"
    "def h(x):\n    return g(x) ** 2 + 1.0\n\n"
    "def k(x):\n    return np.tanh(x)\n\n"
    "dh, dk = grad(h), grad(k)\n"
    "print(float(dh(0.7)), float(dk(0.7)))",
    "def g(x):\n    return np.cos(x) * x ** 2\n",
    "def g(x):\n    raise ValueError('g is broken on purpose')\n",
]


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    require_browser()
    if not AXE.is_file():
        pytest.skip("axe-core missing: run ./dev setup (or jlpm install)")
    files = {"a11y.ipynb": notebook(CELLS)}
    with running(Server(tmp_path_factory.mktemp("lab"), files=files)) as server:
        yield server


@pytest.fixture(scope="module")
def page(lab: Server) -> Iterator[Any]:
    with chromium() as browser, new_page(browser) as pg:
        open_notebook(pg, lab, "a11y.ipynb")
        expect_text(pg.locator(ITEM), "∂ 0 fresh · 0 stale")
        run_cell(pg, 0)
        expect_text(pg.locator(ITEM), "∂ 2 fresh · 0 stale")
        yield pg


def _make_stale(page: Any) -> None:
    run_cell(page, 1)
    expect_text(page.locator(ITEM), "∂ 1 fresh · 1 stale")


def _focus_before(page: Any, selector: str) -> None:
    """Focus the Tab stop just before ``selector`` in the page's Tab order."""
    found = page.evaluate(
        """sel => {
            const target = document.querySelector(sel);
            const all = [...document.querySelectorAll(
                'a[href], button, input, select, textarea, [tabindex]')]
                .filter(el => el.tabIndex >= 0 && !el.disabled
                              && el.getClientRects().length > 0);
            const i = all.indexOf(target);
            if (i < 1) { return false; }
            all[i - 1].focus();
            return document.activeElement === all[i - 1];
        }""",
        selector,
    )
    assert found, f"{selector} is not in the Tab order"


def _focus_is_inside(page: Any, selector: str) -> bool:
    return bool(
        page.evaluate(
            "sel => { const el = document.querySelector(sel);"
            " return !!el && el.contains(document.activeElement); }",
            selector,
        )
    )


def test_keyboard_tab_enter_escape_space_and_the_palette(page: Any) -> None:
    _make_stale(page)
    item = page.locator(ITEM)
    assert item.evaluate("el => el.tagName") == "BUTTON"
    assert item.get_attribute("aria-haspopup") == "dialog"
    assert item.get_attribute("aria-label") == (
        "ipyrefresh in a11y.ipynb: 2 cached derivatives, 1 fresh, 1 stale"
    )

    _focus_before(page, ITEM)
    page.keyboard.press("Tab")
    assert _focus_is_inside(page, ITEM), "Tab does not reach the status item"
    assert item.get_attribute("aria-expanded") == "false"

    page.keyboard.press("Enter")
    popup = page.locator(POPUP)
    popup.wait_for(timeout=QUICK)
    assert item.get_attribute("aria-expanded") == "true"
    assert popup.get_attribute("role") == "dialog"
    assert popup.get_attribute("aria-labelledby")
    assert _focus_is_inside(page, POPUP), "Enter opened the list without moving the focus"
    first = page.evaluate("document.activeElement.textContent")
    page.keyboard.press("Tab")
    assert _focus_is_inside(page, POPUP)
    assert page.evaluate("document.activeElement.textContent") != first

    page.keyboard.press("Escape")
    popup.wait_for(state="detached", timeout=QUICK)
    assert _focus_is_inside(page, ITEM), "Escape did not give the focus back to the item"
    assert item.get_attribute("aria-expanded") == "false"

    page.keyboard.press(" ")
    popup.wait_for(timeout=QUICK)
    assert _focus_is_inside(page, POPUP)
    # Keyboard refresh: the focused "Refresh stale" button, then the list keeps the focus.
    assert page.evaluate("document.activeElement.textContent") == "Refresh stale"
    page.keyboard.press("Enter")
    expect_text(item, "∂ 2 fresh · 0 stale", QUICK)
    assert _focus_is_inside(page, POPUP)
    page.keyboard.press("Escape")
    popup.wait_for(state="detached", timeout=QUICK)
    assert _focus_is_inside(page, ITEM)

    # The command palette's "Show Derivatives" moves the focus into the list too.
    page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Cell").first.click()
    page.keyboard.press("Escape")
    page.keyboard.press("Control+Shift+C")
    palette = page.locator(".jp-ModalCommandPalette input, .lm-CommandPalette-input").first
    palette.wait_for(timeout=QUICK)
    palette.fill("Show Derivatives")
    page.locator(".lm-CommandPalette-item.lm-mod-active:has-text('Show Derivatives')").wait_for(
        timeout=QUICK
    )
    page.keyboard.press("Enter")
    popup.wait_for(timeout=QUICK)
    page.wait_for_function(
        "() => document.querySelector('.ipyrefresh-Popup').contains(document.activeElement)",
        timeout=QUICK,
    )
    page.keyboard.press("Escape")
    popup.wait_for(state="detached", timeout=QUICK)
    assert page.evaluate("document.activeElement !== document.body"), "focus lost on Escape"


def _theme(page: Any, name: str) -> None:
    page.evaluate(
        "t => window.jupyterapp.commands.execute('apputils:change-theme', {theme: t})", name
    )
    page.wait_for_function(
        "t => document.body.dataset.jpThemeName === t && document.body.dataset.jpThemeLight"
        " !== undefined",
        arg=name,
        timeout=QUICK,
    )
    page.evaluate("document.fonts.ready")


def _axe(page: Any, what: str) -> None:
    """Run axe-core on the item and the list (if open); fail on serious or critical
    violations, and on any text of ours whose contrast axe could not decide."""
    if not page.evaluate("typeof window.axe !== 'undefined'"):
        page.add_script_tag(content=Path(AXE).read_text())
    # JupyterLab's <body> is 0 px high (the shell is positioned absolutely) and hides its
    # overflow; axe then takes every text in the shell for clipped and skips its contrast
    # check. A full-height body changes nothing on screen and lets axe look.
    page.evaluate(
        "() => { for (const el of [document.documentElement, document.body]) {"
        " el.style.height = '100%'; } }"
    )
    result = page.evaluate(
        """async () => {
            const include = [['.ipyrefresh-StatusItem']];
            if (document.querySelector('.ipyrefresh-Popup')) {
                include.push(['.ipyrefresh-Popup']);
            }
            const r = await axe.run({include}, {
                runOnly: {type: 'tag', values: ['wcag2a', 'wcag2aa', 'wcag21a', 'wcag21aa',
                                                'wcag22aa', 'best-practice']},
                resultTypes: ['violations', 'incomplete', 'passes'],
            });
            const brief = list => list.map(v => ({
                id: v.id, impact: v.impact,
                nodes: v.nodes.map(n => ({target: n.target.join(' '),
                                          summary: n.failureSummary || '',
                                          data: JSON.stringify((n.any[0] || {}).data || {})}))
            }));
            return {violations: brief(r.violations), incomplete: brief(r.incomplete),
                    passes: brief(r.passes)};
        }"""
    )
    bad = [v for v in result["violations"] if v["impact"] in ("serious", "critical")]
    assert bad == [], f"{what}: {bad}"
    undecided = [v for v in result["incomplete"] if v["id"] == "color-contrast"]
    assert undecided == [], f"{what}: contrast not decided: {undecided}"
    checked = [n for v in result["passes"] if v["id"] == "color-contrast" for n in v["nodes"]]
    assert any("ipyrefresh-Button-text" in n["target"] for n in checked), (what, checked)
    if page.locator(POPUP).count():
        assert any("ipyrefresh-Entry-state" in n["target"] for n in checked), (what, checked)


@pytest.mark.parametrize("theme", THEMES)
def test_no_serious_accessibility_violations(page: Any, theme: str) -> None:
    item = page.locator(ITEM)
    popup = page.locator(POPUP)
    _theme(page, theme)
    slug = re.sub(r"\W+", "-", theme.lower())
    _make_stale(page)

    _axe(page, f"{theme}: stale item")
    item.hover()
    _axe(page, f"{theme}: stale item, hovered")

    item.click()  # clicked highlight + the list: a stale entry with its cell link
    popup.locator(".ipyrefresh-Entry-cell").first.wait_for(timeout=QUICK)
    _axe(page, f"{theme}: list with a stale entry")
    shot(page, f"a11y-{slug}-stale")

    popup.locator(".ipyrefresh-List-refreshAll").click()  # report and fresh entries
    expect_text(item, "∂ 2 fresh · 0 stale", QUICK)
    popup.locator(".ipyrefresh-List-report").wait_for(timeout=QUICK)
    _axe(page, f"{theme}: list with a report")
    page.keyboard.press("Escape")
    popup.wait_for(state="detached", timeout=QUICK)

    run_cell(page, 2)  # g raises: refreshing grad(h) fails
    expect_text(item, "∂ 1 fresh · 1 stale")
    item.click()
    popup.locator(".ipyrefresh-List-refreshAll").click()
    expect_text(item, "∂ 1 fresh · 0 stale · 1 failed", QUICK)
    popup.locator(".ipyrefresh-Entry[data-state='failed']").wait_for(timeout=QUICK)
    _axe(page, f"{theme}: list with a failed entry")
    shot(page, f"a11y-{slug}-failed")
    page.keyboard.press("Escape")
    popup.wait_for(state="detached", timeout=QUICK)
    run_cell(page, 0)  # everything fresh again for the next theme
    expect_text(item, "∂ 2 fresh · 0 stale")
