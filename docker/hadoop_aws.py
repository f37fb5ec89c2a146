"""Put Hadoop's S3A filesystem (hadoop-aws) and the AWS SDK it was built against into pyspark's jars folder.

Run at image build time when HADOOP_AWS_VERSION is set (Dockerfile). The version must be the Hadoop that pyspark
bundles (its hadoop-client-api jar): S3A's classes call into that Hadoop's internals. The AWS SDK v2 `bundle` (and
`analyticsaccelerator-s3`, where that hadoop-aws declares it) are taken at the versions hadoop-aws's POM names, read
through its parent POMs (hadoop-project's dependencyManagement and properties), not pinned here. Every file is
checked against the repository's .sha1 before it is used (that catches a broken transfer or mirror, not a
compromised repository). Usage:

    python hadoop_aws.py 3.5.0 [--jars DIR] [--repository https://repo1.maven.org/maven2]
"""

from __future__ import annotations

import argparse
import hashlib
import http.client
import re
import sys
import urllib.request
import xml.etree.ElementTree as ET
from pathlib import Path

CENTRAL = "https://repo1.maven.org/maven2"
# What S3A needs at run time besides Hadoop itself (in pyspark's hadoop-client jars): (group, artifact, required).
WANTED = [
    ("software.amazon.awssdk", "bundle", True),
    ("software.amazon.s3.analyticsaccelerator", "analyticsaccelerator-s3", False),
]
RUNTIME_SCOPES = {"compile", "runtime"}


class FetchError(Exception):
    """The jars cannot be had as asked; the message says what and where."""


def _url(repository: str, group: str, artifact: str, version: str, ext: str) -> str:
    return f"{repository.rstrip('/')}/{group.replace('.', '/')}/{artifact}/{version}/{artifact}-{version}.{ext}"


def _open(url: str) -> http.client.HTTPResponse:
    try:
        return urllib.request.urlopen(url, timeout=120)  # a file:// URL too (the tests' repository)
    except OSError as err:
        raise FetchError(f"cannot fetch {url}: {err}") from err


def _listed_sha1(url: str) -> str:
    with _open(url + ".sha1") as response:
        words = response.read().decode("ascii", "replace").split()
    return words[0].lower() if words else ""


def _check(url: str, actual: str) -> None:
    listed = _listed_sha1(url)
    if listed != actual:
        raise FetchError(f"{url}: SHA-1 {actual} does not match the repository's {url}.sha1 ({listed[:64]!r})")


def fetch_checked(url: str) -> bytes:
    """The (small) file at url, after its SHA-1 matched the repository's url.sha1."""
    try:
        with _open(url) as response:
            body = response.read()
    except http.client.HTTPException as err:
        raise FetchError(f"cannot fetch {url}: {err!r}") from err
    _check(url, hashlib.sha1(body).hexdigest())
    return body


def download_checked(url: str, dest: Path) -> None:
    """The file at url streamed to dest (the AWS SDK bundle is over 600 MB), its SHA-1 checked; dest is removed
    when the check fails."""
    digest = hashlib.sha1()
    try:
        with _open(url) as response, dest.open("wb") as out:
            while chunk := response.read(1 << 20):
                digest.update(chunk)
                out.write(chunk)
        _check(url, digest.hexdigest())
    except FetchError:
        dest.unlink(missing_ok=True)
        raise
    except (OSError, http.client.HTTPException) as err:  # a transfer cut short, a full disk
        dest.unlink(missing_ok=True)
        raise FetchError(f"cannot fetch {url}: {err!r}") from err


def _strip_namespaces(root: ET.Element) -> ET.Element:
    for element in root.iter():
        if isinstance(element.tag, str) and "}" in element.tag:
            element.tag = element.tag.split("}", 1)[1]
    return root


def _text(element: ET.Element | None, path: str) -> str:
    found = None if element is None else element.find(path)
    return "" if found is None or found.text is None else found.text.strip()


