"""Run the workloads of rendered Kubernetes manifests as podman containers on one machine, without an API server.

`podman kube play` (4.3) cannot express what the chart needs: no StatefulSet (Redis), no Service names, no
downward API `status.podIP`, no `$(VAR)` expansion in arguments, no fsGroup. This runner reads each Deployment's or
StatefulSet's pod template and maps these fields to `podman run` (everything else is listed in UNMAPPED):

- containers and initContainers (init containers run to completion first, in order): `image`, `command`
  (the entrypoint), `args`, `workingDir`, `env` (`value`, `valueFrom.fieldRef` metadata.name / metadata.namespace
  / status.podIP, `valueFrom.secretKeyRef`, `valueFrom.configMapKeyRef`), `envFrom` (secretRef, configMapRef),
  `$(VAR)` references in command and args expanded from the container's environment, as the kubelet does;
- `volumeMounts` (`mountPath`, `readOnly`, `subPath`) of `configMap`, `secret` and `projected` (of those) volumes
  (`items`, `defaultMode`; Secret `data` and `stringData`), `emptyDir`, `persistentVolumeClaim` (a host folder
  per claim, shared by every pod that mounts it) and StatefulSet `volumeClaimTemplates` (a folder per pod);
- `securityContext` of pod and container: `runAsUser` / `runAsGroup` (`--user`), `fsGroup` (a supplementary group
  owning the volumes, group-writable, as the kubelet does), `runAsNonRoot` (refused if the user is root),
  `readOnlyRootFilesystem` (`--read-only`), `allowPrivilegeEscalation: false` (no-new-privileges),
  `capabilities.drop/add`;
- `lifecycle.postStart.exec` (run in the container once it started, which is killed if the hook fails);
- `ports` and the readiness/startup probes (`tcpSocket`,
  `httpGet`, named ports resolved): `wait_ready` waits until they answer;
- Services: every Service name (`name`, `name.ns`, `name.ns.svc`, `name.ns.svc.cluster.local`) resolves to
  127.0.0.1 in every container (`--add-host`): the containers share the host's network, so a Service's
  `targetPort` is the container's port on the loopback address.
"""

from __future__ import annotations

import base64
import os
import re
import shutil
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

UNMAPPED = (
    "resources (requests/limits)",
    "terminationGracePeriodSeconds (containers are killed or removed)",
    "livenessProbe (not acted on)",
    "replicas (one pod each)",
    "serviceAccountName and automountServiceAccountToken (no API server)",
    "nodeSelector, tolerations, affinity (one node)",
    "imagePullPolicy, imagePullSecrets (local images)",
    "seccompProfile (podman's default profile applies)",
    "NetworkPolicies (host network)",
)
POD_IP = "127.0.0.1"
_VAR = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)")


