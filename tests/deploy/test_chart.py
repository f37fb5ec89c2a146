"""The Helm chart, offline: `helm lint --strict` and `helm template` for the default values and the value sets in
helm/windjoin/ci/, every rendered manifest valid for Kubernetes 1.30–1.34 (`kubernetes-validate --strict`; CRD
kinds checked structurally), bad values refused by values.schema.json with a message naming the key, and k8s/
equal to the chart rendered with its defaults."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import kubernetes_validate
import pytest
import yaml
from kubernetes_validate.utils import all_versions

from tests.support.chart import CHART, REQUIRED_VALUES, ROOT, VALUE_SETS, refusal, render, run_helm, values_args
from windjoin.operators.spec import parse_spec

# Every version in 1.30–1.34 that the installed kubernetes-validate ships schemas for.
K8S_VERSIONS = [v for v in ("1.30.0", "1.31.0", "1.32.0", "1.33.0", "1.34.0") if v in all_versions()]


def test_at_least_three_value_sets_besides_the_defaults():
    assert {"external-redis", "strimzi", "autoscaling"} <= set(VALUE_SETS)
    assert K8S_VERSIONS, "kubernetes-validate ships no schemas for 1.30-1.34"


@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_helm_lint_strict(helm, name):
    done = run_helm(helm, "lint", "--strict", str(CHART), *values_args(name))
    assert done.returncode == 0, done.stdout + done.stderr


def _check_crd(doc: dict) -> None:
    """Structural checks for custom resources kubernetes-validate has no schema for."""
    kind, spec = doc["kind"], doc["spec"]
    assert doc["metadata"]["name"] and len(doc["metadata"]["name"]) <= 63
    if kind == "ServiceMonitor":
        assert doc["apiVersion"] == "monitoring.coreos.com/v1"
        assert spec["selector"]["matchLabels"] and spec["endpoints"]
        assert all(e["port"] and e["path"].startswith("/") for e in spec["endpoints"])
    elif kind == "PodMonitor":
        assert doc["apiVersion"] == "monitoring.coreos.com/v1"
        assert spec["selector"]["matchLabels"] and spec["podMetricsEndpoints"]
    elif kind == "Kafka":
        assert doc["apiVersion"] == "kafka.strimzi.io/v1beta2"
        assert doc["metadata"]["annotations"]["strimzi.io/kraft"] == "enabled"
        assert any(listener["port"] == 9092 for listener in spec["kafka"]["listeners"])
    elif kind == "KafkaNodePool":
        assert doc["apiVersion"] == "kafka.strimzi.io/v1beta2"
        assert doc["metadata"]["labels"]["strimzi.io/cluster"]
        assert spec["replicas"] >= 1 and set(spec["roles"]) <= {"controller", "broker"}
    else:
        pytest.fail(f"unexpected custom resource kind {kind}")


CRD_KINDS = {"ServiceMonitor", "PodMonitor", "Kafka", "KafkaNodePool"}


@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_rendered_manifests_pass_kubernetes_validate_strict(helm, name):
    docs = render(helm, name)
    # The executor pod template Spark reads from the spec ConfigMap is a manifest too.
    spec_cm = next(d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith("-spec"))
    docs.append(yaml.safe_load(spec_cm["data"]["executor-pod-template.yaml"]))
    for doc in docs:
        if doc["kind"] in CRD_KINDS:
            _check_crd(doc)
            continue
        for version in K8S_VERSIONS:
            try:
                kubernetes_validate.validate(doc, version, strict=True)
            except kubernetes_validate.ValidationError as err:
                pytest.fail(f"{name}: {doc['kind']}/{doc['metadata'].get('name')} on {version}: {err.message}")


@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_rendered_spec_is_a_valid_windjoin_spec(helm, name):
    docs = render(helm, name)
    cm = next(d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith("-spec"))
    spec = parse_spec(yaml.safe_load(cm["data"]["spec.yaml"]))
    assert spec.checkpoint and spec.sinks.parquet and spec.sinks.redis
    assert all(s.topic for s in spec.streams.values())


def test_value_sets_render_what_they_switch_on(helm):
    kinds = {name: {(d["kind"], d["metadata"]["name"]) for d in render(helm, name)} for name in VALUE_SETS}
    default = kinds["default"]
    assert ("StatefulSet", "wj-windjoin-redis") in default and ("PersistentVolumeClaim", "wj-windjoin-data") in default
    assert not {k for k, _ in default} & (CRD_KINDS | {"HorizontalPodAutoscaler"})
    controller = {k for k, n in default if n.endswith("-controller")}
    assert not controller & {"Deployment", "Role", "ServiceAccount"}, "the controller must be off by default"
    assert not any(k == "StatefulSet" for k, _ in kinds["external-redis"])
    assert {("Kafka", "wj-windjoin-kafka"), ("ServiceMonitor", "wj-windjoin-proxy")} <= kinds["strimzi"]
    assert ("HorizontalPodAutoscaler", "wj-windjoin-proxy") in kinds["autoscaling"]
    assert {("Deployment", "wj-windjoin-controller"), ("Role", "wj-windjoin-controller")} <= kinds["controller"]
    assert ("PodMonitor", "wj-windjoin") in kinds["controller"]


def test_driver_runs_spark_in_client_mode_on_kubernetes(helm):
    docs = render(helm, "default")
    driver = next(d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == "wj-windjoin-driver")
    args = driver["spec"]["template"]["spec"]["containers"][0]["args"]
    conf = dict(a.removeprefix("--spark-conf=").split("=", 1) for a in args if a.startswith("--spark-conf="))
    assert args[:2] == ["windjoin", "run"] and "--spark-master=k8s://https://kubernetes.default.svc:443" in args
    assert conf["spark.driver.host"] == "wj-windjoin-driver.streams.svc"
    headless = next(d for d in docs if d["kind"] == "Service" and d["metadata"]["name"] == "wj-windjoin-driver")
    assert headless["spec"]["clusterIP"] == "None"
    assert {p["port"] for p in headless["spec"]["ports"]} >= {int(conf["spark.driver.port"]), 7079}
    role = next(d for d in docs if d["kind"] == "Role" and d["metadata"]["name"] == "wj-windjoin-driver")
    pods = next(r for r in role["rules"] if "pods" in r["resources"])
    assert {"create", "delete", "list", "watch"} <= set(pods["verbs"])
    assert "--metrics-port=9108" in args
    assert conf["spark.authenticate.secret.file"] == "/var/run/secrets/windjoin/spark/secret"


def test_single_node_values_run_spark_locally_and_monitors_send_the_proxy_token(helm):
    docs = render(helm, "single-node")
    driver = next(d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == "wj-windjoin-driver")
    args = driver["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--spark-master=local[2]" in args
    assert not any("secret.file" in a for a in args)  # Spark refuses a secret file outside Kubernetes mode
    [monitor] = [d for d in docs if d["kind"] == "PodMonitor"]
    auth = {e["port"]: e.get("authorization") for e in monitor["spec"]["podMetricsEndpoints"]}
    assert auth == {
        "metrics": None,
        "http": {"type": "Bearer", "credentials": {"name": "prometheus-proxy-token", "key": "token"}},
    }
    proxy = next(d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == "wj-windjoin-proxy")
    assert "--metrics=token" in proxy["spec"]["template"]["spec"]["containers"][0]["args"]


def test_job_args_name_options_that_windjoin_run_has(helm):
    from click.testing import CliRunner

    from windjoin.pipelines.cli.run import run

    help_text = CliRunner().invoke(run, ["--help"]).output
    for values in ("default", "controller"):
        docs = render(helm, values)
        driver = next(d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == "wj-windjoin-driver")
        args = driver["spec"]["template"]["spec"]["containers"][0]["args"]
        for arg in args:
            if arg.startswith("--"):
                assert arg.split("=")[0] in help_text, arg
        # with a controller the job follows its decisions (routing moves, spreads, shedding)
        assert any(a.startswith("--control-redis=redis://") for a in args) == (values == "controller"), args


def test_controller_args_name_options_that_windjoin_controller_has(helm):
    from click.testing import CliRunner

    from windjoin.pipelines.cli.controller import controller

    help_text = CliRunner().invoke(controller, ["--help"]).output
    docs = render(helm, "controller")
    deployment = next(d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"].endswith("controller"))
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[:2] == ["windjoin", "controller"]
    for arg in args:
        if arg.startswith("--"):
            assert arg.split("=")[0] in help_text, arg


def test_controller_config_renders_as_thresholds_windjoin_controller_accepts(helm):
    """The controller value set's `controller.config` reaches the pod as control.yaml, which the controller's own
    validation accepts with every key kept; the Deployment reads it with --config."""
    from windjoin.operators.control.config import parse_control_config

    docs = render(helm, "controller")
    spec_map = next(d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith("-spec"))
    values = yaml.safe_load((CHART / "ci" / "controller-values.yaml").read_text())["controller"]["config"]
    rendered = yaml.safe_load(spec_map["data"]["control.yaml"])
    assert rendered == values
    config = parse_control_config(rendered)
    assert config.memory.enabled and config.utilisation.capacity == 50000
    deployment = next(d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"].endswith("controller"))
    assert "--config=/etc/windjoin/control.yaml" in deployment["spec"]["template"]["spec"]["containers"][0]["args"]


def _redis_statefulset(helm: str, name: str) -> dict:
    docs = render(helm, name)
    return next(d for d in docs if d["kind"] == "StatefulSet" and d["metadata"]["name"] == "wj-windjoin-redis")


def test_redis_keeps_an_append_only_file_on_a_volume_by_default(helm):
    """A restarted Redis must come back with its results, commit marks and feed: by default it writes an
    append-only file (fsync every second) to /data, a volume claimed per replica that outlives the pod."""
    redis = _redis_statefulset(helm, "default")
    [container] = redis["spec"]["template"]["spec"]["containers"]
    args = container["args"]
    options = dict(zip(args[::2], args[1::2], strict=True))
    assert options["--appendonly"] == "yes" and options["--appendfsync"] == "everysec" and options["--dir"] == "/data"
    [claim] = redis["spec"]["volumeClaimTemplates"]
    assert claim["metadata"]["name"] == "redis-data" and claim["spec"]["resources"]["requests"]["storage"] == "1Gi"
    assert {"name": "redis-data", "mountPath": "/data"} in container["volumeMounts"]
    volumes = {v["name"] for v in redis["spec"]["template"]["spec"]["volumes"]}
    assert "redis-data" not in volumes  # no emptyDir shadowing the claim
    strict = _redis_statefulset(helm, "strimzi")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert strict[strict.index("--appendfsync") + 1] == "always"
    # switched off (the autoscaling value set): no append-only file, an emptyDir, no claim
    volatile = _redis_statefulset(helm, "autoscaling")
    assert volatile["spec"]["template"]["spec"]["containers"][0]["args"][:2] == ["--appendonly", "no"]
    assert "volumeClaimTemplates" not in volatile["spec"]
    assert {"name": "redis-data", "emptyDir": {}} in volatile["spec"]["template"]["spec"]["volumes"]


def test_redis_memory_is_bounded_without_eviction(helm):
    """The bundled Redis stops at its maxmemory (under the container's limit) and refuses writes instead of evicting
    results; the spec's tier keeps at most maxBytes of them (a refused batch goes to Parquet, docs/streaming.md)."""
    for name in ("default", "autoscaling"):
        redis = _redis_statefulset(helm, name)
        [container] = redis["spec"]["template"]["spec"]["containers"]
        args = container["args"]
        options = dict(zip(args[::2], args[1::2], strict=True))
        assert options["--maxmemory"] == "768mb" and options["--maxmemory-policy"] == "noeviction"
        assert container["resources"]["limits"]["memory"] == "1Gi"
    docs = render(helm, "default")
    config = next(d for d in docs if d["kind"] == "ConfigMap" and "spec.yaml" in d.get("data", {}))
    assert yaml.safe_load(config["data"]["spec.yaml"])["sinks"]["redis"]["max_bytes"] == 268435456


BAD_VALUES = [
    (["--set", "redis.persistence.appendfsync=no"], "/redis/persistence/appendfsync"),
    (["--set", "controller.config.colour.x=1"], "/controller/config"),
    (["--set", "controller.epochSeconds=0"], "/controller/epochSeconds"),
    (["--set", "redis.bundled=false"], "/redis/url"),
    (["--set", "redis.bundled=false", "--set", "redis.url=http://cache:6379"], "/redis/url"),
    (["--set", "kafka.bootstrap=kafka"], "/kafka/bootstrap"),
    (["--set", "join.executors.memory=2GB"], "/join/executors/memory"),
    (["--set", "proxy.autoscaling.enabled=yes"], "/proxy/autoscaling/enabled"),
    (["--set", "storage.type=s3"], "/storage/type"),
    (["--set", "storage.type=objectStore"], "/storage/objectStore"),
    (["--set", "proxy.replica=2"], "'replica' not allowed"),
    (["--set", "join.sparkConf.executor.memory=1g"], "'executor' not allowed"),
    (["--set", "spec.tasks=null"], "/spec"),
    (["--set", "monitoring.serviceMonitor.interval=often"], "/monitoring/serviceMonitor/interval"),
    (
        ["--set", "controller.replicas=2", "--set", "controller.leaderElection.enabled=false"],
        "/controller/leaderElection/enabled",
    ),
    (["--set", "controller.leaderElection.leaseDuration=0"], "/controller/leaderElection/leaseDuration"),
]


@pytest.mark.parametrize(("args", "where"), BAD_VALUES, ids=[" ".join(a[1::2]) for a, _ in BAD_VALUES])
def test_bad_values_are_refused_with_a_message_naming_the_key(helm, args, where):
    done = run_helm(helm, "template", "wj", str(CHART), *args)
    assert done.returncode != 0
    assert "values don't meet the specifications of the schema" in done.stderr
    assert where in done.stderr, done.stderr


def test_controller_replicas_elect_a_leader_through_a_lease(helm):
    """The controller value set (2 replicas): every replica runs `windjoin controller --leader-election` with the
    Lease name, its identity and namespace from the downward API in the env variables the CLI reads, and may
    create Leases and get/update only that one."""
    from windjoin.pipelines.cli.controller import controller

    docs = render(helm, "controller")
    deployment = next(
        d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == "wj-windjoin-controller"
    )
    assert deployment["spec"]["replicas"] == 2
    pod = deployment["spec"]["template"]["spec"]
    [container] = pod["containers"]
    args = container["args"]
    assert "--leader-election" in args and "--lease-name=wj-windjoin-controller" in args
    assert {"--lease-duration=15", "--lease-renew-deadline=10", "--lease-retry-period=2"} <= set(args)
    env = {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"] for e in container["env"] if "valueFrom" in e}
    envvars = {p.name: p.envvar for p in controller.params}
    assert env[envvars["lease_identity"]] == "metadata.name"
    assert env[envvars["lease_namespace"]] == "metadata.namespace"
    role = next(d for d in docs if d["kind"] == "Role" and d["metadata"]["name"] == "wj-windjoin-controller")
    rules = {tuple(r["verbs"]): r for r in role["rules"]}
    assert rules[("create",)]["resources"] == ["leases"] and "resourceNames" not in rules[("create",)]
    assert rules[("get", "update")]["resourceNames"] == ["wj-windjoin-controller"]
    assert all(r["apiGroups"] == ["coordination.k8s.io"] for r in role["rules"])
    binding = next(d for d in docs if d["kind"] == "RoleBinding" and d["metadata"]["name"] == "wj-windjoin-controller")
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"][0]["name"] == pod["serviceAccountName"]
    single = render(
        helm, "controller", "--set", "controller.replicas=1", "--set", "controller.leaderElection.enabled=false"
    )
    args = next(d for d in single if d["kind"] == "Deployment" and d["metadata"]["name"].endswith("controller"))[
        "spec"
    ]["template"]["spec"]["containers"][0]["args"]
    assert not any(a.startswith("--lease") or a == "--leader-election" for a in args)


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ("controller.leaderElection.renewDeadline=14", "controller.leaderElection.renewDeadline: 14 leaves 1 s"),
        ("controller.leaderElection.retryPeriod=10", "controller.leaderElection.retryPeriod: 10 must be below"),
    ],
)
def test_lease_timings_without_a_margin_are_refused(helm, setting, message):
    stderr = refusal(helm, REQUIRED_VALUES, "--set", "controller.enabled=true", "--set", setting)
    assert message in stderr, stderr


def test_k8s_manifests_equal_the_chart_rendered_with_defaults(helm, tmp_path):
    out = tmp_path / "windjoin.yaml"
    subprocess.run(["bash", str(ROOT / "scripts" / "render_k8s.sh"), str(out)], check=True, cwd=ROOT)
    committed = (ROOT / "k8s" / "windjoin.yaml").read_text()
    assert committed == out.read_text(), "k8s/windjoin.yaml is stale: run scripts/render_k8s.sh"


def test_kubernetes_validate_cli_accepts_k8s_manifests():
    cli = shutil.which("kubernetes-validate", path=str(Path(__import__("sys").executable).parent))
    assert cli, "kubernetes-validate is in the dev extras"
    for version in K8S_VERSIONS:
        done = subprocess.run(
            [cli, "--strict", "-k", version, "--quiet", str(ROOT / "k8s" / "windjoin.yaml")],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stdout + done.stderr
