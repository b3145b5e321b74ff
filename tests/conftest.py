"""Shared fixtures: cores on every store with a fake clock, and an HTTP client on the Starlette app.

The ``postgres`` kind runs on the server named by ``$PAYMENTCORE_TEST_POSTGRES_URL`` (``.ci/run`` sets it
from ``.ci/install-postgres``), each test in a schema of its own. Without it, where the PostgreSQL server
binaries are installed (``initdb``, ``pg_ctl`` and ``postgres`` on ``PATH``, or Debian's
``/usr/lib/postgresql/N/bin``), the first test that needs PostgreSQL starts a throwaway cluster of the
session's own (:class:`LocalCluster`) and every later one uses it; it is stopped and deleted when the
session ends. Without either the PostgreSQL tests skip, except under CI (``$CI`` set), where they fail:
CI must run them. See docs/development.md.
"""

from __future__ import annotations

import hashlib
import itertools
import os
import pwd
import secrets
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import attrs
import pytest
from starlette.testclient import TestClient

from paymentcore import Config, FakeClock, PaymentCore, wire
from paymentcore._domain.models import Merchant
from paymentcore.adapters.memory import MemoryStore
from paymentcore.adapters.sandbox import SandboxNetwork
from paymentcore.adapters.sqlite import SqliteStore
from paymentcore.ports import Store
from paymentcore.testing import CapturingSender, public_resolver
from paymentcore_server.app import create_app

POSTGRES_URL_ENV = "PAYMENTCORE_TEST_POSTGRES_URL"
STORE_KINDS = ["sqlite", "memory", "postgres"]
HTTP_ENGINES = ["sqlite", "postgres"]  # the engines `paymentcore serve --db` takes
_schemas: list[str] = []  # made by postgres_url(), dropped when the session ends
_schema_numbers = itertools.count()


class LocalCluster:
    """A throwaway PostgreSQL cluster in a temporary directory, for one test session.

    ``initdb`` makes it (superuser ``paymentcore`` with a random password, SCRAM authentication, no
    fsync: nothing in it outlives the session), ``pg_ctl`` starts it on a free port of 127.0.0.1 (its
    socket in the same directory), and the database ``paymentcore_test`` is created. PostgreSQL refuses
    to run as root, so under root the directory belongs to the ``postgres`` account (made by Debian's
    ``postgresql`` package; ``nobody`` where it is missing) and the commands run as that account.
    """

    USER = "paymentcore"
    DATABASE = "paymentcore_test"

    def __init__(self, bin_dir: Path) -> None:
        self.bin_dir = bin_dir
        self._account = _unprivileged_account() if os.geteuid() == 0 else None
        base = Path(tempfile.gettempdir())
        if self._account is not None and not _reachable(base, self._account[0]):
            base = Path("/tmp")  # a private $TMPDIR of root's: the account could not reach its folder
        self.root = Path(tempfile.mkdtemp(prefix="paymentcore-pg-", dir=base))
        if self._account is not None:
            os.chown(self.root, *self._account)
        self.data = self.root / "data"
        self.password = secrets.token_urlsafe(24)
        self.port = 0

    @property
    def url(self) -> str:
        return f"postgresql://{self.USER}:{self.password}@127.0.0.1:{self.port}/{self.DATABASE}"

    def _run(self, *args: str) -> None:
        uid, gid = self._account if self._account is not None else (None, None)
        done = subprocess.run(
            [str(self.bin_dir / args[0]), *args[1:]],
            cwd=self.root,
            env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C"},
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
            user=uid,
            group=gid,
            extra_groups=None if uid is None else [],
        )
        if done.returncode != 0:
            log = self.root / "server.log"
            tail = log.read_text("utf-8", "replace")[-2000:] if log.exists() else ""
            raise RuntimeError(f"{args[0]} failed ({done.returncode}): {done.stdout}{done.stderr}{tail}")

    def start(self) -> None:
        password_file = self.root / "password"
        password_file.write_text(self.password)
        if self._account is not None:
            os.chown(password_file, *self._account)
        password_file.chmod(0o600)
        self._run(
            "initdb", "-D", str(self.data), "-U", self.USER, f"--pwfile={password_file}",
            "--auth=scram-sha-256", "--encoding=UTF8", "--no-locale", "--no-sync",
        )  # fmt: skip
        password_file.unlink()
        for attempt in range(3):  # a free port may be taken before the server binds it
            self.port = _free_port()
            options = (
                f"-p {self.port} -c listen_addresses=127.0.0.1 -c unix_socket_directories={self.root} "
                "-c fsync=off -c synchronous_commit=off -c full_page_writes=off"
            )
            try:
                self._run(
                    "pg_ctl", "-D", str(self.data), "-l", str(self.root / "server.log"), "-o", options,
                    "-w", "-t", "60", "start",
                )  # fmt: skip
                break
            except RuntimeError:
                if attempt == 2:
                    raise
        import psycopg

        admin = self.url.rsplit("/", 1)[0] + "/postgres"
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {self.DATABASE}")

    def stop(self) -> None:
        try:
            if (self.data / "postmaster.pid").exists():
                self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")
        finally:
            shutil.rmtree(self.root, ignore_errors=True)


