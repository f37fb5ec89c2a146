"""A 3-site distributed PMJoin run on the real broker: three `windjoin sites site` processes and Kafka between them.

`windjoin sites run examples/pmjoin_sites.yaml` plans the query, produces 600 s of event time that follows the
STATS rates, and runs the sites. The test reads the source topics back from Kafka and checks, independently of
the code under test (brute-force oracle on those events):

* the sites' results, as a multiset of combinations, equal the oracle's (nothing lost, nothing duplicated);
* every plan edge carried exactly the sub-join it stands for (its streams, its substream group's values);
* the tuples that crossed sites, in planner units per second of event time, are within 10% of the planner's
  predicted communication cost.
"""

from __future__ import annotations

import json
import uuid
from collections import Counter
from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner
from confluent_kafka import Consumer, KafkaError, TopicPartition

from tests.pipelines.sites_oracle import expected_edge_tuples, oracle_for
from windjoin.connectors.local import processes
from windjoin.operators.pmjoin.execution import ExecutionPlan
from windjoin.pipelines.cli.sites import sites
from windjoin.pipelines.sites.site import END_KEY, source_topic

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
SPAN_S = 600


def read_topic(bootstrap: str, topic: str) -> list[dict]:
    """Every event of a one-partition source topic, up to its end-of-stream record."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"check-{uuid.uuid4().hex}", "enable.auto.commit": False}
    )
    events: list[dict] = []
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        for _ in range(600):
            for msg in consumer.consume(num_messages=5000, timeout=0.2):
                if msg.error() is not None and msg.error().code() != KafkaError._PARTITION_EOF:
                    raise AssertionError(f"reading {topic}: {msg.error()}")
                if msg.key() == END_KEY:
                    return events
                events.append(orjson.loads(msg.value()))
        raise AssertionError(f"no end-of-stream record in {topic}")
    finally:
        consumer.close()


def test_three_sites_match_the_predicted_cost_and_the_oracle(kafka_bootstrap, tmp_path):
    out = tmp_path / "run"
    args = ["run", str(EXAMPLES / "pmjoin_sites.yaml"), "--bootstrap", kafka_bootstrap]
    args += ["--span", str(SPAN_S), "--seed", "7", "--out", str(out), "--timeout", "90", "--json"]
    invoked = CliRunner().invoke(sites, args)
    assert invoked.exit_code == 0, invoked.output
    report = json.loads(invoked.output)
    assert all(not processes.is_alive(pid) for pid in report["pids"].values())

    plan = ExecutionPlan.from_dict(orjson.loads((out / "plan.json").read_bytes()))
    assert plan.sites == ("n1", "n2", "n3")
    events = {s.name: read_topic(kafka_bootstrap, source_topic(report["topic_prefix"], s.name)) for s in plan.streams}
    assert {k: len(v) for k, v in events.items()} == report["events"]

    # Results: the union of the three sites' result files equals the oracle as a multiset.
    records = []
    for site in plan.sites:
        with (out / f"{site}.results.jsonl").open("rb") as f:
            records.extend(orjson.loads(line) for line in f)
    got = Counter(tuple(r[s.name]["id"] for s in plan.streams) for r in records)
    want = oracle_for(plan, events, (1 << len(plan.streams)) - 1)
    assert sum(want.values()) > 1000
    assert got == want
    assert report["equals_centralized_mjoin"] is True

    # Every edge carried exactly its sub-join (sources of a group's values, pairs of that group).
    site_reports = [orjson.loads((out / f"{s}.report.json").read_bytes()) for s in plan.sites]
    shipped = Counter(
        {(e["channel"], e["to_instance"], e["slot"]): e["tuples"] for r in site_reports for e in r["edges"]}
    )
    assert shipped == +expected_edge_tuples(plan, events)
    assert {e.channel.split(":")[0] for e in plan.edges()} == {"src", "op"}  # sources and intermediate results

    # Cross-site traffic per second of event time vs the planner's predicted cost (bytes/s, tuple size 1).
    cost = report["cost"]
    assert cost["predicted_cost"] == pytest.approx(14.4)
    assert cost["measured_cost"] == pytest.approx(cost["predicted_cost"], rel=0.10)
    assert set(cost["links"]) == set(plan.predicted_links())
    for link, v in cost["links"].items():  # per link the volumes are smaller: a looser band
        assert v["measured_units_per_s"] == pytest.approx(v["predicted_units_per_s"], rel=0.3), link
        assert v["encoded_bytes"] > v["tuples"] * 40  # JSON records with headers, not planner units
    print(
        f"\npredicted {cost['predicted_cost']:.3f} B/s, measured {cost['measured_cost']:.3f} "
        f"(ratio {cost['ratio']:.3f}); results {report['results']}; wall {report['wall_s']['total']:.1f} s"
    )


def test_count_windows_are_refused_before_anything_starts(tmp_path):
    stats = (EXAMPLES / "pmjoin_sites.yaml").read_text().replace("window: {time: 0.5}", "window: {count: 10}", 1)
    path = tmp_path / "count.yaml"
    path.write_text(stats)
    invoked = CliRunner().invoke(sites, ["run", str(path), "--bootstrap", "127.0.0.1:1", "--out", str(tmp_path)])
    assert invoked.exit_code != 0
    assert "time windows only" in invoked.output


def test_a_site_not_in_the_plan_is_refused(tmp_path):
    from windjoin.pipelines.sites.driver import prepare

    plan, _, _ = prepare(EXAMPLES / "pmjoin_sites.yaml")
    path = tmp_path / "plan.json"
    path.write_bytes(orjson.dumps(plan.to_dict()))
    args = ["site", str(path), "--site", "n9", "--bootstrap", "127.0.0.1:1", "--prefix", "p", "--out", "x"]
    invoked = CliRunner().invoke(sites, args)
    assert invoked.exit_code == 2 and "'n9' is not a site of the plan" in invoked.output
