"""Every notebook in notebooks/ runs in a real kernel, and its outputs say the right things.

The notebooks check themselves too: each cell that computes a derivative asserts that
ipyrefresh's answer equals a fresh ``autograd`` computation of the current code. Here we
also check specific outputs (what ``%stale`` and ``%callgraph`` print and draw).
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path
from typing import Any

import nbformat
import pytest
from nbclient import NotebookClient

from .kernels import kernel_manager

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"

pytestmark = pytest.mark.kernel


def run_notebook(path: Path) -> Any:
    nb = nbformat.read(path, as_version=4)
    assert nb.metadata.get("kernelspec", {}).get("name") == "python3"
    client = NotebookClient(
        nb,
        km=kernel_manager(),
        kernel_name="python3",
        timeout=300,
        resources={"metadata": {"path": str(NOTEBOOKS)}},
    )
    client.execute()  # raises CellExecutionError, with the cell and traceback, on any error
    return nb


def code_cells(nb: Any) -> list[Any]:
    return [c for c in nb.cells if c.cell_type == "code"]


def cell(nb: Any, starts: str) -> Any:
    """The one code cell whose source starts with ``starts``."""
    found = [c for c in code_cells(nb) if c.source.startswith(starts)]
    assert len(found) == 1, f"{len(found)} cells start with {starts!r}"
    return found[0]


def text(c: Any) -> str:
    """Everything a cell printed or displayed as text."""
    parts = []
    for out in c.outputs:
        if out.output_type == "stream":
            parts.append(out.text)
        elif "data" in out and "text/plain" in out.data:
            parts.append(out.data["text/plain"])
    return "\n".join(parts)


def svgs(c: Any) -> list[ET.Element]:
    return [
        ET.fromstring(out.data["image/svg+xml"])
        for out in c.outputs
        if out.output_type == "display_data" and "image/svg+xml" in out.data
    ]


def node_fill(svg: ET.Element, node: str) -> str:
    for el in svg.iter():
        if el.get("id") == f"node-{node}":
            return " ".join(p.get("style", "") for p in el.iter())
    raise AssertionError(f"no node {node!r} in the picture")


RED, ORANGE = "fill: #f8b4b4", "fill: #fde2b8"


def changed_in(cell_count: int | None) -> str:
    """How a reason dates a change made in that cell: exactly ("in cell [N]") when a check
    ran after the previous cell (the status channel's, in a kernel), else bounded by the
    cell before ("since cell [N-1]")."""
    assert cell_count is not None
    return rf"(in cell \[{cell_count}\]|since cell \[{cell_count - 1}\])"


def check_workflow(nb: Any) -> None:
    first = cell(nb, "w = fit(w0)")
    assert "plain least squares: [ 1.53 -2.02  0.5 ]" in text(first)
    redefined = cell(nb, "def penalty(w):\n    return 0.5")
    stale_lines = text(cell(nb, "%stale")).splitlines()
    assert stale_lines[0] == (
        "1 of 1 derivatives will be rebuilt at their next call; 0 fresh (checked just now):"
    )
    assert re.fullmatch(
        rf"  grad\(loss\)  loss redefined {changed_in(redefined.execution_count)}",
        stale_lines[1],
    ), stale_lines
    assert "with penalty: [ 1.06  -1.135  0.391]" in text(cell(nb, "w_pen = fit(w0)"))
    assert "stale: ['grad(loss)']" in text(cell(nb, "def penalty(w):\n    return 0.05"))
    edit = cell(nb, "def predict(w, X):\n    return X @ w + 0.0")
    picture = cell(nb, "%callgraph loss")
    (svg,) = svgs(picture)
    assert RED in node_fill(svg, "predict")
    assert ORANGE in node_fill(svg, "residuals") and ORANGE in node_fill(svg, "loss")
    assert ORANGE not in node_fill(svg, "penalty") and RED not in node_fill(svg, "penalty")
    tree = text(cell(nb, "%callgraph --text loss"))
    when = changed_in(edit.execution_count)
    assert re.fullmatch(rf"grad\(loss\): stale \(predict redefined {when}\)", tree.splitlines()[0])
    assert re.search(rf"predict \[static\+dynamic\]  <- redefined {when}", tree), tree
    assert "watches: X, np, np.mean, np.sqrt, np.sum, y" in tree
    last = text(code_cells(nb)[-1])
    assert "builds: 5" in last and last.strip().endswith("workflow OK")


def check_dispatch(nb: Any) -> None:
    assert "stale: ['grad(layer)']" in text(cell(nb, 'ACT = "softplus"'))
    assert "softplus [dynamic]" in text(cell(nb, "%callgraph --text layer"))
    rule = cell(nb, "def clipped_vjp")
    assert "stale: ['grad(nll)']" in text(rule)
    lines = text(cell(nb, "%stale")).splitlines()
    when = changed_in(rule.execution_count)
    assert any(
        re.fullmatch(rf"  grad\(nll\)  logsumexp gradient rule changed {when}", ln) for ln in lines
    ), lines
    assert "[ 0.2    -1.6965  0.1   ]" in text(cell(nb, "g_clipped = check"))
    (svg,) = svgs(cell(nb, "%callgraph nll"))
    ids = {el.get("id") for el in svg.iter()}
    assert "edge-both-nll->logsumexp" in ids  # named in nll's code, and it ran
    last = text(code_cells(nb)[-1])
    assert "all fresh: True" in last and last.strip().endswith("dispatch and rules OK")


def check_any(nb: Any) -> None:
    """For notebooks without specific checks (the lead's quickstart): it loads ipyrefresh."""
    assert any("%load_ext ipyrefresh" in c.source for c in code_cells(nb))
    assert all(c.execution_count is not None for c in code_cells(nb))


CHECKS: dict[str, Callable[[Any], None]] = {
    "workflow.ipynb": check_workflow,
    "dispatch_and_rules.ipynb": check_dispatch,
}


def test_our_notebooks_are_there() -> None:
    names = {p.name for p in NOTEBOOKS.glob("*.ipynb")}
    assert set(CHECKS) <= names


@pytest.mark.parametrize("path", sorted(NOTEBOOKS.glob("*.ipynb")), ids=lambda p: p.name)
def test_notebook(path: Path) -> None:
    nb = run_notebook(path)
    errors = [o for c in code_cells(nb) for o in c.outputs if o.output_type == "error"]
    assert not errors
    CHECKS.get(path.name, check_any)(nb)
