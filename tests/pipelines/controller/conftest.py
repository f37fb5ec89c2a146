"""The controller tests' fresh Redis namespace for load reports and decisions, removed afterwards."""

from __future__ import annotations

import uuid

import pytest

from windjoin.connectors.redis.load_reports import LoadReports


@pytest.fixture
def namespace(redis_url):
    ns = f"t{uuid.uuid4().hex[:8]}"
    yield ns
    reports = LoadReports(redis_url, ns)
    reports.client.delete(reports.key, f"{ns}:{{control}}:decision", f"{ns}:{{control}}:decisions")
    reports.close()
