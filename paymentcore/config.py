"""Configuration of a PaymentCore: what to build, not how (see ``paymentcore._root.core``)."""

from __future__ import annotations

import attrs

from paymentcore._domain.limits import DEFAULT_AUTO_DISABLE_AFTER, DEFAULT_WEBHOOK_TIMEOUT_SECONDS

__all__ = [
    "DEFAULT_AUTO_DISABLE_AFTER",
    "DEFAULT_WEBHOOK_RETRY_DELAYS",
    "DEFAULT_WEBHOOK_TIMEOUT_SECONDS",
    "Config",
]

# Production retry schedule for webhook deliveries, in seconds before each retry (jitter is added):
# 10 s, 1 min, 5 min, 30 min, 2 h, 6 h, 12 h, 24 h: eight retries over about 45 hours.
DEFAULT_WEBHOOK_RETRY_DELAYS: tuple[int, ...] = (10, 60, 300, 1800, 7200, 21600, 43200, 86400)


@attrs.frozen
class Config:
    """Settings of a core. Every field has a production default."""

    public_url: str = "http://127.0.0.1:8000"
    sandbox_delay: float = 2.0
    sandbox_hang: tuple[str, ...] = ()  # sandbox providers (codes) or numbers whose calls hang ...
    sandbox_hang_seconds: float = 30.0  # ... this long, then fail as unanswered
    webhook_retry_delays: tuple[int, ...] = DEFAULT_WEBHOOK_RETRY_DELAYS
    webhook_jitter: float = 0.1  # each retry delay is stretched by up to this fraction
    webhook_timeout: float = DEFAULT_WEBHOOK_TIMEOUT_SECONDS  # an unanswered attempt fails after this
    allow_private_webhooks: bool = False
    auto_disable_after: int = DEFAULT_AUTO_DISABLE_AFTER  # consecutive failed events
    prompt_limit: int = 3  # prompts one number may receive ...
    prompt_window_seconds: int = 300  # ... within this many seconds (RECIPIENT_BUSY beyond)
    prompt_timeout_seconds: int = 300  # a prompt unanswered this long fails with TIMEOUT
    poll_interval_seconds: float = 1.0  # how often the worker asks the network about open work
    dispatch_lease_seconds: int = 5  # a worker's claim on an item, renewed while it works on it
    idempotency_retention_hours: int = 48
    default_per_minute: int = 30
    default_per_hour: int = 600
    worker_concurrency: int = 64  # collections (and payouts) worked at once by one worker, in all ...
    network_per_provider: int = 16  # ... and on one provider (mobile network)
    network_slow_after: float = 5.0  # a network call longer than this makes its provider suspect ...
    network_slow_concurrency: int = 16  # ... and moves to the slow pool: this many at once, in all
    delivery_concurrency: int = 64  # webhook deliveries at once by one worker, in all ...
    delivery_per_endpoint: int = 16  # ... and to one endpoint that has answered (1 before it has)
    delivery_slow_after: float = 2.0  # a delivery longer than this makes its endpoint suspect ...
    delivery_slow_concurrency: int = 128  # ... and moves to the slow pool: this many at once, in all
    work_log_seconds: float = 5.0  # how often a busy worker logs its queue
    sign_in_failures_per_client: int = 10  # failed console sign-ins from one address ...
    sign_in_failures_overall: int = 100  # ... and from every address together ...
    sign_in_window_seconds: int = 600  # ... within this many seconds (60 to 3600): then RATE_LIMITED
