"""Kept for code written against earlier versions: the webhook sender is now
:class:`paymentcore.adapters.http_sender.HttpWebhookSender` (on the standard library's ``http.client``,
with the same guarantees and constructor), and ``HttpxWebhookSender`` is another name for it."""

from __future__ import annotations

from paymentcore.adapters.http_sender import (
    DEFAULT_USER_AGENT,
    MAX_BODY,
    MAX_RETRY_AFTER,
    HttpWebhookSender,
    parse_retry_after,
)

__all__ = ["DEFAULT_USER_AGENT", "MAX_BODY", "MAX_RETRY_AFTER", "HttpxWebhookSender", "parse_retry_after"]

HttpxWebhookSender = HttpWebhookSender
