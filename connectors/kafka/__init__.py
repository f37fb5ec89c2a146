"""Kafka: the Spark source, topic administration, producing, client security, arrival counts, the schema
registry and dead-letter records."""
