"""The start's login check leaves a broker that is down or hangs to the job's retries: only a refused login, a
failed handshake or a listener that drops the client at once is an error (those on a real broker:
test_kafka_sasl_tls.py)."""

from __future__ import annotations

import socket

from windjoin.connectors.kafka.login_check import check_login
from windjoin.connectors.kafka.security import PLAINTEXT
from windjoin.connectors.local.processes import free_port


def test_a_closed_port_passes():
    check_login(f"127.0.0.1:{free_port()}", PLAINTEXT, timeout_s=1.0)


def test_a_listener_that_never_answers_passes():
    """A hung broker (SIGSTOP) still takes TCP connections in the kernel: not a protocol mismatch."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(16)
        check_login(f"127.0.0.1:{server.getsockname()[1]}", PLAINTEXT, timeout_s=1.0)
