"""The Kafka-facing tests here run on both brokers: Tansu (the suite's default) and Apache Kafka."""

from tests.services_fixtures import on_each_broker

kafka_bootstrap = on_each_broker()
