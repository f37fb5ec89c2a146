"""The join driver's authorization, offline: its Role is exactly what Spark's Kubernetes backend calls with the
chart's settings, and a ValidatingAdmissionPolicy (where the API exists) limits what it creates, updates and
deletes to its own executor pods, which may reference the job's own Secrets only."""

from __future__ import annotations

import copy
import re

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
    find,
    render,
    run_helm,
    spark_conf,
    spark_executor_pod,
)

# What KubernetesClusterSchedulerBackend / ExecutorPodsAllocator / ExecutorPodsLifecycleManager and the watch and
# polling sources call with the chart's spark.kubernetes.* settings (Spark 4.x, direct allocator).
DRIVER_RULES = [
    {
        "apiGroups": [""],
        "resources": ["pods"],
        "verbs": sorted(["get", "list", "watch", "create", "delete", "deletecollection"]),
    }
]


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


@pytest.mark.parametrize("name", [n for n in sorted(VALUE_SETS) if n != "single-node"])
def test_the_drivers_role_is_exactly_executor_pods(helm, name):
    docs = render(helm, name)
    [role] = find(docs, "Role", "wj-windjoin-driver")
    rules = [{**r, "verbs": sorted(r["verbs"])} for r in role["rules"]]
    assert rules == DRIVER_RULES, rules
    assert "resourceNames" not in role["rules"][0]
    # the settings that keep Spark from ConfigMaps, Services and claims (which the Role does not allow)
    conf = spark_conf(docs)
    assert conf["spark.kubernetes.executor.disableConfigMap"] == "true"
    assert conf["spark.kubernetes.driver.service.deleteOnTermination"] == "false"
    assert conf["spark.kubernetes.driver.ownPersistentVolumeClaim"] == "false"
    assert conf["spark.kubernetes.driver.reusePersistentVolumeClaim"] == "false"
    assert conf["spark.kubernetes.executor.deleteOnTermination"] == "true"  # else Spark patches kept executors
    assert not any(k.startswith("spark.kubernetes.executor.decommissionLabel") for k in conf)
    assert conf.get("spark.kubernetes.allocation.pods.allocator", "direct") == "direct"


def test_a_local_master_gets_no_kubernetes_access(helm):
    docs = render(helm, "single-node")
    assert not find(docs, "Role", "wj-windjoin-driver") and not find(docs, "RoleBinding", "wj-windjoin-driver")
    assert not find(docs, "ValidatingAdmissionPolicy")
    [account] = find(docs, "ServiceAccount", "wj-windjoin-driver")
    assert account["automountServiceAccountToken"] is False


def test_spark_kubernetes_settings_in_spark_conf_are_refused_naming_the_key(helm):
    key = "spark.kubernetes.executor.secrets.other-secret"
    escaped = key.replace(".", "\\.")
    done = run_helm(
        helm, "template", "wj", str(CHART), "-f", str(REQUIRED_VALUES), "--set", f"join.sparkConf.{escaped}=/x"
    )
    assert (
        done.returncode != 0 and f"join.sparkConf.{key}: spark.kubernetes.* settings are the chart's" in done.stderr
    ), done.stderr


def _policy(docs: list[dict]) -> tuple[dict, dict]:
    [policy] = find(docs, "ValidatingAdmissionPolicy")
    [binding] = find(docs, "ValidatingAdmissionPolicyBinding")
    return policy, binding


@pytest.mark.parametrize("name", [n for n in sorted(VALUE_SETS) if n != "single-node"])
def test_the_admission_policy_allows_the_executors_own_secrets_only(helm, name):
    docs = render(helm, name)
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
    secrets = set(cel_list(variables["secrets"]))
    assert secrets == _template_secrets(template), "the policy allows exactly the Secrets the executor template uses"
    # never another component's credentials: the controller's or proxy's Redis password, the proxy's tokens, cursor
    # key or TLS
    forbidden = re.compile(
        r"-(redis-controller|redis-proxy|proxy-tokens|proxy-cursor-key|proxy-tls)$|^windjoin-proxy-tls$"
    )
    assert not {s for s in secrets if forbidden.search(s)}, secrets
    [redis_volume] = [v for v in template["spec"]["volumes"] if v["name"] == "redis-auth"]
    assert {i["key"] for i in redis_volume["secret"].get("items", [{"key": "job"}])} <= {"job", "password"}
    config_maps = cel_list(variables["configMaps"])
    assert config_maps == ["wj-windjoin-spec"]
    labels = variables["executorLabels"]
    for key, value in template["metadata"]["labels"].items():
        if key in {"app.kubernetes.io/name", "app.kubernetes.io/instance", "app.kubernetes.io/component"}:
            assert f"'{key}': '{value}'" in labels
    assert "'spark-role': 'executor'" in labels
    text = "\n".join(v["expression"] for v in spec["validations"])
    image = spark_conf(docs)["spark.kubernetes.container.image"]
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
    assert find(render(helm, "default"), "ValidatingAdmissionPolicy")  # served from 1.30, the chart's minimum
    off = render(helm, "default", "--set", "join.admissionPolicy.enabled=false")
    assert not find(off, "ValidatingAdmissionPolicy") and not find(off, "ValidatingAdmissionPolicyBinding")
    assert find(off, "Role", "wj-windjoin-driver")


@pytest.mark.parametrize("name", ["default", "secure", "autoscaling", "object-store"])
def test_the_admission_policy_admits_sparks_executors_and_denies_anything_else(helm, name):
    """The policy's CEL evaluated (tests/deploy/cel_subset.py) on the pod Spark makes from the chart's template and
    on pods that differ from it in one way each."""
    docs = render(helm, name)
    policy, _ = _policy(docs)
    pod = spark_executor_pod(_executor_template(docs), spark_conf(docs))
    assert decide(policy, "CREATE", pod, None, DRIVER) == []
    for what, bad in bad_pods(pod).items():
        assert decide(policy, "CREATE", bad, None, DRIVER), f"{name}: a pod with {what} was admitted"
        assert decide(policy, "CREATE", bad, None, "system:serviceaccount:streams:someone-else") == []
    [driver] = find(docs, "Deployment", "wj-windjoin-driver")
    driver_pod = {"metadata": {"labels": driver["spec"]["template"]["metadata"]["labels"]}, "spec": {}}
    assert decide(policy, "DELETE", None, pod, DRIVER) == []  # its executor
    assert decide(policy, "DELETE", None, driver_pod, DRIVER)  # any other pod: denied
    assert decide(policy, "DELETE", None, None, DRIVER) == []  # deletecollection as a whole (each item checked)
    relabelled = copy.deepcopy(pod)
    relabelled["spec"]["containers"][0]["image"] = "attacker/image:1"
    assert decide(policy, "UPDATE", relabelled, pod, DRIVER)  # an executor's image cannot be swapped either


@pytest.mark.parametrize("name", [n for n in sorted(VALUE_SETS) if n != "single-node"])
def test_sparks_local_dir_volumes_do_not_collide_with_the_templates_mounts(helm, name):
    """Two volume mounts at one path make the API server refuse the executor pod."""
    docs = render(helm, name)
    pod = spark_executor_pod(_executor_template(docs), spark_conf(docs))
    paths = [m["mountPath"] for m in pod["spec"]["containers"][0]["volumeMounts"]]
    assert len(paths) == len(set(paths)), paths
