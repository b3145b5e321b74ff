"""The code in ``docs/`` runs as written (issue 24, point 7).

Every fenced block of ``docs/*.md`` carries a language. Each ``python`` block runs, in a process of its
own in an empty temporary folder. Each command block (``sh``, ``bash``, ``console``) runs too, unless an
HTML comment right before its fence says why it cannot: ``<!-- not-run: REASON -->`` (it starts a server
that runs until stopped, needs a production machine, installs packages, ...), or names the test that
runs it: ``<!-- run-by: tests/FILE.py (how) -->``, a file that reads the page. Nothing else excuses a
block.

The command blocks of a page run in order, each in ``bash`` with ``set -euo pipefail``, in the folder of
a real ``paymentcore serve --demo`` (on its default database ``./paymentcore.db``, on a free port, with
``--sandbox-delay 0 --allow-private-webhooks``), as a reader would after the quickstart: ``$BASE``,
``$COLLECT_KEY`` and ``$DISBURSE_KEY`` are the demo server's, ``$M`` (and ``$DEMO_M``) the demo
merchant, ``$HOOKS`` the test's webhook receiver, ``paymentcore`` and ``python`` this interpreter (with
``examples/`` beside the database). A block must exit 0 and print no API error (a JSON object with ``code``
and ``requestId``). What a reader would replace, the test replaces, with the live value of the moment:

- a placeholder argument of a ``paymentcore`` command: ``M``, ``mer_...``, ``K``, ``OP``, ``PO-...``;
- a sample id: ``mer_`` + 24 hex digits, ``PO-``/``REQ-`` + 13 digits + ``-`` + 10 characters;
- a sample value assigned to one of those variables (``REF=REQ-...   # the reference you received``);
- the sample addresses ``http://127.0.0.1:8000`` (the server), ``http://127.0.0.1:9000`` and
  ``https://shop.example.com`` (a webhook receiver of the test's, on loopback);
- the production paths ``/srv/pay/`` and ``/srv/backups/`` (a folder of the test's), and the sample
  PostgreSQL URL ``postgresql://pay@db.internal:5432/payments`` (a schema of the test server).

The live values are the last ones printed: ``reference`` (``REF`` or ``PO``), ``checkoutUrl``
(``CHECKOUT_URL``), ``merchantId`` (``M``), ``keyId`` (``K``), ``operatorId`` (``OP``) and
``signingSecret`` (``SECRET``) of a JSON answer.

Hidden set-up and checks sit in HTML comments beside a block, in its language: ``<!-- given: CODE -->``
before the fence runs first (its output goes to stderr), ``<!-- then: CODE -->`` after the fence runs
last. For a command block, the block's output is in the file ``$BLOCK_OUT``, and the helpers of
:data:`SHELL_HELPERS` are defined (``charge``, ``payout``, ``wait_for``, ``field``). For a Python
block, ``printed`` holds what the block printed and ``block_source`` its text; the three share one
namespace.

Separately, every ``paymentcore`` command line of every command block, run or not, must parse with the
CLI's own parser (brackets of a synopsis are dropped), and the ``Config`` figures the docs quote as
```Config.NAME = VALUE``` must be the defaults.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shlex
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from threading import Thread

import httpx
import pytest

from paymentcore import Config
from paymentcore_server.cli import build_parser

from conftest import postgres_url  # type: ignore[import-not-found, unused-ignore]

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
COMMAND_LANGUAGES = {"sh", "bash", "console"}
MARKERS = {"not-run", "run-by", "given", "then"}
FENCE = re.compile(r"^```(\S*)[ \t]*$")
COMMENT_BEFORE = re.compile(r"<!--\s*([a-z-]+):((?:(?!<!--|-->).)*)-->\s*\Z", re.S)
COMMENT_AFTER = re.compile(r"\A\s*<!--\s*then:((?:(?!-->).)*)-->", re.S)


@dataclass
class Block:
    page: str
    line: int  # of the opening fence, counting from 1
    language: str
    code: str
    markers: dict[str, str] = field(default_factory=dict)

    @property
    def id(self) -> str:
        return f"{self.page}:{self.line}"

    @property
    def runs_here(self) -> bool:
        return self.language in COMMAND_LANGUAGES and not {"not-run", "run-by"} & set(self.markers)


def page_blocks(path: Path) -> list[Block]:
    text = path.read_text("utf-8")
    lines = text.splitlines(keepends=True)
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line))
    found: list[Block] = []
    index = 0
    while index < len(lines):
        opening = FENCE.match(lines[index].rstrip("\n"))
        if not opening:
            index += 1
            continue
        end = index + 1
        while end < len(lines) and lines[end].rstrip() != "```":
            end += 1
        assert end < len(lines), f"{path.name}:{index + 1}: a fence is never closed"
        block = Block(path.name, index + 1, opening.group(1), "".join(lines[index + 1 : end]))
        before = text[: offsets[index]]
        while comment := COMMENT_BEFORE.search(before):
            name, body = comment.group(1), comment.group(2)
            if name == "then":
                break  # the checks of the block above
            assert name in MARKERS, f"{block.id}: unknown marker {name!r}"
            block.markers[name] = textwrap.dedent(body).strip("\n") if name == "given" else body.strip()
            before = before[: comment.start()]
        if after := COMMENT_AFTER.match(text[offsets[end + 1] :] if end + 1 < len(offsets) else ""):
            block.markers["then"] = textwrap.dedent(after.group(1)).strip("\n")
        found.append(block)
        index = end + 1
    return found


def all_blocks() -> list[Block]:
    return [block for path in sorted(DOCS.glob("*.md")) for block in page_blocks(path)]


BLOCKS = all_blocks()
PYTHON_BLOCKS = [block for block in BLOCKS if block.language == "python"]
COMMAND_BLOCKS = [block for block in BLOCKS if block.language in COMMAND_LANGUAGES]
PAGES_WITH_RUN_BLOCKS = sorted({block.page for block in COMMAND_BLOCKS if block.runs_here})


# --- what every block must be ----------------------------------------------------------------------


def test_every_block_says_its_language() -> None:
    assert [block.id for block in BLOCKS if not block.language] == []


def test_every_command_block_is_run_or_says_why_not() -> None:
    problems = []
    for block in COMMAND_BLOCKS:
        if "not-run" in block.markers and not block.markers["not-run"]:
            problems.append(f"{block.id}: not-run without a reason")
        if by := block.markers.get("run-by"):
            runner = ROOT / by.split()[0]
            if not runner.is_file() or block.page not in runner.read_text("utf-8"):
                problems.append(f"{block.id}: run-by {by}, which does not exist or never reads {block.page}")
        if not block.runs_here and {"given", "then"} & set(block.markers):
            problems.append(f"{block.id}: set-up or checks for a block that is not run here")
    for block in PYTHON_BLOCKS:
        if {"not-run", "run-by"} & set(block.markers):
            problems.append(f"{block.id}: every Python block runs")
    assert problems == []
    # every other command block is run by test_the_command_blocks_of_a_page_run_in_order


def command_lines(code: str) -> Iterator[list[str]]:
    """Each ``paymentcore ...`` command of a block as its arguments (after ``paymentcore``)."""
    joined = code.replace("\\\n", " ")
    for line in joined.splitlines():
        for part in re.split(r"&&|;|\|\|", line):
            try:
                words = shlex.split(part.replace("[", "").replace("]", ""), comments=True)
            except ValueError:  # a quote that a later line closes: JSON of a curl command
                assert not part.strip().startswith("paymentcore"), part
                continue
            while words and re.fullmatch(r"\w+=\S*", words[0]):
                words.pop(0)  # VAR=value before a command
            if words and words[0] == "paymentcore":
                yield words[1:]


@pytest.mark.parametrize("block", COMMAND_BLOCKS, ids=lambda block: block.id)
def test_every_paymentcore_command_in_the_docs_parses(
    block: Block, capsys: pytest.CaptureFixture[str]
) -> None:
    for words in command_lines(block.code):
        try:
            build_parser().parse_args(words)
        except SystemExit:
            pytest.fail(f"{block.id}: paymentcore {shlex.join(words)}: {capsys.readouterr().err.strip()}")


# --- Config figures ----------------------------------------------------------------------------------

QUOTED_FIGURE = re.compile(r"`Config\.(\w+) = ([^`]+)`")
WORK_FIGURES = {"worker_concurrency", "delivery_concurrency", "delivery_per_endpoint"}


def test_the_config_figures_the_docs_quote_are_the_defaults() -> None:
    defaults = Config()
    quoted: dict[str, set[str]] = {}
    wrong = []
    for path in sorted(DOCS.glob("*.md")):
        for name, value in QUOTED_FIGURE.findall(path.read_text("utf-8")):
            quoted.setdefault(path.name, set()).add(name)
            if not hasattr(defaults, name):
                wrong.append(f"{path.name}: Config has no field {name}")
            elif ast.literal_eval(value.replace(",", "_")) != getattr(defaults, name):
                wrong.append(
                    f"{path.name}: Config.{name} = {value}, but the default is {getattr(defaults, name)!r}"
                )
    assert wrong == []
    # the worker's concurrency is stated in both places an operator looks for it
    for page in ("deployment.md", "operator.md"):
        assert quoted.get(page, set()) >= WORK_FIGURES, page


# --- reliability.md names tests that exist -----------------------------------------------------------


def test_every_test_reliability_md_names_exists() -> None:
    text = (DOCS / "reliability.md").read_text("utf-8")
    missing = []
    for cell in re.findall(r"`([a-z]+/test_\w+\.py)::([^`]+)`((?:, `::[^`]+`)*)", text):
        path, first, more = cell
        source = (ROOT / "tests" / path).read_text("utf-8") if (ROOT / "tests" / path).is_file() else ""
        for name in [first, *re.findall(r"`::([^`]+)`", more)]:
            defined = rf"^\s*(?:async )?(?:def|class) {re.escape(name)}\b|^{re.escape(name)} = "
            if not re.search(defined, source, re.M):
                missing.append(f"{path}::{name}")
    assert missing == []


# --- Python blocks -----------------------------------------------------------------------------------

DRIVER = """\
import contextlib, io, json, pathlib, sys

