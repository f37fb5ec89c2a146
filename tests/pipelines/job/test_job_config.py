"""The join job refuses, before Spark starts, specs it cannot run, naming every key at fault."""

from __future__ import annotations

from pathlib import Path

import pytest

from windjoin.operators.spec import SpecError, load_spec, parse_spec
from windjoin.pipelines.job.join_job import JobConfigError, check_runnable

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


def three_way() -> dict:
    """The 3-way example spec as a mapping (read with the spec's own YAML 1.2 loader: `on` stays a key)."""
    return load_spec(EXAMPLES / "three_way.yaml").model_dump(by_alias=True, exclude_none=True)


def test_missing_topics_and_checkpoint_are_refused_before_spark():
    data = three_way()
    data["streams"]["orders"]["topic"] = "orders"
    with pytest.raises(JobConfigError) as err:
        check_runnable(parse_spec(data))
    message = str(err.value)
    assert "streams.payments.topic" in message and "streams.shipments.topic" in message
    assert "streams.orders.topic" not in message
    assert "checkpoint" in message
    assert "tasks[0]" not in message  # a 3-way task is runnable


def test_an_n_way_spec_with_topics_and_checkpoint_is_runnable(tmp_path):
    """Equalities on different attributes, no stream keyed: every tuple goes to partition 0, which joins them all."""
    data = three_way()
    for name, stream in data["streams"].items():
        stream["topic"] = name
    data["checkpoint"] = str(tmp_path / "ckpt")
    check_runnable(parse_spec(data))


def test_keyed_streams_an_n_way_task_joins_on_different_attributes_are_refused():
    """Hash partitions by key cannot hold every combination of orders.order = payments.order and
    orders.customer = shipments.customer together: refused (by the spec, so before the job too), naming the keys."""
    data = three_way()
    keys = {"orders": "order", "payments": "order", "shipments": "customer"}
    for name, stream in data["streams"].items():
        stream["topic"], stream["key"] = name, keys[name]
    with pytest.raises(SpecError) as err:
        parse_spec(data)
    assert "tasks[0].on" in str(err.value) and "partitioned by key" in str(err.value)
    assert "orders.order" in str(err.value) and "shipments.customer" in str(err.value)


def test_a_two_way_spec_with_topics_and_checkpoint_is_runnable(tmp_path):
    data = three_way()
    data["tasks"][0]["join"] = ["orders", "payments"]
    data["tasks"][0]["on"] = data["tasks"][0]["on"][:1]
    del data["streams"]["shipments"]
    for name, stream in data["streams"].items():
        stream["topic"] = name
    data["checkpoint"] = str(tmp_path / "ckpt")
    check_runnable(parse_spec(data))


def test_outer_semi_and_anti_tasks_run_over_time_and_count_windows(tmp_path):
    """The slots recall which tuples paired over time windows (asymmetric bounds too) and count windows."""
    on = [{"op": "eq", "left": "R.k", "right": "S.k"}]
    data = {
        "window": {"kind": "time", "lower_ms": -300_000, "upper_ms": 60_000},
        "streams": {
            "R": {"fields": {"k": "int"}, "topic": "r", "key": "k"},
            "S": {"fields": {"k": "int"}, "topic": "s", "key": "k"},
        },
        "tasks": [{"name": "pairs", "join": ["R", "S"], "on": on}],
        "checkpoint": str(tmp_path / "ckpt"),
    }
    data["tasks"].append({"name": "unpaid", "join": ["R", "S"], "on": on, "type": "anti"})
    check_runnable(parse_spec(data))
    data["window"] = {"kind": "count", "size": 100}
    check_runnable(parse_spec(data))
