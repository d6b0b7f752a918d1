"""The screenshots in docs/ (light and dark, stale and fresh, the list open, Notebook 7's
toolbar), taken from a real JupyterLab and Notebook 7 with the current build.

Every run writes them to artifacts/docs/; with IPYREFRESH_UPDATE_DOCS=1 it also replaces
the ones in docs/ (that is how they are made):

    IPYREFRESH_UPDATE_DOCS=1 .venv/bin/python -m pytest tests/test_frontend_screenshots.py
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .frontend.harness import (
    ARTIFACTS,
    ITEM,
    POPUP,
    QUICK,
    ROOT,
    TOOLBAR_ITEM,
    Server,
    chromium,
    expect_text,
    new_page,
    notebook,
    open_notebook,
    require_browser,
    run_cell,
    running,
)

DOCS = ROOT / "docs"
SHOTS = {
    "statusbar-light-stale.png": "Light theme: grad(h) is stale because g was redefined",
    "statusbar-light-fresh.png": "Light theme: refreshed, with the report",
    "statusbar-dark-stale.png": "Dark theme: the list of derivatives, one stale",
    "statusbar-dark-fresh.png": "Dark theme: everything fresh",
    "notebook7-toolbar.png": "Notebook 7: the same item in the notebook toolbar",
}
VIEWPORT = {"width": 960, "height": 600}
CELLS = [
    "import autograd.numpy as np\nfrom ipyrefresh import grad, hessian\n\n"
    "def g(x):\n    return np.sin(x) * x\n\n"
    "def h(x):\n    return g(x) ** 2 + 1.0\n\n"
    "def k(x):\n    return np.tanh(x)\n\n"
    "dh, ddk = grad(h), hessian(k)\n"
    "dh(0.7), ddk(0.7)",
    "def g(x):\n    return np.cos(x) * x ** 2",
]


def test_readme_and_docs_show_the_screenshots() -> None:
    """Not a browser test: the screenshots exist and the README and docs link them."""
    readme = (ROOT / "README.md").read_text()
    guide = (DOCS / "frontend.md").read_text()
    for name in SHOTS:
        assert (DOCS / name).is_file(), name
        assert f"docs/{name}" in readme, f"README.md does not show docs/{name}"
        assert f"({name})" in guide, f"docs/frontend.md does not show {name}"


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    require_browser()
    with chromium() as b:
        yield b


def _save(page: Any, name: str) -> None:
    out = ARTIFACTS / "docs"
    out.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(out / name))
    if os.environ.get("IPYREFRESH_UPDATE_DOCS") == "1":
        shutil.copyfile(out / name, DOCS / name)


def _theme(page: Any, name: str) -> None:
    page.evaluate(
        "t => window.jupyterapp.commands.execute('apputils:change-theme', {theme: t})", name
    )
    page.wait_for_function("t => document.body.dataset.jpThemeName === t", arg=name)


@pytest.mark.browser
@pytest.mark.timeout(600)
def test_take_the_screenshots(browser: Any, tmp_path: Path) -> None:
    files = {"derivatives.ipynb": notebook(CELLS)}
    with (
        running(Server(tmp_path / "lab", files=files)) as lab,
        new_page(browser, viewport=VIEWPORT) as page,
    ):
        open_notebook(page, lab, "derivatives.ipynb")
        page.evaluate("window.jupyterapp.commands.execute('application:toggle-left-area')")
        item, popup = page.locator(ITEM), page.locator(POPUP)
        expect_text(item, "∂ 0 fresh · 0 stale")
        for theme, slug in (("JupyterLab Light", "light"), ("JupyterLab Dark", "dark")):
            _theme(page, theme)
            run_cell(page, 0)
            run_cell(page, 1)
            expect_text(item, "∂ 1 fresh · 1 stale")
            page.mouse.move(0, 0)
            item.click()
            popup.locator(".ipyrefresh-Entry-cell").wait_for(timeout=QUICK)
            _save(page, f"statusbar-{slug}-stale.png")
            popup.locator(".ipyrefresh-List-refreshAll").click()
            expect_text(item, "∂ 2 fresh · 0 stale", QUICK)
            popup.locator(".ipyrefresh-List-report").wait_for(timeout=QUICK)
            if slug == "light":
                _save(page, "statusbar-light-fresh.png")
            page.keyboard.press("Escape")
            popup.wait_for(state="detached", timeout=QUICK)
            if slug == "dark":
                page.mouse.move(0, 0)
                _save(page, "statusbar-dark-fresh.png")

    files = {"derivatives.ipynb": notebook(CELLS)}
    with (
        running(Server(tmp_path / "nb7", app="notebook", files=files)) as nb7,
        new_page(browser, viewport=VIEWPORT) as page,
    ):
        open_notebook(page, nb7, "derivatives.ipynb")
        item = page.locator(TOOLBAR_ITEM)
        expect_text(item, "∂ 0 fresh · 0 stale")
        run_cell(page, 0)
        run_cell(page, 1)
        expect_text(item, re.escape("∂ 1 fresh · 1 stale"))
        item.click()
        page.locator(POPUP).locator(".ipyrefresh-Entry-cell").wait_for(timeout=QUICK)
        _save(page, "notebook7-toolbar.png")
    for name in SHOTS:
        assert (ARTIFACTS / "docs" / name).stat().st_size > 10_000, name