parts = json.loads(pathlib.Path(sys.argv[1]).read_text("utf-8"))
namespace = {"__name__": "__main__", "printed": "", "block_source": parts["source"]}
for label, line, code in parts["steps"]:
    compiled = compile("\\n" * line + code, parts["page"] + (" " + label if label else ""), "exec")
    if label:  # given, then
        exec(compiled, namespace)
        continue
    captured = io.StringIO()
    with contextlib.redirect_stdout(captured):
        exec(compiled, namespace)
    namespace["printed"] = captured.getvalue()
    sys.stdout.write(namespace["printed"])
"""

SAMPLE_POSTGRES = "postgresql://pay@db.internal:5432/payments"


def subprocess_env(**extra: str) -> dict[str, str]:
    path = os.pathsep.join(p for p in [str(ROOT), os.environ.get("PYTHONPATH", "")] if p)
    return {**os.environ, "PYTHONPATH": path, "PYTHONUNBUFFERED": "1", **extra}


def production_paths(code: str, folder: Path) -> str:
    for sample in ("/srv/pay/", "/srv/backups/"):
        if sample in code:
            local = folder / sample.strip("/").replace("/", "-")
            local.mkdir(exist_ok=True)
            code = code.replace(sample, f"{local}/")
    return code


@pytest.mark.parametrize("block", PYTHON_BLOCKS, ids=lambda block: block.id)
def test_a_python_block_runs(block: Block, tmp_path: Path) -> None:
    code = production_paths(block.code, tmp_path)
    if SAMPLE_POSTGRES in code:
        code = code.replace(SAMPLE_POSTGRES, postgres_url(tmp_path))
    steps = [("given", 0, block.markers.get("given", "")), ("", block.line, code)]
    steps.append(("then", 0, block.markers.get("then", "")))
    parts = tmp_path / "parts.json"
    parts.write_text(json.dumps({"page": f"docs/{block.page}", "source": block.code, "steps": steps}))
    driver = tmp_path / "run_block.py"
    driver.write_text(DRIVER)
    work = tmp_path / "work"
    work.mkdir()
    done = subprocess.run(
        [sys.executable, "-W", "error", str(driver), str(parts)],
        cwd=work,
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, f"{block.id}\n{done.stdout}\n{done.stderr}"
    assert "Traceback" not in done.stderr and "Warning" not in done.stderr, f"{block.id}\n{done.stderr}"


# --- command blocks ----------------------------------------------------------------------------------

SHELL_HELPERS = r"""
# field NAME: the field NAME of the JSON object on stdin
field() { python -c 'import json, sys; print(json.load(sys.stdin)[sys.argv[1]])' "$1"; }
# wait_for PATH KEY STATUSES: until GET $BASE/PATH (with KEY) answers a status matching STATUSES
wait_for() {
  for _ in $(seq 150); do
    curl -s "$BASE/$1" -H "Authorization: Bearer $2" | grep -Eq "\"status\":\"($3)\"" && return 0
    sleep 0.2
  done
  echo "timed out waiting for $1 to be $3" >&2; return 1
}
# charge AMOUNT [PHONE]: a demo-merchant charge in XAF, once final; prints its reference
charge() {
  local ref
  ref=$(curl -s -X POST "$BASE/v1/collect/charge" -H "Authorization: Bearer $COLLECT_KEY" \
    -H "Content-Type: application/json" -d "{\"amount\": $1, \"currency\": \"XAF\", \"country\": \"CM\",
    \"provider\": \"mtn_cm\", \"phone\": \"${2:-670000001}\"}" | field reference)
  wait_for "v1/collect/$ref" "$COLLECT_KEY" "SUCCESS|FAILED"
  echo "$ref"
}
# payout AMOUNT PHONE: a demo-merchant payout in XAF, as created; prints its reference
payout() {
  curl -s -X POST "$BASE/v1/disburse" -H "Authorization: Bearer $DISBURSE_KEY" \
    -H "Content-Type: application/json" -H "Idempotency-Key: docs-$RANDOM$RANDOM" \
    -d "{\"amount\": $1, \"currency\": \"XAF\", \"phone\": \"$2\"}" | field reference
}
"""

LEARNED = {"checkoutUrl": "CHECKOUT_URL", "merchantId": "M", "keyId": "K", "operatorId": "OP"}
LEARNED_TOO = {"signingSecret": "SECRET"}
SAMPLE_IDS = [
    (re.compile(r"\bmer_[0-9a-f]{24}\b"), "M"),
    (re.compile(r"\bPO-\d{13}-[0-9A-Z]{10}\b"), "PO"),
    (re.compile(r"\bREQ-\d{13}-[0-9A-Z]{10}\b"), "REF"),
]
PLACEHOLDER_ARGUMENTS = {"M": "M", "mer_...": "M", "K": "K", "OP": "OP", "PO-...": "PO"}


class Receiver:
    """A webhook endpoint on loopback that answers 204 and keeps what it received."""

    def __init__(self) -> None:
        self.received: list[tuple[str, bytes]] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                receiver.received.append((self.headers.get("X-Service-Event", ""), body))
                self.send_response(204)
                self.end_headers()

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@dataclass
class Session:
    """The live values a page's blocks run with, and what they learn from each answer."""

    folder: Path
    values: dict[str, str]
    receiver: Receiver
    env: dict[str, str]

    def rewrite(self, code: str) -> str:
        """The block as the test runs it: samples and placeholders replaced (see the module's docstring).

        Ids become references to the shell variables of the moment (``${PO}``), so that a given's
        assignment wins; addresses and paths become the literal values (they may sit in quoted JSON).
        """
        code = production_paths(code, self.folder)
        names = "|".join(sorted(self.values, key=len, reverse=True))
        lines = []
        for line in code.splitlines():
            if re.match(rf"\s*(export\s+)?({names})=", line):
                line = re.sub(rf"\b({names})=(\S+)", r"\1=${\1}", line)
            lines.append(line)
        code = "\n".join(lines) + "\n"
        for pattern, name in SAMPLE_IDS:
            code = pattern.sub(f"${{{name}}}", code)
        code = code.replace("http://127.0.0.1:8000", self.values["BASE"])
        code = code.replace("http://127.0.0.1:9000", self.receiver.base)
        code = code.replace("https://shop.example.com", self.receiver.base)
        return re.sub(r"^(paymentcore .*)$", self.arguments, code, flags=re.M)

    def arguments(self, match: re.Match[str]) -> str:
        command, _, comment = match.group(1).partition("  #")
        words = [
            f"${{{PLACEHOLDER_ARGUMENTS[word]}}}" if word in PLACEHOLDER_ARGUMENTS else word
            for word in command.split(" ")
        ]
        return " ".join(words) + (f"  #{comment}" if comment else "")

    def learn(self, output: str) -> list[dict[str, object]]:
        answers = []
        decoder = json.JSONDecoder()
        for line in output.splitlines():
            line = line.strip()
            if not line.startswith("{"):
                continue
            try:
                answer, _ = decoder.raw_decode(line)
            except ValueError:
                continue
            answers.append(answer)
            reference = answer.get("reference")
            if isinstance(reference, str):
                self.values["PO" if reference.startswith("PO-") else "REF"] = reference
            for key, name in {**LEARNED, **LEARNED_TOO}.items():
                if isinstance(answer.get(key), str):
                    self.values[name] = answer[key]
        return answers


