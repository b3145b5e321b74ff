"""The Grafana dashboard of paymentcore's metrics, as code (Grafana's foundation SDK for Python).

``python deploy/grafana/generate.py`` writes ``deploy/grafana/paymentcore.json`` (``--check`` only says
whether the committed file is what this generates). Import that file in Grafana (Dashboards, New,
Import) and pick the Prometheus data source that scrapes paymentcore (the ``datasource`` variable).
tests/e2e/test_grafana_dashboard.py checks that the committed JSON is this script's output, that every
panel's query parses (by the real promtool) and that it reads only metrics the server exports.

The same aggregation rules as the alert rules (deploy/prometheus/paymentcore-rules.yml): the work and
endpoint gauges are the database's view, the same from every process (``max``); the counters are what
each process did (``sum``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from grafana_foundation_sdk.builders.dashboard import Dashboard, DatasourceVariable, Row
from grafana_foundation_sdk.builders.prometheus import Dataquery
from grafana_foundation_sdk.builders.stat import Panel as Stat
from grafana_foundation_sdk.builders.timeseries import Panel as Timeseries
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models.dashboard import DataSourceRef

__all__ = ["OUTPUT", "PANELS", "build", "main", "render"]

OUTPUT = Path(__file__).resolve().parent / "paymentcore.json"
DATASOURCE = DataSourceRef(type_val="prometheus", uid="${datasource}")
RATE = "$__rate_interval"

#: (row, [(kind, title, unit, description, [(expr, legend)])]): what the dashboard shows
PANELS: list[tuple[str, list[tuple[str, str, str, str, list[tuple[str, str]]]]]] = [
    (
        "Is money moving?",
        [
            (
                "timeseries",
                "Payouts reaching each status",
                "ops",
                "Payouts per second reaching each status, every process added up (PENDING when created).",
                [(f"sum by (status) (rate(paymentcore_payouts_total[{RATE}]))", "{{status}}")],
            ),
            (
                "timeseries",
                "Collections reaching each status",
                "ops",
                "Collections per second reaching each status, every process added up.",
                [(f"sum by (status) (rate(paymentcore_collections_total[{RATE}]))", "{{status}}")],
            ),
            (
                "stat",
                "Payout failure share (30 min)",
                "percentunit",
                "FAILED / (FAILED + PAID) of the payouts answered in the last 30 minutes (alert above 10%).",
                [
                    (
                        'sum(increase(paymentcore_payouts_total{status="FAILED"}[30m]))'
                        ' / sum(increase(paymentcore_payouts_total{status=~"PAID|FAILED"}[30m]))',
                        "failed share",
                    )
                ],
            ),
            (
                "stat",
                "Collection failure share (30 min)",
                "percentunit",
                "FAILED / (FAILED + SUCCESS) of the collections answered in the last 30 minutes.",
                [
                    (
                        'sum(increase(paymentcore_collections_total{status="FAILED"}[30m]))'
                        ' / sum(increase(paymentcore_collections_total{status=~"SUCCESS|FAILED"}[30m]))',
                        "failed share",
                    )
                ],
            ),
        ],
    ),
    (
        "Background work",
        [
            (
                "timeseries",
                "Pending work",
                "short",
                "Items due and waiting for a worker, by kind (the database's view).",
                [("max by (kind) (paymentcore_work_pending)", "{{kind}}")],
            ),
            (
                "timeseries",
                "Work in flight",
                "short",
                "Items held by a worker under a lease, by kind.",
                [("max by (kind) (paymentcore_work_in_flight)", "{{kind}}")],
            ),
            (
                "timeseries",
                "Oldest pending item's wait",
                "s",
                "How long the longest-waiting due item of each kind has been due (alert above 10 min).",
                [("max by (kind) (paymentcore_work_oldest_pending_seconds)", "{{kind}}")],
            ),
        ],
    ),
    (
        "Webhooks",
        [
            (
                "timeseries",
                "Delivery attempts",
                "ops",
                "Webhook delivery attempts per second, delivered (2xx) or failed.",
                [(f"sum by (outcome) (rate(paymentcore_webhook_deliveries_total[{RATE}]))", "{{outcome}}")],
            ),
            (
                "stat",
                "Endpoints failing or disabled",
                "short",
                "Endpoints whose latest events failed, and endpoints disabled; the console's overview names"
                " them.",
                [("max by (state) (paymentcore_webhook_endpoints)", "{{state}}")],
            ),
        ],
    ),
    (
        "HTTP API",
        [
            (
                "timeseries",
                "Requests by status",
                "reqps",
                "Requests answered per second by status, every server process added up.",
                [(f"sum by (status) (rate(paymentcore_http_requests_total[{RATE}]))", "{{status}}")],
            ),
            (
                "timeseries",
                "5xx share",
                "percentunit",
                "The share of requests answered 5xx (alert above 2% for 5 minutes).",
                [
                    (
                        f'sum(rate(paymentcore_http_requests_total{{status=~"5.."}}[{RATE}]))'
                        f" / sum(rate(paymentcore_http_requests_total[{RATE}]))",
                        "5xx",
                    )
                ],
            ),
            (
                "timeseries",
                "Latency",
                "s",
                "p50 and p99 of the time to answer, every route but unknown paths.",
                [
                    (
                        "histogram_quantile(0.5, sum by (le) (rate("
                        f'paymentcore_http_request_duration_seconds_bucket{{route!="unmatched"}}[{RATE}])))',
                        "p50",
                    ),
                    (
                        "histogram_quantile(0.99, sum by (le) (rate("
                        f'paymentcore_http_request_duration_seconds_bucket{{route!="unmatched"}}[{RATE}])))',
                        "p99",
                    ),
                ],
            ),
            (
                "stat",
                "Targets up",
                "short",
                "Metrics targets of the paymentcore job answering their scrape (alert when one is down).",
                [('sum(up{job="paymentcore"})', "up")],
            ),
        ],
    ),
]


def build() -> Dashboard:
    dashboard = (
        Dashboard("paymentcore")
        .uid("paymentcore-overview")
        .description("Payouts, collections, background work, webhooks and the HTTP API of paymentcore.")
        .tags(["paymentcore", "generated"])
        .refresh("30s")
        .time("now-6h", "now")
        .timezone("utc")
        .with_variable(DatasourceVariable("datasource").label("Data source").type("prometheus"))
    )
    for row, panels in PANELS:
        dashboard = dashboard.with_row(Row(row))
        width = 24 // len(panels)
        for kind, title, unit, description, queries in panels:
            panel: Any = Timeseries() if kind == "timeseries" else Stat()
            panel = panel.title(title).description(description).unit(unit).datasource(DATASOURCE)
            panel = panel.height(8).span(width)
            for index, (expr, legend) in enumerate(queries):
                query = Dataquery().expr(expr).legend_format(legend).ref_id("ABCDEFGH"[index])
                panel = panel.with_target(query.datasource(DATASOURCE))
            dashboard = dashboard.with_panel(panel)
    return dashboard


def render() -> str:
    return JSONEncoder(sort_keys=True, indent=2).encode(build().build()) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Write (or check) deploy/grafana/paymentcore.json.")
    parser.add_argument("--check", action="store_true", help="only say whether the committed file is current")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        current = OUTPUT.exists() and OUTPUT.read_text() == text
        print(f"{OUTPUT.name} is {'current' if current else 'out of date: run deploy/grafana/generate.py'}")
        return 0 if current else 1
    OUTPUT.write_text(text)
    print(f"wrote {OUTPUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
