"""Configuration of a PaymentCore: what to build, not how (see ``paymentcore._bootstrap``)."""

from __future__ import annotations

import attrs

__all__ = [
    "DEFAULT_WEBHOOK_RETRY_DELAYS",
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
    webhook_retry_delays: tuple[int, ...] = DEFAULT_WEBHOOK_RETRY_DELAYS
    webhook_jitter: float = 0.1  # each retry delay is stretched by up to this fraction
    webhook_timeout: float = 10.0
    allow_private_webhooks: bool = False
    auto_disable_after: int = 10  # consecutive failed events
    prompt_limit: int = 3  # prompts one number may receive ...
    prompt_window_seconds: int = 300  # ... within this many seconds (RECIPIENT_BUSY beyond)
    prompt_timeout_seconds: int = 300  # a prompt unanswered this long fails with TIMEOUT
    poll_interval_seconds: float = 1.0  # how often the worker asks the network about open work
    dispatch_lease_seconds: int = 30  # a worker's claim on a payout or a delivery
    idempotency_retention_hours: int = 48
    default_per_minute: int = 30
    default_per_hour: int = 600
    worker_concurrency: int = 64  # collections (and payouts) worked at once by one worker
    delivery_concurrency: int = 32  # webhook deliveries at once by one worker, in all ...
    delivery_per_endpoint: int = 4  # ... and to one endpoint (a hanging endpoint holds only these)
    work_log_seconds: float = 5.0  # how often a busy worker logs its queue
    sign_in_failures_per_client: int = 10  # failed console sign-ins from one address ...
    sign_in_failures_overall: int = 100  # ... and from every address together ...
    sign_in_window_seconds: int = 600  # ... within this many seconds (60 to 3600): then RATE_LIMITED
