"""The Grafana dashboard as code (deploy/grafana/generate.py, Grafana's foundation SDK) and its JSON.

The committed deploy/grafana/paymentcore.json is what the generator writes; every panel queries the
chosen Prometheus data source; every query parses (the real promtool checks each as a recording rule,
with Grafana's ``$__rate_interval`` given a value, as Grafana does before it sends a query) and reads
only metrics the server exports. Without promtool the parse check skips, except under CI.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
from pathlib import Path
from types import ModuleType
from typing import Any

import yaml
from promql_helpers import ROOT, exported_metric_names, metric_names, require

GENERATOR = ROOT / "deploy" / "grafana" / "generate.py"
COMMITTED = ROOT / "deploy" / "grafana" / "paymentcore.json"


def generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("paymentcore_dashboard", GENERATOR)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def queries(dashboard: dict[str, Any]) -> list[tuple[str, str]]:
    """(panel title, expr) of every query of every panel."""
    return [
        (panel["title"], target["expr"])
        for panel in dashboard["panels"]
        if panel["type"] != "row"
        for target in panel.get("targets", [])
    ]


def as_prometheus_gets_it(expr: str) -> str:
    return expr.replace("$__rate_interval", "1m").replace("$__interval", "1m")


def test_the_committed_json_is_what_the_generator_writes() -> None:
    made = generator().render()
    assert COMMITTED.read_text() == made, "run: python deploy/grafana/generate.py"
    dashboard = json.loads(made)
    assert dashboard["uid"] == "paymentcore-overview"
    [variable] = dashboard["templating"]["list"]
    assert (variable["name"], variable["type"], variable["query"]) == (
        "datasource",
        "datasource",
        "prometheus",
    )
    panels = [p for p in dashboard["panels"] if p["type"] != "row"]
    assert len(panels) >= 10
    for panel in panels:
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
        assert panel["targets"] and all(t["expr"] for t in panel["targets"]), panel["title"]


def test_every_query_reads_only_metrics_the_server_exports() -> None:
    exported = exported_metric_names()
    read = set()
    for title, expr in queries(json.loads(COMMITTED.read_text())):
        names = metric_names(expr)
        assert names, title
        assert names <= exported, f"{title}: {names - exported} not exported"
        read |= names
    # the dashboard shows every family the server exports (and Prometheus' own `up`)
    families = {"paymentcore_" + n for n in ("payouts_total", "collections_total", "work_pending")}
    assert families <= read


def test_every_query_parses_in_the_real_promtool(tmp_path: Path) -> None:
    promtool = require("promtool")
    found = queries(json.loads(COMMITTED.read_text()))

    def check(exprs: list[str]) -> subprocess.CompletedProcess[str]:
        rules = [{"record": f"paymentcore:dashboard:query{i}", "expr": e} for i, e in enumerate(exprs)]
        path = tmp_path / "dashboard-queries.yml"
        path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
        return subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True)

    exprs = [as_prometheus_gets_it(expr) for _, expr in found]
    checked = check(exprs)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"SUCCESS: {len(exprs)} rules found" in checked.stdout
    broken = check([*exprs[:-1], exprs[-1] + ")"])  # the check does reject a query that does not parse
    assert broken.returncode != 0