class Pom:
    """One POM and its parents: properties and managed versions, the nearest POM's winning."""

    def __init__(self, repository: str, group: str, artifact: str, version: str) -> None:
        self.chain: list[ET.Element] = []
        coordinates: tuple[str, str, str] | None = (group, artifact, version)
        while coordinates and len(self.chain) < 6:
            url = _url(repository, *coordinates, "pom")
            root = _strip_namespaces(ET.fromstring(fetch_checked(url)))
            self.chain.append(root)
            parent = root.find("parent")
            coordinates = (
                None
                if parent is None
                else (_text(parent, "groupId"), _text(parent, "artifactId"), _text(parent, "version"))
            )
        self.properties: dict[str, str] = {"project.version": version, "project.parent.version": ""}
        if self.chain[0].find("parent") is not None:
            self.properties["project.parent.version"] = _text(self.chain[0], "parent/version")
        for root in reversed(self.chain):  # the nearest POM's properties override its parents'
            for prop in root.findall("properties/*"):
                self.properties[prop.tag] = (prop.text or "").strip()

    def resolve(self, value: str, depth: int = 0) -> str:
        """value with ${property} references replaced, as Maven does; an unknown one is an error naming it."""

        def one(match: re.Match[str]) -> str:
            name = match.group(1)
            if name not in self.properties or depth > 10:
                raise FetchError(f"property ${{{name}}} is not defined in {self.describe()}")
            return self.resolve(self.properties[name], depth + 1)

        return re.sub(r"\$\{([^}]+)\}", one, value)

    def describe(self) -> str:
        return " <- ".join(
            f"{_text(r, 'groupId') or _text(r, 'parent/groupId')}:{_text(r, 'artifactId')}:"
            f"{_text(r, 'version') or _text(r, 'parent/version')}"
            for r in self.chain
        )

    def dependencies(self) -> list[ET.Element]:
        return self.chain[0].findall("dependencies/dependency")

    def managed_version(self, group: str, artifact: str) -> str:
        for root in self.chain:
            for dep in root.findall("dependencyManagement/dependencies/dependency"):
                if _text(dep, "groupId") == group and _text(dep, "artifactId") == artifact and _text(dep, "version"):
                    return _text(dep, "version")
        return ""


def bundled_hadoop(jars: Path) -> str:
    """The Hadoop version pyspark bundles (hadoop-client-api-<version>.jar)."""
    found = sorted(p.name for p in jars.glob("hadoop-client-api-*.jar"))
    if len(found) != 1:
        raise FetchError(f"expected one hadoop-client-api-*.jar in {jars}, found {found or 'none'}")
    return found[0].removeprefix("hadoop-client-api-").removesuffix(".jar")


def plan(repository: str, version: str) -> list[tuple[str, str, str]]:
    """(group, artifact, version) of every jar to fetch: hadoop-aws and the wanted dependencies its POM declares."""
    pom = Pom(repository, "org.apache.hadoop", "hadoop-aws", version)
    jars = [("org.apache.hadoop", "hadoop-aws", version)]
    declared = {}
    for dep in pom.dependencies():
        scope = _text(dep, "scope") or "compile"
        if scope in RUNTIME_SCOPES and _text(dep, "optional") != "true":
            declared[(_text(dep, "groupId"), _text(dep, "artifactId"))] = dep
    for group, artifact, required in WANTED:
        dep = declared.pop((group, artifact), None)
        if dep is None:
            if required:
                raise FetchError(f"{pom.describe()} declares no {group}:{artifact} dependency")
            continue
        raw = _text(dep, "version") or pom.managed_version(group, artifact)
        if not raw:
            raise FetchError(f"no version of {group}:{artifact} in {pom.describe()}")
        jars.append((group, artifact, pom.resolve(raw)))
    for group, artifact in sorted(declared):
        if group != "org.apache.hadoop":
            print(f"hadoop-aws {version} also declares {group}:{artifact}: not fetched", file=sys.stderr)
    return jars


def install(version: str, jars_dir: Path, repository: str = CENTRAL) -> list[Path]:
    """Fetch and check every jar, then move them all into jars_dir (none is left there when one fails)."""
    bundled = bundled_hadoop(jars_dir)
    if version != bundled:
        raise FetchError(
            f"HADOOP_AWS_VERSION={version} but pyspark bundles Hadoop {bundled} ({jars_dir}): hadoop-aws must be"
            f" the same version, {bundled}"
        )
    fetched: list[tuple[Path, Path]] = []
    try:
        for group, artifact, v in plan(repository, version):
            target = jars_dir / f"{artifact}-{v}.jar"
            partial = jars_dir / f".{target.name}.partial"
            download_checked(_url(repository, group, artifact, v, "jar"), partial)
            fetched.append((partial, target))
    except FetchError:
        for partial, _ in fetched:
            partial.unlink(missing_ok=True)
        raise
    for partial, target in fetched:
        partial.replace(target)
    return [target for _, target in fetched]


def _pyspark_jars() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent / "jars"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("version", help="hadoop-aws version: the Hadoop pyspark bundles, e.g. 3.5.0")
    parser.add_argument("--jars", type=Path, default=None, help="default: pyspark's jars folder")
    parser.add_argument("--repository", default=CENTRAL, help=f"a Maven repository's base URL (default {CENTRAL})")
    args = parser.parse_args(argv)
    try:
        for path in install(args.version, args.jars or _pyspark_jars(), args.repository):
            print(f"installed {path} ({path.stat().st_size} bytes)")
    except FetchError as err:
        print(f"hadoop_aws: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
