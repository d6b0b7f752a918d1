"""The front end's unit tests (tests/frontend/*.test.ts, node's test runner) run from pytest,
so that ``./dev test`` covers them. ``./dev setup`` installs the node packages."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_front_end_message_handling() -> None:
    bindir = str(Path(sys.executable).parent)
    env = {**os.environ, "PATH": bindir + os.pathsep + os.environ.get("PATH", "")}
    jlpm = shutil.which("jlpm", path=env["PATH"])
    if jlpm is None or shutil.which("node") is None:
        pytest.skip("needs node and jlpm (./dev setup installs them)")
    if not (ROOT / "node_modules" / "typescript").is_dir():
        pytest.skip("node packages not installed: run ./dev setup (or jlpm install)")
    proc = subprocess.run(
        [jlpm, "test"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    passed = re.search(r"^# pass (\d+)$", out, re.M)
    failed = re.search(r"^# fail (\d+)$", out, re.M)
    assert passed and failed, out
    assert int(failed.group(1)) == 0, out
    assert int(passed.group(1)) >= 10, out
