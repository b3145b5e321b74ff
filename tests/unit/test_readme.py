"""The README's two set-up commands, and CI running the same test command."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text("utf-8")
    return [block.strip() for block in re.findall(r"```sh\n(.*?)```", text, flags=re.S)]


def test_readme_has_exactly_the_two_set_up_commands() -> None:
    serve, test = readme_commands()
    assert "paymentcore serve --demo" in serve
    assert "pip install -c constraints.txt -e '.[test]'" in test and "pytest" in test
    assert "mypy" in test and "ruff check" in test


def test_both_commands_install_through_the_lock() -> None:
    """The server a reader starts runs on the versions the tests ran on (issue 24, point 9)."""
    serve, test = readme_commands()
    assert serve.startswith("python3 -m pip install -c constraints.txt . && "), serve
    assert test.startswith("python3 -m pip install -c constraints.txt -e '.[test]' && "), test


def test_the_readme_names_the_debian_package_the_postgresql_tests_need() -> None:
    """tests/conftest.py starts a throwaway cluster from the server binaries of Debian's postgresql."""
    text = (ROOT / "README.md").read_text("utf-8")
    assert "`postgresql` package" in text and "apt-get install postgresql" in text


def test_ci_runs_the_readme_test_command_verbatim() -> None:
    _, test = readme_commands()
    ci_lines = [line.strip() for line in (ROOT / ".ci" / "run").read_text("utf-8").splitlines()]
    assert test in ci_lines
