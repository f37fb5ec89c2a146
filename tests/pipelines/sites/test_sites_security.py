"""The sites runtime's Kafka clients honour the `kafka:` section (TLS / SASL), in-process and without a broker.

No SASL or TLS broker runs here (the embedded broker is plaintext; see docs/deployment.md "Not yet tested"), so:
a site's real consumer and producer are pointed at a bare TCP listener, which sees a TLS ClientHello on every
connection with `security_protocol: SSL` (and a Kafka request without it); and the settings each client is built
with (site consumer and producer, the driver's admin client and producer) are captured and must carry the
protocol, the mechanism, the user, the password read from its file and the CA.
"""

from __future__ import annotations

import socket
import ssl
import threading
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from windjoin.connectors.kafka import admin as kafka_admin
from windjoin.connectors.kafka import producer as kafka_producer
from windjoin.connectors.kafka.security import PLAINTEXT, KafkaSecurity
from windjoin.pipelines.cli.sites import load_kafka_config, sites
from windjoin.pipelines.sites import driver, site
from windjoin.pipelines.sites.driver import SitesRunConfig, prepare, run_sites, start_sites
from windjoin.pipelines.sites.site import Site, SiteConfig, SiteError

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
STATS = EXAMPLES / "pmjoin_sites.yaml"
CA_FILE = ssl.get_default_verify_paths().cafile or "/etc/ssl/certs/ca-certificates.crt"


@pytest.fixture()
def sasl(tmp_path) -> KafkaSecurity:
    if not Path(CA_FILE).exists():
        pytest.skip(f"no CA bundle at {CA_FILE} for librdkafka's ssl.ca.location")
    password = tmp_path / "kafka-password"
    password.write_text("s3cret-from-file\n")
    return KafkaSecurity("SASL_SSL", "SCRAM-SHA-512", "windjoin", str(password), None, CA_FILE)


def _expected(security: KafkaSecurity) -> dict[str, str]:
    return {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "windjoin",
        "sasl.password": "s3cret-from-file",
        "ssl.ca.location": security.ca_file,
    }


