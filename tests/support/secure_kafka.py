"""An Apache Kafka broker of a test's own that speaks only SASL_SSL with SCRAM-SHA-512, as production clusters ask
of windjoin's clients: TLS by a CA made here for the test (openssl), SCRAM users made when its storage is formatted
(`--add-scram`, KRaft's way), one KRaft node on loopback. Tansu cannot serve this (tests/connectors/kafka/
test_kafka_security.py says why)."""

from __future__ import annotations

import subprocess
import time
import uuid
from base64 import urlsafe_b64encode
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka.admin import AdminClient

from windjoin.connectors.local import processes
from windjoin.connectors.local.kafka_broker import HEAP, java_binary, libs_dir, server_properties

MECHANISM = "SCRAM-SHA-512"
ADMIN = ("admin", "admin-s3cret")  # the broker's own login, inter-broker
USER = ("windjoin-job", "job-s3cret-pw")


@dataclass
class SecureKafka:
    bootstrap: str
    ca_file: Path
    password_file: Path
    pid: int
    log: Path

    @property
    def username(self) -> str:
        return USER[0]

    def spec_section(self) -> dict[str, str]:
        """The spec's `kafka:` section for this broker (the password from its file)."""
        return {
            "security_protocol": "SASL_SSL",
            "sasl_mechanism": MECHANISM,
            "username": self.username,
            "password_file": str(self.password_file),
            "ca_file": str(self.ca_file),
        }

    def client_config(self, password: str | None = None) -> dict[str, str]:
        """librdkafka settings of a client of this broker (another password to try a wrong one)."""
        return {
            "bootstrap.servers": self.bootstrap,
            "security.protocol": "SASL_SSL",
            "ssl.ca.location": str(self.ca_file),
            "sasl.mechanism": MECHANISM,
            "sasl.username": USER[0],
            "sasl.password": USER[1] if password is None else password,
        }

    def stop(self) -> None:
        processes.stop(self.pid)


def _certificates(folder: Path) -> tuple[Path, Path]:
    """A CA, and a server key and certificate for 127.0.0.1 signed by it: (the CA's PEM, the server's key + chain)."""

    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=folder, check=True, capture_output=True, timeout=60)

    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
            "-subj", "/CN=windjoin-test-ca")  # fmt: skip
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key", "-out", "server.csr", "-subj",
            "/CN=127.0.0.1")  # fmt: skip
    (folder / "san.cnf").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial", "-out",
            "server.crt", "-days", "2", "-extfile", "san.cnf")  # fmt: skip
    keystore = folder / "server.pem"  # Kafka's PEM keystore: the PKCS#8 key, then the certificate
    keystore.write_text((folder / "server.key").read_text() + (folder / "server.crt").read_text())
    return folder / "ca.pem", keystore


def start_secure_kafka(folder: Path, timeout_s: float = 90.0) -> SecureKafka:
    """Start the broker (its jars as the local service's) in `folder`; returns once a SCRAM client lists topics."""
    folder.mkdir(parents=True, exist_ok=True)
    ca, keystore = _certificates(folder)
    port, controller_port = processes.free_port(), processes.free_port()
    plain = server_properties("127.0.0.1", port, controller_port, folder / "kafka-data").splitlines()
    overrides = {
        "listeners": f"SASL_SSL://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}",
        "advertised.listeners": f"SASL_SSL://127.0.0.1:{port}",
        "inter.broker.listener.name": "SASL_SSL",
        "listener.security.protocol.map": "SASL_SSL:SASL_SSL,CONTROLLER:PLAINTEXT",
    }
    lines = [line for line in plain if line.split("=", 1)[0] not in overrides]
    lines += [f"{key}={value}" for key, value in overrides.items()]
    lines += [
        f"sasl.enabled.mechanisms={MECHANISM}",
        f"sasl.mechanism.inter.broker.protocol={MECHANISM}",
        "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule"
        f' required username="{ADMIN[0]}" password="{ADMIN[1]}";',
        "ssl.keystore.type=PEM",
        f"ssl.keystore.location={keystore}",
        "ssl.truststore.type=PEM",
        f"ssl.truststore.location={ca}",
        f"super.users=User:{ADMIN[0]}",
    ]
    config = folder / "kafka.properties"
    config.write_text("\n".join(lines) + "\n")
    classpath = f"{libs_dir()}/*"
    cluster = urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
    scram = [f"{MECHANISM}=[name={name},password={password}]" for name, password in (ADMIN, USER)]
    subprocess.run(
        [java_binary(), "-cp", classpath, "kafka.tools.StorageTool", "format", "-t", cluster, "-c", str(config)]
        + [arg for user in scram for arg in ("--add-scram", user)],
        check=True,
        capture_output=True,
        timeout=120,
    )
    log = folder / "kafka.log"
    pid = processes.spawn([java_binary(), HEAP, "-cp", classpath, "kafka.Kafka", str(config)], log)
    password_file = folder / "password"
    password_file.write_text(USER[1] + "\n")
    broker = SecureKafka(f"127.0.0.1:{port}", ca, password_file, pid, log)
    deadline = time.monotonic() + timeout_s
    admin = AdminClient(broker.client_config())
    while True:
        try:
            admin.list_topics(timeout=5)
            return broker
        except Exception as err:  # not up yet: asked again until the deadline
            if time.monotonic() > deadline or not processes.is_alive(pid):
                broker.stop()
                tail = processes.log_tail(log)
                raise RuntimeError(f"the secure broker did not answer in {timeout_s:g} s:\n{tail}") from err
            time.sleep(0.5)
