"""A database that cannot be written is refused in one line, not a traceback (issue 14, point 5), and
so is a read-only database file or rate-limit file in a writable folder, by ``serve`` and ``worker``
at start; ``/healthz`` answers 503 while either cannot be written (issue 24, point 1).

Read-only is made with the immutable attribute (``chattr +i``), which binds root too (CI runs as
root, and root ignores file modes); a file is also given mode 444, which is what binds an ordinary
user. Where ``chattr`` is needed but cannot be used the tests skip, except under CI. The unreachable
PostgreSQL server is tested in test_postgres_server.py.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
from test_postgres_server import Serve, free_port  # type: ignore[import-not-found, unused-ignore]

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


# --- a read-only database file in a writable folder (issue 24, point 1) ------------------------------


@contextmanager
def read_only(path: Path) -> Iterator[None]:
    """``path`` made read-only for this process: mode 444 and, as root (whom modes do not bind), the
    immutable attribute too. The folder stays writable, as in the red team's run."""
    mode = path.stat().st_mode
    path.chmod(0o444)
    frozen = False
    try:
        if os.geteuid() == 0:
            try:
                if shutil.which("chattr") is None:
                    raise OSError("no chattr")
                chattr("+i", path)
                frozen = True
            except (OSError, subprocess.CalledProcessError) as exc:
                if os.environ.get("CI"):
                    pytest.fail(f"chattr +i is needed under CI: {exc}")
                pytest.skip(f"cannot make a file read-only for root here ({exc})")
        assert not os.access(path, os.W_OK)
        yield
    finally:
        if frozen:
            chattr("-i", path)
        path.chmod(mode)


@pytest.fixture
def database(tmp_path: Path) -> Path:
    """A migrated paymentcore database (``shop/a.db``, its key and rate file beside it)."""
    folder = tmp_path / "shop"
    folder.mkdir()
    PaymentCore.sqlite(folder / "a.db", sender=None).close()
    return folder / "a.db"


def started(db: Path, command: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run ``paymentcore --db DB COMMAND``; one that is still running after START_WAIT seconds started
    (it is stopped, and the test fails)."""
    process = subprocess.Popen(
        [sys.executable, "-m", "paymentcore_server", "--db", str(db), *command],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=cwd,
    )
    try:
        out, err = process.communicate(timeout=START_WAIT)
    except subprocess.TimeoutExpired:
        process.terminate()
        out, err = process.communicate(timeout=30)
        pytest.fail(f"`{' '.join(command)}` started on a read-only {db.name}:\n{out}{err}")
    return subprocess.CompletedProcess(process.args, process.returncode, out, err)


START_WAIT = 20.0


def server_commands() -> list[list[str]]:
    port = str(free_port())
    return [["serve", "--port", port, "--sandbox-delay", "0"], ["worker", "--sandbox-delay", "0"]]


@pytest.mark.parametrize("which", ["a.db", "a.db-rates"])
def test_serve_and_worker_refuse_a_read_only_database_or_rate_file_in_one_line(
    database: Path, tmp_path: Path, which: str
) -> None:
    target = database.with_name(which)
    with read_only(target):
        for command in server_commands():
            done = started(database, command, tmp_path)
            assert_one_line_refusal(done, target)
            assert "read-only" in done.stderr, done.stderr
            if which == "a.db":
                assert "a.db-rates" not in done.stderr, done.stderr


def healthz(base: str) -> httpx.Response:
    return httpx.get(f"{base}/healthz", timeout=5)


@pytest.mark.parametrize("which", ["a.db", "a.db-rates"])
def test_healthz_answers_503_while_the_database_or_rate_file_cannot_be_written(
    database: Path, tmp_path: Path, which: str
) -> None:
    server = Serve(str(database), tmp_path, "server")
    try:
        server.wait_ready()
        assert healthz(server.base).status_code == 200
        with read_only(database.with_name(which)):
            answer = healthz(server.base)
            assert answer.status_code == 503, answer.text
            body = answer.json()
            assert body == {
                "code": "SERVER_ERROR",
                "message": "The database cannot be written.",
                "requestId": answer.headers["x-request-id"],
            }
            assert answer.headers["cache-control"] == "no-store"
        assert healthz(server.base).status_code == 200
    finally:
        server.stop()
