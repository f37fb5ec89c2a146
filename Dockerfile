# One image for every windjoin component: the join job's driver and executors, the query proxy, the controller,
# producers. Python 3.11 + Java 17 (Spark's JVM) + pyspark + windjoin (runtime dependencies only: no test tools,
# no embedded broker), running as a non-root user.
# Build: docker build -t windjoin:0.1.0 .
# Without a registry: scripts/build_image.sh (podman, BASE_IMAGE made from Debian's packages, PYTHON=python3).
# With Hadoop's S3A filesystem (an s3a:// checkpoint, helm value storage.objectStore.checkpointUrl):
#   docker build --build-arg HADOOP_AWS_VERSION=3.5.0 -t windjoin:0.1.0-s3a .   (or HADOOP_AWS_VERSION=3.5.0
#   scripts/build_image.sh). It must be the Hadoop pyspark bundles (pyspark/jars/hadoop-client-api-*.jar; 3.5.0
#   for pyspark 4.3): the build fails otherwise. docker/hadoop_aws.py fetches hadoop-aws and the AWS SDK v2
#   `bundle` (and analyticsaccelerator-s3) at the versions hadoop-aws's POM names, each checked against
#   Maven Central's .sha1. For 3.5.0 that should be bundle 2.35.4 and analyticsaccelerator-s3 1.3.1 (what
#   third-party builds report): not verified where this was written, which cannot reach Maven Central; there this
#   path was built only against a local stand-in repository (MAVEN_REPOSITORY=http://127.0.0.1:PORT).
#   The Parquet results need none of it: pyarrow reads s3://, gs:// and abfs:// itself.
ARG BASE_IMAGE=python:3.11-slim-bookworm

# Stage 1: the dependencies' virtualenv (wheels and build files stay in this stage).
FROM ${BASE_IMAGE} AS venv
ARG PYTHON=python
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
RUN ${PYTHON} -m venv /opt/windjoin/venv
WORKDIR /opt/windjoin/src
# The dependencies first, from pyproject.toml alone: a change to the code or the README rebuilds only what follows.
COPY pyproject.toml ./
RUN /opt/windjoin/venv/bin/python -c "import tomllib; print(*tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies'], sep='\n')" \
        > requirements.txt \
    && /opt/windjoin/venv/bin/pip install --no-compile -r requirements.txt
# Optional S3A jars into pyspark's jars folder (the header above); empty HADOOP_AWS_VERSION: none, nothing fetched.
COPY docker/hadoop_aws.py ./
ARG HADOOP_AWS_VERSION=""
ARG MAVEN_REPOSITORY=https://repo1.maven.org/maven2
RUN if [ -n "${HADOOP_AWS_VERSION}" ]; then \
        /opt/windjoin/venv/bin/python hadoop_aws.py "${HADOOP_AWS_VERSION}" --repository "${MAVEN_REPOSITORY}"; \
    fi

# Stage 2: the runtime: Java, tini, procps, the virtualenv and windjoin.
FROM ${BASE_IMAGE}
ARG DEBIAN_FRONTEND=noninteractive
# Unpinned on purpose: the base image's Debian release fixes the versions and security updates still apply.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends openjdk-17-jre-headless procps tini \
    && rm -rf /var/lib/apt/lists/* \
    && ln -s "$(dirname "$(dirname "$(readlink -f "$(command -v java)")")")" /opt/java

ENV JAVA_HOME=/opt/java \
    VIRTUAL_ENV=/opt/windjoin/venv \
    PATH=/opt/windjoin/venv/bin:$PATH \
    PYTHONUNBUFFERED=1

# The dependencies' venv (1.5 GB) is a layer of its own, cached while pyproject.toml stays; windjoin's code is
# installed into it after, so a change to the code rebuilds only these small layers.
COPY --from=venv /opt/windjoin/venv /opt/windjoin/venv
WORKDIR /opt/windjoin/src
COPY pyproject.toml README.md setup.py ./
COPY windjoin windjoin
COPY operators operators
COPY connectors connectors
COPY pipelines pipelines
RUN PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 pip install --no-deps --no-compile . \
    && pip uninstall --yes pip \
    && cd / && rm -rf /opt/windjoin/src
WORKDIR /
RUN python -c "import windjoin.pipelines.cli.main, pyspark" \
    && ln -s "$(python -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))')" /opt/spark

# Spark (driver and executors) and PySpark use the venv's interpreter; SPARK_HOME is the pyspark package.
ENV SPARK_HOME=/opt/spark \
    PYSPARK_PYTHON=/opt/windjoin/venv/bin/python \
    PYSPARK_DRIVER_PYTHON=/opt/windjoin/venv/bin/python

COPY docker/entrypoint.sh /opt/windjoin/entrypoint.sh
RUN groupadd --gid 10001 windjoin \
    && useradd --uid 10001 --gid 10001 --create-home --home-dir /home/windjoin windjoin \
    && mkdir -p /data \
    && chown windjoin:windjoin /data
USER 10001:10001
WORKDIR /home/windjoin

EXPOSE 8080 9108 7078 7079 4040
ENTRYPOINT ["/usr/bin/tini", "--", "/opt/windjoin/entrypoint.sh"]
CMD ["windjoin", "--help"]
