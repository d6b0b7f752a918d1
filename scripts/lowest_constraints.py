"""Pip constraints that pin every dependency to its declared floor, for one Python.

Usage: python scripts/lowest_constraints.py [--python PATH | --python-version X.Y.Z]
                                            [--extra NAME]... [--pyproject FILE]

Reads ``[project].dependencies`` (and the named extras) from pyproject.toml, keeps the
requirements whose environment markers hold for the target Python, and prints
``name==floor`` for each, where the floor is the requirement's ``>=`` bound. ``./dev test``
installs ipyrefresh with these constraints on the lowest supported Python and runs the demo
and a smoke subset there, so a floor that does not work fails the run instead of a user's
install. Everything not pinned here (transitive dependencies, test tools) resolves freely.

A requirement without a ``>=`` floor is an error: every dependency must state one.
Needs ``packaging`` (and ``tomli`` on 3.10); the target Python may differ from this one.
"""

from __future__ import annotations

import argparse
import platform
import subprocess
import sys
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: tomli (ipyrefresh's test extra has it)
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent


def target_environment(python: str | None, version: str | None) -> dict[str, str]:
    """Marker environment of the target interpreter (this one's, with its version swapped)."""
    env = dict(default_environment())
    if python is not None:
        version = subprocess.run(
            [python, "-c", "import platform; print(platform.python_version())"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    if version is None:
        version = platform.python_version()
    env["python_full_version"] = version
    env["python_version"] = ".".join(version.split(".")[:2])
    return env


def floors(
    pyproject: dict, extras: list[str], env: dict[str, str]
) -> list[tuple[str, str, Requirement]]:
    """``(name, floor, requirement)`` for each requirement that applies to ``env``."""
    project = pyproject["project"]
    self_name = project["name"]
    reqs = [Requirement(r) for r in project.get("dependencies", [])]
    optional = project.get("optional-dependencies", {})
    for extra in extras:
        if extra not in optional:
            raise SystemExit(f"no extra {extra!r} in pyproject.toml")
        reqs += [Requirement(r) for r in optional[extra]]
    out: list[tuple[str, str, Requirement]] = []
    seen: dict[str, str] = {}
    for req in reqs:
        if req.name == self_name:  # ipyrefresh[callgraph] and the like
            continue
        if req.marker is not None and not req.marker.evaluate(env):
            continue
        lows = [s.version for s in req.specifier if s.operator == ">="]
        if len(lows) != 1:
            raise SystemExit(f"{req}: needs exactly one '>=' floor to pin (found {len(lows)})")
        floor = lows[0]
        if not req.specifier.contains(floor, prereleases=True):
            raise SystemExit(f"{req}: its floor {floor} is excluded by its own specifier")
        key = req.name.lower().replace("_", "-")
        if key in seen and seen[key] != floor:
            raise SystemExit(f"{req.name}: two floors apply ({seen[key]} and {floor})")
        if key not in seen:
            seen[key] = floor
            out.append((req.name, floor, req))
    return out


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--python", help="the target interpreter (default: this one)")
    which.add_argument("--python-version", help="the target's version, e.g. 3.10.13")
    parser.add_argument("--extra", action="append", default=[], help="also pin this extra")
    parser.add_argument("--pyproject", default=str(ROOT / "pyproject.toml"))
    args = parser.parse_args(argv)
    with open(args.pyproject, "rb") as f:
        pyproject = tomllib.load(f)
    env = target_environment(args.python, args.python_version)
    print(
        f"# Declared floors of {pyproject['project']['name']} for Python "
        f"{env['python_full_version']} (scripts/lowest_constraints.py)"
    )
    for name, floor, req in floors(pyproject, args.extra, env):
        print(f"{name}=={floor}  # {req}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
