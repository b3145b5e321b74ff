"""mypy's verdict on the typed API, both ways.

``samples/misuse.py`` (the library) and ``samples/client_misuse.py`` (``paymentcore.client``, as an
outside file uses it) hold deliberate misuses, one a line, each marked ``# expect: <code>[, <code>...]``:
every marked line must be reported by ``mypy --strict`` at that line with exactly those error codes (one
test per line), and no unmarked line may be reported. ``samples/correct_use.py`` and
``samples/client_correct_use.py``, the same operations done right, must be clean.

mypy runs in-process (``mypy.api``), once per sample per session, with the project's configuration,
``--strict``, and a cache directory of its own, so that it never touches the main run's ``.mypy_cache``.
Errors inside the library are silenced (``--follow-imports=silent``): they are the main run's business.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import pytest
from mypy import api

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = ROOT / "pyproject.toml"
SAMPLES = Path(__file__).resolve().parent / "samples"
MISUSE = SAMPLES / "misuse.py"
CORRECT = SAMPLES / "correct_use.py"

MARKER = re.compile(r"#\s*expect\b")
EXPECT = re.compile(r"#\s*expect:\s*(?P<codes>[a-z0-9-]+(?:\s*,\s*[a-z0-9-]+)*)\s*$")
# /abs/path.py:12: error: Message text  [code]
REPORT = re.compile(
    r"^(?P<path>.+?):(?P<line>\d+):(?:\d+:)? (?P<severity>error|note): (?P<message>.*?)"
    r"(?:  \[(?P<code>[a-z0-9-]+)\])?$"
)


class Error(NamedTuple):
    line: int
    code: str | None
    message: str


class Report(NamedTuple):
    status: int
    errors: list[Error]  # errors in the sample itself, in order
    output: str

    def at(self, line: int) -> list[Error]:
        return [error for error in self.errors if error.line == line]


def markers(path: Path) -> tuple[dict[int, tuple[str, ...]], list[int]]:
    """The ``# expect:`` codes by line number, and the lines whose marker does not parse."""
    expected: dict[int, tuple[str, ...]] = {}
    malformed: list[int] = []
    for number, text in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not MARKER.search(text):
            continue
        match = EXPECT.search(text)
        if match is None:
            malformed.append(number)
        else:
            expected[number] = tuple(code.strip() for code in match["codes"].split(","))
    return expected, malformed


def run_mypy(sample: Path, cache_dir: Path) -> Report:
    """mypy --strict on one sample, with the project's configuration; its errors in that file."""
    args = [
        "--strict",
        "--config-file",
        str(PYPROJECT),
        "--cache-dir",
        str(cache_dir),
        "--follow-imports=silent",
        "--show-absolute-path",
        "--show-error-codes",
        "--no-pretty",
        "--no-color-output",
        "--no-error-summary",
        str(sample),
    ]
    with pytest.MonkeyPatch.context() as patch:
        # paymentcore is installed in editable mode through an import hook mypy cannot follow: point it
        # at the source tree, whatever directory pytest runs from.
        patch.setenv("MYPYPATH", os.pathsep.join(filter(None, [str(ROOT), os.environ.get("MYPYPATH")])))
        stdout, stderr, status = api.run(args)
    if status not in (0, 1):
        pytest.fail(f"mypy did not run on {sample.name} (exit {status}):\n{stdout}{stderr}")
    errors: list[Error] = []
    for raw in stdout.splitlines():
        match = REPORT.match(raw)
        if match is None or match["severity"] != "error":
            continue
        if Path(match["path"]).resolve() != sample.resolve():
            continue
        errors.append(Error(int(match["line"]), match["code"], match["message"]))
    return Report(status, errors, stdout + stderr)


MISUSES = {"library": MISUSE, "client": SAMPLES / "client_misuse.py"}
CORRECT_USES = {"library": CORRECT, "client": SAMPLES / "client_correct_use.py"}
MARKED = {name: markers(path) for name, path in MISUSES.items()}
SOURCES = {name: path.read_text(encoding="utf-8").splitlines() for name, path in MISUSES.items()}
CASES = [
    (name, line, codes) for name, (expected, _) in MARKED.items() for line, codes in sorted(expected.items())
]


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    yield tmp_path_factory.mktemp("mypy-cache")


class Reports:
    """mypy's report on each sample, run once per module (on first use)."""

    def __init__(self, cache_dir: Path) -> None:
        self.cache_dir = cache_dir
        self.done: dict[Path, Report] = {}

    def of(self, sample: Path) -> Report:
        if sample not in self.done:
            self.done[sample] = run_mypy(sample, self.cache_dir)
        return self.done[sample]


@pytest.fixture(scope="module")
def reports(cache_dir: Path) -> Reports:
    return Reports(cache_dir)


def describe(errors: list[Error]) -> str:
    return "\n".join(f"  {e.line}: {e.message}  [{e.code}]" for e in errors) or "  nothing"


@pytest.mark.parametrize("sample", sorted(MISUSES))
def test_the_markers_parse(sample: str) -> None:
    expected, malformed = MARKED[sample]
    assert not malformed, f"{MISUSES[sample].name}: malformed '# expect:' markers on lines {malformed}"
    assert len(expected) >= 10, f"{MISUSES[sample].name} has lost its marked misuses"
    assert markers(CORRECT_USES[sample]) == ({}, []), f"{CORRECT_USES[sample].name} must not expect any error"


@pytest.mark.parametrize(
    ("sample", "line", "codes"),
    CASES,
    ids=[f"{sample}-line{line}-{'+'.join(codes)}" for sample, line, codes in CASES],
)
def test_misuse_is_reported(reports: Reports, sample: str, line: int, codes: tuple[str, ...]) -> None:
    reported = reports.of(MISUSES[sample]).at(line)
    assert {error.code for error in reported} == set(codes), (
        f"{MISUSES[sample].name}:{line}: {SOURCES[sample][line - 1].strip()}\n"
        f"expected {', '.join(codes)}; mypy reported:\n{describe(reported)}"
    )


@pytest.mark.parametrize("sample", sorted(MISUSES))
def test_no_unmarked_line_is_reported(reports: Reports, sample: str) -> None:
    report = reports.of(MISUSES[sample])
    expected, _ = MARKED[sample]
    unexpected = [error for error in report.errors if error.line not in expected]
    assert not unexpected, (
        f"{MISUSES[sample].name}: errors on lines not marked '# expect:':\n{describe(unexpected)}"
    )
    assert report.status == 1


@pytest.mark.parametrize("sample", sorted(CORRECT_USES))
def test_correct_use_is_clean(reports: Reports, sample: str) -> None:
    report = reports.of(CORRECT_USES[sample])
    assert report.errors == [], f"{CORRECT_USES[sample].name}:\n{describe(report.errors)}"
    assert report.status == 0, report.output
