"""Spark: the local session windjoin's jobs and tests use, and a local standalone cluster."""
