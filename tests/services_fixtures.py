"""pytest plugin: session-wide Kafka bootstrap address and Redis URL for integration tests.

Each fixture picks, in order: an external service named by an environment variable
(WINDJOIN_KAFKA_BOOTSTRAP / WINDJOIN_REDIS_URL); a testcontainers container when a Docker engine answers;
else the embedded service (a broker / redis-server) started in a temporary state dir and stopped by PID at
session end. Load it with `pytest_plugins = ["services_fixtures"]` in tests/conftest.py.

Two brokers: Tansu (in memory, up in ~0.1 s) and Apache Kafka (KRaft, the jars scripts/fetch_jars.sh fetches,
fetched on first use here too). `kafka_bootstrap` is the suite's broker: Tansu unless WINDJOIN_TEST_BROKER=kafka
(the Kafka-facing tests under tests/connectors/kafka run on both; `apache_kafka_bootstrap` asks for the real one).
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import time
import uuid
from collections.abc import Callable, Iterator
from functools import cache
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tests.first_use import FETCH_JARS, install_once
from windjoin.connectors.local import kafka_broker, services
from windjoin.connectors.redis.client import ENV_PASSWORD_FILE, redis_client
from windjoin.connectors.redis.functions import load_library

KAFKA_ENV = "WINDJOIN_KAFKA_BOOTSTRAP"
APACHE_KAFKA_ENV = "WINDJOIN_APACHE_KAFKA_BOOTSTRAP"  # an external Apache Kafka for `apache_kafka_bootstrap`
BROKER_ENV = "WINDJOIN_TEST_BROKER"  # which broker `kafka_bootstrap` is: services.BROKERS
REDIS_ENV = "WINDJOIN_REDIS_URL"


@cache
def docker_available(timeout_s: float = 0.5) -> bool:
    """True when a Docker engine answers `GET /_ping` on DOCKER_HOST or the default socket.

    A raw socket probe, so that without Docker this costs microseconds and prints nothing (the docker
    SDK would retry and log). TLS-protected tcp:// engines are not detected; set the env vars instead.
    """
    host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    if host.startswith("unix://"):
        path = host.removeprefix("unix://")
        if not os.path.exists(path):
            return False
        family, address = socket.AF_UNIX, path
    elif host.startswith("tcp://"):
        parts = urlsplit(host)
        family, address = socket.AF_INET, (parts.hostname or "127.0.0.1", parts.port or 2375)
    else:
        return False
    try:
        with socket.socket(family, socket.SOCK_STREAM) as sock:
            sock.settimeout(timeout_s)
            sock.connect(address)
            sock.sendall(b"GET /_ping HTTP/1.0\r\nHost: docker\r\n\r\n")
            return b" 200 " in sock.recv(256)
    except OSError:
        return False


@pytest.fixture(scope="session")
def redis_login(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """One password file for every embedded Redis of the session, named by WINDJOIN_REDIS_PASSWORD_FILE, so that a
    client built without credentials (the tests', the processes they start) logs in as the embedded services ask."""
    path = services.redis_password_file(tmp_path_factory.mktemp("redis-login"))
    before = os.environ.get(ENV_PASSWORD_FILE)
    os.environ[ENV_PASSWORD_FILE] = str(path)
    yield path
    if before is None:
        os.environ.pop(ENV_PASSWORD_FILE, None)
    else:
        os.environ[ENV_PASSWORD_FILE] = before


def _embedded(
    tmp_path_factory: pytest.TempPathFactory, name: str, login: Path | None = None, broker: str = services.TANSU
) -> Iterator[str]:
    """Start one embedded service in its own temporary state dir (Redis with the session's password file); always
    stop it (by PID) afterwards."""
    state_dir: Path = tmp_path_factory.mktemp(f"services-{broker}" if name == services.KAFKA else f"services-{name}")
    if login is not None:
        shutil.copy(login, state_dir / services.REDIS_PASSWORD_FILE)  # keeps its 0600
    if broker == services.APACHE_KAFKA:
        fetch_kafka_jars()
    config = services.ServicesConfig(
        state_dir=state_dir, kafka=name == services.KAFKA, redis=name == services.REDIS, broker=broker
    )
    try:
        [started] = services.up(config)
        yield started.service.url
    finally:
        services.down(state_dir)


def fetch_kafka_jars() -> None:
    """Apache Kafka's jars in .tools/jars/kafka (scripts/setup.sh fetches them; this covers a setup without)."""

    def fetched() -> bool:
        try:
            kafka_broker.libs_dir()
        except kafka_broker.KafkaBrokerError:
            return False
        return True

    install_once(FETCH_JARS, fetched)


def suite_broker() -> str:
    """The broker `kafka_bootstrap` gives: WINDJOIN_TEST_BROKER, Tansu by default (the suite's time budget)."""
    broker = os.environ.get(BROKER_ENV, services.TANSU)
    if broker not in services.BROKERS:
        raise pytest.UsageError(f"{BROKER_ENV}={broker!r} is not accepted (accepted: {', '.join(services.BROKERS)})")
    return broker


@pytest.fixture(scope="session")
def tansu_bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Bootstrap address (`host:port`) of the embedded Tansu broker for the whole session."""
    yield from _embedded(tmp_path_factory, services.KAFKA)


@pytest.fixture(scope="session")
def apache_kafka_bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Bootstrap address of an Apache Kafka broker for the whole session: WINDJOIN_APACHE_KAFKA_BOOTSTRAP, a
    container where Docker answers, else the embedded one (KRaft, jars from Maven Central)."""
    external = os.environ.get(APACHE_KAFKA_ENV)
    if external:
        yield external
    elif docker_available():
        try:
            from testcontainers.community.kafka import KafkaContainer
        except ImportError:  # testcontainers < 4.13
            from testcontainers.kafka import KafkaContainer
        with KafkaContainer() as kafka:
            yield kafka.get_bootstrap_server()
    else:
        yield from _embedded(tmp_path_factory, services.KAFKA, broker=services.APACHE_KAFKA)


@pytest.fixture(scope="session")
def kafka_bootstrap(request: pytest.FixtureRequest) -> str:
    """Bootstrap address (`host:port`) of the suite's Kafka broker for the whole session (`suite_broker`), or
    the external one WINDJOIN_KAFKA_BOOTSTRAP names."""
    external = os.environ.get(KAFKA_ENV)
    return external or _broker_bootstrap(request, suite_broker())


def _broker_bootstrap(request: pytest.FixtureRequest, broker: str) -> str:
    """The session's bootstrap address of `broker` (services.BROKERS)."""
    return request.getfixturevalue("apache_kafka_bootstrap" if broker == services.APACHE_KAFKA else "tansu_bootstrap")


def _with_functions(url: str) -> str:
    """`url`, its Redis given the windjoin function library (as the embedded services do at start-up)."""
    client = redis_client(url)
    try:
        load_library(client)
    finally:
        client.close()
    return url


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[str]:
    """`redis://host:port/0` of a Redis server for the whole session."""
    external = os.environ.get(REDIS_ENV)
    if external:
        yield _with_functions(external)
    elif docker_available():
        try:
            from testcontainers.community.redis import RedisContainer
        except ImportError:  # testcontainers < 4.13
            from testcontainers.redis import RedisContainer
        with RedisContainer() as redis:
            yield _with_functions(f"redis://{redis.get_container_host_ip()}:{redis.get_exposed_port(6379)}/0")
    else:  # the embedded services load the functions themselves
        yield from _embedded(tmp_path_factory, services.REDIS, request.getfixturevalue("redis_login"))


@pytest.fixture
def unique_topic(request: pytest.FixtureRequest) -> Callable[..., str]:
    """Factory of topic names unique per call: `<label>-<test name>-<random>` (Kafka-legal characters).

    Topics are not created or deleted here; the broker is shared by the whole session.
    """
    test_name = re.sub(r"[^A-Za-z0-9._-]+", "-", request.node.name).strip("-")[:100]

    def make(label: str = "t") -> str:
        clean = re.sub(r"[^A-Za-z0-9._-]+", "-", label)[:60]
        return f"{clean}-{test_name}-{uuid.uuid4().hex[:10]}"

    return make


@pytest.fixture
def private_redis(tmp_path_factory: pytest.TempPathFactory, redis_login: Path) -> Iterator[str]:
    """`redis://host:port/0` of an embedded redis-server of the test alone (to flush it, fill it, read its SLOWLOG);
    stopped by PID after the test."""
    yield from _embedded(tmp_path_factory, services.REDIS, redis_login)


class PrivateBroker:
    """One test's own Apache Kafka broker, restartable on the same port with its log kept (a broker restart)."""

    def __init__(self, state_dir: Path) -> None:
        self.config = services.ServicesConfig(state_dir=state_dir, redis=False, broker=services.APACHE_KAFKA)
        [started] = services.up(self.config)
        self.bootstrap = started.service.url
        self.restarts = 0

    def stop(self) -> None:
        services.down(self.config.state_dir, names=[services.KAFKA])

    def start(self) -> None:
        [started] = services.up(self.config)
        assert started.service.url == self.bootstrap, f"restarted on {started.service.url}, not {self.bootstrap}"

    def restart(self, down_s: float = 0.0) -> None:
        """Stop the broker (SIGTERM, a controlled shutdown), wait `down_s`, start it again on its log and port."""
        self.stop()
        time.sleep(down_s)
        self.start()
        self.restarts += 1


@pytest.fixture
def private_apache_kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrivateBroker]:
    """An Apache Kafka broker of the test alone, to restart under a running job; stopped by PID after the test."""
    fetch_kafka_jars()
    broker = PrivateBroker(tmp_path_factory.mktemp("private-kafka"))
    try:
        yield broker
    finally:
        broker.stop()


def on_each_broker() -> Callable[..., str]:
    """A `kafka_bootstrap` fixture running each test that takes it once on each broker (Tansu and Apache Kafka);
    a module or conftest assigns it to the name `kafka_bootstrap`. An external WINDJOIN_KAFKA_BOOTSTRAP is the one
    broker when set."""

    @pytest.fixture(scope="session", params=services.BROKERS, name="kafka_bootstrap")
    def each_broker(request: pytest.FixtureRequest) -> str:
        external = os.environ.get(KAFKA_ENV)
        if external:
            if request.param != services.TANSU:
                pytest.skip(f"{KAFKA_ENV} names the one broker to test on")
            return external
        return _broker_bootstrap(request, request.param)

    return each_broker
