"""Packaging: what a user's ``pip install`` gets.

* The declared dependency floors are well formed, and scripts/lowest_constraints.py (which
  ``./dev test`` uses to install exactly those floors) pins them per Python version.
* ``python -m build`` makes an sdist that carries the prebuilt labextension and a wheel (built
  from that sdist, as pip does) that carries LICENSE, classifiers, project URLs, the ``lab``
  extra, the labextension and the kernelspec.
* The sdist installs with no Node.js on PATH, in a fresh venv with real pip, and JupyterLab
  there lists the extension.
"""

from __future__ import annotations

import email
import os
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path
from typing import Any

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
NAME = PYPROJECT["project"]["name"]
VERSION = PYPROJECT["project"]["version"]
LABEXT_FILES = ("package.json", "static/style.js", "install.json")


def lowest(*args: str) -> dict[str, str]:
    out = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "lowest_constraints.py"), *args],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    pins = {}
    for line in out.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        m = re.fullmatch(r"([A-Za-z0-9_.-]+)==(\S+)  # .*", line)
        assert m, line
        pins[m.group(1)] = m.group(2)
    return pins


def test_one_version_everywhere() -> None:
    """``ipyrefresh.__version__``, the distribution's and the JupyterLab extension's are one
    (the engine's rebuild raised the first alone, and ``pip show`` disagreed with it)."""
    import json

    import ipyrefresh

    package = json.loads((ROOT / "package.json").read_text())
    assert (ipyrefresh.__version__, package["version"]) == (VERSION, VERSION)


def test_every_dependency_declares_a_floor() -> None:
    for spec in PYPROJECT["project"]["dependencies"]:
        req = Requirement(spec)
        floors = [s for s in req.specifier if s.operator == ">="]
        assert len(floors) == 1, f"{spec}: one '>=' floor, please (the lowest-versions run pins it)"


def applies(req: Requirement, python: str) -> bool:
    env = {"python_full_version": python, "python_version": ".".join(python.split(".")[:2])}
    return req.marker is None or req.marker.evaluate(env)


@pytest.mark.parametrize(
    ("python", "numpy"), [("3.10.13", "1.24.4"), ("3.12.1", "1.26.0"), ("3.13.0", "2.1.0")]
)
def test_lowest_constraints_follow_the_markers(python: str, numpy: str) -> None:
    pins = lowest("--python-version", python, "--extra", "jax")
    assert pins["numpy"] == numpy
    project = PYPROJECT["project"]
    reqs = [
        Requirement(s) for s in project["dependencies"] + project["optional-dependencies"]["jax"]
    ]
    for req in reqs:
        if applies(req, python):
            assert Version(pins[req.name]) in req.specifier, (str(req), pins[req.name])
    assert {r.name for r in reqs if applies(r, python)} == set(pins)


def test_lowest_constraints_refuse_a_dependency_without_floor(tmp_path: Path) -> None:
    text = (ROOT / "pyproject.toml").read_text().replace('"comm>=0.1.3"', '"comm"')
    assert '"comm"' in text
    (tmp_path / "pyproject.toml").write_text(text)
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "scripts" / "lowest_constraints.py"),
            "--pyproject",
            str(tmp_path / "pyproject.toml"),
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode != 0 and "comm: needs exactly one '>=' floor" in proc.stderr


# --- building and installing for real ----------------------------------------------------


def no_node_path() -> str:
    """PATH without any directory that holds node (or nodejs)."""
    keep = [
        d
        for d in os.environ.get("PATH", "").split(os.pathsep)
        if d and not any(os.access(Path(d) / exe, os.X_OK) for exe in ("node", "nodejs"))
    ]
    path = os.pathsep.join(keep)
    assert shutil.which("node", path=path) is None
    return path


def run(cmd: list[str], **kw: Any) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, **kw)
    assert proc.returncode == 0, f"{cmd} failed:\n{proc.stdout}\n{proc.stderr}"
    return proc


