"""docker/hadoop_aws.py (the image's optional S3A jars, HADOOP_AWS_VERSION), offline against a file:// Maven
repository laid out as Maven Central is: the AWS SDK bundle's version is the one hadoop-aws's POM names through
its parent's dependencyManagement and properties, every file is checked against its .sha1, nothing is left in the
jars folder when one check fails, and a version other than pyspark's bundled Hadoop is refused. (The real download
from Maven Central cannot run here: no access to it.)"""

from __future__ import annotations

import hashlib
import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "docker" / "hadoop_aws.py"
_spec = importlib.util.spec_from_file_location("hadoop_aws", SCRIPT)
hadoop_aws = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(hadoop_aws)

AWS_POM = """<?xml version="1.0" encoding="UTF-8"?>
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <parent>
    <groupId>org.apache.hadoop</groupId>
    <artifactId>hadoop-project</artifactId>
    <version>{v}</version>
  </parent>
  <artifactId>hadoop-aws</artifactId>
  <version>{v}</version>
  <dependencies>
    <dependency><groupId>org.apache.hadoop</groupId><artifactId>hadoop-common</artifactId>
      <scope>provided</scope></dependency>
    <dependency><groupId>software.amazon.awssdk</groupId><artifactId>bundle</artifactId>
      <scope>compile</scope></dependency>
    <dependency><groupId>software.amazon.s3.analyticsaccelerator</groupId>
      <artifactId>analyticsaccelerator-s3</artifactId></dependency>
    <dependency><groupId>junit</groupId><artifactId>junit</artifactId><scope>test</scope></dependency>
    <dependency><groupId>org.wildfly.openssl</groupId><artifactId>wildfly-openssl</artifactId>
      <scope>runtime</scope></dependency>
  </dependencies>
</project>
"""
PROJECT_POM = """<?xml version="1.0" encoding="UTF-8"?>
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <parent><groupId>org.apache.hadoop</groupId><artifactId>hadoop-main</artifactId><version>{v}</version></parent>
  <artifactId>hadoop-project</artifactId>
  <version>{v}</version>
  <properties>
    <aws-java-sdk-v2.version>{sdk}</aws-java-sdk-v2.version>
    <aal.base>1.3</aal.base>
    <amazon-s3-analyticsaccelerator-s3.version>${{aal.base}}.1</amazon-s3-analyticsaccelerator-s3.version>
  </properties>
  <dependencyManagement><dependencies>
    <dependency><groupId>software.amazon.awssdk</groupId><artifactId>bundle</artifactId>
      <version>${{aws-java-sdk-v2.version}}</version></dependency>
    <dependency><groupId>software.amazon.s3.analyticsaccelerator</groupId>
      <artifactId>analyticsaccelerator-s3</artifactId>
      <version>${{amazon-s3-analyticsaccelerator-s3.version}}</version></dependency>
  </dependencies></dependencyManagement>
</project>
"""
MAIN_POM = """<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion>
  <groupId>org.apache.hadoop</groupId><artifactId>hadoop-main</artifactId><version>{v}</version>
  <properties><aws-java-sdk-v2.version>0.0.0-overridden</aws-java-sdk-v2.version></properties>
</project>
"""


def _put(repo: Path, group: str, artifact: str, version: str, ext: str, body: bytes, sha1: str | None = None) -> None:
    folder = repo / group.replace(".", "/") / artifact / version
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{artifact}-{version}.{ext}").write_bytes(body)
    (folder / f"{artifact}-{version}.{ext}.sha1").write_text(sha1 or hashlib.sha1(body).hexdigest())


def _repository(tmp_path: Path, version: str = "3.5.0", sdk: str = "2.35.4") -> Path:
    repo = tmp_path / "maven"
    _put(repo, "org.apache.hadoop", "hadoop-aws", version, "pom", AWS_POM.format(v=version).encode())
    _put(repo, "org.apache.hadoop", "hadoop-project", version, "pom", PROJECT_POM.format(v=version, sdk=sdk).encode())
    _put(repo, "org.apache.hadoop", "hadoop-main", version, "pom", MAIN_POM.format(v=version).encode())
    _put(repo, "org.apache.hadoop", "hadoop-aws", version, "jar", b"s3a classes")
    _put(repo, "software.amazon.awssdk", "bundle", sdk, "jar", b"aws sdk" * 1000)
    _put(repo, "software.amazon.s3.analyticsaccelerator", "analyticsaccelerator-s3", "1.3.1", "jar", b"aal")
    return repo


def _jars(tmp_path: Path, hadoop: str = "3.5.0") -> Path:
    jars = tmp_path / "jars"
    jars.mkdir()
    (jars / f"hadoop-client-api-{hadoop}.jar").write_bytes(b"")
    (jars / f"hadoop-client-runtime-{hadoop}.jar").write_bytes(b"")
    return jars


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=60)