def _unprivileged_account() -> tuple[int, int]:
    for name in ("postgres", "nobody"):
        try:
            entry = pwd.getpwnam(name)
        except KeyError:
            continue
        return entry.pw_uid, entry.pw_gid
    raise RuntimeError("running as root, and there is no postgres or nobody account to run PostgreSQL as")


def _reachable(folder: Path, uid: int) -> bool:
    """Whether the account ``uid`` may pass through ``folder`` and each folder above it."""
    for part in [folder.resolve(), *folder.resolve().parents]:
        info = part.stat()
        if not (info.st_mode & 0o001 or (info.st_uid == uid and info.st_mode & 0o100)):
            return False
    return True


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def postgres_binaries() -> Path | None:
    """The directory of ``initdb``, ``pg_ctl`` and ``postgres``: on ``PATH``, else the newest of Debian's
    ``/usr/lib/postgresql/N/bin`` (Debian keeps them off ``PATH``); None when they are not installed."""
    needed = ("initdb", "pg_ctl", "postgres")
    candidates = [Path(found).resolve().parent for found in [shutil.which("initdb")] if found]
    versions = Path("/usr/lib/postgresql")
    if versions.is_dir():
        numbered = [d for d in versions.iterdir() if d.name.isdigit()]
        candidates += [d / "bin" for d in sorted(numbered, key=lambda d: int(d.name), reverse=True)]
    for folder in candidates:
        if all(os.access(folder / name, os.X_OK) for name in needed):
            return folder
    return None


_local: LocalCluster | None = None
_local_failure: str | None = None
_local_report: str | None = None  # said at the end of the session's output


def available_postgres_url() -> str | None:
    """``$PAYMENTCORE_TEST_POSTGRES_URL``; else the session's own cluster (started at the first call,
    its URL then exported in that variable for the session, so that the processes the tests start
    find it too); else None (no server binaries). Fails the test when the binaries are there but the
    cluster cannot start."""
    global _local, _local_failure
    url = os.environ.get(POSTGRES_URL_ENV, "").strip()
    if url:
        return url
    if _local_failure is not None:
        pytest.fail(_local_failure)
    bin_dir = postgres_binaries()
    if bin_dir is None:
        return None
    cluster = LocalCluster(bin_dir)
    try:
        cluster.start()
    except (OSError, RuntimeError, subprocess.SubprocessError) as exc:
        cluster.stop()
        _local_failure = f"cannot start a throwaway PostgreSQL cluster from {bin_dir}: {exc}"
        pytest.fail(_local_failure)
    _local = cluster
    os.environ[POSTGRES_URL_ENV] = cluster.url
    return cluster.url


def postgres_server_url() -> str:
    """The test server's URL (see :func:`available_postgres_url`), or skip (fail under CI) without one."""
    url = available_postgres_url()
    if url:
        return url
    if os.environ.get("CI"):
        pytest.fail(
            f"${POSTGRES_URL_ENV} is not set and no PostgreSQL server binaries were found: under CI "
            "the PostgreSQL tests must run (.ci/run sets it from .ci/install-postgres)"
        )
    pytest.skip(
        f"no PostgreSQL server: install the Debian package postgresql, or set ${POSTGRES_URL_ENV} "
        "(docs/development.md)"
    )


def _admin(sql: str) -> None:
    import psycopg

    with psycopg.connect(postgres_server_url(), autocommit=True) as conn:
        conn.execute(sql)


