"""The main job: execute notebooks/quickstart.ipynb in a real kernel and tell the story.

Usage: python scripts/demo.py [notebook] — writes the executed notebook under build/ and
prints each cell's output. Exits non-zero if any cell failed (the notebook asserts that
ipyrefresh agrees with a fresh autograd computation at every step).
"""

from __future__ import annotations

import sys
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError


def text_of(output: dict) -> str:
    if output["output_type"] == "stream":
        return str(output["text"])
    if output["output_type"] in ("execute_result", "display_data"):
        return str(output["data"].get("text/plain", "")) + "\n"
    if output["output_type"] == "error":
        return f"{output['ename']}: {output['evalue']}\n"
    return ""


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
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            first = cell.source.splitlines()[0].lstrip("# ")
            print(f"\n== {first}")
            continue
        shown = cell.source.strip().splitlines()
        print("  >>> " + (shown[0] if shown else ""))
        for output in cell.get("outputs", []):
            for line in text_of(output).rstrip("\n").splitlines():
                print(f"      {line}")
    print(f"\nExecuted notebook written to {target}")
    if failed is not None:
        print(f"\nDEMO FAILED: {failed}", file=sys.stderr)
        return 1
    print("Demo OK: ipyrefresh matched a fresh autograd computation at every step.")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