def test_the_sdk_bundle_is_the_version_hadoop_aws_names(tmp_path):
    repo, jars = _repository(tmp_path), _jars(tmp_path)
    done = _run("3.5.0", "--jars", str(jars), "--repository", repo.as_uri())
    assert done.returncode == 0, done.stderr
    added = {p.name: p.read_bytes() for p in jars.iterdir() if not p.name.startswith("hadoop-client-")}
    assert added == {
        "hadoop-aws-3.5.0.jar": b"s3a classes",
        "bundle-2.35.4.jar": b"aws sdk" * 1000,  # hadoop-project's property, not hadoop-main's
        "analyticsaccelerator-s3-1.3.1.jar": b"aal",  # a property made of another
    }
    assert "wildfly-openssl: not fetched" in done.stderr  # declared, not fetched: said
    assert "junit" not in done.stderr and "hadoop-common" not in done.stderr


def test_a_jar_that_does_not_match_its_sha1_leaves_nothing_behind(tmp_path):
    repo, jars = _repository(tmp_path), _jars(tmp_path)
    _put(repo, "software.amazon.awssdk", "bundle", "2.35.4", "jar", b"aws sdk", sha1="0" * 40)
    done = _run("3.5.0", "--jars", str(jars), "--repository", repo.as_uri())
    assert done.returncode == 1
    assert "bundle-2.35.4.jar: SHA-1" in done.stderr and "does not match" in done.stderr, done.stderr
    assert sorted(p.name for p in jars.iterdir()) == ["hadoop-client-api-3.5.0.jar", "hadoop-client-runtime-3.5.0.jar"]


def test_a_pom_that_does_not_match_its_sha1_is_refused(tmp_path):
    repo, jars = _repository(tmp_path), _jars(tmp_path)
    _put(repo, "org.apache.hadoop", "hadoop-project", "3.5.0", "pom", b"<project/>", sha1="1" * 40)
    done = _run("3.5.0", "--jars", str(jars), "--repository", repo.as_uri())
    assert done.returncode == 1 and "hadoop-project-3.5.0.pom: SHA-1" in done.stderr, done.stderr


def test_a_version_other_than_pysparks_hadoop_is_refused(tmp_path):
    repo, jars = _repository(tmp_path, version="3.4.1", sdk="2.24.6"), _jars(tmp_path, hadoop="3.5.0")
    done = _run("3.4.1", "--jars", str(jars), "--repository", repo.as_uri())
    assert done.returncode == 1
    assert "HADOOP_AWS_VERSION=3.4.1 but pyspark bundles Hadoop 3.5.0" in done.stderr, done.stderr
    assert not list(jars.glob("hadoop-aws-*"))


def test_an_undefined_property_is_named(tmp_path):
    repo, jars = _repository(tmp_path), _jars(tmp_path)
    pom = PROJECT_POM.format(v="3.5.0", sdk="x").replace("<aws-java-sdk-v2.version>x</aws-java-sdk-v2.version>", "")
    _put(repo, "org.apache.hadoop", "hadoop-project", "3.5.0", "pom", pom.encode())
    main = MAIN_POM.format(v="3.5.0").replace("<aws-java-sdk-v2.version>0.0.0-overridden</aws-java-sdk-v2.version>", "")
    _put(repo, "org.apache.hadoop", "hadoop-main", "3.5.0", "pom", main.encode())
    with pytest.raises(hadoop_aws.FetchError, match=r"property \$\{aws-java-sdk-v2.version\} is not defined"):
        hadoop_aws.install("3.5.0", jars, repo.as_uri())


def test_an_unreachable_repository_is_an_error_naming_the_url(tmp_path):
    jars = _jars(tmp_path)
    done = _run("3.5.0", "--jars", str(jars), "--repository", (tmp_path / "nowhere").as_uri())
    assert done.returncode == 1 and "cannot fetch" in done.stderr and "hadoop-aws-3.5.0.pom" in done.stderr


def test_the_pyspark_here_bundles_the_hadoop_the_dockerfile_names():
    """The Dockerfile's example version is the Hadoop this project's pyspark bundles."""
    import pyspark

    bundled = hadoop_aws.bundled_hadoop(Path(pyspark.__file__).parent / "jars")
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert f"HADOOP_AWS_VERSION={bundled}" in dockerfile, bundled


def test_the_default_build_fetches_nothing():
    """HADOOP_AWS_VERSION empty by default, and the fetch runs only when it is set."""
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert 'ARG HADOOP_AWS_VERSION=""' in dockerfile
    assert dockerfile.count("python hadoop_aws.py") == 1
    guarded = r'^RUN if \[ -n "\$\{HADOOP_AWS_VERSION\}" \]; then \\\n\s+/opt/windjoin/venv/bin/python hadoop_aws.py '
    assert re.search(guarded, dockerfile, re.MULTILINE), "the fetch runs only when HADOOP_AWS_VERSION is set"
    build = (ROOT / "scripts" / "build_image.sh").read_text()
    assert '--build-arg "HADOOP_AWS_VERSION=$HADOOP_AWS_VERSION"' in build
