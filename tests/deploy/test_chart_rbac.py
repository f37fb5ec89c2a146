"""The join driver's authorization, offline: its Role is exactly what Spark's Kubernetes backend calls with the
chart's settings, and a ValidatingAdmissionPolicy (where the API exists) limits what it creates, updates and
deletes to its own executor pods, which may reference the job's own Secrets only."""

from __future__ import annotations

import copy
import re

import pytest
import yaml

from tests.deploy.cel_subset import evaluate
from tests.deploy.test_chart import CHART, REQUIRED_VALUES, VALUE_SETS, _helm, _render

# What KubernetesClusterSchedulerBackend / ExecutorPodsAllocator / ExecutorPodsLifecycleManager and the watch and
# polling sources call with the chart's spark.kubernetes.* settings (Spark 4.x, direct allocator).
DRIVER_RULES = [
    {
        "apiGroups": [""],
        "resources": ["pods"],
        "verbs": sorted(["get", "list", "watch", "create", "delete", "deletecollection"]),
    }
]


def _find(docs: list[dict], kind: str, name: str | None = None) -> list[dict]:
    return [d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]


def _spark_conf(docs: list[dict]) -> dict[str, str]:
    [driver] = _find(docs, "Deployment", "wj-windjoin-driver")
    args = driver["spec"]["template"]["spec"]["containers"][0]["args"]
    return dict(a.removeprefix("--spark-conf=").split("=", 1) for a in args if a.startswith("--spark-conf="))


def _executor_template(docs: list[dict]) -> dict:
    spec_map = next(d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith("-spec"))
    return yaml.safe_load(spec_map["data"]["executor-pod-template.yaml"])


def _template_secrets(pod: dict) -> set[str]:
    names = {v["secret"]["secretName"] for v in pod["spec"].get("volumes", []) if "secret" in v}
    for c in pod["spec"]["containers"]:
        names |= {
            e["valueFrom"]["secretKeyRef"]["name"] for e in c.get("env", []) if "secretKeyRef" in e.get("valueFrom", {})
        }
        names |= {s["secretRef"]["name"] for s in c.get("envFrom", []) if "secretRef" in s}
    return names


def _cel_list(expression: str) -> list[str]:
    assert re.fullmatch(r"\[('[a-z0-9.-]+'(, '[a-z0-9.-]+')*)?\]", expression), expression
    return re.findall(r"'([^']*)'", expression)


@pytest.mark.parametrize("name", [n for n in sorted(VALUE_SETS) if n != "single-node"])
def test_the_drivers_role_is_exactly_executor_pods(helm, name):
    docs = _render(helm, name)
    [role] = _find(docs, "Role", "wj-windjoin-driver")
    rules = [{**r, "verbs": sorted(r["verbs"])} for r in role["rules"]]
    assert rules == DRIVER_RULES, rules
    assert "resourceNames" not in role["rules"][0]
    # the settings that keep Spark from ConfigMaps, Services and claims (which the Role does not allow)
    conf = _spark_conf(docs)
    assert conf["spark.kubernetes.executor.disableConfigMap"] == "true"
    assert conf["spark.kubernetes.driver.service.deleteOnTermination"] == "false"
    assert conf["spark.kubernetes.driver.ownPersistentVolumeClaim"] == "false"
    assert conf["spark.kubernetes.driver.reusePersistentVolumeClaim"] == "false"
    assert conf["spark.kubernetes.executor.deleteOnTermination"] == "true"  # else Spark patches kept executors
    assert not any(k.startswith("spark.kubernetes.executor.decommissionLabel") for k in conf)
    assert conf.get("spark.kubernetes.allocation.pods.allocator", "direct") == "direct"


def test_a_local_master_gets_no_kubernetes_access(helm):
    docs = _render(helm, "single-node")
    assert not _find(docs, "Role", "wj-windjoin-driver") and not _find(docs, "RoleBinding", "wj-windjoin-driver")
    assert not _find(docs, "ValidatingAdmissionPolicy")
    [account] = _find(docs, "ServiceAccount", "wj-windjoin-driver")
    assert account["automountServiceAccountToken"] is False


