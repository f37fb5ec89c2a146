"""The chart's object store (storage.type objectStore), offline: its credentials (a Secret as environment variables,
or a shared-credentials file mounted read-only) and its endpoint and region reach the pods that read or write it -
the job's driver and executors, the proxy - and no other; Hadoop's s3a:// checkpoint is set to the same; the
NetworkPolicies let exactly those pods reach it, at the endpoint's port; the admission policy lets executors
reference the credentials Secret and nothing more."""

from __future__ import annotations

import json

import pytest
import yaml

from tests.support.chart import (
    CHART,
    DRIVER,
    REQUIRED_VALUES,
    VALUE_SETS,
    bad_pods,
    cel_list,
    decide,
    render,
    run_helm,
    spark_conf,
    spark_executor_pod,
)

PEERS = [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "minio"}}}]
STORE = [
    "--set",
    "storage.type=objectStore",
    "--set",
    "storage.objectStore.checkpointUrl=s3a://bucket/checkpoint",
    "--set",
    "storage.objectStore.parquetUrl=s3://bucket/results",
    "--set-json",
    f"storage.objectStore.networkPeers={json.dumps(PEERS)}",
    "--set",
    "controller.enabled=true",  # present, to show it gets nothing
]
ENV_SECRET = ["--set", "storage.objectStore.credentialsSecret=s3-env"]
FILE_SECRET = [
    "--set",
    "storage.objectStore.credentialsFile.secret=s3-file",
    "--set",
    "storage.objectStore.credentialsFile.key=aws-credentials",
]
MINIO = [
    "--set",
    "storage.objectStore.endpoint=http://minio.minio.svc:9000",
    "--set",
    "storage.objectStore.port=9000",
    "--set",
    "storage.objectStore.region=eu-central-1",
]
USERS = ("driver", "executor", "proxy")
OTHERS = ("controller", "redis")
AWS_ENV = {"AWS_SHARED_CREDENTIALS_FILE", "AWS_ENDPOINT_URL", "AWS_REGION", "AWS_DEFAULT_REGION"}


def _pods(docs: list[dict]) -> dict[str, dict]:
    """Pod specs by component: the workloads' and the executors' pod template in the spec ConfigMap."""
    pods = {}
    for doc in docs:
        if doc["kind"] in ("Deployment", "StatefulSet"):
            labels = doc["spec"]["template"]["metadata"]["labels"]
            pods[labels["app.kubernetes.io/component"]] = doc["spec"]["template"]["spec"]
        elif doc["kind"] == "ConfigMap" and "executor-pod-template.yaml" in doc.get("data", {}):
            pods["executor"] = yaml.safe_load(doc["data"]["executor-pod-template.yaml"])["spec"]
    assert set(USERS + OTHERS) <= set(pods), sorted(pods)
    return pods


def _env(pod: dict) -> dict[str, str]:
    return {e["name"]: e.get("value") for c in pod["containers"] for e in c.get("env", [])}


def _secret_refs(pod: dict) -> set[str]:
    """Every Secret the pod references: volumes (projected ones too), env and envFrom."""
    names = set()
    for volume in pod.get("volumes", []):
        if "secret" in volume:
            names.add(volume["secret"]["secretName"])
        for source in volume.get("projected", {}).get("sources", []):
            if "secret" in source:
                names.add(source["secret"]["name"])
    for container in [*pod.get("initContainers", []), *pod["containers"]]:
        for env in container.get("env", []):
            ref = env.get("valueFrom", {}).get("secretKeyRef")
            if ref:
                names.add(ref["name"])
        names |= {s["secretRef"]["name"] for s in container.get("envFrom", []) if "secretRef" in s}
    return names


def _env_from(pod: dict) -> set[str]:
    return {s["secretRef"]["name"] for c in pod["containers"] for s in c.get("envFrom", []) if "secretRef" in s}


@pytest.mark.parametrize(("credentials", "secret"), [(ENV_SECRET, "s3-env"), (FILE_SECRET, "s3-file")])
def test_credentials_reach_the_driver_executors_and_proxy_only(helm, credentials, secret):
    pods = _pods(render(helm, "default", *STORE, *credentials))
    for component in USERS:
        assert secret in _secret_refs(pods[component]), component
    for component in OTHERS:
        pod = pods[component]
        assert secret not in _secret_refs(pod), component
        assert not AWS_ENV & set(_env(pod)), component
        assert "object-store" not in json.dumps(pod), component


