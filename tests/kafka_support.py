"""Kafka test fixtures (filled in by the Kafka transport work)."""
