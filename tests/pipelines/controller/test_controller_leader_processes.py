"""Two real `windjoin controller --leader-election` processes through the official kubernetes client, against a
stand-in for the API server's Lease endpoints (HTTP, JSON, resourceVersion checks, 404/409 Status bodies) named
in a kubeconfig: one leads and decides, the other stands by; the leader stopped by SIGTERM releases the Lease and
the standby takes over and resumes from the recorded decision. The API server is a stand-in because none can run
here; test_leader_election.py's cluster test runs against a real one when a kubeconfig reaches it."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.support.controller_load import CONFIG, publish, spec_file
from windjoin.connectors.redis.client import ENV_PASSWORD_FILE
from windjoin.connectors.redis.control_decisions import DecisionStore

LEASES = re.compile(r"^/apis/coordination\.k8s\.io/v1/namespaces/([^/]+)/leases(?:/([^/?]+))?(?:\?.*)?$")


class LeaseServer(ThreadingHTTPServer):
    """Leases by (namespace, name) as JSON; every write bumps a global resourceVersion, a PUT with a stale one is
    409 Conflict, a second POST 409 AlreadyExists (as the API server answers)."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), LeaseHandler)
        self.leases: dict[tuple[str, str], dict] = {}
        self.version = 0
        self.lock = threading.Lock()
        self.requests: list[tuple[str, str]] = []


class LeaseHandler(BaseHTTPRequestHandler):
    server: LeaseServer

    def log_message(self, *args) -> None:  # quiet
        pass

    def _reply(self, code: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _status(self, code: int, reason: str, message: str) -> None:
        body = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": reason, "code": code}
        self._reply(code, {**body, "message": message})

    def _body(self) -> dict:
        return json.loads(self.rfile.read(int(self.headers["Content-Length"])))

    def _route(self, method: str) -> None:
        match = LEASES.match(self.path)
        if match is None:
            return self._status(404, "NotFound", f"no route {self.path}")
        ns, name = match.groups()
        srv = self.server
        with srv.lock:
            srv.requests.append((method, self.path))
            current = srv.leases.get((ns, name)) if name else None
            if method == "GET":
                if current is None:
                    return self._status(404, "NotFound", f'leases.coordination.k8s.io "{name}" not found')
                return self._reply(200, current)
            body = self._body()
            if method == "POST":
                name = body["metadata"]["name"]
                if (ns, name) in srv.leases:
                    return self._status(409, "AlreadyExists", f'leases.coordination.k8s.io "{name}" already exists')
            elif current is None:
                return self._status(404, "NotFound", f'leases.coordination.k8s.io "{name}" not found')
            elif body["metadata"].get("resourceVersion") != current["metadata"]["resourceVersion"]:
                return self._status(409, "Conflict", "the object has been modified; please apply your changes")
            srv.version += 1
            body["metadata"].update(namespace=ns, resourceVersion=str(srv.version))
            body.update(apiVersion="coordination.k8s.io/v1", kind="Lease")
            srv.leases[ns, name] = body
            return self._reply(201 if method == "POST" else 200, body)

    def do_GET(self) -> None:
        self._route("GET")

    def do_POST(self) -> None:
        self._route("POST")

    def do_PUT(self) -> None:
        self._route("PUT")


@pytest.fixture
def lease_server(tmp_path):
    server = LeaseServer()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    kubeconfig = tmp_path / "kubeconfig"
    url = f"http://127.0.0.1:{server.server_address[1]}"
    kubeconfig.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "stand-in", "cluster": {"server": url}}],
                "users": [{"name": "nobody", "user": {}}],
                "contexts": [{"name": "stand-in", "context": {"cluster": "stand-in", "user": "nobody"}}],
                "current-context": "stand-in",
            }
        )
    )
    yield server, kubeconfig
    server.shutdown()
    server.server_close()


