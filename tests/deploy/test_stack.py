"""The chart's processes run from the built image (podman), watched by a real Prometheus.

The chart is rendered for one node (helm/windjoin/ci/single-node-values.yaml, plus this test's ports, broker,
proxy token and a 1 s window) and every workload it defines runs as a container from `localhost/windjoin`
(scripts/build_image.sh): the join driver (Spark local[2]), the controller, the query proxy, and Redis (the chart's
StatefulSet with its ACL init container, from a small Debian image with redis-server, since no registry serves
`redis:7.4-alpine`), with commands, arguments, environment, config files, Secrets, volumes and security settings
taken from the rendered pod specs (tests/deploy/pod_runner.py says which fields it maps and which not). A Tansu
broker runs in a container too. Events are produced from the host; the results read from the proxy over HTTP
equal the brute-force oracle, also after the driver's container was killed with SIGKILL mid-run and started again
(nothing lost, nothing twice).

Debian's prometheus scrapes the pods the chart's PodMonitor selects (driver, controller, proxy; its ports, paths
and interval), and every expression of every Grafana dashboard panel is queried from its HTTP API: each returns
data, except those listed in EXPECTED_EMPTY with the reason. The test prints every panel and its status.

The image is built on first use (scripts/build_image.sh, which installs podman as root with apt-get when
missing); skipped only where podman is absent and cannot be installed.
"""

from __future__ import annotations

import base64
import json
import math
import random
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.deploy.pod_runner import UNMAPPED, PodRunner, load_manifests, podman
from tests.pipelines.pipeline_helpers import produce_events
from windjoin.connectors.kafka.admin import create_topics
from windjoin.connectors.kafka.producer import produce
from windjoin.connectors.local.processes import free_port
from windjoin.connectors.local.services import tansu_binary
from windjoin.connectors.results.result_query import MAX_LIMIT
from windjoin.operators.testing.oracle import as_multiset, oracle_join
from windjoin.pipelines.proxy.tokens import token_hash

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "helm" / "windjoin"
CONTAINERS_CONF = ROOT / ".tools" / "containers.conf"
RELEASE, NAMESPACE = "wj", "windjoin"
FULL = f"{RELEASE}-windjoin"
DEPS_IMAGE = "localhost/windjoin-stack-deps:1"
TOKEN = "wj-stack-test-token"
PROMETHEUS_TOKEN = "wj-stack-prometheus-token"  # in the Secret the single-node values name
TOKENS = {"tester": TOKEN, "prometheus": PROMETHEUS_TOKEN}
EVENT_AGE_MS = 90_000  # events start this far behind the wall clock: production delays land in the histogram's range
WAVE = 1200  # events per wave; the driver is killed after the first
WINDOW_MS = 1000
SCRAPE_S = 5
DEPS_CONTAINERFILE = """\
FROM localhost/windjoin-base:bookworm
RUN apt-get update && apt-get install -y --no-install-recommends redis-server && rm -rf /var/lib/apt/lists/*
COPY tansu /usr/local/bin/tansu
ENTRYPOINT ["redis-server"]
"""
# Panels whose metric appears only under a condition this run does not create (the rest must return data).
# Panels showing what the test made happen: their value must be above 0.
TRIGGERED = {
    "sum by (reason) (rate(windjoin_job_dead_letters_total[5m]))": "one record that is not JSON",
    "sum(rate(windjoin_job_pairs_total[5m]))": "pairs joined",
    "sum by (kind) (rate(windjoin_proxy_rows_served_total[5m]))": "rows served over HTTP",
}
EXPECTED_EMPTY = {
    'sum(rate(windjoin_proxy_queries_total{status=~"5.."}[5m]))': "only after the proxy answered 5xx; none here",
}


