"""A sink added in its own room (tests/pipelines/toy_sink.py): the spec accepts its key, `build_sinks` makes it,
and the streaming job (Kafka → Spark → the toy sink) writes results equal to the brute-force oracle."""

from __future__ import annotations

import random

import pytest

from tests.pipelines.pipeline_helpers import keyed_eq_spec, produce_events
from tests.pipelines.toy_sink import KIND, ToySink
from windjoin.operators.spec import SpecError, parse_spec
from windjoin.operators.testing.oracle import as_multiset, oracle_join
from windjoin.pipelines.job.join_job import start_job
from windjoin.pipelines.job.sinks import build_sinks


def _events(n: int, seed: int) -> list[dict]:
    """R (k, x) and S (k, a) events, 1 ms apart, over 20 keys (the streams of `keyed_eq_spec`)."""
    rng = random.Random(seed)
    base = 1_700_000_000_000
    return [
        {"stream": "R", "ts": base + i, "k": rng.randrange(20), "x": rng.randrange(100)}
        if rng.random() < 0.5
        else {"stream": "S", "ts": base + i, "k": rng.randrange(20), "a": rng.randrange(100)}
        for i in range(n)
    ]


def test_an_unknown_sink_kind_names_the_registered_kinds(tmp_path) -> None:
    spec = keyed_eq_spec(lambda name: name, tmp_path) | {"sinks": {"toy_jsnol": {"path": str(tmp_path)}}}
    unknown = rf"sinks.toy_jsnol: unknown sink kind 'toy_jsnol' \(registered kinds: .*'{KIND}'"
    with pytest.raises(SpecError, match=unknown):
        parse_spec(spec)
    spec["sinks"] = {KIND: {"path": str(tmp_path), "extra": 1}}
    with pytest.raises(SpecError, match=f"sinks.{KIND}.extra: Extra inputs are not permitted"):
        parse_spec(spec)


def test_build_sinks_makes_the_registered_kind(tmp_path) -> None:
    spec = keyed_eq_spec(lambda name: name, tmp_path) | {"sinks": {KIND: {"path": str(tmp_path / "toy")}}}
    [sink] = build_sinks(parse_spec(spec))
    assert isinstance(sink, ToySink) and sink.path == tmp_path / "toy"


@pytest.mark.slow
def test_the_job_writes_the_oracle_results_to_a_toy_sink(spark, kafka_bootstrap, unique_topic, tmp_path) -> None:
    spec_dict = keyed_eq_spec(unique_topic, tmp_path) | {
        "sinks": {KIND: {"path": str(tmp_path / "toy")}},
        "max_offsets_per_trigger": 400,
    }
    events = _events(1200, seed=3)
    produce_events(kafka_bootstrap, spec_dict, events)
    spec = parse_spec(spec_dict)
    sinks = build_sinks(spec)
    query = start_job(spark, spec, kafka_bootstrap, sinks, available_now=True)
    query.awaitTermination(timeout=600)
    assert query.exception() is None
    [toy] = sinks
    got = [("eq", row["R"], row["S"]) for row in toy.rows("eq")]
    expected, late = oracle_join(spec_dict, events)
    assert not late and len(expected) > 100
    assert as_multiset(got) == as_multiset(expected)
