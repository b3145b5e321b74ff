"""The composition root: a PaymentCore built from its parts, its worker, the SQLite-to-PostgreSQL move."""