@pytest.fixture(scope="module")
def podman_ready(windjoin_image, monkeypatch_module) -> None:
    # windjoin_image (conftest) builds the image on first use: from empty storage ~5 min, unchanged seconds.
    monkeypatch_module.setenv("CONTAINERS_CONF", str(CONTAINERS_CONF))
    ctx = ROOT / ".tools" / "stack-deps"
    ctx.mkdir(parents=True, exist_ok=True)
    (ctx / "Containerfile").write_text(DEPS_CONTAINERFILE)
    shutil.copy(tansu_binary(), ctx / "tansu")
    podman("build", "--network", "host", "--quiet", "-t", DEPS_IMAGE, str(ctx))


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as mp:
        yield mp


def _render(helm: str, values: dict[str, Any], tmp: Path) -> str:
    path = tmp / "test-values.yaml"
    path.write_text(yaml.safe_dump(values))
    done = subprocess.run(
        [helm, "template", RELEASE, str(CHART), "--namespace", NAMESPACE]
        + ["-f", str(CHART / "ci" / "single-node-values.yaml"), "-f", str(path)],
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout


def _events(n: int, start: int, seed: int, base_ts: int) -> list[dict]:
    """Both streams in event-time order, two events per millisecond tick (ties), keys 0-7 (skewed to 0)."""
    rng = random.Random(seed)
    out = []
    for i in range(start, start + n):
        stream = rng.choice("RS")
        k = 0 if rng.random() < 0.3 else rng.randrange(8)
        event = {"stream": stream, "k": k, "ts": base_ts + (i // 2) * 20}
        event["x" if stream == "R" else "a"] = rng.randrange(1000)
        out.append(event)
    return out


def _query_all(proxy: str, base_ts: int) -> list[dict]:
    rows, cursor = [], None
    while True:
        params = {"from": base_ts - 10_000, "to": base_ts + 10_000_000, "limit": MAX_LIMIT}
        if cursor:
            params["cursor"] = cursor
        answer = httpx.get(f"{proxy}/v1/tasks/eq/results", params=params, headers={"Authorization": f"Bearer {TOKEN}"})
        answer.raise_for_status()
        page = answer.json()
        rows += page["rows"]
        if not page["next_cursor"]:
            return rows
        cursor = page["next_cursor"]


def _pairs(rows: list[dict]) -> list[tuple]:
    return [("eq", row["R"], row["S"]) for row in rows]


def _wait_for(proxy: str, base_ts: int, count: int, timeout_s: float) -> list[dict]:
    deadline = time.monotonic() + timeout_s
    while True:
        rows = _query_all(proxy, base_ts)
        if len(rows) >= count or time.monotonic() > deadline:
            return rows
        time.sleep(2)


def _token_secret(manifests: list[dict]) -> dict[str, Any]:
    [monitor] = [d for d in manifests if d["kind"] == "PodMonitor"]
    [credentials] = [
        e["authorization"]["credentials"] for e in monitor["spec"]["podMetricsEndpoints"] if "authorization" in e
    ]
    data = {credentials["key"]: base64.b64encode(PROMETHEUS_TOKEN.encode()).decode()}
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": credentials["name"]}, "data": data}


def _prometheus_config(manifests: list[dict], runner: PodRunner, tmp: Path) -> dict[str, Any]:
    """Scrape jobs from the rendered PodMonitor: for each endpoint, the pods it selects that name its port, and the
    bearer token from the Secret its `authorization` names."""
    jobs = []
    for monitor in (d for d in manifests if d["kind"] == "PodMonitor"):
        selector = monitor["spec"]["selector"]["matchLabels"]
        for i, endpoint in enumerate(monitor["spec"]["podMetricsEndpoints"]):
            targets = []
            for w in runner.workloads.values():
                if not selector.items() <= w.labels.items():
                    continue
                named = [p for c in w.pod["containers"] for p in c.get("ports", [])]
                ports = [p for p in named if p.get("name") == endpoint["port"]]
                labels = {"namespace": NAMESPACE, "pod": w.pod_name, "container": w.pod["containers"][0]["name"]}
                targets += [{"targets": [f"127.0.0.1:{p['containerPort']}"], "labels": labels} for p in ports]
            job = {}
            if "authorization" in endpoint:
                credentials = endpoint["authorization"]["credentials"]
                token = tmp / f"prometheus-token-{i}"
                token.write_bytes(runner.secret_value(credentials["name"], credentials["key"]))
                job["authorization"] = {"type": endpoint["authorization"]["type"], "credentials_file": str(token)}
            jobs.append(
                job
                | {
                    "job_name": f"podMonitor/{NAMESPACE}/{monitor['metadata']['name']}/{i}",
                    "scrape_interval": endpoint["interval"],
                    "metrics_path": endpoint["path"],
                    "static_configs": targets,
                    "relabel_configs": [
                        {"target_label": "job", "replacement": f"{NAMESPACE}/{monitor['metadata']['name']}"},
                        {"target_label": "endpoint", "replacement": endpoint["port"]},
                    ],
                }
            )
    return {"global": {"evaluation_interval": "15s"}, "scrape_configs": jobs}


def _prom_query(url: str, expr: str) -> list[dict]:
    query = urllib.parse.urlencode({"query": expr})
    with urllib.request.urlopen(f"{url}/api/v1/query?{query}", timeout=10) as answer:
        body = json.load(answer)
    assert body["status"] == "success", body
    return body["data"]["result"]


def _wait_for_prom(url: str, expr: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not _prom_query(url, expr):
        assert time.monotonic() < deadline, f"Prometheus returned nothing for {expr} in {timeout_s} s"
        time.sleep(1)


@dataclass
class StackRun:
    rows_before_kill: int
    first_wave_pairs: int
    rows: list[dict]
    expected: list[tuple]
    prometheus: str
    targets: list[dict]
    manifests: list[dict]


@pytest.fixture(scope="module")
def stack(podman_ready, helm, tmp_path_factory) -> StackRun:
    tmp = tmp_path_factory.mktemp("stack")
    for port in (6379,):  # the chart's fixed ports that the containers bind on the host's network
        with socket.socket() as s:
            assert s.connect_ex(("127.0.0.1", port)) != 0, f"port {port} is taken: the chart's Redis needs it"
    broker_port, proxy_port, prom_port = free_port(), free_port(), free_port()
    values = {
        "kafka": {"bootstrap": f"127.0.0.1:{broker_port}"},
        "join": {"metricsPort": free_port()},
        "controller": {"metricsPort": free_port()},
        "proxy": {
            "port": proxy_port,
            "auth": {"tokens": [{"name": n, "sha256": token_hash(t), "tasks": "*"} for n, t in TOKENS.items()]},
        },
        "spec": {"window": {"kind": "time", "size_ms": WINDOW_MS}, "max_offsets_per_trigger": 300},  # several batches
        "redis": {"image": dict(zip(("repository", "tag"), DEPS_IMAGE.rsplit(":", 1), strict=True))},
        "monitoring": {"podMonitor": {"interval": f"{SCRAPE_S}s"}},  # several scrapes within the run
    }
    manifests = load_manifests(_render(helm, values, tmp))
    manifests.append(_token_secret(manifests))  # created by the user, as the values say
    [config_map] = [d for d in manifests if d["kind"] == "ConfigMap" and d["metadata"]["name"] == f"{FULL}-spec"]
    spec = yaml.safe_load(config_map["data"]["spec.yaml"])
    runner = PodRunner(manifests, tmp / "volumes", NAMESPACE)
    broker = "wj-stack-broker"
    prometheus = None
    podman("rm", "--force", broker, check=False)
    try:
        url = f"tcp://127.0.0.1:{broker_port}"
        podman(
            "run", "--detach", "--name", broker, "--network", "host", "--user", "65534:65534", "--read-only",
            "--entrypoint", "/usr/local/bin/tansu", DEPS_IMAGE,
            "broker", "--listener-url", url, "--advertised-listener-url", url, "--storage-engine", "memory://tansu/",
        )  # fmt: skip
        bootstrap = f"127.0.0.1:{broker_port}"
        topics = [s["topic"] for s in spec["streams"].values()]
        deadline = time.monotonic() + 60
        while True:
            try:
                create_topics(bootstrap, topics, 2, exist_ok=True)
                create_topics(bootstrap, [spec["dead_letter_topic"]], 1, exist_ok=True)
                break
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(1)
        for workload in (f"{FULL}-redis", f"{FULL}-proxy", f"{FULL}-controller", f"{FULL}-driver"):
            runner.start(workload)
        for workload in (f"{FULL}-redis", f"{FULL}-controller", f"{FULL}-driver"):
            runner.wait_ready(workload)
        config = tmp / "prometheus.yml"
        config.write_text(yaml.safe_dump(_prometheus_config(manifests, runner, tmp)))
        prom_url = f"http://127.0.0.1:{prom_port}"
        prometheus = subprocess.Popen(
            ["prometheus", f"--config.file={config}", f"--storage.tsdb.path={tmp / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{prom_port}"],
            stdout=subprocess.DEVNULL, stderr=(tmp / "prometheus.log").open("w"),
        )  # fmt: skip

        proxy = f"http://127.0.0.1:{proxy_port}"
        base_ts = int(time.time() * 1000) - EVENT_AGE_MS
        first, second = _events(WAVE, 0, 1, base_ts), _events(WAVE, WAVE, 2, base_ts)
        produce_events(bootstrap, spec, first, topic_partitions=2)
        expected, late = oracle_join(spec, first + second)
        assert not late
        first_only, _ = oracle_join(spec, first)
        runner.wait_ready(f"{FULL}-proxy")  # ready once the job has written Parquet
        # kill once part of the first wave's results are committed, not all
        before = len(_wait_for(proxy, base_ts, max(1, len(first_only) // 4), 300))
        assert before > 0, runner.logs(f"{FULL}-driver")[-4000:]
        runner.kill(f"{FULL}-driver")
        produce_events(bootstrap, spec, second, topic_partitions=2)  # while the driver is down
        runner.start(f"{FULL}-driver")
        restarted = time.time()
        runner.wait_ready(f"{FULL}-driver")
        rows = _wait_for(proxy, base_ts, len(expected), 420)
        # one record that is not JSON: dead-lettered, never joined. Sent once Prometheus holds the restarted
        # driver's counter at 0, so the dead-letter panel's rate() sees it rise within one process.
        _wait_for_prom(prom_url, f"timestamp(windjoin_job_dead_letters_total) > {restarted}", 120)
        produce(bootstrap, spec["streams"]["R"]["topic"], [(b"0", b"not json", base_ts + WAVE * 10)])
        _wait_for_prom(prom_url, "sum(rate(windjoin_job_dead_letters_total[5m])) > 0", 120)
        time.sleep(8)  # a few more batches: nothing arrives twice later
        rows = _query_all(proxy, base_ts)
        # a continuous query: the proxy's stream metrics
        with httpx.stream(
            "GET", f"{proxy}/v1/tasks/eq/stream", params={"from": 0}, headers={"Authorization": f"Bearer {TOKEN}"},
            timeout=10,
        ) as feed:  # fmt: skip
            for _ in feed.iter_lines():
                break
        time.sleep(12)  # the controller's next epochs, a few scrapes
        targets = json.load(urllib.request.urlopen(f"{prom_url}/api/v1/targets", timeout=10))["data"]["activeTargets"]
        yield StackRun(before, len(first_only), rows, expected, prom_url, targets, manifests)
    finally:
        if prometheus is not None:
            prometheus.terminate()
            prometheus.wait(30)
        runner.stop_all()
        podman("rm", "--force", "--time", "2", broker, check=False)
        runner.remove_files()


def test_the_stack_joins_exactly_and_is_watched(stack, capsys):
    """One test over the one stack run: the chart binds Redis' port 6379 on the host, so two test workers must never
    each start a stack (pytest-xdist may hand a module's tests to both). Every check runs; their failures together."""
    failures = []
    for check in (
        _results_equal_the_oracle_across_a_driver_kill,
        _prometheus_scrapes_the_pods_the_pod_monitor_selects,
        _every_dashboard_panel_returns_data_from_prometheus,
    ):
        try:
            check(stack, capsys)
        except AssertionError as err:
            failures.append(f"{check.__name__}: {err}")
    assert not failures, "\n".join(failures)


def _results_equal_the_oracle_across_a_driver_kill(stack: StackRun, capsys: pytest.CaptureFixture) -> None:
    with capsys.disabled():
        print(
            f"\npairs: {len(stack.expected)} expected, {len(stack.rows)} read from the proxy; the driver was "
            f"killed with {stack.rows_before_kill} committed ({stack.first_wave_pairs} in the first wave)"
        )
    assert 0 < stack.rows_before_kill < len(stack.expected)
    got = as_multiset(_pairs(stack.rows))
    want = as_multiset(stack.expected)
    lost, extra = sum((want - got).values()), sum((got - want).values())
    assert got == want, f"lost {lost}, extra {extra} of {len(stack.expected)}"


def _prometheus_scrapes_the_pods_the_pod_monitor_selects(stack: StackRun, _capsys: pytest.CaptureFixture) -> None:
    up = {(t["labels"]["pod"], t["labels"]["endpoint"]): t["health"] for t in stack.targets}
    assert up == {
        (f"{FULL}-driver-stack", "metrics"): "up",
        (f"{FULL}-controller-stack", "metrics"): "up",
        (f"{FULL}-proxy-stack", "http"): "up",
    }


def _panels() -> list[tuple[str, str, str]]:
    out = []
    for path in sorted((ROOT / "dashboards").glob("*.json")):
        dashboard = json.loads(path.read_text())
        for panel in dashboard["panels"]:
            for p in [panel, *panel.get("panels", [])]:
                out += [(path.stem, p["title"], t["expr"]) for t in p.get("targets", [])]
    return out


def _every_dashboard_panel_returns_data_from_prometheus(stack: StackRun, capsys: pytest.CaptureFixture) -> None:
    statuses, peaks = [], {}
    for dashboard, title, expr in _panels():
        result = _prom_query(stack.prometheus, expr.replace("$slot", ".*"))
        values = [float(sample["value"][1]) for sample in result]
        if any(math.isfinite(v) for v in values):  # NaN: a quantile or ratio over no observations
            peaks[expr] = max(v for v in values if math.isfinite(v))
            status = f"data ({len(result)} series, max {peaks[expr]:.3g})"
        elif expr in EXPECTED_EMPTY:
            status = f"expected empty: {EXPECTED_EMPTY[expr]}"
        else:
            status = "NO DATA"
        statuses.append((dashboard, title, expr, status))
    with capsys.disabled():
        print(f"\nrunner leaves unmapped: {', '.join(UNMAPPED)}")
        for dashboard, title, expr, status in statuses:
            print(f"{dashboard:11} | {title:38} | {status:40} | {expr}")
    missing = [(d, t, e) for d, t, e, s in statuses if s == "NO DATA"]
    assert not missing, missing
    flat = {expr: why for expr, why in TRIGGERED.items() if not peaks.get(expr, 0) > 0}
    assert not flat, f"panels that should show what the test did: {flat}"
    unexpected = [e for e in EXPECTED_EMPTY if e not in {e for *_, e, s in statuses if s.startswith("expected")}]
    assert not unexpected, f"listed as expected-empty but returned data (or no panel queries it): {unexpected}"
