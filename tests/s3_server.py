"""An S3-compatible server for the tests: moto's server mode (`moto_server`, from PyPI), one process per session on
a free loopback port, with a bucket per test.

The fixture `s3_env` points pyarrow (and any process the test starts, which inherits the environment) at it
through the variables a deployment would set: AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
AWS_REGION. `s3_bucket` yields a fresh bucket's URL, `s3://<bucket>`.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pyarrow.fs as pafs
import pytest

CREDENTIALS = {"AWS_ACCESS_KEY_ID": "windjoin-test", "AWS_SECRET_ACCESS_KEY": "windjoin-test-secret"}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="session")
def s3_endpoint(tmp_path_factory) -> Iterator[str]:
    """`moto_server` on loopback, its URL; stopped at the end of the session."""
    beside = Path(sys.executable).with_name("moto_server")  # this environment's, before any other on PATH
    binary = str(beside) if beside.exists() else shutil.which("moto_server") or "moto_server"
    port = _free_port()
    log = tmp_path_factory.mktemp("moto") / "moto.log"
    with log.open("wb") as out:
        proc = subprocess.Popen([binary, "-H", "127.0.0.1", "-p", str(port)], stdout=out, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"moto_server exited (code {proc.returncode}): {log.read_text()[-2000:]}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            break
        except OSError:
            if time.monotonic() > deadline:
                proc.kill()
                raise RuntimeError(f"moto_server did not listen on {port} in 60 s: {log.read_text()[-2000:]}") from None
            time.sleep(0.1)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@pytest.fixture
def s3_env(s3_endpoint, monkeypatch) -> dict[str, str]:
    """The environment naming the server and its credentials, set in this process for the test."""
    env = {**CREDENTIALS, "AWS_ENDPOINT_URL": s3_endpoint, "AWS_REGION": "us-east-1"}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_SHARED_CREDENTIALS_FILE", raising=False)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    return env


@pytest.fixture
def s3_bucket(s3_env) -> str:
    """A new bucket's URL, `s3://<bucket>`."""
    bucket = f"windjoin-{uuid.uuid4().hex[:12]}"
    fs, _ = pafs.FileSystem.from_uri(f"s3://{bucket}?allow_bucket_creation=true")
    fs.create_dir(bucket)
    assert os.environ["AWS_ENDPOINT_URL"] == s3_env["AWS_ENDPOINT_URL"]
    return f"s3://{bucket}"
