"""Prometheus metrics of a server or worker process (``--metrics-port``), on a registry of its own.

:class:`Metrics` holds one ``CollectorRegistry`` per instance (never the global one, so tests and several
apps in one process do not collide) with:

- ``paymentcore_http_requests_total{method,route,status}`` and
  ``paymentcore_http_request_duration_seconds{method,route}``, fed by the request middleware
  (``paymentcore_server.observability``) of the app built with ``create_app(core, metrics=...)``;
- ``paymentcore_collections_total{status}``, ``paymentcore_payouts_total{status}`` and
  ``paymentcore_webhook_deliveries_total{outcome}``, fed by the core through :meth:`Metrics.observer`
  (a :class:`paymentcore.Observer`): what this process did;
- ``paymentcore_work_pending{kind}``, ``paymentcore_work_in_flight{kind}`` and
  ``paymentcore_work_oldest_pending_seconds{kind}``, and ``paymentcore_webhook_endpoints{state}``
  (``failing``, ``disabled``), read from the database at each scrape
  (:meth:`paymentcore.PaymentCore.work_backlog`, :meth:`paymentcore.PaymentCore.webhook_trouble`) once
  :meth:`Metrics.watch` is called: the same figures from every process on the database.

:meth:`Metrics.serve` exposes the registry at ``http://HOST:PORT/metrics`` on its own port (the API's
port never serves it). Labels hold only fixed words and route templates: no merchant id, key, phone
number or reference.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, Counter, Histogram, start_http_server
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from paymentcore import CollectionStatus, Observer, PaymentCore, PayoutStatus, WorkBacklog
from paymentcore.observe import WORK_KINDS
from paymentcore_server.observability import RequestRecord

__all__ = ["SCRAPE_TIMEOUT", "BacklogCollector", "Metrics", "MetricsObserver", "MetricsServer"]

log = logging.getLogger("paymentcore.metrics")
SCRAPE_TIMEOUT = 2.0  # seconds a scrape waits for the database before leaving the work gauges out


class Metrics:
    """The metrics of one process, on their own registry."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self.http_requests = Counter(
            "paymentcore_http_requests",
            "HTTP requests answered, by method, route template and status.",
            ["method", "route", "status"],
            registry=self.registry,
        )
        self.http_duration = Histogram(
            "paymentcore_http_request_duration_seconds",
            "Time from a request's arrival to the end of its response, by method and route template.",
            ["method", "route"],
            registry=self.registry,
        )
        self.collections = Counter(
            "paymentcore_collections",
            "Collections reaching a status in this process (PENDING when created).",
            ["status"],
            registry=self.registry,
        )
        self.payouts = Counter(
            "paymentcore_payouts",
            "Payouts reaching a status in this process (PENDING when created).",
            ["status"],
            registry=self.registry,
        )
        self.deliveries = Counter(
            "paymentcore_webhook_deliveries",
            "Webhook delivery attempts made by this process: delivered (2xx) or failed (anything else).",
            ["outcome"],
            registry=self.registry,
        )
        for collection_status in CollectionStatus:  # every series exists from the start, at 0
            self.collections.labels(status=collection_status.value)
        for payout_status in PayoutStatus:
            self.payouts.labels(status=payout_status.value)
        for outcome in ("delivered", "failed"):
            self.deliveries.labels(outcome=outcome)
        self._backlog: BacklogCollector | None = None
        self._server: MetricsServer | None = None

    def record_request(self, record: RequestRecord) -> None:
        """A request sink (``RequestObserverMiddleware``)."""
        self.http_requests.labels(method=record.method, route=record.route, status=str(record.status)).inc()
        self.http_duration.labels(method=record.method, route=record.route).observe(record.duration)

    def observer(self) -> MetricsObserver:
        """The observer to give the core (``PaymentCore(..., observer=metrics.observer())``)."""
        return MetricsObserver(self)

    def watch(self, core: PaymentCore) -> None:
        """Export ``core``'s work backlog (pending and in flight per kind), read at each scrape."""
        if self._backlog is None:
            self._backlog = BacklogCollector(core)
            self.registry.register(self._backlog)

    def serve(self, host: str, port: int) -> MetricsServer:
        """Serve the registry at ``http://host:port/metrics`` from a daemon thread."""
        self._server = MetricsServer(self.registry, host, port)
        return self._server

    def close(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        if self._backlog is not None:
            self.registry.unregister(self._backlog)
            self._backlog.close()
            self._backlog = None


class MetricsObserver(Observer):
    """The core's observer, counting into :class:`Metrics`."""

    def __init__(self, metrics: Metrics) -> None:
        self._metrics = metrics

    def collection_status(self, status: CollectionStatus) -> None:
        self._metrics.collections.labels(status=status.value).inc()

    def payout_status(self, status: PayoutStatus) -> None:
        self._metrics.payouts.labels(status=status.value).inc()

    def delivery_attempt(self, *, delivered: bool) -> None:
        self._metrics.deliveries.labels(outcome="delivered" if delivered else "failed").inc()


class BacklogCollector(Collector):
    """The gauges read from the database at each scrape: ``paymentcore_work_pending``,
    ``paymentcore_work_in_flight``, ``paymentcore_work_oldest_pending_seconds`` and
    ``paymentcore_webhook_endpoints``.

    The queries run on one thread of its own (one database connection for every scrape) and are given
    :data:`SCRAPE_TIMEOUT` seconds; when the database does not answer, the scrape still succeeds
    without these gauges' samples, and the failure is logged.
    """

    def __init__(self, core: PaymentCore) -> None:
        self._core = core
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="paymentcore-metrics")

    def describe(self) -> Iterable[GaugeMetricFamily]:
        return self._families([], None)

    def _read(self) -> tuple[list[WorkBacklog], tuple[int, int]]:
        return self._core.work_backlog(), self._core.webhook_trouble()

    def collect(self) -> Iterable[GaugeMetricFamily]:
        try:
            backlog, trouble = self._pool.submit(self._read).result(timeout=SCRAPE_TIMEOUT)
        except Exception as exc:
            log.warning("could not read the work backlog for /metrics: %s", exc)
            return self._families([], None)
        return self._families(backlog, trouble)

    @staticmethod
    def _families(backlog: list[WorkBacklog], trouble: tuple[int, int] | None) -> Iterator[GaugeMetricFamily]:
        pending = GaugeMetricFamily(
            "paymentcore_work_pending",
            "Background work due and waiting for a worker, by kind (the database's view: every process "
            "shows the same figure).",
            labels=["kind"],
        )
        in_flight = GaugeMetricFamily(
            "paymentcore_work_in_flight",
            "Background work held by a worker under a lease that has not run out, by kind (every "
            "process on the database, from the database).",
            labels=["kind"],
        )
        oldest = GaugeMetricFamily(
            "paymentcore_work_oldest_pending_seconds",
            "How long the pending item of each kind that has waited longest has been due, in seconds (0 "
            "when nothing is pending; from the database).",
            labels=["kind"],
        )
        endpoints = GaugeMetricFamily(
            "paymentcore_webhook_endpoints",
            "Webhook endpoints needing an operator, by state: failing (active, its latest events failed "
            "after every retry) or disabled (from the database; the console's overview names them).",
            labels=["state"],
        )
        for item in backlog:
            if item.kind in WORK_KINDS:
                pending.add_metric([item.kind], item.pending)
                in_flight.add_metric([item.kind], item.in_flight)
                oldest.add_metric([item.kind], item.oldest_pending_seconds)
        if trouble is not None:
            endpoints.add_metric(["failing"], trouble[0])
            endpoints.add_metric(["disabled"], trouble[1])
        yield pending
        yield in_flight
        yield oldest
        yield endpoints

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


class MetricsServer:
    """``prometheus_client``'s exposition server on ``host:port``, in a daemon thread."""

    def __init__(self, registry: CollectorRegistry, host: str, port: int) -> None:
        server: WSGIServer
        server, thread = start_http_server(port, addr=host, registry=registry)
        self._server = server
        self._thread: threading.Thread = thread
        self.port: int = server.server_address[1]

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
