"""What a plain install gives is what production wants (issue 24, point 9).

- ``pip install .`` brings uvicorn's standard extras, and ``paymentcore serve`` runs on them: the uvloop
  event loop and the httptools HTTP parser (uvicorn's ``auto`` picks each when it is installed, and falls
  back to asyncio and h11 without a word when it is not, which is why this looks inside the process).
- Every file a served SQLite database makes beside itself is ignored by git.
"""

from __future__ import annotations

import fnmatch
import importlib.metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from starlette.testclient import TestClient
from test_postgres_server import Serve  # type: ignore[import-not-found, unused-ignore]

from paymentcore import PaymentCore
from paymentcore_server import create_app

ROOT = Path(__file__).resolve().parents[2]


def test_the_installed_distribution_requires_uvicorns_standard_extras() -> None:
    requirements = [Requirement(line) for line in importlib.metadata.requires("paymentcore") or []]
    [uvicorn] = [r for r in requirements if r.name == "uvicorn" and r.marker is None]
    assert "standard" in uvicorn.extras


@pytest.mark.slow
def test_paymentcore_serve_runs_on_uvloop_and_httptools(tmp_path: Path) -> None:
    server = Serve(str(tmp_path / "pc.db"), tmp_path, "server")
    try:
        server.wait_ready()
        maps = Path(f"/proc/{server.proc.pid}/maps")
        if not maps.exists():
            pytest.skip("needs /proc (Linux) to see which native modules the server loaded")
        loaded = [line.split()[-1] for line in maps.read_text().splitlines() if ".so" in line]
    finally:
        server.stop()
    assert any("/uvloop/" in path for path in loaded), "the server runs on asyncio's loop, not uvloop"
    assert any("/httptools/" in path for path in loaded), "the server parses HTTP with h11, not httptools"


def ignored(name: str, patterns: list[str]) -> bool:
    """Whether a file called ``name`` (in any folder) matches one of .gitignore's file patterns."""
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in patterns)


def gitignore_file_patterns() -> list[str]:
    lines = (ROOT / ".gitignore").read_text("utf-8").splitlines()
    return [line for line in lines if line and not line.startswith("#") and not line.endswith("/")]


def test_gitignore_covers_every_file_a_served_database_makes(tmp_path: Path) -> None:
    core = PaymentCore.sqlite(tmp_path / "paymentcore.db", sender=None)
    seen: set[str] = set()
    try:
        merchant = core.operator.create_merchant("Ignored Shop")
        key = core.operator.create_key(merchant.id, ["collect"]).api_key
        with TestClient(create_app(core)) as http:
            answer = http.get("/v1/account/balances", headers={"Authorization": f"Bearer {key}"})
            assert answer.status_code == 200  # a counted request: the rate-limit file is in use
            seen |= {path.name for path in tmp_path.iterdir()}
    finally:
        core.close()
    seen |= {path.name for path in tmp_path.iterdir()}
    assert {"paymentcore.db", "paymentcore.db.key", "paymentcore.db-rates"} <= seen
    patterns = gitignore_file_patterns()
    assert [name for name in sorted(seen) if not ignored(name, patterns)] == []
    # the companions SQLite makes in WAL mode, whether or not they were there at this moment
    for companion in ("-wal", "-shm"):
        for name in ("paymentcore.db", "paymentcore.db-rates"):
            assert ignored(name + companion, patterns), name + companion
