"""A refused Kafka login or TLS handshake, told in the spec's words before the job starts.

librdkafka reports a refused SASL login, a failed TLS handshake or a plaintext client at a TLS listener only to
its error callback; the client's next metadata call then fails as a bare "Broker transport failure", which names
nothing to fix. `check_login` connects once as the job's clients will and raises `KafkaLoginError` naming the
`kafka:` keys involved: a refused login, a failed handshake, or a listener that takes the connection and drops the
client at once (it speaks TLS or SASL where the spec says plaintext, or the other way round). A broker that does
not answer, or hangs, is left to the job's own retries (it may be starting).
"""

from __future__ import annotations

import socket
import time

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient

from windjoin.connectors.kafka.security import KafkaSecurity

_REFUSALS = (KafkaError._AUTHENTICATION, KafkaError._SSL)


class KafkaLoginError(ValueError):
    """The broker refused the job's credentials or TLS settings; the message names the spec's keys."""


def check_login(bootstrap: str, security: KafkaSecurity, timeout_s: float = 5.0) -> None:
    """Raise KafkaLoginError when the brokers at `bootstrap` refuse `security` (see the module docstring)."""
    seen: list[tuple[float, KafkaError]] = []  # (seconds after the start, error), as the callback is served
    started = time.monotonic()
    config = {"bootstrap.servers": bootstrap, **security.client_config()}
    client = AdminClient({**config, "error_cb": lambda error: seen.append((time.monotonic() - started, error))})
    while time.monotonic() - started < timeout_s and not any(e.code() in _REFUSALS for _, e in seen):
        try:
            client.list_topics(timeout=0.5)
            return
        except KafkaException:
            client.poll(0.1)  # serves the error callback: errors are seen about when they happen
    # dropped at once (the handshake failed), not a broker that hangs: a stopped one still takes TCP connections
    dropped = any(
        at < timeout_s / 2 and e.code() in (KafkaError._ALL_BROKERS_DOWN, KafkaError._TRANSPORT) for at, e in seen
    )
    problem = _explained(bootstrap, security, [e for _, e in seen], dropped)
    if problem:
        raise KafkaLoginError(problem)


def _explained(bootstrap: str, security: KafkaSecurity, errors: list[KafkaError], dropped: bool) -> str | None:
    for error in errors:
        text = error.str()
        if error.code() == KafkaError._AUTHENTICATION:
            secret = (
                f"kafka.password_file {security.password_file}"
                if security.password_file
                else f"kafka.password_env {security.password_env}"
            )
            return (
                f"kafka: the broker at {bootstrap} refused the login of kafka.username {security.username!r} with "
                f"kafka.sasl_mechanism {security.sasl_mechanism} and the password in {secret}: check that user, "
                f"its password and the mechanism the broker enables ({text})"
            )
        if error.code() == KafkaError._SSL:
            return (
                f"kafka: the TLS handshake with {bootstrap} failed ({text}): kafka.ca_file "
                f"({security.ca_file or 'none: the system CAs'}) must hold the CA that signed the broker's "
                f"certificate, whose name must match the bootstrap address"
            )
    listening = [address for address in bootstrap.split(",") if dropped and _accepts(address)]
    if listening:  # a listener takes the connection, then drops the client at once: the handshake failed
        return (
            f"kafka: a listener answers at {', '.join(listening)} but not in kafka.security_protocol "
            f"{security.security_protocol}: set it to what the listener expects (SSL or SASL_SSL for a TLS "
            f"listener, with kafka.sasl_mechanism for SASL)"
        )
    return None


def _accepts(address: str, timeout_s: float = 2.0) -> bool:
    """Whether a TCP connection to host:port is taken."""
    host, _, port = address.strip().rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s):
            return True
    except (OSError, ValueError):
        return False
