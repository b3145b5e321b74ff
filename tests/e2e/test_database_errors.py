"""A database that cannot be written is refused in one line, not a traceback (issue 14, point 5).

Read-only is made with the immutable attribute (``chattr +i``), which binds root too (CI runs as
root, and root ignores file modes). Where ``chattr`` cannot be used the tests skip, except under CI.
The unreachable PostgreSQL server is tested in test_postgres_server.py.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from paymentcore import PaymentCore


def chattr(flag: str, *paths: Path) -> None:
    subprocess.run(["chattr", flag, *map(str, paths)], check=True, capture_output=True)


@pytest.fixture
def frozen(tmp_path: Path) -> Iterator[Path]:
    """A folder holding a paymentcore database (``pc.db``); the folder and its files are made immutable."""
    folder = tmp_path / "frozen"
    folder.mkdir()
    PaymentCore.sqlite(folder / "pc.db", sender=None).close()
    files = sorted(folder.iterdir())
    try:
        if shutil.which("chattr") is None:
            raise OSError("no chattr")
        chattr("+i", *files, folder)
    except (OSError, subprocess.CalledProcessError) as exc:
        if os.environ.get("CI"):
            pytest.fail(f"chattr +i is needed under CI: {exc}")
        pytest.skip(f"cannot make files immutable here ({exc}); run as root on ext4 or tmpfs")
    try:
        yield folder
    finally:
        chattr("-i", folder, *files)


def paymentcore(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "paymentcore_server", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=60,
        check=False,
    )


def assert_one_line_refusal(done: subprocess.CompletedProcess[str], db: Path) -> None:
    assert done.returncode != 0 and done.stdout == "", (done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("error: ") and "Traceback" not in done.stderr
    assert str(db) in lines[0] or db.name in lines[0], lines[0]


def test_a_write_to_a_read_only_database_is_refused_in_one_line(frozen: Path, tmp_path: Path) -> None:
    db = frozen / "pc.db"
    done = paymentcore("--db", str(db), "merchant", "create", "Frozen Shop", "--json", cwd=tmp_path)
    assert_one_line_refusal(done, db)


def test_a_new_database_in_a_read_only_folder_is_refused_in_one_line(frozen: Path, tmp_path: Path) -> None:
    db = frozen / "new.db"
    for command in (["balance", "mer_x", "--json"], ["serve", "--port", "1", "--sandbox-delay", "0"]):
        done = paymentcore("--db", str(db), *command, cwd=tmp_path)
        assert_one_line_refusal(done, db)
    assert not db.exists()
