"""The main job: execute notebooks/quickstart.ipynb in a real kernel and tell the story.

Usage: python scripts/demo.py [notebook] — prints every cell as it would appear in a
console (``In [n]:`` and the whole source, then its output) and writes the executed
notebook under build/. Exits non-zero if any cell failed: the notebook asserts that
ipyrefresh agrees with a fresh autograd computation at every step.
"""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path
from typing import Any

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError


def text_of(output: Any) -> str:
    if output["output_type"] == "stream":
        return str(output["text"])
    if output["output_type"] in ("execute_result", "display_data"):
        return str(output["data"].get("text/plain", "")) + "\n"
    if output["output_type"] == "error":
        return f"{output['ename']}: {output['evalue']}\n"
    return ""


def show(nb: Any) -> None:
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            title, _, rest = cell.source.partition("\n")
            level = len(title) - len(title.lstrip("#"))
            title = title.lstrip("# ")
            print(f"\n{title.upper()}" if level == 1 else f"\n--- {title} ---" if level else "")
            if not level:
                rest = cell.source
            for paragraph in rest.strip().split("\n\n"):
                if paragraph:
                    text = " ".join(paragraph.split())
                    print(textwrap.fill(text, 88, initial_indent="  ", subsequent_indent="  "))
            continue
        prompt = f"In [{cell.get('execution_count') or ' '}]: "
        for i, line in enumerate(cell.source.splitlines()):
            print((prompt if i == 0 else " " * (len(prompt) - 5) + "...: ") + line)
        for output in cell.get("outputs", []):
            for line in text_of(output).rstrip("\n").splitlines():
                print(f"    {line}")


def main(argv: list[str]) -> int:
    source = Path(argv[0] if argv else "notebooks/quickstart.ipynb")
    nb = nbformat.read(source, as_version=4)
    client = NotebookClient(nb, timeout=120, kernel_name="python3")
    failed = None
    try:
        client.execute(cwd=str(source.parent))
    except CellExecutionError as exc:
        failed = exc
    out_dir = Path("build")
    out_dir.mkdir(exist_ok=True)
    target = out_dir / source.name
    nbformat.write(nb, target)
    show(nb)
    print(f"\nExecuted notebook written to {target}")
    if failed is not None:
        print(f"\nDEMO FAILED: {failed}", file=sys.stderr)
        return 1
    print("Demo OK: ipyrefresh matched a fresh autograd computation at every step.")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
