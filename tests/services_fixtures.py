"""pytest plugin: session-wide Kafka bootstrap address and Redis URL for integration tests.

Each fixture picks, in order: an external service named by an environment variable
(WINDJOIN_KAFKA_BOOTSTRAP / WINDJOIN_REDIS_URL); a testcontainers container when a Docker engine answers;
else the embedded service (Tansu / redis-server) started in a temporary state dir and stopped by PID at
session end. Load it with `pytest_plugins = ["services_fixtures"]` in tests/conftest.py.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import uuid
from collections.abc import Callable, Iterator
from functools import cache
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from windjoin.connectors.local import services
from windjoin.connectors.redis.client import ENV_PASSWORD_FILE, redis_client
from windjoin.connectors.redis.functions import load_library

KAFKA_ENV = "WINDJOIN_KAFKA_BOOTSTRAP"
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


def _embedded(tmp_path_factory: pytest.TempPathFactory, name: str, login: Path | None = None) -> Iterator[str]:
    """Start one embedded service in its own temporary state dir (Redis with the session's password file); always
    stop it (by PID) afterwards."""
    state_dir: Path = tmp_path_factory.mktemp(f"services-{name}")
    if login is not None:
        shutil.copy(login, state_dir / services.REDIS_PASSWORD_FILE)  # keeps its 0600
    config = services.ServicesConfig(state_dir=state_dir, kafka=name == services.KAFKA, redis=name == services.REDIS)
    try:
        [started] = services.up(config)
        yield started.service.url
    finally:
        services.down(state_dir)


@pytest.fixture(scope="session")
def kafka_bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Bootstrap address (`host:port`) of a Kafka-protocol broker for the whole session."""
    external = os.environ.get(KAFKA_ENV)
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
        yield from _embedded(tmp_path_factory, services.KAFKA)


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