def podman(*args: str, check: bool = True, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(["podman", *args], capture_output=True, text=True, check=check, timeout=timeout)


def expand(text: str, env: dict[str, str]) -> str:
    """Kubernetes' `$(VAR)` expansion: known variables are replaced, `$$` is a literal `$`, others stay."""
    return _VAR.sub(lambda m: "$" if m.group(0) == "$$" else env.get(m.group(1), m.group(0)), text)


@dataclass
class Workload:
    kind: str
    name: str
    pod: dict[str, Any]  # the pod template's spec
    labels: dict[str, str]
    claim_templates: list[str]

    @property
    def pod_name(self) -> str:
        return f"{self.name}-0" if self.kind == "StatefulSet" else f"{self.name}-stack"


class PodRunner:
    """The manifests' workloads as containers named after their pods; every file they mount under `root`."""

    def __init__(self, manifests: Iterable[dict[str, Any]], root: Path, namespace: str) -> None:
        docs = [d for d in manifests if d]
        self.namespace = namespace
        self.root = root
        self.by_kind: dict[tuple[str, str], dict[str, Any]] = {(d["kind"], d["metadata"]["name"]): d for d in docs}
        self.workloads = {
            d["metadata"]["name"]: Workload(
                d["kind"],
                d["metadata"]["name"],
                d["spec"]["template"]["spec"],
                d["spec"]["template"]["metadata"].get("labels", {}),
                [t["metadata"]["name"] for t in d["spec"].get("volumeClaimTemplates", [])],
            )
            for d in docs
            if d["kind"] in ("Deployment", "StatefulSet")
        }
        self.hosts = sorted(
            {host for d in docs if d["kind"] == "Service" for host in self._service_names(d["metadata"]["name"])}
        )
        self.started: list[str] = []

    def _service_names(self, name: str) -> list[str]:
        ns = self.namespace
        return [name, f"{name}.{ns}", f"{name}.{ns}.svc", f"{name}.{ns}.svc.cluster.local"]

    # ---- lookups -------------------------------------------------------------------------------------------

    def _data(self, kind: str, name: str) -> dict[str, bytes]:
        doc = self.by_kind.get((kind, name))
        if doc is None:
            raise KeyError(f"{kind} {name} is not in the rendered manifests")
        out = {k: base64.b64decode(v) for k, v in (doc.get("data") or {}).items()} if kind == "Secret" else {}
        if kind == "ConfigMap":
            out.update({k: v.encode() for k, v in (doc.get("data") or {}).items()})
        out.update({k: v.encode() for k, v in (doc.get("stringData") or {}).items()})
        return out

    def secret_value(self, name: str, key: str) -> bytes:
        return self._data("Secret", name)[key]

    def container_port(self, workload: str, port: str | int) -> int:
        """A named (or numbered) port of the workload's containers."""
        if isinstance(port, int) or str(port).isdigit():
            return int(port)
        for container in self.workloads[workload].pod["containers"]:
            for p in container.get("ports", []):
                if p.get("name") == port:
                    return int(p["containerPort"])
        raise KeyError(f"{workload} has no port named {port}")

    # ---- volumes --------------------------------------------------------------------------------------------

    def _volume_dirs(self, w: Workload, fs_group: int | None) -> dict[str, Path]:
        """Each volume of the pod as a host folder holding its files."""
        dirs: dict[str, Path] = {}
        volumes = [*w.pod.get("volumes", []), *({"name": t, "claimTemplate": t} for t in w.claim_templates)]
        for vol in volumes:
            name = vol["name"]
            if "persistentVolumeClaim" in vol:
                path = self.root / "claims" / vol["persistentVolumeClaim"]["claimName"]
            elif "claimTemplate" in vol:
                path = self.root / "claims" / f"{name}-{w.pod_name}"
            else:
                path = self.root / "pods" / w.pod_name / name
            fresh = not path.exists()
            path.mkdir(parents=True, exist_ok=True)
            projected = vol.get("projected")
            sources = projected["sources"] if projected else [vol] if "configMap" in vol or "secret" in vol else []
            mode = (projected or vol.get("configMap") or vol.get("secret") or {}).get("defaultMode", 0o644)
            for source in sources:  # a configMap or secret volume, or each of a projected volume's sources
                kind = "ConfigMap" if "configMap" in source else "Secret"
                ref = source.get("configMap") or source["secret"]
                data = self._data(kind, ref.get("name") or ref.get("secretName"))
                for item in ref.get("items") or [{"key": k, "path": k} for k in data]:
                    target = path / item["path"]
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.write_bytes(data[item["key"]])
                    target.chmod(item.get("mode", mode))
                    self._own(target, fs_group)
            if sources:
                path.chmod(0o755)
            elif fresh or "emptyDir" in vol:
                path.chmod(0o2775 if fs_group is not None else 0o777)
            self._own(path, fs_group)
            dirs[name] = path
        return dirs

    @staticmethod
    def _own(path: Path, fs_group: int | None) -> None:
        if fs_group is not None:
            os.chown(path, 0, fs_group)

    # ---- containers -----------------------------------------------------------------------------------------

    def _env(self, w: Workload, container: dict[str, Any]) -> dict[str, str]:
        fields = {"metadata.name": w.pod_name, "metadata.namespace": self.namespace, "status.podIP": POD_IP}
        env: dict[str, str] = {}
        for source in container.get("envFrom", []):
            if "secretRef" in source:
                data = self._data("Secret", source["secretRef"]["name"])
            else:
                data = self._data("ConfigMap", source["configMapRef"]["name"])
            env.update({k: v.decode() for k, v in data.items()})
        for var in container.get("env", []):
            if "value" in var:
                env[var["name"]] = expand(str(var["value"]), env)
                continue
            ref = var["valueFrom"]
            if "fieldRef" in ref:
                env[var["name"]] = fields[ref["fieldRef"]["fieldPath"]]
            elif "secretKeyRef" in ref:
                key = ref["secretKeyRef"]
                env[var["name"]] = self._data("Secret", key["name"])[key["key"]].decode()
            elif "configMapKeyRef" in ref:
                key = ref["configMapKeyRef"]
                env[var["name"]] = self._data("ConfigMap", key["name"])[key["key"]].decode()
            else:
                raise NotImplementedError(f"{w.name}: env {var['name']} from {sorted(ref)}")
        return env

    def _run_args(self, w: Workload, container: dict[str, Any], dirs: dict[str, Path], name: str) -> list[str]:
        pod_sc = w.pod.get("securityContext", {})
        sc = {**pod_sc, **container.get("securityContext", {})}
        uid, gid = sc.get("runAsUser"), sc.get("runAsGroup")
        if sc.get("runAsNonRoot") and uid in (None, 0):
            raise ValueError(f"{w.name}/{container['name']}: runAsNonRoot without a non-root runAsUser")
        args = ["--name", name, "--network", "host", "--hostname", w.pod_name]
        args += [a for host in self.hosts for a in ("--add-host", f"{host}:{POD_IP}")]
        if uid is not None:
            args += ["--user", f"{uid}:{gid if gid is not None else uid}"]
        if pod_sc.get("fsGroup") is not None:
            args += ["--group-add", str(pod_sc["fsGroup"])]
        if sc.get("readOnlyRootFilesystem"):
            args.append("--read-only")
        if sc.get("allowPrivilegeEscalation") is False:
            args += ["--security-opt", "no-new-privileges"]
        caps = sc.get("capabilities", {})
        args += [a for cap in caps.get("drop", []) for a in ("--cap-drop", cap)]
        args += [a for cap in caps.get("add", []) for a in ("--cap-add", cap)]
        if container.get("workingDir"):
            args += ["--workdir", container["workingDir"]]
        for mount in container.get("volumeMounts", []):
            source = dirs[mount["name"]] / mount.get("subPath", "")
            options = "ro" if mount.get("readOnly") else "rw"
            args += ["--volume", f"{source}:{mount['mountPath']}:{options}"]
        env = self._env(w, container)
        for key, value in env.items():
            args += ["--env", f"{key}={value}"]
        command = [expand(c, env) for c in container.get("command", [])]
        if command:
            args += ["--entrypoint", command[0]]
        return [*args, container["image"], *command[1:], *(expand(a, env) for a in container.get("args", []))]

    def start(self, workload: str) -> str:
        """Run the workload's init containers to completion, then start its (first) container; its name."""
        w = self.workloads[workload]
        dirs = self._volume_dirs(w, w.pod.get("securityContext", {}).get("fsGroup"))
        for init in w.pod.get("initContainers", []):
            name = f"{w.pod_name}-{init['name']}"
            podman("rm", "--force", name, check=False)
            done = podman("run", "--rm", *self._run_args(w, init, dirs, name), check=False)
            if done.returncode != 0:
                raise RuntimeError(f"init container {name} failed: {done.stderr[-2000:]}")
        [container] = w.pod["containers"]
        name = f"{w.pod_name}-{container['name']}"
        podman("rm", "--force", name, check=False)
        podman("run", "--detach", *self._run_args(w, container, dirs, name))
        if name not in self.started:
            self.started.append(name)
        hook = container.get("lifecycle", {}).get("postStart", {}).get("exec")
        if hook is not None:  # as the kubelet: in the container, once it started; a failure kills it
            done = podman("exec", name, *hook["command"], check=False)
            if done.returncode != 0:
                podman("kill", "--signal", "KILL", name, check=False)
                raise RuntimeError(f"{name}: postStart hook failed: {(done.stdout + done.stderr)[-2000:]}")
        return name

    def kill(self, workload: str) -> None:
        """SIGKILL the workload's container (a crash, not a graceful stop)."""
        w = self.workloads[workload]
        podman("kill", "--signal", "KILL", f"{w.pod_name}-{w.pod['containers'][0]['name']}")

    def wait_ready(self, workload: str, timeout_s: float = 300) -> None:
        """Until the container's startup and readiness probes (tcpSocket, httpGet) answer; fails if it exits."""
        w = self.workloads[workload]
        container = w.pod["containers"][0]
        probes = [container[p] for p in ("startupProbe", "readinessProbe") if p in container]
        deadline = time.monotonic() + timeout_s
        name = f"{w.pod_name}-{container['name']}"
        while not all(self._probe(workload, p) for p in probes):
            state = podman("inspect", "--format", "{{.State.Running}}", name, check=False).stdout.strip()
            if state != "true":
                raise RuntimeError(f"{name} is not running:\n{self.logs(workload)[-4000:]}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"{name} not ready in {timeout_s} s:\n{self.logs(workload)[-4000:]}")
            time.sleep(1)

    def _probe(self, workload: str, probe: dict[str, Any]) -> bool:
        if "tcpSocket" in probe:
            try:
                socket.create_connection((POD_IP, self.container_port(workload, probe["tcpSocket"]["port"])), 1).close()
                return True
            except OSError:
                return False
        get = probe["httpGet"]
        url = f"{get.get('scheme', 'HTTP').lower()}://{POD_IP}:{self.container_port(workload, get['port'])}"
        try:
            with urllib.request.urlopen(url + get.get("path", "/"), timeout=2) as answer:
                return 200 <= answer.status < 400
        except OSError:
            return False

    def logs(self, workload: str) -> str:
        w = self.workloads[workload]
        done = podman("logs", f"{w.pod_name}-{w.pod['containers'][0]['name']}", check=False)
        return done.stdout + done.stderr

    def stop_all(self) -> None:
        for name in reversed(self.started):
            podman("rm", "--force", "--time", "5", name, check=False)
        self.started.clear()

    def remove_files(self) -> None:
        """The volumes' folders (files written by the containers' users too)."""
        shutil.rmtree(self.root, ignore_errors=True)


def load_manifests(text: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(text) if d]