def test_a_credentials_secret_is_the_environment_of_the_users(helm):
    pods = _pods(render(helm, "default", *STORE, *ENV_SECRET))
    for component in USERS:
        assert _env_from(pods[component]) == {"s3-env"}, component
        assert "AWS_SHARED_CREDENTIALS_FILE" not in _env(pods[component])
        assert not [v for v in pods[component]["volumes"] if v["name"] == "object-store-credentials"]


def test_a_credentials_file_is_mounted_read_only_and_named_by_the_env(helm):
    pods = _pods(render(helm, "default", *STORE, *FILE_SECRET))
    for component in USERS:
        pod = pods[component]
        [volume] = [v for v in pod["volumes"] if v.get("secret", {}).get("secretName") == "s3-file"]
        assert volume["secret"]["defaultMode"] in (0o400, 0o440), component  # owner and fsGroup read, no one writes
        [item] = volume["secret"]["items"]
        assert item["key"] == "aws-credentials"
        [container] = pod["containers"]
        [mount] = [m for m in container["volumeMounts"] if m["name"] == volume["name"]]
        assert mount["readOnly"] is True, component
        assert "subPath" not in mount  # a subPath mount would not follow the Secret's updates
        assert _env(pod)["AWS_SHARED_CREDENTIALS_FILE"] == f"{mount['mountPath']}/{item['path']}", component
        assert not _env_from(pod), component  # no environment credentials that would win over the file


def test_endpoint_and_region_are_the_users_environment_and_s3a_settings(helm):
    docs = render(helm, "default", *STORE, *FILE_SECRET, *MINIO)
    pods = _pods(docs)
    for component in USERS:
        env = _env(pods[component])
        assert env["AWS_ENDPOINT_URL"] == "http://minio.minio.svc:9000", component
        assert env["AWS_REGION"] == env["AWS_DEFAULT_REGION"] == "eu-central-1", component
    conf = spark_conf(docs)
    assert conf["spark.hadoop.fs.s3a.endpoint"] == "http://minio.minio.svc:9000"
    assert conf["spark.hadoop.fs.s3a.path.style.access"] == "true"
    assert conf["spark.hadoop.fs.s3a.endpoint.region"] == "eu-central-1"
    # the AWS SDK's own chain: the variables, the shared-credentials file, web identity
    provider = "software.amazon.awssdk.auth.credentials.DefaultCredentialsProvider"
    assert conf["spark.hadoop.fs.s3a.aws.credentials.provider"] == provider


def test_without_endpoint_region_or_file_nothing_of_them_is_set(helm):
    docs = render(helm, "default", *STORE, *ENV_SECRET)
    for component, pod in _pods(docs).items():
        assert not AWS_ENV & set(_env(pod)), component
    conf = spark_conf(docs)
    assert not {k for k in conf if k.startswith("spark.hadoop.fs.s3a.endpoint")}
    assert "spark.hadoop.fs.s3a.path.style.access" not in conf
    # a checkpoint that is not s3a:// gets no s3a settings at all
    gs = render(helm, "default", *STORE, "--set", "storage.objectStore.checkpointUrl=gs://bucket/checkpoint")
    assert not {k for k in spark_conf(gs) if "s3a" in k}


def test_the_spark_conf_value_overrides_the_charts_s3a_setting(helm):
    docs = render(
        helm,
        "default",
        *STORE,
        *MINIO,
        "--set",
        "join.sparkConf.spark\\.hadoop\\.fs\\.s3a\\.path\\.style\\.access=false",
    )
    assert spark_conf(docs)["spark.hadoop.fs.s3a.path.style.access"] == "false"


def test_pvc_storage_renders_no_object_store_credentials(helm):
    """The object store's values are ignored with storage.type pvc (a Secret named there is not mounted)."""
    docs = render(helm, "default", *FILE_SECRET, *MINIO, "--set", "controller.enabled=true")
    for component, pod in _pods(docs).items():
        assert not AWS_ENV & set(_env(pod)), component
        assert "s3-file" not in _secret_refs(pod), component
    assert not {k for k in spark_conf(docs) if "s3a" in k}


