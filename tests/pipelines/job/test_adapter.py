"""The input adapter on Kafka-shaped Arrow batches, without Spark: every record becomes one row, joinable or dead."""

from __future__ import annotations

import orjson
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from windjoin.connectors.kafka.range_reader import ARROW_SCHEMA
from windjoin.operators.control.job_epoch import ControlEpoch
from windjoin.operators.partitioning import Group, RoutingTable
from windjoin.operators.spec import parse_spec
from windjoin.pipelines.job.adapter import CONTROL, SHED, Adapter

SPEC = parse_spec(
    {
        "window": {"kind": "time", "size_ms": 1000},
        "streams": {
            "R": {"fields": {"k": "int", "x": "float"}, "topic": "r", "key": "k"},
            "S": {"fields": {"k": "float", "c": "string"}, "topic": "s", "key": "k"},
        },
        "tasks": [{"name": "t", "join": ["R", "S"], "on": [{"op": "eq", "left": "R.k", "right": "S.k"}]}],
        "partitions": 16,
        "slots": 4,
        "max_future_ms": 60_000,
    }
)
NOW = 1_700_000_000_000


def _batch(records: list[tuple[str, bytes | None, int]]) -> pa.RecordBatch:
    n = len(records)
    return pa.RecordBatch.from_pydict(
        {
            "topic": [r[0] for r in records],
            "partition": [i % 3 for i in range(n)],
            "offset": list(range(n)),
            "key": [None] * n,
            "value": [r[1] for r in records],
            "timestamp": [r[2] for r in records],
        },
        schema=ARROW_SCHEMA,
    )


def _json(**fields) -> bytes:
    return orjson.dumps(fields)


def test_rows_are_checked_partitioned_and_routed():
    adapter = Adapter(SPEC, RoutingTable.round_robin(16, 4), slot_labels=(12, 6, 2, 0))
    records = [
        ("r", _json(ts=NOW, k=5, x=1.5), NOW),
        ("s", _json(ts=NOW + 1, k=5.0, c="a"), NOW),  # 5 and 5.0 are one key: same partition
        ("s", _json(ts=NOW + 2, k=7.0, c="b"), NOW),
        ("r", b"{not json", NOW),
        ("r", _json(ts=NOW, x=1.0), NOW),  # no key field
        ("s", _json(ts=NOW + 120_000, k=1.0, c="z"), NOW),  # two minutes ahead of its record time
        ("q", _json(ts=NOW, k=1), NOW),  # a topic of no stream
        ("r", None, NOW),  # tombstone
    ]
    out = adapter.adapt(_batch(records)).to_pydict()
    assert len(out["slot"]) == len(records)  # one row per record, nothing dropped
    assert out["reason"] == [
        None,
        None,
        None,
        "not_json",
        "missing_field",
        "future_timestamp",
        "unknown_topic",
        "null_value",
    ]
    assert out["part"][0] == out["part"][1] and 0 <= out["part"][2] < 16
    for part, slot in zip(out["part"][:3], out["slot"][:3], strict=True):
        assert slot == (12, 6, 2, 0)[part % 4]  # routing table (round robin) then the slot's label
    assert all(p == -1 for p in out["part"][3:]) and all(s in (12, 6, 2, 0) for s in out["slot"])
    assert out["R__x"][0] == 1.5 and out["S__c"][2] == "b" and out["ts"][1] == NOW + 1
    assert out["stream"] == ["R", "S", "S", "R", "R", "S", None, "R"]
    assert (out["topic"], out["koffset"]) == ([r[0] for r in records], list(range(len(records))))


def test_future_bound_can_be_switched_off():
    spec = SPEC.model_copy(update={"max_future_ms": None})
    adapter = Adapter(spec, RoutingTable.round_robin(16, 4), slot_labels=(12, 6, 2, 0))
    out = adapter.adapt(_batch([("s", _json(ts=NOW + 10**9, k=1.0, c="z"), NOW)])).to_pydict()
    assert out["reason"] == [None]


def test_shedding_drops_the_ratio_of_join_records_the_same_way_every_time():
    adapter = Adapter(SPEC, RoutingTable.round_robin(16, 4), slot_labels=(12, 6, 2, 0))
    n = 20_000
    records = [("r" if i % 2 else "s", _json(ts=NOW + i, k=i % 97, x=1.0, c="a"), NOW + i) for i in range(n)]
    records[5] = ("r", b"{broken", NOW)  # dead letters are never shed
    epoch = ControlEpoch(adapter.routing, shed_ratio=0.3)
    first = adapter.adapt(_batch(records), epoch).to_pydict()
    again = adapter.adapt(_batch(records), epoch).to_pydict()
    assert first == again  # replay-deterministic
    summary = {s: o for s, o, r in zip(first["stream"], first["koffset"], first["reason"], strict=True) if r == SHED}
    joined = [r is None for r in first["reason"]].count(True)
    assert sum(summary.values()) + joined == n - 1
    for stream in ("R", "S"):
        kept = sum(1 for s, r in zip(first["stream"], first["reason"], strict=True) if s == stream and r is None)
        assert abs(summary[stream] / (summary[stream] + kept) - 0.3) < 0.02, (stream, summary, kept)
    broken = [r for o, r in zip(first["koffset"], first["reason"], strict=True) if o == 5 and r != SHED]
    assert len(broken) == 1 and broken[0] is not None  # the broken record is dead-lettered, not shed
    nothing_shed = adapter.adapt(_batch(records), ControlEpoch(adapter.routing)).to_pydict()
    assert SHED not in nothing_shed["reason"] and len(nothing_shed["reason"]) == n
    more = adapter.adapt(_batch(records), ControlEpoch(adapter.routing, shed_ratio=0.6)).to_pydict()
    kept_at = {
        ratio: {o for o, r in zip(out["koffset"], out["reason"], strict=True) if r is None}
        for ratio, out in ((0.3, first), (0.6, more))
    }
    assert kept_at[0.6] < kept_at[0.3]  # a higher ratio sheds a superset