@pytest.fixture(scope="module")
def dists(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """sdist and wheel from ``python -m build`` (the wheel is built from the sdist)."""
    pytest.importorskip("build")
    if not (ROOT / "ipyrefresh" / "labextension" / "static" / "style.js").is_file():
        pytest.fail("the labextension is not built: run ./dev setup (jlpm build) first")
    out = tmp_path_factory.mktemp("dist")
    run([sys.executable, "-m", "build", "--outdir", str(out), str(ROOT)])
    (sdist,) = out.glob(f"{NAME}-{VERSION}.tar.gz")
    (wheel,) = out.glob(f"{NAME}-{VERSION}-py3-none-any.whl")
    return {"sdist": sdist, "wheel": wheel}


@pytest.mark.slow
def test_sdist_carries_the_prebuilt_labextension_and_sources(dists: dict[str, Path]) -> None:
    with tarfile.open(dists["sdist"]) as tar:
        names = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
    for f in LABEXT_FILES[:2]:
        assert f"ipyrefresh/labextension/{f}" in names
    for f in (
        "LICENSE",
        "pyproject.toml",
        "README.md",
        "package.json",
        "yarn.lock",
        "jupyter-config/install.json",
        "src/index.ts",
    ):
        assert f in names, f
    leaked = sorted(
        n
        for n in names
        if n.split("/")[0] in (".venv", "node_modules", "build", "dist", "artifacts", "lib")
        or n.startswith(".venv")
    )
    assert not leaked, leaked[:10]


@pytest.mark.slow
def test_wheel_carries_license_metadata_labextension_and_kernelspec(
    dists: dict[str, Path],
) -> None:
    with zipfile.ZipFile(dists["wheel"]) as whl:
        names = set(whl.namelist())
        info = f"{NAME}-{VERSION}.dist-info"
        license_text = whl.read(f"{info}/licenses/LICENSE").decode()
        meta = email.message_from_bytes(whl.read(f"{info}/METADATA"))
    assert license_text.startswith("BSD 3-Clause License")
    assert "the ipyrefresh developers" in license_text
    assert meta["License-Expression"] == "BSD-3-Clause"
    assert meta.get_all("License-File") == ["LICENSE"]
    classifiers = set(meta.get_all("Classifier"))
    for c in (
        "Framework :: Jupyter :: JupyterLab :: Extensions :: Prebuilt",
        "Framework :: IPython",
        "Programming Language :: Python :: 3.10",
        "Programming Language :: Python :: 3.13",
        "Topic :: Scientific/Engineering",
        "Intended Audience :: Science/Research",
    ):
        assert c in classifiers, c
    urls = dict(u.split(", ", 1) for u in meta.get_all("Project-URL"))
    assert urls["Homepage"] == "https://github.com/ipyrefresh/ipyrefresh"
    assert urls["Issues"] == "https://github.com/ipyrefresh/ipyrefresh/issues"
    assert "Documentation" in urls
    assert meta["Requires-Python"] == ">=3.10"
    assert "lab" in meta.get_all("Provides-Extra")
    requires = [Requirement(r) for r in meta.get_all("Requires-Dist")]
    lab = [
        r
        for r in requires
        if r.name == "jupyterlab" and r.marker and r.marker.evaluate({"extra": "lab"})
    ]
    assert lab and Version("4.0") in lab[0].specifier and Version("5.0") not in lab[0].specifier
    data = f"{NAME}-{VERSION}.data/data/share/jupyter"
    for f in LABEXT_FILES:
        assert f"{data}/labextensions/ipyrefresh/{f}" in names, f
    assert f"{data}/kernels/python3-ipyrefresh/kernel.json" in names


@pytest.mark.slow
def test_sdist_installs_without_node_and_jupyterlab_lists_the_extension(
    dists: dict[str, Path], tmp_path: Path
) -> None:
    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", str(venv)])
    py = venv / "bin" / "python"
    env = {
        **os.environ,
        "PATH": str(venv / "bin") + os.pathsep + no_node_path(),
        # this venv's Jupyter paths only, not the developer's
        "JUPYTER_CONFIG_DIR": str(tmp_path / "config"),
        "JUPYTER_DATA_DIR": str(tmp_path / "data"),
        "JUPYTER_PREFER_ENV_PATH": "1",
    }
    env.pop("VIRTUAL_ENV", None)
    env.pop("PYTHONPATH", None)
    run(
        [str(py), "-m", "pip", "install", "-q", f"{NAME}[lab] @ {dists['sdist'].as_uri()}"], env=env
    )
    share = venv / "share" / "jupyter"
    for f in LABEXT_FILES:
        assert (share / "labextensions" / "ipyrefresh" / f).is_file(), f
    assert (share / "kernels" / "python3-ipyrefresh" / "kernel.json").is_file()
    proc = run([str(venv / "bin" / "jupyter"), "labextension", "list"], env=env)
    listing = re.sub(r"\x1b\[[0-9;]*m", "", proc.stdout + proc.stderr)  # no colours
    assert str(share / "labextensions") in listing, listing
    assert re.search(
        rf"^\s*ipyrefresh v{re.escape(VERSION)} enabled OK \(python, ipyrefresh\)$", listing, re.M
    ), listing
    proc = run([str(venv / "bin" / "jupyter"), "kernelspec", "list"], env=env)
    assert "python3-ipyrefresh" in proc.stdout, proc.stdout
    # The installed package is the one that answers (not this checkout), and it works.
    code = (
        "import ipyrefresh, sys\n"
        "from ipyrefresh import grad\n"
        f"assert ipyrefresh.__file__.startswith({str(venv)!r}), ipyrefresh.__file__\n"
        "print(float(grad(lambda x: x * x * x)(2.0)))\n"
    )
    out = run([str(py), "-c", code], env=env, cwd=tmp_path).stdout
    assert out.strip() == "12.0"
