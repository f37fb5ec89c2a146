"""The container image's files, without a Docker engine (none runs here): the entrypoint starts a Spark executor
the way Spark's Kubernetes backend expects and passes any other command through; the Dockerfile copies only what
exists and .dockerignore lets in; the chart uses the image's paths."""

from __future__ import annotations

import ast
import os
import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# setup.py's source folders (reading it, not importing it: importing would run setup())
SOURCE_FOLDERS = ast.literal_eval(re.search(r"^SOURCE_FOLDERS = (.+)$", (ROOT / "setup.py").read_text(), re.M).group(1))
ENTRYPOINT = ROOT / "docker" / "entrypoint.sh"


def _fake_java(tmp_path: Path) -> Path:
    home = tmp_path / "java"
    (home / "bin").mkdir(parents=True)
    java = home / "bin" / "java"
    java.write_text('#!/bin/sh\nfor a in "$@"; do echo "$a"; done\n')
    java.chmod(0o755)
    return home


def test_executor_command_runs_spark_kubernetes_executor_backend(tmp_path):
    env = {
        "PATH": os.environ["PATH"],
        "JAVA_HOME": str(_fake_java(tmp_path)),
        "SPARK_HOME": "/opt/spark",
        "SPARK_EXECUTOR_MEMORY": "2g",
        "SPARK_DRIVER_URL": "spark://CoarseGrainedScheduler@wj-driver.ns.svc:7078",
        "SPARK_EXECUTOR_ID": "3",
        "SPARK_EXECUTOR_CORES": "1",
        "SPARK_APPLICATION_ID": "spark-app-1",
        "SPARK_EXECUTOR_POD_IP": "10.0.0.7",
        "SPARK_RESOURCE_PROFILE_ID": "0",
        "SPARK_EXECUTOR_POD_NAME": "wj-exec-3",
        "SPARK_JAVA_OPT_1": "-Dspark.driver.port=7078",
        "SPARK_JAVA_OPT_0": "-Xss64m",
        "SPARK_JAVA_OPT_10": "-Dlast=1",
    }
    done = subprocess.run(["bash", str(ENTRYPOINT), "executor"], env=env, capture_output=True, text=True, check=True)
    args = done.stdout.splitlines()
    assert args[:3] == ["-Xss64m", "-Dspark.driver.port=7078", "-Dlast=1"]  # SPARK_JAVA_OPT_n in numeric order
    assert "-Xmx2g" in args and "org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend" in args
    cp = args[args.index("-cp") + 1]
    assert "/opt/spark/jars/*" in cp.split(":")
    pairs = dict(zip(args, args[1:], strict=False))  # each argument to the one after it
    assert pairs["--driver-url"] == env["SPARK_DRIVER_URL"] and pairs["--hostname"] == "10.0.0.7"
    assert pairs["--executor-id"] == "3" and pairs["--podName"] == "wj-exec-3" and pairs["--app-id"] == "spark-app-1"


def test_other_commands_pass_through():
    done = subprocess.run(["bash", str(ENTRYPOINT), "echo", "windjoin", "run"], capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout == "windjoin run\n"


def test_dockerfile_copies_only_what_exists_and_is_not_ignored():
    dockerfile = (ROOT / "Dockerfile").read_text()
    ignore = (ROOT / ".dockerignore").read_text().splitlines()
    allowed = {line[1:].rstrip("/") for line in ignore if line.startswith("!")}
    copies = re.findall(r"^COPY (.+) \S+$", dockerfile, re.MULTILINE)
    sources = [m.split()[0] for m in copies if not m.startswith("--from=")]  # --from: another stage's files
    assert sources
    for group in sources:
        for src in group.split():
            assert (ROOT / src).exists(), src
            assert src.split("/")[0] in allowed, f"{src} is excluded by .dockerignore"
    for folder in ("windjoin", *SOURCE_FOLDERS):  # what setup.py installs as windjoin.*
        assert f"COPY {folder} {folder}" in dockerfile
    assert re.search(r"^COPY .*setup\.py", dockerfile, re.MULTILINE)
    assert re.search(r"^USER 10001", dockerfile, re.MULTILINE), "the image runs as a non-root user"
    assert "openjdk-17" in dockerfile


def test_chart_uses_the_image_paths():
    dockerfile = (ROOT / "Dockerfile").read_text()
    chart = "\n".join(p.read_text() for p in (ROOT / "helm" / "windjoin" / "templates").glob("*"))
    for path in set(re.findall(r"/opt/windjoin/venv/bin/python", chart)):
        assert path in dockerfile
    assert "runAsUser: 10001" in (ROOT / "helm" / "windjoin" / "values.yaml").read_text()
