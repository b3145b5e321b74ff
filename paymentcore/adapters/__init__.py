"""Adapters: the concrete implementations of the protocols in ``paymentcore.ports``."""

__all__: list[str] = []  # import the adapters from their modules (paymentcore.adapters.sqlite, ...)