def test_spark_kubernetes_settings_in_spark_conf_are_refused_naming_the_key(helm):
    key = "spark.kubernetes.executor.secrets.other-secret"
    escaped = key.replace(".", "\\.")
    done = _helm(
        helm, "template", "wj", str(CHART), "-f", str(REQUIRED_VALUES), "--set", f"join.sparkConf.{escaped}=/x"
    )
    assert (
        done.returncode != 0 and f"join.sparkConf.{key}: spark.kubernetes.* settings are the chart's" in done.stderr
    ), done.stderr


def _policy(docs: list[dict]) -> tuple[dict, dict]:
    [policy] = _find(docs, "ValidatingAdmissionPolicy")
    [binding] = _find(docs, "ValidatingAdmissionPolicyBinding")
    return policy, binding


@pytest.mark.parametrize("name", [n for n in sorted(VALUE_SETS) if n != "single-node"])
def test_the_admission_policy_allows_the_executors_own_secrets_only(helm, name):
    docs = _render(helm, name)
    policy, binding = _policy(docs)
    spec = policy["spec"]
    assert spec["failurePolicy"] == "Fail"
    assert spec["matchConstraints"]["resourceRules"] == [
        {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE", "DELETE"], "resources": ["pods"]}
    ]
    [condition] = spec["matchConditions"]
    assert condition["expression"] == "request.userInfo.username == 'system:serviceaccount:streams:wj-windjoin-driver'"
    assert binding["spec"]["policyName"] == policy["metadata"]["name"]
    assert binding["spec"]["validationActions"] == ["Deny"]
    assert binding["spec"]["matchResources"]["namespaceSelector"] == {
        "matchLabels": {"kubernetes.io/metadata.name": "streams"}
    }
    variables = {v["name"]: v["expression"] for v in spec["variables"]}
    template = _executor_template(docs)
    secrets = set(_cel_list(variables["secrets"]))
    assert secrets == _template_secrets(template), "the policy allows exactly the Secrets the executor template uses"
    # never another component's credentials: the controller's or proxy's Redis password, the proxy's tokens, cursor
    # key or TLS
    forbidden = re.compile(
        r"-(redis-controller|redis-proxy|proxy-tokens|proxy-cursor-key|proxy-tls)$|^windjoin-proxy-tls$"
    )
    assert not {s for s in secrets if forbidden.search(s)}, secrets
    [redis_volume] = [v for v in template["spec"]["volumes"] if v["name"] == "redis-auth"]
    assert {i["key"] for i in redis_volume["secret"].get("items", [{"key": "job"}])} <= {"job", "password"}
    config_maps = _cel_list(variables["configMaps"])
    assert config_maps == ["wj-windjoin-spec"]
    labels = variables["executorLabels"]
    for key, value in template["metadata"]["labels"].items():
        if key in {"app.kubernetes.io/name", "app.kubernetes.io/instance", "app.kubernetes.io/component"}:
            assert f"'{key}': '{value}'" in labels
    assert "'spark-role': 'executor'" in labels
    text = "\n".join(v["expression"] for v in spec["validations"])
    image = _spark_conf(docs)["spark.kubernetes.container.image"]
    assert f"c.image == '{image}'" in text
    assert "object.spec.serviceAccountName == 'wj-windjoin-executor'" in text
    assert template["spec"]["serviceAccountName"] == "wj-windjoin-executor"
    for path in (
        "v.secret.secretName in variables.secrets",
        "e.valueFrom.secretKeyRef.name in variables.secrets",
        "s.secretRef.name in variables.secrets",
        "oldObject.metadata.labels[k]",
    ):
        assert path in text, path
    for expression in [*variables.values(), condition["expression"], *(v["expression"] for v in spec["validations"])]:
        _check_cel_syntax(expression)


def _check_cel_syntax(expression: str) -> None:
    """What can be checked without a CEL library: balanced brackets outside string literals, only the variables
    an admission policy has, no Python or YAML leftovers."""
    bare = re.sub(r"'[^']*'", "''", expression)
    depth = []
    pairs = {")": "(", "]": "[", "}": "{"}
    for ch in bare:
        if ch in "([{":
            depth.append(ch)
        elif ch in ")]}":
            assert depth and depth.pop() == pairs[ch], expression
    assert not depth, expression
    assert not re.search(r"\b(and|or|not|None|True|False)\b|\{\{|\}\}", bare), expression
    roots = set(re.findall(r"(?<![.\w])([a-zA-Z_]\w*)(?=\s*\.)", bare))
    assert roots <= {"object", "oldObject", "request", "variables", "c", "e", "s", "v"}, roots


def test_the_admission_policy_is_on_by_default_and_can_be_switched_off(helm):
    assert _find(_render(helm, "default"), "ValidatingAdmissionPolicy")  # served from 1.30, the chart's minimum
    off = _render(helm, "default", "--set", "join.admissionPolicy.enabled=false")
    assert not _find(off, "ValidatingAdmissionPolicy") and not _find(off, "ValidatingAdmissionPolicyBinding")
    assert _find(off, "Role", "wj-windjoin-driver")


def _spark_local_dirs(template: dict, conf: dict[str, str]) -> list[str]:
    """Where Spark's LocalDirsFeatureStep mounts new emptyDirs in an executor pod: none if the template's container
    mounts volumes named spark-local-dir-*, else each of spark.local.dir (default /var/data/spark-<uuid>)."""
    [container] = template["spec"]["containers"]
    if any(m["name"].startswith("spark-local-dir-") for m in container.get("volumeMounts", [])):
        return []
    return conf.get("spark.local.dir", "/var/data/spark-0123").split(",")


def _spark_executor_pod(template: dict, conf: dict[str, str]) -> dict:
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


def _decide(policy: dict, operation: str, obj: dict | None, old: dict | None, user: str) -> list[str]:
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


def _bad_pods(pod: dict) -> dict[str, dict]:
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


@pytest.mark.parametrize("name", ["default", "secure", "autoscaling", "object-store"])
def test_the_admission_policy_admits_sparks_executors_and_denies_anything_else(helm, name):
    """The policy's CEL evaluated (tests/deploy/cel_subset.py) on the pod Spark makes from the chart's template and
    on pods that differ from it in one way each."""
    docs = _render(helm, name)
    policy, _ = _policy(docs)
    pod = _spark_executor_pod(_executor_template(docs), _spark_conf(docs))
    assert _decide(policy, "CREATE", pod, None, DRIVER) == []
    for what, bad in _bad_pods(pod).items():
        assert _decide(policy, "CREATE", bad, None, DRIVER), f"{name}: a pod with {what} was admitted"
        assert _decide(policy, "CREATE", bad, None, "system:serviceaccount:streams:someone-else") == []
    [driver] = _find(docs, "Deployment", "wj-windjoin-driver")
    driver_pod = {"metadata": {"labels": driver["spec"]["template"]["metadata"]["labels"]}, "spec": {}}
    assert _decide(policy, "DELETE", None, pod, DRIVER) == []  # its executor
    assert _decide(policy, "DELETE", None, driver_pod, DRIVER)  # any other pod: denied
    assert _decide(policy, "DELETE", None, None, DRIVER) == []  # deletecollection as a whole (each item checked)
    relabelled = copy.deepcopy(pod)
    relabelled["spec"]["containers"][0]["image"] = "attacker/image:1"
    assert _decide(policy, "UPDATE", relabelled, pod, DRIVER)  # an executor's image cannot be swapped either


@pytest.mark.parametrize("name", [n for n in sorted(VALUE_SETS) if n != "single-node"])
def test_sparks_local_dir_volumes_do_not_collide_with_the_templates_mounts(helm, name):
    """Two volume mounts at one path make the API server refuse the executor pod."""
    docs = _render(helm, name)
    pod = _spark_executor_pod(_executor_template(docs), _spark_conf(docs))
    paths = [m["mountPath"] for m in pod["spec"]["containers"][0]["volumeMounts"]]
    assert len(paths) == len(set(paths)), paths
