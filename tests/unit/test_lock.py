"""constraints.txt (the lock CI installs through) agrees with the ranges pyproject.toml declares."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
PROJECT = "paymentcore (pyproject.toml)"


def declared(pyproject: str) -> dict[str, Requirement]:
    """Every requirement of the project: runtime and every extra, by canonical name."""
    project = tomllib.loads(pyproject)["project"]
    lines = list(project.get("dependencies", []))
    for extra in project.get("optional-dependencies", {}).values():
        lines.extend(extra)
    found: dict[str, Requirement] = {}
    for line in lines:
        requirement = Requirement(line)
        found[canonicalize_name(requirement.name)] = requirement
    return found


def locked(lock: str) -> dict[str, tuple[Version, set[str]]]:
    """Each pinned package of a pip-compile file: its version and what its `# via` lines name."""
    found: dict[str, tuple[Version, set[str]]] = {}
    current: str | None = None
    for raw in lock.splitlines():
        line = raw.strip()
        pin = re.fullmatch(r"([A-Za-z0-9._-]+)==([^\s;]+)", line)
        if pin:
            current = canonicalize_name(pin.group(1))
            found[current] = (Version(pin.group(2)), set())
            continue
        via = re.fullmatch(r"#\s+(?:via\s+)?#?\s*(.+)", line)
        if current and via and not line.startswith("# The following"):
            name = via.group(1).strip()
            if name and name != "via":
                found[current][1].add(name if name == PROJECT else canonicalize_name(name))
        if not line:
            current = None
    return found


def disagreements(pyproject: str, lock: str) -> list[str]:
    wanted = declared(pyproject)
    pins = locked(lock)
    problems: list[str] = []
    for name, requirement in sorted(wanted.items()):
        if name not in pins:
            problems.append(f"{name} is declared in pyproject.toml but not locked")
            continue
        version = pins[name][0]
        if not requirement.specifier.contains(version, prereleases=True):
            problems.append(f"{name}=={version} is outside the declared range {requirement.specifier}")
    for name, (version, via) in sorted(pins.items()):
        if name in wanted:
            continue
        required_by = {source for source in via if source != PROJECT and source in pins}
        if not required_by:
            problems.append(f"{name}=={version} is locked but nothing in pyproject.toml needs it")
    return problems


def test_the_committed_lock_agrees_with_pyproject() -> None:
    pyproject = (ROOT / "pyproject.toml").read_text("utf-8")
    lock = (ROOT / "constraints.txt").read_text("utf-8")
    assert disagreements(pyproject, lock) == []


PYPROJECT = """
[project]
name = "demo"
dependencies = ["attrs>=23.2"]
[project.optional-dependencies]
test = ["pytest>=8,<9.2"]
"""

LOCK = """
attrs==26.1.0
    # via paymentcore (pyproject.toml)
iniconfig==2.3.1
    # via pytest
pytest==9.1.1
    # via paymentcore (pyproject.toml)
"""


def test_a_lock_in_step_with_pyproject_has_no_disagreement() -> None:
    assert disagreements(PYPROJECT, LOCK) == []


@pytest.mark.parametrize(
    ("pyproject", "lock", "problem"),
    [
        (
            PYPROJECT.replace('"attrs>=23.2"', '"attrs>=23.2", "cattrs>=23.2"'),
            LOCK,
            "cattrs is declared in pyproject.toml but not locked",
        ),
        (PYPROJECT, LOCK.replace("pytest==9.1.1", "pytest==9.2.0"), "pytest==9.2.0 is outside"),
        (
            PYPROJECT.replace('"attrs>=23.2"', ""),
            LOCK,
            "attrs==26.1.0 is locked but nothing in pyproject.toml needs it",
        ),
        (
            PYPROJECT,
            LOCK + "httpx2==2.16.2\n    # via paymentcore (pyproject.toml)\n",
            "httpx2==2.16.2 is locked but nothing in pyproject.toml needs it",
        ),
    ],
    ids=["declared-not-locked", "locked-outside-range", "dropped-dependency", "stale-pin"],
)
def test_each_kind_of_disagreement_is_reported(pyproject: str, lock: str, problem: str) -> None:
    assert any(problem in line for line in disagreements(pyproject, lock))
