"""Apache Kafka's broker as a local service: one KRaft node (broker and controller in one JVM) on loopback.

Its jars are the pinned set scripts/fetch_jars.sh fetches from Maven Central (scripts/maven/kafka.pom.xml) into
.tools/jars/kafka, or WINDJOIN_KAFKA_LIBS names another folder of them. Its log segments live under the state dir
(`kafka-data`), formatted once with a cluster id of its own, so a restart keeps every topic and offset: what the
in-memory Tansu build cannot give (fault tests restart the broker; transactions are kept, so `read_committed`
readers skip aborted records).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from base64 import urlsafe_b64encode
from pathlib import Path

LIBS_ENV = "WINDJOIN_KAFKA_LIBS"
DEFAULT_LIBS = Path(__file__).resolve().parents[2] / ".tools" / "jars" / "kafka"
HEAP = "-Xmx512m"
_LOG4J = """Configuration:
  Appenders:
    Console:
      name: STDOUT
      PatternLayout:
        pattern: "[%d] %p %m (%c)%n"
  Loggers:
    Root:
      level: WARN
      AppenderRef:
        - ref: STDOUT
    Logger:
      - name: kafka.server.KafkaRaftServer
        level: INFO
"""


class KafkaBrokerError(RuntimeError):
    """The broker cannot be prepared (no Java, no jars, a storage format that failed); the message says what to do."""


def libs_dir(explicit: Path | None = None) -> Path:
    """The folder of Kafka's jars: `explicit`, else WINDJOIN_KAFKA_LIBS, else the setup's .tools/jars/kafka."""
    folder = explicit or Path(os.environ.get(LIBS_ENV) or DEFAULT_LIBS)
    if not any(folder.glob("kafka_2.13-*.jar")):
        raise KafkaBrokerError(
            f"Apache Kafka's jars are not in {folder}: `bash scripts/fetch_jars.sh kafka` fetches them "
            f"(scripts/setup.sh does), or set {LIBS_ENV} to a folder holding kafka_2.13-*.jar and its dependencies"
        )
    return folder


def java_binary() -> str:
    """`java` from JAVA_HOME, else PATH (Kafka 4 needs Java 17+)."""
    home = os.environ.get("JAVA_HOME")
    found = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    if not found or not os.access(found, os.X_OK):
        raise KafkaBrokerError("Apache Kafka needs Java 17+: `java` is not on PATH and JAVA_HOME names none")
    return found


def server_properties(host: str, port: int, controller_port: int, data_dir: Path) -> str:
    """One node that is its own controller quorum; every internal topic at replication 1, as a single node needs.

    No retention by time: a local broker holds what the demo and the tests write, whose event times may lie years
    back (the broker's default of 7 days, checked every 5 minutes, deleted such records under a running test).
    The log cleaner looks for compactable logs every second (Kafka's default: 15 s), so compacted topics are
    compacted within moments, as the tests of reads with gaps need."""
    return "\n".join(
        [
            "process.roles=broker,controller",
            "node.id=1",
            f"controller.quorum.voters=1@{host}:{controller_port}",
            f"listeners=PLAINTEXT://{host}:{port},CONTROLLER://{host}:{controller_port}",
            f"advertised.listeners=PLAINTEXT://{host}:{port}",
            "controller.listener.names=CONTROLLER",
            "inter.broker.listener.name=PLAINTEXT",
            "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            f"log.dirs={data_dir}",
            "num.partitions=1",
            "offsets.topic.replication.factor=1",
            "transaction.state.log.replication.factor=1",
            "transaction.state.log.min.isr=1",
            "share.coordinator.state.topic.replication.factor=1",
            "share.coordinator.state.topic.min.isr=1",
            "group.initial.rebalance.delay.ms=0",
            "log.retention.ms=-1",
            "log.cleaner.backoff.ms=1000",
            "",
        ]
    )


def prepare(state_dir: Path, host: str, port: int, controller_port: int, libs: Path | None = None) -> list[str]:
    """Write the broker's config (ports of this start), format its storage the first time, return its argv."""
    folder = libs_dir(libs)
    java = java_binary()
    data_dir = state_dir / "kafka-data"
    config = state_dir / "kafka.properties"
    config.write_text(server_properties(host, port, controller_port, data_dir), encoding="utf-8")
    log4j = state_dir / "kafka-log4j2.yaml"
    log4j.write_text(_LOG4J, encoding="utf-8")
    classpath = f"{folder}/*"
    if not (data_dir / "meta.properties").exists():
        cluster_id = urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        done = subprocess.run(
            [java, "-cp", classpath, "kafka.tools.StorageTool", "format", "-t", cluster_id, "-c", str(config)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        if done.returncode != 0:
            raise KafkaBrokerError(f"formatting Kafka's storage in {data_dir} failed:\n{done.stdout}{done.stderr}")
    return [
        java,
        HEAP,
        "-XX:+UseG1GC",
        f"-Dlog4j2.configurationFile={log4j}",
        "-cp",
        classpath,
        "kafka.Kafka",
        str(config),
    ]