def test_control_rows_reach_every_slot_of_both_routings():
    adapter = Adapter(SPEC, RoutingTable.round_robin(16, 4), slot_labels=(12, 6, 2, 0, 9))
    pending = adapter.routing.with_moves({Group(3): 4})
    rows = adapter.control_rows(ControlEpoch(adapter.routing, 0.1, pending)).to_pydict()
    assert rows["slot"] == [12, 6, 2, 0, 9] and set(rows["reason"]) == {CONTROL}
    assert ControlEpoch.from_json(orjson.loads(rows["detail"][0])) == ControlEpoch(adapter.routing, 0.1, pending)


def test_a_spread_partition_reaches_all_its_slots_and_is_stored_at_one():
    adapter = Adapter(SPEC, RoutingTable.round_robin(16, 4), slot_labels=(12, 6, 2, 0))
    records = [("r" if i % 2 else "s", _json(ts=NOW + i, k=i % 7, x=1.0, c="a"), NOW + i) for i in range(400)]
    plain = adapter.adapt(_batch(records)).to_pydict()
    hot = plain["part"][0]
    home = adapter.routing.slot_of[hot]
    spread = adapter.routing.with_spread(hot, (home, *[s for s in range(4) if s != home][:2]))
    out = adapter.adapt(_batch(records), ControlEpoch(spread)).to_pydict()
    assert out == adapter.adapt(_batch(records), ControlEpoch(spread)).to_pydict()  # replay-deterministic
    copies: dict[int, list[tuple[int, bool]]] = {}
    for part, offset, slot, stored in zip(out["part"], out["koffset"], out["slot"], out["stored"], strict=True):
        if part == hot:
            copies.setdefault(offset, []).append((slot, stored))
    labels = sorted(adapter.slot_labels[s] for s in spread.holders(hot))
    assert copies and all(sorted(s for s, _ in c) == labels for c in copies.values())
    assert all(sum(stored for _, stored in c) == 1 for c in copies.values())  # stored at exactly one slot
    share = [sum(1 for c in copies.values() for s, st in c if st and s == label) for label in labels]
    assert min(share) > len(copies) / len(labels) / 2  # the store turns spread evenly
    others = [(o, s) for p, o, s in zip(out["part"], out["koffset"], out["slot"], strict=True) if p != hot]
    assert sorted(others) == sorted(
        (o, s) for p, o, s in zip(plain["part"], plain["koffset"], plain["slot"], strict=True) if p != hot
    )


PUNCTUATED = parse_spec(
    {
        "window": {"kind": "time", "size_ms": 1000},
        "streams": {
            "R": {"fields": {"k": "int", "kind": "string", "on": "bool"}, "topic": "r", "key": "k"},
            "S": {"fields": {"k": "float"}, "topic": "s", "key": "k"},
        },
        "tasks": [{"name": "t", "join": ["R", "S"], "on": [{"op": "eq", "left": "R.k", "right": "S.k"}]}],
        "partitions": 16,
        "slots": 4,
        "max_future_ms": 60_000,
        "sinks": {
            "parquet": {
                "path": "unused",
                "snapshots": {"punctuation": {"stream": "R", "field": "kind", "value": "end"}},
            }
        },
    }
)
r_values = st.one_of(
    st.builds(
        lambda ts, k, kind, on: orjson.dumps({"ts": ts, "k": k, "kind": kind, "on": on}),
        st.integers(NOW - 5_000, NOW + 100_000),  # some over max_future_ms ahead of their record time
        st.integers(-(2**53), 2**53),  # a few beyond +-(2^53 - 1)
        st.sampled_from(["data", "end", "End"]),
        st.booleans(),
    ),
    st.sampled_from(
        [b"{not json", b'{"ts": 1, "k": 1.5, "kind": "x", "on": true}', b'{"ts":1,"k":2,"kind":"x","on":1}']
    ),
)


@settings(max_examples=150, deadline=None)
@given(
    values=st.lists(r_values, min_size=1, max_size=30),
    topic=st.sampled_from(["r", "q"]),
    ratio=st.sampled_from([0, 0.5]),
)
def test_the_batch_decoding_adapts_exactly_as_record_by_record(values, topic, ratio):
    """Whole batches decoded at once (connectors.formats.json_columns) give the very rows the per-record path gives."""
    adapter = Adapter(PUNCTUATED, RoutingTable.round_robin(16, 4), slot_labels=(12, 6, 2, 0))
    epoch = ControlEpoch(adapter.routing, shed_ratio=ratio)
    batch = _batch([(topic, v, NOW) for v in values])
    by_batch = adapter.adapt(batch, epoch)
    adapter._decode_columns = lambda *args: None  # the per-record path only
    assert by_batch.equals(adapter.adapt(batch, epoch))


def test_a_plain_batch_is_decoded_at_once():
    adapter = Adapter(PUNCTUATED, RoutingTable.round_robin(16, 4), slot_labels=(12, 6, 2, 0))
    values = [orjson.dumps({"ts": NOW + i, "k": i, "kind": "end" if i == 3 else "data", "on": True}) for i in range(9)]
    decoded = []
    batch_path = adapter._decode_columns
    adapter._decode_columns = lambda *args: decoded.append(batch_path(*args)) or decoded[-1]
    adapted = adapter.adapt(_batch([("r", v, NOW) for v in values]))
    assert len(decoded) == 1 and decoded[0] is not None
    assert adapted.column("reason").to_pylist() == [None] * 3 + ["punctuation"] + [None] * 5