def shim(folder: Path, name: str, *args: str) -> None:
    script = folder / name
    script.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} {shlex.join(args)} "$@"\n')
    script.chmod(0o755)


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.fixture
def session(tmp_path: Path) -> Iterator[Session]:
    """A demo server in a folder of its own, with ``paymentcore`` and ``python`` on PATH."""
    work = tmp_path / "work"
    bin_dir = tmp_path / "bin"
    work.mkdir()
    bin_dir.mkdir()
    (work / "examples").symlink_to(ROOT / "examples")
    (work / "deploy").symlink_to(ROOT / "deploy")
    shim(bin_dir, "paymentcore", "-m", "paymentcore_server")
    shim(bin_dir, "python")
    shim(bin_dir, "python3")
    env = subprocess_env(PATH=f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    port = free_port()
    command = ["paymentcore", "serve", "--demo", "--port", str(port), "--sandbox-delay", "0"]
    log = tmp_path / "server.log"
    receiver = Receiver()
    with log.open("w") as out:
        server = subprocess.Popen(
            [*command, "--allow-private-webhooks"], cwd=work, env=env, stdout=out, stderr=subprocess.STDOUT
        )
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while True:
            assert server.poll() is None, log.read_text()
            try:
                if httpx.get(f"{base}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.1)
        banner = log.read_text()
        values = {
            "BASE": base,
            "M": re.search(r"created: (mer_\w+)", banner).group(1),  # type: ignore[union-attr]
            "COLLECT_KEY": re.search(r"Collect key:\s+(\S+)", banner).group(1),  # type: ignore[union-attr]
            "DISBURSE_KEY": re.search(r"Disburse key:\s+(\S+)", banner).group(1),  # type: ignore[union-attr]
        }
        values["DEMO_M"] = values["M"]
        values["HOOKS"] = receiver.base
        yield Session(work, values, receiver, env)
    finally:
        server.terminate()
        try:
            server.wait(timeout=15)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(timeout=10)
        receiver.close()


def run_command_block(session: Session, block: Block) -> str:
    out = session.folder / "block.out"
    script = "\n".join(
        [
            "set -euo pipefail",
            SHELL_HELPERS,
            f"BLOCK_OUT={shlex.quote(str(out))}",
            "{",
            block.markers.get("given", ":"),
            "} >&2",
            "{",
            session.rewrite(block.code),
            '} >"$BLOCK_OUT"',
            'cat "$BLOCK_OUT"',
            "{",
            block.markers.get("then", ":"),
            "} >&2",
        ]
    )
    env = {**session.env, **session.values}
    done = subprocess.run(
        ["bash", "-c", script], cwd=session.folder, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, (
        f"{block.id} exited {done.returncode}\n{script}\n{done.stdout}\n{done.stderr}"
    )
    for answer in session.learn(done.stdout):
        assert not {"code", "requestId"} <= answer.keys(), f"{block.id} answered an error: {answer}"
    return done.stdout


@pytest.mark.slow
@pytest.mark.parametrize("page", PAGES_WITH_RUN_BLOCKS)
def test_the_command_blocks_of_a_page_run_in_order(page: str, session: Session) -> None:
    for block in COMMAND_BLOCKS:
        if block.page == page and block.runs_here:
            run_command_block(session, block)