class _Listener:
    """A TCP port that records the first bytes of every connection (and answers nothing)."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.first_bytes: list[bytes] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.sock.getsockname()[1]}"

    def _serve(self) -> None:
        held = []
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            conn.settimeout(3)
            try:
                self.first_bytes.append(conn.recv(6))
            except TimeoutError:
                self.first_bytes.append(b"")
            held.append(conn)
        for conn in held:
            conn.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.sock.close()


def _run_site_against(listener: _Listener, security: KafkaSecurity, out: Path) -> None:
    plan, _, _ = prepare(STATS)
    config = SiteConfig(listener.bootstrap, "wj-sec", out, timeout_s=2.0, security=security)
    with pytest.raises(SiteError, match="not finished"):
        Site(plan, plan.sites[0], config).run()


def test_a_sites_clients_speak_tls_when_the_section_says_ssl(tmp_path):
    if not Path(CA_FILE).exists():
        pytest.skip(f"no CA bundle at {CA_FILE}")
    tls = _Listener()
    try:
        _run_site_against(tls, KafkaSecurity("SSL", ca_file=CA_FILE), tmp_path / "tls")
    finally:
        tls.close()
    assert tls.first_bytes, "the site's clients never connected"
    assert all(b[:2] == b"\x16\x03" for b in tls.first_bytes), tls.first_bytes  # a TLS handshake record
    plain = _Listener()
    try:
        _run_site_against(plain, PLAINTEXT, tmp_path / "plain")
    finally:
        plain.close()
    assert plain.first_bytes and all(b[4:6] == b"\x00\x12" for b in plain.first_bytes), plain.first_bytes  # ApiVersions


class _Recorded(Exception):
    pass


def _recorder(seen: list[tuple[str, dict]], kind: str, stop: bool):
    class Client:
        def __init__(self, config: dict) -> None:
            seen.append((kind, dict(config)))
            if stop:
                raise _Recorded(kind)

        def assign(self, _partitions) -> None:
            pass

        def consume(self, num_messages: int = 1, timeout: float = 0) -> list:
            return []

        def poll(self, _timeout: float = 0) -> int:
            return 0

        def flush(self, _timeout: float = 0) -> int:
            return 0

        def close(self) -> None:
            pass

    return Client


def test_a_sites_consumer_and_producer_are_built_with_the_security_settings(monkeypatch, tmp_path, sasl):
    seen: list[tuple[str, dict]] = []
    monkeypatch.setattr(site, "Consumer", _recorder(seen, "consumer", stop=False))
    monkeypatch.setattr(site, "Producer", _recorder(seen, "producer", stop=False))
    plan, _, _ = prepare(STATS)
    config = SiteConfig("broker:9093", "wj-sec", tmp_path, timeout_s=0.2, security=sasl)
    with pytest.raises(SiteError):
        Site(plan, plan.sites[0], config).run()
    assert [kind for kind, _ in seen] == ["consumer", "producer"]
    for kind, settings in seen:
        assert _expected(sasl).items() <= settings.items(), kind
        assert settings["bootstrap.servers"] == "broker:9093"


def _stats_with_kafka(tmp_path: Path, security: KafkaSecurity) -> Path:
    data = yaml.safe_load(STATS.read_text())
    data["kafka"] = {k: v for k, v in security.__dict__.items() if v is not None}
    path = tmp_path / "stats.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_the_drivers_admin_client_and_producer_are_built_with_the_security_settings(monkeypatch, tmp_path, sasl):
    stats = _stats_with_kafka(tmp_path, sasl)
    assert driver.stats_security(stats) == sasl  # STATS' `kafka:` section, validated like the spec's
    seen: list[tuple[str, dict]] = []
    config = SitesRunConfig(stats, "broker:9093", tmp_path / "out", span_s=5, reference=False, security=sasl)
    monkeypatch.setattr(kafka_admin, "AdminClient", _recorder(seen, "admin", stop=True))
    with pytest.raises(_Recorded):
        run_sites(config)
    monkeypatch.setattr(driver, "create_topics", lambda *a, **k: None)
    monkeypatch.setattr(kafka_producer, "Producer", _recorder(seen, "producer", stop=True))
    with pytest.raises(_Recorded):
        run_sites(config)
    assert [kind for kind, _ in seen] == ["admin", "producer"]
    for kind, settings in seen:
        assert _expected(sasl).items() <= settings.items(), kind


def test_the_sites_get_the_section_as_a_file_without_the_password(monkeypatch, tmp_path, sasl):
    started: list[list[str]] = []
    monkeypatch.setattr(driver.processes, "spawn", lambda argv, log, env=None: started.append(list(argv)) or 1)
    plan, _, _ = prepare(STATS)
    out = tmp_path / "out"
    out.mkdir()
    config = SitesRunConfig(STATS, "broker:9093", out, security=sasl)
    start_sites(out / "plan.json", plan, config, "wj-sec")
    assert len(started) == len(plan.sites)
    for argv in started:
        path = Path(argv[argv.index("--kafka-config") + 1])
        assert load_kafka_config(path) == sasl  # what `windjoin sites site --kafka-config` reads
        assert "s3cret" not in path.read_text() and "s3cret" not in " ".join(argv)
    monkeypatch.setattr(driver.processes, "spawn", lambda argv, log, env=None: started.append(list(argv)) or 1)
    started.clear()
    start_sites(out / "plan.json", plan, SitesRunConfig(STATS, "broker:9093", out), "wj-sec")
    assert not any("--kafka-config" in argv for argv in started)  # plaintext: nothing to pass


def test_a_bad_kafka_section_is_refused_naming_the_key(tmp_path):
    bad = tmp_path / "kafka.yaml"
    bad.write_text("security_protocol: SASL_SSL\nusername: u\npassword_file: /x\n")
    with pytest.raises(Exception, match="kafka.*sasl_mechanism: required with SASL_SSL"):
        load_kafka_config(bad)
    stats = tmp_path / "stats.yaml"
    data = yaml.safe_load(STATS.read_text())
    data["kafka"] = {"security_protocol": "TLS"}
    stats.write_text(yaml.safe_dump(data))
    invoked = CliRunner().invoke(sites, ["run", str(stats), "--bootstrap", "broker:9093"])
    assert invoked.exit_code != 0 and "kafka.security_protocol" in invoked.output, invoked.output
    data["kafka"] = {"security_protocol": "SSL"}
    stats.write_text(yaml.safe_dump(data))
    invoked = CliRunner().invoke(sites, ["run", str(stats)], env={"WINDJOIN_KAFKA_BOOTSTRAP": ""})
    assert invoked.exit_code != 0 and "needs --bootstrap" in invoked.output, invoked.output
