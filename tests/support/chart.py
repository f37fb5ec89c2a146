"""The Helm chart, offline: its paths and value sets, `helm` run and `helm template` rendered, and the join
driver's RBAC helpers (the executor pod Spark makes from the chart's template, pods that differ from it, and the
admission policy's CEL evaluated on them)."""

from __future__ import annotations

import copy
import re
import subprocess
from pathlib import Path

import yaml

from tests.deploy.cel_subset import evaluate

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "helm" / "windjoin"
# "default": the chart's defaults plus what it cannot default (the API server's addresses, where Kafka is).
REQUIRED_VALUES = ROOT / "tests" / "deploy" / "required-values.yaml"
VALUE_SETS = {
    "default": REQUIRED_VALUES,
    **{p.name.removesuffix("-values.yaml"): p for p in sorted((CHART / "ci").glob("*.yaml"))},
}


def run_helm(helm: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([helm, *args], capture_output=True, text=True, cwd=ROOT, timeout=120)


def values_args(name: str) -> list[str]:
    path = VALUE_SETS[name]
    return [] if path is None else ["-f", str(path)]


def refusal(helm: str, values: Path | None, *extra: str) -> str:
    """What `helm template` says when it refuses the chart with the values file `values` and `extra` arguments
    (it must refuse)."""
    done = run_helm(helm, "template", "wj", str(CHART), *([] if values is None else ["-f", str(values)]), *extra)
    assert done.returncode != 0, "the chart rendered, it should have been refused"
    return done.stderr


def render(helm: str, name: str, *extra: str) -> list[dict]:
    done = run_helm(helm, "template", "wj", str(CHART), "--namespace", "streams", *values_args(name), *extra)
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def find(docs: list[dict], kind: str, name: str | None = None) -> list[dict]:
    return [d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]


def spark_conf(docs: list[dict]) -> dict[str, str]:
    [driver] = find(docs, "Deployment", "wj-windjoin-driver")
    args = driver["spec"]["template"]["spec"]["containers"][0]["args"]
    return dict(a.removeprefix("--spark-conf=").split("=", 1) for a in args if a.startswith("--spark-conf="))


def cel_list(expression: str) -> list[str]:
    assert re.fullmatch(r"\[('[a-z0-9.-]+'(, '[a-z0-9.-]+')*)?\]", expression), expression
    return re.findall(r"'([^']*)'", expression)


def _spark_local_dirs(template: dict, conf: dict[str, str]) -> list[str]:
    """Where Spark's LocalDirsFeatureStep mounts new emptyDirs in an executor pod: none if the template's container
    mounts volumes named spark-local-dir-*, else each of spark.local.dir (default /var/data/spark-<uuid>)."""
    [container] = template["spec"]["containers"]
    if any(m["name"].startswith("spark-local-dir-") for m in container.get("volumeMounts", [])):
        return []
    return conf.get("spark.local.dir", "/var/data/spark-0123").split(",")


def spark_executor_pod(template: dict, conf: dict[str, str]) -> dict:
    """The executor pod Spark 4 creates from the chart's template: its labels, image, env and local-dir volume."""
    pod = copy.deepcopy(template)
    pod["metadata"]["name"] = "wj-windjoin-exec-1"
    pod["metadata"]["labels"].update(
        {"spark-app-selector": "spark-0123", "spark-role": "executor", "spark-exec-id": "1"}
    )
    pod["metadata"]["ownerReferences"] = [{"apiVersion": "v1", "kind": "Pod", "name": "wj-windjoin-driver-x"}]
    [container] = pod["spec"]["containers"]
    container["image"] = conf["spark.kubernetes.container.image"]
    container["env"] = [
        *container.get("env", []),
        {"name": "SPARK_EXECUTOR_POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        {"name": "SPARK_EXECUTOR_ID", "value": "1"},
    ]
    for k, path in enumerate(_spark_local_dirs(template, conf)):  # Spark's LocalDirsFeatureStep
        pod["spec"]["volumes"].append({"name": f"spark-local-dir-{k + 1}", "emptyDir": {}})
        container["volumeMounts"].append({"name": f"spark-local-dir-{k + 1}", "mountPath": path})
    pod["spec"]["restartPolicy"] = "Never"
    return pod


def decide(policy: dict, operation: str, obj: dict | None, old: dict | None, user: str) -> list[str]:
    """The messages of the validations that deny this request ([]: admitted), as the API server would."""
    spec = policy["spec"]
    request = {"operation": operation, "userInfo": {"username": user}}
    env: dict = {"object": obj, "oldObject": old, "request": request}
    if not all(evaluate(c["expression"], env) for c in spec["matchConditions"]):
        return []  # not the driver: the policy does not apply
    env["variables"] = {}
    for variable in spec["variables"]:
        env["variables"][variable["name"]] = evaluate(variable["expression"], env)
    return [v["message"] for v in spec["validations"] if not evaluate(v["expression"], env)]


DRIVER = "system:serviceaccount:streams:wj-windjoin-driver"


def bad_pods(pod: dict) -> dict[str, dict]:
    def changed(change) -> dict:
        bad = copy.deepcopy(pod)
        change(bad)
        return bad

    return {
        "another component's Redis password": changed(
            lambda p: p["spec"]["volumes"].append(
                {"name": "x", "secret": {"secretName": "wj-windjoin-redis-controller"}}
            )
        ),
        "the proxy's tokens": changed(
            lambda p: p["spec"]["volumes"].append({"name": "x", "secret": {"secretName": "wj-windjoin-proxy-tokens"}})
        ),
        "a projected Secret": changed(
            lambda p: p["spec"]["volumes"].append(
                {"name": "x", "projected": {"sources": [{"secret": {"name": "wj-windjoin-redis-admin"}}]}}
            )
        ),
        "a hostPath": changed(lambda p: p["spec"]["volumes"].append({"name": "x", "hostPath": {"path": "/"}})),
        "a Secret in env": changed(
            lambda p: p["spec"]["containers"][0]["env"].append(
                {"name": "X", "valueFrom": {"secretKeyRef": {"name": "wj-windjoin-redis-proxy", "key": "password"}}}
            )
        ),
        "a Secret in envFrom": changed(
            lambda p: p["spec"]["containers"][0].setdefault("envFrom", []).append({"secretRef": {"name": "other"}})
        ),
        "another image": changed(lambda p: p["spec"]["containers"][0].update(image="attacker/image:1")),
        "another ServiceAccount": changed(lambda p: p["spec"].update(serviceAccountName="wj-windjoin-controller")),
        "the token": changed(lambda p: p["spec"].update(automountServiceAccountToken=True)),
        "no executor label": changed(
            lambda p: p["metadata"]["labels"].update({"app.kubernetes.io/component": "proxy"})
        ),
        "another release's executor": changed(
            lambda p: p["metadata"]["labels"].update({"app.kubernetes.io/instance": "x"})
        ),
        "the host's network": changed(lambda p: p["spec"].update(hostNetwork=True)),
        "a privileged container": changed(
            lambda p: p["spec"]["containers"][0]["securityContext"].update(privileged=True)
        ),
        "an init container": changed(
            lambda p: p["spec"].update(initContainers=[dict(p["spec"]["containers"][0], name="init")])
        ),
    }