def postgres_url(tmp_path: Path) -> str:
    """A ``postgresql://`` URL on a new, empty schema of the test server (one per call)."""
    base = postgres_server_url()
    tag = hashlib.sha256(f"{os.getpid()}:{tmp_path}".encode()).hexdigest()[:10]
    schema = f"pctest_{tag}_{next(_schema_numbers)}"
    _admin(f"CREATE SCHEMA {schema}")
    _schemas.append(schema)
    separator = "&" if "?" in base else "?"
    return f"{base}{separator}options={quote(f'-csearch_path={schema}', safe='')}"


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    global _local, _local_report
    if _local is not None:  # the whole cluster goes: no schema to drop
        os.environ.pop(POSTGRES_URL_ENV, None)
        _local.stop()
        _local_report = (
            f"PostgreSQL: the tests ran on a throwaway cluster ({_local.bin_dir}) in {_local.root}, "
            "now stopped and deleted"
        )
        _local = None
        _schemas.clear()
        return
    if not _schemas:
        return
    import psycopg

    try:
        with psycopg.connect(os.environ[POSTGRES_URL_ENV], autocommit=True) as conn:
            for schema in _schemas:
                conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
    except psycopg.Error:
        pass  # a leftover schema is harmless; the next run makes new ones
    _schemas.clear()


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if _local_report is not None:
        terminalreporter.write_line(_local_report)


def open_store(kind: str, tmp_path: Path) -> Store:
    """A bare store of ``kind`` (the storage port alone, without a core)."""
    if kind == "memory":
        return MemoryStore()
    if kind == "postgres":
        from paymentcore.adapters.postgres import PostgresStore

        return PostgresStore(postgres_url(tmp_path))
    return SqliteStore(tmp_path / "store.db")


@pytest.fixture(params=sorted(STORE_KINDS))
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    """Each store in turn, closed after the test."""
    made = open_store(request.param, tmp_path)
    try:
        yield made
    finally:
        made.close()


def make_core(kind: str, tmp_path: Path, clock: FakeClock, **config: Any) -> PaymentCore:
    settings: dict[str, Any] = {"sandbox_delay": 0, "webhook_jitter": 0.0, **config}
    kwargs: dict[str, Any] = {
        "clock": clock,
        "config": Config(**settings),
        "network": SandboxNetwork(delay_seconds=settings["sandbox_delay"]),
        "sender": CapturingSender(),
        "resolver": public_resolver,
    }
    if kind == "memory":
        return PaymentCore.memory(**kwargs)
    if kind == "postgres":
        return PaymentCore.postgresql(postgres_url(tmp_path), **kwargs)
    return PaymentCore.sqlite(tmp_path / "test.db", **kwargs)


@attrs.define
class Client:
    """A merchant with a Collect key and a Disburse key, talking to the app over HTTP."""

    http: TestClient
    core: PaymentCore
    clock: FakeClock
    merchant: Merchant
    collect_key: str
    disburse_key: str

    def headers(self, key: str | None, idempotency_key: str | None = None) -> dict[str, str]:
        headers = {}
        if key is not None:
            headers["Authorization"] = f"Bearer {key}"
        if idempotency_key is not None:
            headers["Idempotency-Key"] = idempotency_key
        return headers

    def post(self, path: str, body: Any, *, key: str | None = None, idem: str | None = None) -> Any:
        headers = {**self.headers(key or self.collect_key, idem), "Content-Type": "application/json"}
        return self.http.post(path, content=wire.dumps(body), headers=headers)

    def get(self, path: str, *, key: str | None = None) -> Any:
        return self.http.get(path, headers=self.headers(key or self.collect_key))

    def settle(self) -> None:
        self.core.run_until_idle()

    @property
    def sandbox(self) -> SandboxNetwork:
        network = self.core.network
        assert isinstance(network, SandboxNetwork)
        return network


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture(params=STORE_KINDS)
def store_kind(request: pytest.FixtureRequest) -> str:
    kind: str = request.param
    return kind


def _client(core: PaymentCore, clock: FakeClock) -> Iterator[Client]:
    merchant = core.operator.create_merchant("Test Shop", settlement_currency="XAF")
    collect = core.operator.create_key(merchant.id, ["collect"])
    disburse = core.operator.create_key(merchant.id, ["disburse"])
    app = create_app(core)
    with TestClient(app, raise_server_exceptions=False) as http:
        yield Client(http, core, clock, merchant, collect.api_key, disburse.api_key)
    core.close()


@pytest.fixture(params=HTTP_ENGINES)
def client(request: pytest.FixtureRequest, tmp_path: Path, clock: FakeClock) -> Iterator[Client]:
    """The app on each database engine in turn: the HTTP end-to-end suite runs on SQLite and PostgreSQL."""
    yield from _client(make_core(request.param, tmp_path, clock), clock)


@pytest.fixture
def any_client(tmp_path: Path, clock: FakeClock, store_kind: str) -> Iterator[Client]:
    """The app on each store in turn."""
    yield from _client(make_core(store_kind, tmp_path, clock), clock)
