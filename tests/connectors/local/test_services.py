"""Embedded services against the real binaries: lifecycle, a Kafka round trip through Tansu, Redis, the CLI."""

from __future__ import annotations

import collections
import os
import socket
import stat
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import redis
from click.testing import CliRunner
from confluent_kafka import Consumer, TopicPartition

from tests.services_fixtures import fetch_kafka_jars
from windjoin.connectors.kafka import admin as kafka_admin
from windjoin.connectors.kafka import producer as kafka_producer
from windjoin.connectors.local import services
from windjoin.connectors.redis.client import RedisAuth, redis_client
from windjoin.connectors.redis.functions import BUSY_REPLY_MS
from windjoin.pipelines.cli.services import services as services_cli

PARTITIONS = 4


def _gone(pid: int) -> bool:
    """The process no longer exists (reaped) or is a zombie: it runs no code and holds no port."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()
    except FileNotFoundError:
        return True
    return fields[0] == "Z"


def _records(n: int) -> list[tuple[str, str, int]]:
    return [(f"k{i % 13}", f"v{i}", 1_700_000_000_000 + i * 7) for i in range(n)]


def _consume_all(consumer: Consumer, expected: int, timeout_s: float = 60.0, settle_s: float = 2.0) -> list:
    """Consume until `expected` messages came, then keep polling `settle_s` more to catch duplicates."""
    got: list = []
    deadline = time.monotonic() + timeout_s
    while len(got) < expected and time.monotonic() < deadline:
        for msg in consumer.consume(1000, 0.5):
            assert msg.error() is None, msg.error()
            got.append(msg)
    settle = time.monotonic() + settle_s
    while time.monotonic() < settle:
        got.extend(m for m in consumer.consume(1000, 0.2) if m.error() is None)
    return got


def _check_exactly_once(sent: list[tuple[str, str, int]], got: list) -> None:
    received = [(m.key().decode(), m.value().decode(), m.timestamp()[1]) for m in got]
    assert collections.Counter(received) == collections.Counter(sent)
    positions = [(m.partition(), m.offset()) for m in got]
    assert len(set(positions)) == len(positions)
    # Keyed records: one key, one partition; and every partition got some of the 13 keys.
    partitions_by_key = collections.defaultdict(set)
    for m in got:
        partitions_by_key[m.key()].add(m.partition())
    assert all(len(p) == 1 for p in partitions_by_key.values())
    assert {m.partition() for m in got} == set(range(PARTITIONS))


def test_lifecycle_kafka_round_trip_and_redis(tmp_path: Path) -> None:
    config = services.ServicesConfig(state_dir=tmp_path / "svc")
    started = services.up(config)
    try:
        by_name = {s.service.name: s.service for s in started}
        assert set(by_name) == {"kafka", "redis"} and not any(s.reused for s in started)
        assert all(s.port > 0 and s.host == "127.0.0.1" for s in by_name.values())
        assert {(s.service.name, s.running, s.reachable) for s in services.status(config.state_dir)} == {
            ("kafka", True, True),
            ("redis", True, True),
        }
        again = services.up(config)  # idempotent: same processes, reported as reused
        assert {s.service.pid for s in again} == {s.pid for s in by_name.values()}
        assert all(s.reused for s in again)

        bootstrap = by_name["kafka"].url
        kafka_admin.create_topics(bootstrap, "roundtrip", PARTITIONS)
        assert kafka_admin.list_topics(bootstrap)["roundtrip"] == PARTITIONS
        sent = _records(3000)
        assert kafka_producer.produce(bootstrap, "roundtrip", sent) == len(sent)

        consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": "roundtrip-test",
                "auto.offset.reset": "earliest",
                "session.timeout.ms": 6000,
                "enable.auto.commit": False,
            }
        )
        try:
            consumer.subscribe(["roundtrip"])
            got = _consume_all(consumer, len(sent))
        finally:
            consumer.close()
        _check_exactly_once(sent, got)

        client = redis_client(by_name["redis"].url, by_name["redis"].auth)
        try:
            assert client.set("windjoin:test", b"\x00value") is True
            assert client.get("windjoin:test") == b"\x00value"
        finally:
            client.close()
    finally:
        stopped = services.down(config.state_dir)
    assert {s.pid for s in stopped} == {s.pid for s in by_name.values()}
    assert all(_gone(s.pid) for s in stopped)
    assert services.status(config.state_dir) == []
    assert services.load_state(config.state_dir) == {}  # forgotten, but their ports are remembered
    assert services.recorded_ports(config.state_dir) == {name: s.port for name, s in by_name.items()}


def test_services_restarted_keep_their_ports_when_free(tmp_path: Path) -> None:
    """After `down`, `up` starts each service on the port it had (so a spec written with its URL still works);
    a port taken meanwhile gives way to a free one, and the new one is remembered."""
    config = services.ServicesConfig(state_dir=tmp_path / "state", kafka=False)
    try:
        [first] = services.up(config)
        services.down(config.state_dir)
        [again] = services.up(config)
        assert not again.reused and again.service.pid != first.service.pid
        assert again.service.port == first.service.port
        assert services.redis_ready(again.service.url, auth=again.service.auth)
        services.down(config.state_dir)
        with socket.socket() as squatter:  # someone else took the port meanwhile
            squatter.bind(("127.0.0.1", first.service.port))
            squatter.listen()
            [moved] = services.up(config)
            assert moved.service.port != first.service.port and services.redis_ready(
                moved.service.url, auth=moved.service.auth
            )
        assert services.recorded_ports(config.state_dir) == {"redis": moved.service.port}
    finally:
        services.down(config.state_dir)


def test_fixtures_give_working_services(kafka_bootstrap: str, redis_url: str, unique_topic: Callable[..., str]) -> None:
    topic, other = unique_topic("left"), unique_topic("left")
    assert topic != other and topic.startswith("left-test_fixtures_give_working_services-")
    kafka_admin.create_topics(kafka_bootstrap, topic, PARTITIONS)
    sent = _records(500)
    kafka_producer.produce(kafka_bootstrap, topic, sent)
    # Assigned reading (no group join), as windjoin's Spark source reads.
    consumer = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": topic, "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        got = _consume_all(consumer, len(sent), settle_s=1.0)
    finally:
        consumer.close()
    _check_exactly_once(sent, got)
    kafka_admin.delete_topics(kafka_bootstrap, topic)
    assert topic not in kafka_admin.list_topics(kafka_bootstrap)

    client = redis_client(redis_url)  # the session's password file (WINDJOIN_REDIS_PASSWORD_FILE)
    try:
        client.set(topic, "1")
        assert client.incr(topic) == 2
    finally:
        client.close()


def test_cli_up_status_down(tmp_path: Path) -> None:
    runner = CliRunner()
    state = ["--state-dir", str(tmp_path / "svc")]
    result = runner.invoke(services_cli, ["up", *state])
    try:
        assert result.exit_code == 0, result.output
        lines = dict(line.split(": ", 1) for line in result.output.splitlines())
        bootstrap = lines["kafka"].split()[0]
        redis_address = lines["redis"].split()[0]
        assert bootstrap.startswith("127.0.0.1:") and redis_address.startswith("redis://127.0.0.1:")
        assert "pid " in lines["kafka"] and "pid " in lines["redis"]
        login = RedisAuth(password_file=lines["redis"].split("password in ")[1].rstrip(")"))  # printed: its path
        assert services.kafka_ready(bootstrap) and services.redis_ready(redis_address, auth=login)
        assert not services.redis_ready(redis_address, auth=RedisAuth())  # on loopback too: no password, no entry

        result = runner.invoke(services_cli, ["status", *state])
        assert result.exit_code == 0, result.output
        assert result.output.count("reachable") == 2

        result = runner.invoke(services_cli, ["up", *state])
        assert result.exit_code == 0 and result.output.count("already running") == 2
    finally:
        pids = [s.service.pid for s in services.status(tmp_path / "svc")]
        result = runner.invoke(services_cli, ["down", *state])
    assert result.exit_code == 0 and result.output.count("stopped") == 2
    assert all(_gone(pid) for pid in pids)
    result = runner.invoke(services_cli, ["status", *state])
    assert result.exit_code == 1 and "nothing running" in result.output


def _script(path: Path, body: str) -> str:
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def test_binary_that_exits_gives_clear_error(tmp_path: Path) -> None:
    fake = _script(tmp_path / "fake-tansu", 'echo "fatal: storage engine exploded" >&2\nexit 3\n')
    config = services.ServicesConfig(state_dir=tmp_path / "svc", redis=False, tansu_bin=fake, ready_timeout_s=20)
    t0 = time.monotonic()
    with pytest.raises(services.ServiceStartError) as info:
        services.up(config)
    assert time.monotonic() - t0 < 10  # noticed the exit, did not wait for the timeout
    message = str(info.value)
    assert "kafka" in message and "exited (code 3)" in message
    assert "fatal: storage engine exploded" in message
    assert services.status(config.state_dir) == []


def test_a_binary_that_exits_is_reported_with_its_code_every_time(tmp_path: Path) -> None:
    """50 starts of a broker that exits at once (after 0-49 ms, so the exit lands anywhere in a readiness round):
    each is reported as an exit with code 3 and the log's last line, never as a timeout."""
    t0 = time.monotonic()
    for run in range(50):
        fake = _script(tmp_path / f"fake-tansu-{run}", f'sleep 0.{run:03d}\necho "fatal: run {run}" >&2\nexit 3\n')
        config = services.ServicesConfig(state_dir=tmp_path / f"svc{run}", redis=False, tansu_bin=fake)
        with pytest.raises(services.ServiceStartError) as info:
            services.up(config)
        message = str(info.value)
        assert "exited (code 3)" in message and f"fatal: run {run}" in message, f"run {run}: {message}"
    assert time.monotonic() - t0 < 20


