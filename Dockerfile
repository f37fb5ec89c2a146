# One image for every windjoin component: the join job's driver and executors, the query proxy, the controller,
# producers. Python 3.11 + Java 17 (Spark's JVM) + pyspark + windjoin, running as a non-root user.
# Build: docker build -t windjoin:0.1.0 .
FROM python:3.11-slim-bookworm

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
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

RUN python -m venv /opt/windjoin/venv
WORKDIR /opt/windjoin/src
COPY pyproject.toml README.md ./
COPY operators operators
COPY connectors connectors
COPY pipelines pipelines
RUN pip install . \
    && python -c "import windjoin.pipelines.cli, pyspark" \
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
