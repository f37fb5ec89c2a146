"""Shared fixtures: real services (broker, Redis) and Spark, started once per session when a test asks."""

pytest_plugins = ["tests.services_fixtures", "tests.spark_fixtures", "tests.s3_server"]