def test_an_exit_between_two_checks_keeps_its_code(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A loaded machine: the process exits while the readiness loop is between its checks (each check of the
    exit status is slowed down); the code still reaches the error."""
    check = services.processes.exit_code

    def slow_check(pid: int) -> int | None:
        code = check(pid)
        time.sleep(0.05)
        return code

    monkeypatch.setattr(services.processes, "exit_code", slow_check)
    fake = _script(tmp_path / "fake-tansu", 'sleep 0.02\necho "fatal: late" >&2\nexit 3\n')
    for run in range(5):
        config = services.ServicesConfig(state_dir=tmp_path / f"svc{run}", redis=False, tansu_bin=fake)
        with pytest.raises(services.ServiceStartError) as info:
            services.up(config)
        assert "exited (code 3)" in str(info.value) and "fatal: late" in str(info.value), str(info.value)


def test_readiness_timeout_gives_clear_error_and_stops_process(tmp_path: Path) -> None:
    fake = _script(tmp_path / "fake-redis", 'echo "pretending to start"\nexec sleep 60\n')
    config = services.ServicesConfig(
        state_dir=tmp_path / "svc", kafka=False, redis_bin=fake, ready_timeout_s=1.0, stop_grace_s=2.0
    )
    with pytest.raises(services.ServiceStartError) as info:
        services.up(config)
    message = str(info.value)
    assert "redis" in message and "no answer within 1 s" in message and "pretending to start" in message
    assert info.value.pid is not None and _gone(info.value.pid)
    assert services.status(config.state_dir) == []


def _live_children() -> dict[int, str]:
    """PID -> command name of this interpreter's live (non-zombie) child processes."""
    children = {}
    for stat_file in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat_file.read_text()
        except OSError:
            continue
        fields = text.rsplit(")", 1)[-1].split()
        if int(fields[1]) == os.getpid() and fields[0] != "Z":
            children[int(stat_file.parent.name)] = text[text.index("(") + 1 : text.rindex(")")]
    return children


def test_failed_start_rolls_back_services_started_in_the_same_call(tmp_path: Path) -> None:
    fake = _script(tmp_path / "fake-redis", "exit 1\n")
    config = services.ServicesConfig(state_dir=tmp_path / "svc", redis_bin=fake)
    before = _live_children()
    with pytest.raises(services.ServiceStartError, match="redis"):
        services.up(config)
    assert services.status(config.state_dir) == []
    assert (config.state_dir / "kafka.log").exists()  # the broker did start before redis failed ...
    assert _live_children().keys() <= before.keys()  # ... and was stopped again


def _non_loopback_address() -> str:
    """An address of this machine beyond loopback (the one its default route leaves from); skip without one."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("203.0.113.1", 9))  # UDP: no packet is sent
        except OSError as err:
            pytest.skip(f"no route beyond loopback: {err}")
        address = probe.getsockname()[0]
    if address.startswith("127."):
        pytest.skip("this machine has no address beyond loopback")
    return address


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "10.231.0.1"])
def test_redis_keeps_protected_mode_and_has_a_password_on_every_address(tmp_path: Path, host: str):
    """Protected mode stays on everywhere; on loopback too the password is in a 0600 config file, not in argv (any
    local user reaches a loopback port)."""
    argv = services._argv(services.REDIS, services.ServicesConfig(host=host, redis_bin="redis-server"), 6379, tmp_path)
    assert argv[argv.index("--protected-mode") + 1] == "yes"
    password_file = tmp_path / services.REDIS_PASSWORD_FILE
    password = password_file.read_text().strip()
    assert len(password) >= 32 and not any(password in arg for arg in argv)
    conf = Path(argv[1])
    assert conf.read_text() == f"requirepass {password}\n"
    assert stat.S_IMODE(password_file.stat().st_mode) == stat.S_IMODE(conf.stat().st_mode) == 0o600


@pytest.mark.parametrize("where", ["loopback", "beyond loopback"])
def test_redis_refuses_clients_without_its_password(tmp_path: Path, where: str) -> None:
    """Every endpoint authenticates: the embedded Redis, on loopback (any local user reaches it) as beyond, answers
    only clients that give the password from its file; the reported URL (server only) with that file works;
    nothing prints it."""
    host = "127.0.0.1" if where == "loopback" else _non_loopback_address()
    config = services.ServicesConfig(state_dir=tmp_path / "svc", kafka=False, host=host)
    try:
        [started] = services.up(config)
        service = started.service
        password = Path(service.password_file).read_text().strip()
        assert service.url == f"redis://{host}:{service.port}/0"  # the server only: specs and logs show it
        with pytest.raises(redis.AuthenticationError):  # NOAUTH
            redis.Redis.from_url(service.url, socket_timeout=5).ping()
        with pytest.raises(redis.AuthenticationError):
            redis.Redis.from_url(service.url, password="not-" + password, socket_timeout=5).ping()
        assert services.redis_ready(service.url, auth=service.auth)
        assert [(s.running, s.reachable) for s in services.status(config.state_dir)] == [(True, True)]
        assert password not in Path(f"/proc/{service.pid}/cmdline").read_text()
        assert password not in (config.state_dir / services.STATE_FILE).read_text()
        result = CliRunner().invoke(services_cli, ["status", "--state-dir", str(config.state_dir)])
        assert result.exit_code == 0 and f"password in {service.password_file}" in result.output, result.output
        assert password not in result.output
        again = services.up(config)  # reused: the same file still logs in
        assert again[0].reused and again[0].service.password_file == service.password_file
    finally:
        services.down(config.state_dir)
    assert not (config.state_dir / "redis-data").exists()  # its config file (holding the password) went with it


def test_the_embedded_redis_sets_its_busy_reply_threshold(redis_url: str) -> None:
    """Set explicitly (redis_functions.BUSY_REPLY_MS, its docstring says why), whatever a redis.conf would say."""
    assert redis_client(redis_url).config_get("busy-reply-threshold") == {"busy-reply-threshold": str(BUSY_REPLY_MS)}


def test_apache_kafka_keeps_its_topics_and_records_across_a_restart(tmp_path: Path) -> None:
    fetch_kafka_jars()
    config = services.ServicesConfig(state_dir=tmp_path / "svc", redis=False, broker=services.APACHE_KAFKA)
    [started] = services.up(config)
    try:
        assert started.service.broker == services.APACHE_KAFKA
        bootstrap = started.service.url
        kafka_admin.create_topics(bootstrap, "kept", PARTITIONS)
        sent = [(b"k", f"v{i}".encode(), 1_700_000_000_000 + i) for i in range(20)]
        assert kafka_producer.produce(bootstrap, "kept", sent) == len(sent)
        with pytest.raises(services.ServiceStartError, match="a kafka broker already runs .* not the tansu broker"):
            services.up(services.ServicesConfig(state_dir=tmp_path / "svc", redis=False))
        services.down(config.state_dir)
        [again] = services.up(config)
        assert again.service.url == bootstrap and not again.reused
        assert kafka_admin.list_topics(bootstrap)["kept"] == PARTITIONS
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "kept", "enable.auto.commit": False})
        try:
            got = []
            for partition in range(PARTITIONS):
                consumer.assign([TopicPartition("kept", partition, 0)])
                low, high = consumer.get_watermark_offsets(TopicPartition("kept", partition), timeout=10)
                while len([g for g in got if g[0] == partition]) < high - low:
                    msg = consumer.poll(10)
                    assert msg is not None and msg.error() is None
                    got.append((partition, msg.value()))
            assert sorted(v for _, v in got) == sorted(v for _, v, _ in sent)
        finally:
            consumer.close()
    finally:
        services.down(config.state_dir)


def test_an_unknown_broker_is_refused_naming_the_accepted_ones(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"broker: 'redpanda' is not accepted \(accepted: tansu, kafka\)"):
        services.ServicesConfig(state_dir=tmp_path, broker="redpanda")
