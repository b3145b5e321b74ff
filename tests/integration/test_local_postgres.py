"""Without ``$PAYMENTCORE_TEST_POSTGRES_URL``, the PostgreSQL tests run on a cluster the session starts.

Where the server binaries are installed (Debian's ``postgresql`` package), the README's test command
runs every test: tests/conftest.py starts a throwaway cluster at the first test that needs PostgreSQL
and removes it when the session ends (issue 24, point 8). Run as root (as CI and this machine do), this
also covers running PostgreSQL as the ``postgres`` account.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import POSTGRES_URL_ENV, postgres_binaries  # type: ignore[import-not-found, unused-ignore]

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


def test_without_a_url_the_postgres_tests_run_on_a_throwaway_cluster() -> None:
    if postgres_binaries() is None:
        if os.environ.get("CI"):
            pytest.fail("CI has the PostgreSQL server binaries (.ci/install-postgres installs them)")
        pytest.skip("the PostgreSQL server binaries are not installed (Debian package postgresql)")
    env = {name: value for name, value in os.environ.items() if name not in (POSTGRES_URL_ENV, "CI")}
    done = subprocess.run(
        [
            sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rs",
            "tests/integration/test_store_contract.py", "-k", "postgres and round_trip",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )  # fmt: skip
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    assert re.search(r"^\d+ passed, \d+ deselected in ", out, re.M), out
    assert "skipped" not in out, out
    # it said where the cluster was, and nothing of it is left: no folder, no server
    found = re.search(r"throwaway cluster \(.+\) in (\S+), now stopped and deleted", out)
    assert found, out
    folder = found.group(1)
    assert not Path(folder).exists()
    running = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True, check=True).stdout
    assert folder not in running
