"""Write notebooks/quickstart.ipynb (kept as code so that its cells are reviewable).

Run ``python scripts/make_quickstart.py`` after editing; ``./dev demo`` executes the
notebook in a real kernel and prints every cell with its output.
"""

from __future__ import annotations

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

cells = [
    new_markdown_cell(
        "# ipyrefresh quickstart\n\n"
        "In a notebook you redefine functions all day. A derivative made earlier keeps "
        "answering for the *old* code. This notebook shows that with plain autograd, then "
        "runs the same steps with ipyrefresh. Every answer is checked against a fresh "
        "autograd computation of the code and data as they are at that moment."
    ),
    new_markdown_cell("## 1. Plain autograd: `dh = grad(h)` keeps the old `h`"),
    new_code_cell(
        "import autograd\n"
        "import autograd.numpy as np\n\n"
        "def g(x):\n    return 2 * x\n\n"
        "def h(x):\n    return 2 * g(x)      # h(x) = 4x, so h'(x) = 4\n\n"
        "dh_plain = autograd.grad(h)\n"
        'print("plain autograd:  h\'(1.0) =", dh_plain(1.0))'
    ),
    new_code_cell(
        "def h(x):\n    return 5 * g(x)      # now h(x) = 10x, so h'(x) = 10\n\n"
        'print("plain autograd:  h\'(1.0) =", dh_plain(1.0), " <- still 4.0: stale")\n'
        'print("fresh autograd:  h\'(1.0) =", autograd.grad(h)(1.0))'
    ),
    new_markdown_cell(
        "(`jax.jit(jax.grad(h))` is worse: it also keeps the old *callees* of `h`, and the "
        "values of the global arrays it read.)"
    ),
    new_markdown_cell(
        "## 2. The same steps with ipyrefresh\n\n"
        "`grad(h)` from ipyrefresh follows the *name* `h` and everything `h` reads: the "
        "functions it calls, the globals and arrays it uses, gradient rules. Before every "
        "call it checks that none of that changed since the derivative was compiled; if "
        "something did, it rebuilds just that derivative, from the current code."
    ),
    new_code_cell(
        "%load_ext ipyrefresh\n"
        "from ipyrefresh import grad\n\n"
        "def g(x):\n    return 2 * x\n\n"
        "def h(x):\n    return 2 * g(x)      # h'(x) = 4\n\n"
        "dh = grad(h)\n"
        'print("ipyrefresh:      h\'(1.0) =", dh(1.0))'
    ),
    new_code_cell(
        "def h(x):\n    return 5 * g(x)      # h'(x) = 10\n\n"
        'print("ipyrefresh:      h\'(1.0) =", dh(1.0))\n'
        'print("fresh autograd:  h\'(1.0) =", autograd.grad(h)(1.0))\n'
        "assert dh(1.0) == autograd.grad(h)(1.0) == 10.0"
    ),
    new_markdown_cell(
        "## 3. Data counts too: globals, arrays changed in place, objects\n\n"
        "`loss` reads the global array `w`. Changing one element in place, without "
        "rebinding any name, changes the gradient; the next call sees it."
    ),
    new_code_cell(
        "w = np.array([1.0, 2.0, 3.0])\n\n"
        "def loss(x):\n    return np.sum(w * np.tanh(x))   # d/dx at x = 0 is w\n\n"
        "dloss = grad(loss)\n"
        "x0 = np.zeros(3)\n"
        'print("gradient of loss at 0:", dloss(x0))'
    ),
    new_code_cell(
        "w[0] = 100.0\n"
        'print("after w[0] = 100:     ", dloss(x0))\n'
        "assert np.array_equal(dloss(x0), autograd.grad(loss)(x0))"
    ),
    new_markdown_cell(
        "Changes made by a function call, inside a loop, or on an object's attributes are "
        "seen the same way, because the check happens at the call:"
    ),
    new_code_cell(
        "class Model:\n"
        "    def __init__(self, scale):\n        self.scale = scale\n"
        "    def predict(self, x):\n        return self.scale * np.sin(x)\n\n"
        "model = Model(3.0)\n"
        "dpredict = grad(model.predict)\n\n"
        "def set_scale(s):\n    model.scale = s\n\n"
        "for s in [1.0, 2.0, 3.0]:\n"
        "    set_scale(s)\n"
        '    print(f"scale = {s}:  d/dx predict at 0 =", dpredict(0.0))\n'
        "    assert dpredict(0.0) == autograd.grad(model.predict)(0.0)"
    ),
    new_markdown_cell(
        "## 4. `%stale`: what will be rebuilt at its next call, and why\n\n"
        "Redefine `g` again and ask. `%stale` checks every cached derivative against the "
        "code and data of this moment; only `grad(h)` reaches `g`."
    ),
    new_code_cell("def g(x):\n    return 3 * x          # h'(x) = 15\n\n%stale"),
    new_code_cell(
        'print("ipyrefresh:      h\'(1.0) =", dh(1.0), " (rebuilt just now)")\n'
        "assert dh(1.0) == autograd.grad(h)(1.0) == 15.0"
    ),
    new_markdown_cell(
        "## 5. `%grad` for a quick look\n\n"
        "`%grad f(args)` differentiates one call with the current code; `-a 1` picks the "
        "argument, `--hessian`, `--jacobian`, `--value` pick the derivative. For "
        "f(x, y) = x² y³ at (2, 3): ∂f/∂y = 3x²y² = 108 and ∂²f/∂y² = 6x²y = 72."
    ),
    new_code_cell("def f(x, y):\n    return x ** 2 * y ** 3\n\n%grad -a 1 f(2.0, 3.0)"),
    new_code_cell("%grad --hessian -a 1 f(2.0, 3.0)"),
    new_markdown_cell(
        "## 6. What is cached\n\n"
        "`ipyrefresh.status()` lists every cached derivative: its state, how often it was "
        "built and answered from the cache, and how it runs (a compiled replay of "
        "autograd's tape, or autograd itself for functions a replay cannot repeat)."
    ),
    new_code_cell(
        "import ipyrefresh\n\n"
        "s = ipyrefresh.status()\n"
        "print(f\"{s['fresh']} fresh, {s['stale']} stale, {s['rebuilds']} rebuilds\")\n"
        "print(f\"{'derivative':<22} {'state':<6} {'builds':>6} {'hits':>5}  runs\")\n"
        'for e in s["entries"]:\n'
        '    runs = ", ".join(e["runs"])\n'
        "    print(f\"{e['name']:<22} {e['state']:<6} {e['builds']:>6} {e['hits']:>5}  {runs}\")"
    ),
]

nb = new_notebook(cells=cells)
nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
nbformat.write(nb, "notebooks/quickstart.ipynb")
