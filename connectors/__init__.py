"""Edges to the outside world: files, Kafka, Redis, Parquet and the embedded local services."""
