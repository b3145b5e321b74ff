"""Adapters: the concrete implementations of the protocols in ``paymentcore.ports``."""