def _start(args: list[str], pod: str, kubeconfig: Path, out: Path) -> subprocess.Popen:
    script = Path(sys.executable).with_name("windjoin")
    cli = [str(script)] if script.exists() else [sys.executable, "-m", "windjoin.pipelines"]
    env = {
        "PATH": "/usr/bin:/bin",
        "KUBECONFIG": str(kubeconfig),
        "POD_NAME": pod,
        "POD_NAMESPACE": "streams",
        "PYTHONUNBUFFERED": "1",
        # its Redis login, as a pod's environment names its mounted Secret (the session's embedded Redis)
        **{k: v for k, v in os.environ.items() if k == ENV_PASSWORD_FILE},
    }
    with out.open("wb") as sink:
        return subprocess.Popen([*cli, *args], stdout=sink, stderr=subprocess.STDOUT, env=env)


def _wait(predicate, what: str, outs: list[Path], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError(f"{what}:\n" + "\n---\n".join(p.read_text()[-2000:] for p in outs))


def test_two_controller_processes_one_leads_the_other_takes_over_on_sigterm(
    redis_url,
    namespace,
    tmp_path,
    lease_server,
):
    server, kubeconfig = lease_server
    config = tmp_path / "control.yaml"
    config.write_text(json.dumps(CONFIG))
    spec = spec_file(tmp_path, redis_url)
    args = ["controller", str(spec), "--config", str(config), "--namespace", namespace, "--epoch-s", "0.5"]
    args += ["--leader-election", "--lease-name", "wj-controller", "--lease-duration", "4"]
    args += ["--lease-renew-deadline", "2", "--lease-retry-period", "0.3"]
    publish(redis_url, namespace, range(4))
    outs = {pod: tmp_path / f"{pod}.out" for pod in ("controller-0", "controller-1")}
    procs = {}
    try:
        procs["controller-0"] = _start(args, "controller-0", kubeconfig, outs["controller-0"])
        decisions = DecisionStore(redis_url, namespace)

        def epoch() -> int:
            latest = decisions.latest()
            return int(latest["epoch"]) if latest else 0

        _wait(lambda: epoch() == 1, "controller-0 decided no epoch", list(outs.values()))
        procs["controller-1"] = _start(args, "controller-1", kubeconfig, outs["controller-1"])
        _wait(
            lambda: "is a candidate" in outs["controller-1"].read_text(), "controller-1 did not start", [*outs.values()]
        )
        time.sleep(2.0)  # several retry periods: controller-1 stays standby while controller-0 renews
        lease = server.leases["streams", "wj-controller"]
        assert lease["spec"]["holderIdentity"] == "controller-0"
        assert lease["spec"]["leaseDurationSeconds"] == 4 and lease["spec"]["leaseTransitions"] == 0
        assert "leads" not in outs["controller-1"].read_text()

        procs["controller-0"].send_signal(signal.SIGTERM)
        assert procs["controller-0"].wait(timeout=30) == 0
        assert "lease released" in outs["controller-0"].read_text()
        released_at = time.monotonic()
        _wait(lambda: "controller-1 leads" in outs["controller-1"].read_text(), "no takeover", list(outs.values()))
        assert time.monotonic() - released_at < 3.0, "the standby waited out the lease instead of taking it at once"
        lease = server.leases["streams", "wj-controller"]
        assert lease["spec"]["holderIdentity"] == "controller-1" and lease["spec"]["leaseTransitions"] == 1
        assert re.match(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}(Z|\+00:00)$", lease["spec"]["renewTime"])

        publish(redis_url, namespace, range(4, 8))
        _wait(lambda: epoch() == 2, "the new leader decided no epoch 2", list(outs.values()))
        assert "epoch 2: 4 batches" in outs["controller-1"].read_text()  # resumed at epoch 2, not a new epoch 1
        assert " batches, tau " not in outs["controller-1"].read_text().split("epoch 2:")[0]
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.terminate()
                proc.wait(timeout=30)
    lines0 = outs["controller-0"].read_text()
    assert "controller-0 leads (lease streams/wj-controller)" in lines0 and "epoch 1: 4 batches" in lines0
    assert server.leases["streams", "wj-controller"]["spec"].get("holderIdentity") is None  # released at the end
