"""The shipped alert rules (deploy/prometheus/paymentcore-rules.yml), checked by the real Prometheus.

- ``promtool check rules`` accepts the file; ``promtool test rules`` runs its unit tests, in which each
  alert fires on one set of series (with its labels and annotations) and stays quiet on another; and
  those cases matter: an alert whose expression never fires, or always fires, fails them.
- Every alert has a runbook link to a heading of docs/operator.md, and reads only metrics the server
  exports.
- A real Prometheus server (Debian's, started here on a free port with a temporary storage directory,
  and stopped) scrapes a real ``paymentcore serve --metrics-port``, loads the rules, and evaluates every
  rule's expression through its HTTP API without error; when the server stops, the target-down
  expression finds it.

Without promtool and prometheus (``bash .ci/install-prometheus``) the tests skip, except under CI.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from promql_helpers import ROOT, RULE_TESTS, RULES, exported_metric_names, metric_names, require

pytestmark = pytest.mark.slow


def rules() -> list[dict[str, Any]]:
    loaded: list[dict[str, Any]] = yaml.safe_load(RULES.read_text())["groups"][0]["rules"]
    return loaded


def heading_anchors(markdown: str) -> set[str]:
    """GitHub's anchors of a Markdown file's headings."""
    anchors = set()
    for line in markdown.splitlines():
        found = re.match(r"#{1,6} (.+)", line)
        if found:
            title = re.sub(r"[`*]", "", found.group(1).strip()).lower()
            anchors.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return anchors


def test_promtool_accepts_the_rules_and_their_unit_tests_pass() -> None:
    promtool = require("promtool")
    checked = subprocess.run([promtool, "check", "rules", str(RULES)], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"SUCCESS: {len(rules())} rules found" in checked.stdout
    tested = subprocess.run(
        [promtool, "test", "rules", RULE_TESTS.name], cwd=RULE_TESTS.parent, capture_output=True, text=True
    )
    assert tested.returncode == 0, tested.stdout + tested.stderr


def test_every_alert_has_a_firing_and_a_quiet_case_and_both_matter(tmp_path: Path) -> None:
    promtool = require("promtool")
    cases = yaml.safe_load(RULE_TESTS.read_text())["tests"]
    for rule in rules():
        checks = [c for case in cases for c in case["alert_rule_test"] if c["alertname"] == rule["alert"]]
        assert any(c["exp_alerts"] for c in checks), f"{rule['alert']} is never expected to fire"
        assert any(not c["exp_alerts"] for c in checks), f"{rule['alert']} is never expected to stay quiet"
    shutil.copy(RULE_TESTS, tmp_path / RULE_TESTS.name)
    for index, rule in enumerate(rules()):
        for mutant in ("vector(0) > 1", "vector(1)"):  # never fires; always fires
            changed = yaml.safe_load(RULES.read_text())
            changed["groups"][0]["rules"][index]["expr"] = mutant
            (tmp_path / RULES.name).write_text(yaml.safe_dump(changed))
            run = subprocess.run(
                [promtool, "test", "rules", RULE_TESTS.name], cwd=tmp_path, capture_output=True, text=True
            )
            assert run.returncode != 0, f"the tests of {rule['alert']} pass even with `{mutant}`"


def test_each_alert_links_its_runbook_and_reads_only_exported_metrics() -> None:
    anchors = heading_anchors((ROOT / "docs" / "operator.md").read_text())
    exported = exported_metric_names()
    for rule in rules():
        link = rule["annotations"]["runbook_url"]
        page, _, anchor = link.partition("#")
        assert page == "docs/operator.md" and anchor in anchors, f"{rule['alert']}: {link}"
        assert anchor == rule["alert"].lower()
        assert rule["labels"]["severity"] in ("warning", "critical")
        unknown = metric_names(rule["expr"]) - exported
        assert unknown == set(), f"{rule['alert']} reads metrics the server does not export: {unknown}"
        assert metric_names(rule["expr"]), rule["alert"]


# --- a real Prometheus on a real server ------------------------------------------------------------


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def wait_for(check: Any, what: str, limit: float = 30) -> Any:
    deadline = time.monotonic() + limit
    while True:
        try:
            found = check()
        except httpx.HTTPError:
            found = None
        if found:
            return found
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.25)


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], str, int]]:
    """``paymentcore serve --metrics-port``: the process, its API URL, its metrics port."""
    port, metrics_port = free_port(), free_port()
    db = tmp_path / "pay.db"
    command = [sys.executable, "-m", "paymentcore_server", "--db", str(db), "serve", "--port", str(port)]
    command += ["--metrics-port", str(metrics_port), "--sandbox-delay", "0"]
    log = (tmp_path / "serve.log").open("wb")
    process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: httpx.get(f"{base}/healthz", timeout=2).status_code == 200, "paymentcore serve")
        yield process, base, metrics_port
    finally:
        stop(process)
        log.close()


def test_a_real_prometheus_scrapes_a_real_server_and_evaluates_every_rule(
    tmp_path: Path, serve: tuple[subprocess.Popen[bytes], str, int]
) -> None:
    binary = require("prometheus")
    server, base, metrics_port = serve
    httpx.get(f"{base}/healthz", timeout=5)  # a request: the request counters and histogram have series
    web = free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
        f"rule_files:\n  - {RULES}\n"
        "scrape_configs:\n  - job_name: paymentcore\n    static_configs:\n"
        f"      - targets: ['127.0.0.1:{metrics_port}']\n"
    )
    log = (tmp_path / "prometheus.log").open("wb")
    prometheus = subprocess.Popen(
        [
            binary,
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp_path / 'data'}",
            f"--web.listen-address=127.0.0.1:{web}",
        ],
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    api = f"http://127.0.0.1:{web}/api/v1"

    def query(expr: str) -> list[dict[str, Any]]:
        answer = httpx.get(f"{api}/query", params={"query": expr}, timeout=5).json()
        assert answer["status"] == "success", (expr, answer)
        result: list[dict[str, Any]] = answer["data"]["result"]
        return result

    try:
        wait_for(lambda: httpx.get(f"{api}/status/buildinfo", timeout=2).status_code == 200, "prometheus")
        wait_for(lambda: query('up{job="paymentcore"} == 1'), "the paymentcore target to be up")
        wait_for(lambda: query("paymentcore_work_oldest_pending_seconds"), "a scrape with the work gauges")
        wait_for(lambda: query('paymentcore_webhook_endpoints{state="disabled"}'), "the endpoint gauges")
        for rule in rules():
            query(rule["expr"])  # the server parses and evaluates it on the live data
        assert query(rules()[0]["expr"]) == []  # the target is up: nothing is down

        def evaluated() -> list[dict[str, Any]]:
            groups = httpx.get(f"{api}/rules", timeout=5).json()["data"]["groups"]
            loaded = [r for g in groups for r in g["rules"]]
            done = [r for r in loaded if r["lastEvaluation"] > "2000"]
            return loaded if len(done) == len(rules()) else []

        loaded = wait_for(evaluated, "every rule evaluated")
        assert {r["name"] for r in loaded} == {r["alert"] for r in rules()}
        assert [(r["name"], r["lastError"]) for r in loaded if r["health"] != "ok"] == []

        stop(server)  # the target goes down: the target-down expression finds it
        down = wait_for(
            lambda: query(rules()[0]["expr"]), "the target-down expression to find the stopped server"
        )
        assert down[0]["metric"]["instance"] == f"127.0.0.1:{metrics_port}"
    finally:
        stop(prometheus)
        log.close()
