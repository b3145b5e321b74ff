"""What the alert-rule and dashboard tests share: Debian's promtool and prometheus (skipped without them,
except under CI, where that fails), the names of the metrics the server exports, and the metric names a
PromQL expression reads.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest

from paymentcore import PaymentCore
from paymentcore_server.metrics import Metrics
from paymentcore_server.observability import RequestRecord

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "deploy" / "prometheus" / "paymentcore-rules.yml"
RULE_TESTS = ROOT / "deploy" / "prometheus" / "paymentcore-rules.test.yml"
#: series Prometheus makes itself for every target
SYNTHETIC = {"up", "scrape_duration_seconds", "scrape_samples_scraped"}
_KEYWORDS = {
    "and",
    "or",
    "unless",
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "bool",
    "offset",
    "inf",
    "nan",
}


def under_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def require(tool: str) -> str:
    """The path of Debian's ``tool`` (promtool, prometheus); skips without it, fails under CI."""
    found = shutil.which(tool) or (f"/usr/bin/{tool}" if os.access(f"/usr/bin/{tool}", os.X_OK) else None)
    if found:
        return found
    reason = f"{tool} is not installed (bash .ci/install-prometheus: Debian's prometheus package)"
    if under_ci():
        pytest.fail(f"{reason}; CI is set, so these tests may not be skipped")
    pytest.skip(reason)


def exported_metric_names() -> set[str]:
    """Every sample name the server's metrics registry exposes (one request recorded, so that the
    request histogram has its buckets too), read from the exposition text as a scrape reads it."""
    from prometheus_client import generate_latest

    core = PaymentCore.memory(sender=None)
    metrics = Metrics()
    metrics.watch(core)
    try:
        metrics.record_request(RequestRecord("req_1", "GET", "/healthz", 200, 0.002, None))
        text = generate_latest(metrics.registry).decode()
    finally:
        metrics.close()
        core.close()
    names = {line.split("{")[0].split(" ")[0] for line in text.splitlines() if line and line[0] != "#"}
    return names | SYNTHETIC


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects (a selector's name, or ``__name__="..."``)."""
    names = set(re.findall(r'__name__\s*=\s*"([^"]+)"', expr))
    plain = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # string literals (label values) out
    plain = re.sub(r"\{[^}]*\}", "", plain)  # label matchers out
    plain = re.sub(r"\[[^\]]*\]", "", plain)  # ranges out
    plain = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", plain)
    plain = re.sub(r"\$__\w+", " ", plain)  # Grafana variables
    for token in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", plain):
        name = token.group()
        follows = plain[token.end() :].lstrip()[:1]
        if name.lower() in _KEYWORDS or follows == "(":  # a keyword, or a function
            continue
        names.add(name)
    return names
