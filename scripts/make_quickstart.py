"""Write notebooks/quickstart.ipynb (kept as code so that its cells are reviewable)."""

from __future__ import annotations

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

cells = [
    new_markdown_cell(
        "# ipyrefresh quickstart\n\n"
        "In a notebook you redefine functions all day. A derivative you made earlier keeps "
        "answering for the *old* code. This notebook shows the problem with plain autograd, "
        "then the same steps under `%load_ext ipyrefresh`."
    ),
    new_markdown_cell("## 1. Plain autograd: `dh = grad(h)` keeps the old `h`"),
    new_code_cell(
        "import autograd\n"
        "import autograd.numpy as np\n\n"
        "def g(x):\n    return 2 * x\n\n"
        "def h(x):\n    return 2 * g(x)\n\n"
        "dh_plain = autograd.grad(h)\n"
        'print("plain autograd, d/dx 2*g(x) at 1.0:", dh_plain(1.0))'
    ),
    new_code_cell(
        "def h(x):\n    return 10 * np.sin(x)\n\n"
        "fresh = autograd.grad(h)(0.0)\n"
        'print("plain autograd after redefining h:", dh_plain(0.0), "- a fresh grad says", fresh)\n'
        'print("STALE" if dh_plain(0.0) != fresh else "fresh")'
    ),
    new_markdown_cell(
        "## 2. The same with ipyrefresh\n\n"
        "Handles follow the *name* they were made from, and everything it reaches: callees, "
        "data globals, gradient rules. After each cell ipyrefresh checks what the cached "
        "derivatives depend on and marks exactly the affected ones stale; they rebuild at "
        "their next call."
    ),
    new_code_cell(
        "%load_ext ipyrefresh\n"
        "from ipyrefresh import grad\n\n"
        "def g(x):\n    return 2 * x\n\n"
        "def h(x):\n    return 2 * g(x)\n\n"
        "dh = grad(h)\n"
        'print("ipyrefresh:", dh(1.0))'
    ),
    new_code_cell(
        "def h(x):\n    return 10 * np.sin(x)\n\n"
        'print("ipyrefresh after redefining h:", dh(0.0), "- a fresh grad says", '
        "autograd.grad(h)(0.0))\n"
        "assert dh(0.0) == autograd.grad(h)(0.0)"
    ),
    new_markdown_cell("### A callee changes: only the derivatives that reach it go stale"),
    new_code_cell(
        "def h(x):\n    return 2 * g(x)\n\n"
        "def unrelated(x):\n    return np.cos(x)\n\n"
        "d_unrelated = grad(unrelated)\n"
        "print(dh(1.0), d_unrelated(0.0))"
    ),
    new_code_cell("def g(x):\n    return 10 * x"),
    new_code_cell("%stale"),
    new_code_cell(
        'print("after redefining g:", dh(1.0), "- a fresh grad says", autograd.grad(h)(1.0))\n'
        "assert dh(1.0) == autograd.grad(h)(1.0) == 20.0"
    ),
    new_markdown_cell("### Data globals count too, including in-place changes of arrays"),
    new_code_cell(
        "w = np.array([1.0, 2.0, 3.0])\n\n"
        "def loss(x):\n    return np.sum(w * np.tanh(x))\n\n"
        "dloss = grad(loss)\n"
        "x0 = np.zeros(3)\n"
        "print(dloss(x0))"
    ),
    new_code_cell("w[0] = 100.0"),
    new_code_cell(
        'print("after w[0] = 100:", dloss(x0))\n'
        "assert np.allclose(dloss(x0), autograd.grad(loss)(x0))"
    ),
    new_markdown_cell("### `%grad` for a quick look, with the same guarantees"),
    new_code_cell("def f(x, y):\n    return x * y ** 3\n\n%grad -a 1 f(1.0, 2.0)"),
    new_code_cell("%grad --hessian -a 1 f(1.0, 2.0)"),
    new_code_cell(
        "import ipyrefresh\n"
        "s = ipyrefresh.status()\n"
        "print(f\"{s['fresh']} fresh, {s['stale']} stale, {s['rebuilds']} rebuilds, "
        "world {s['world']}\")\n"
        "for e in s[\"entries\"]:\n    print(f\"  {e['name']:<16} {e['state']:<6} "
        "rebuilt {e['rebuilds']}x, depends on {', '.join(e['deps'])}\")"
    ),
]

nb = new_notebook(cells=cells)
nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
nbformat.write(nb, "notebooks/quickstart.ipynb")
