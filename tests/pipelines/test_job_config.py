"""The join job refuses, before Spark starts, specs it cannot run, naming every key at fault."""

from __future__ import annotations

from pathlib import Path

import pytest

from windjoin.operators.spec import load_spec, parse_spec
from windjoin.pipelines.join_job import JobConfigError, check_runnable

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def three_way() -> dict:
    """The 3-way example spec as a mapping (read with the spec's own YAML 1.2 loader: `on` stays a key)."""
    return load_spec(EXAMPLES / "three_way.yaml").model_dump(by_alias=True, exclude_none=True)


def test_n_way_tasks_and_missing_topics_are_refused_before_spark():
    data = three_way()
    data["streams"]["orders"]["topic"] = "orders"
    with pytest.raises(JobConfigError) as err:
        check_runnable(parse_spec(data))
    message = str(err.value)
    assert "tasks[0].join" in message and "3 streams" in message
    assert "streams.payments.topic" in message and "streams.shipments.topic" in message
    assert "streams.orders.topic" not in message
    assert "checkpoint" in message


def test_a_two_way_spec_with_topics_and_checkpoint_is_runnable(tmp_path):
    data = three_way()
    data["tasks"][0]["join"] = ["orders", "payments"]
    data["tasks"][0]["on"] = data["tasks"][0]["on"][:1]
    del data["streams"]["shipments"]
    for name, stream in data["streams"].items():
        stream["topic"] = name
    data["checkpoint"] = str(tmp_path / "ckpt")
    check_runnable(parse_spec(data))
