"""Transports behind one bus interface: in-process memory streams and Kafka (aiokafka)."""