def test_only_the_users_may_reach_the_object_store_at_the_endpoints_port(helm):
    docs = render(helm, "default", *STORE, *FILE_SECRET, *MINIO)
    reach = {}
    for doc in docs:
        if doc["kind"] == "NetworkPolicy":
            component = doc["metadata"]["name"]
            rules = doc["spec"].get("egress", [])
            assert all(r.get("to") for r in rules), f"{component}: an egress rule to anywhere"
            reach[component] = any(
                r["to"] == PEERS and r["ports"] == [{"protocol": "TCP", "port": 9000}] for r in rules
            )
    assert {c for c, ok in reach.items() if ok} == {f"wj-windjoin-{c}" for c in USERS}, reach
    assert {"wj-windjoin-controller", "wj-windjoin-redis"} <= set(reach)


@pytest.mark.parametrize(
    ("extra", "said"),
    [
        # the NetworkPolicies would allow 443 while the endpoint listens on 9000
        (["--set", "storage.objectStore.endpoint=http://minio.minio.svc:9000"], "storage.objectStore.port is 443"),
        # no port in the URL: the scheme's
        (
            ["--set", "storage.objectStore.endpoint=http://minio.minio.svc", "--set", "storage.objectStore.port=9000"],
            "reached at port 80",
        ),
        ([*ENV_SECRET, *FILE_SECRET], "storage.objectStore.credentialsSecret and storage.objectStore.credentialsFile"),
    ],
)
def test_a_mismatched_port_or_two_credentials_are_refused_naming_the_key(helm, extra, said):
    done = run_helm(helm, "template", "wj", str(CHART), "-f", str(REQUIRED_VALUES), *STORE, *extra)
    assert done.returncode != 0 and said in done.stderr, done.stderr


@pytest.mark.parametrize(
    ("setting", "where"),
    [
        ("storage.objectStore.endpoint=http://key:secret@minio:9000", "/storage/objectStore/endpoint"),
        ("storage.objectStore.endpoint=minio:9000", "/storage/objectStore/endpoint"),
        ("storage.objectStore.region=EU West", "/storage/objectStore/region"),
        ("storage.objectStore.credentialsFile.secret=Not_A_Name", "/storage/objectStore/credentialsFile/secret"),
        ("storage.objectStore.credentialsFile.keys=x", "/storage/objectStore/credentialsFile"),
    ],
)
def test_bad_object_store_values_are_refused_by_the_schema(helm, setting, where):
    done = run_helm(helm, "template", "wj", str(CHART), "-f", str(REQUIRED_VALUES), *STORE, "--set", setting)
    assert done.returncode != 0 and where in done.stderr, done.stderr


@pytest.mark.parametrize(
    ("values", "secret"),
    [(["-f", str(VALUE_SETS["object-store"])], "windjoin-s3-credentials"), ([*STORE, *ENV_SECRET], "s3-env")],
)
def test_executors_may_reference_the_credentials_secret_and_nothing_more(helm, values, secret):
    """The admission policy's Secret list is exactly the job's own and the object store's credentials; its CEL
    (tests/deploy/cel_subset.py) admits the executor pod Spark makes from the template and refuses it with the
    credentials Secret swapped for another."""
    docs = render(helm, "default", *values)
    [policy] = [d for d in docs if d["kind"] == "ValidatingAdmissionPolicy"]
    variables = {v["name"]: v["expression"] for v in policy["spec"]["variables"]}
    assert set(cel_list(variables["secrets"])) == {"wj-windjoin-redis-job", "wj-windjoin-spark-auth", secret}
    template = next(
        yaml.safe_load(d["data"]["executor-pod-template.yaml"])
        for d in docs
        if d["kind"] == "ConfigMap" and "executor-pod-template.yaml" in d.get("data", {})
    )
    pod = spark_executor_pod(template, spark_conf(docs))
    assert secret in _secret_refs(pod["spec"])
    assert decide(policy, "CREATE", pod, None, DRIVER) == []
    swapped = json.loads(json.dumps(pod).replace(f'"{secret}"', '"wj-windjoin-redis-admin"'))
    assert decide(policy, "CREATE", swapped, None, DRIVER), "an executor with another Secret was admitted"
    for what, bad in bad_pods(pod).items():
        assert decide(policy, "CREATE", bad, None, DRIVER), f"a pod with {what} was admitted"
