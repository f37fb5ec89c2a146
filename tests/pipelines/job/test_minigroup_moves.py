"""Mini-group moves in the running job (real Kafka, Redis, Spark): fine tuning's units travel like partitions.

The test plays the controller, recording routing decisions in Redis as `windjoin controller` does: partition 3
is split into 4 mini-groups (depth 2) of which two go to other slots, and partition 4 is split in two in place;
then one mini-group of each moves on; then both are merged back whole on slot 0, gathering their tuples from
three slots; last, partition 5 is split in place (no tuple changes slot, so the job adopts it without a
hand-over). A left outer and an anti task ride along, their windows closing as the run goes (no lateness): the
mini-groups a split leaves behind keep which of their tuples paired and closed. The first announce batch that
hands state over fails after its sinks wrote, and the job restarts from its checkpoint, so the replayed batch
hands the same pieces over again. Results must equal the brute-force oracle exactly: a pair lost or joined twice
at a move shows up as a difference.
"""

from __future__ import annotations

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from tests.pipelines.control_helpers import assert_sinks_equal_the_oracle, run_holder_changes
from tests.pipelines.pipeline_helpers import produce_closers
from tests.support.join_tasks import TASKS, TRACKED
from tests.support.pipeline_events import pipeline_events, pipeline_spec
from windjoin.connectors.kafka.range_reader import ARROW_SCHEMA
from windjoin.operators.control.job_epoch import ControlEpoch
from windjoin.operators.partitioning import Group, RoutingTable
from windjoin.operators.spec import parse_spec
from windjoin.pipelines.job.adapter import Adapter
from windjoin.pipelines.job.hand_over import check_held
from windjoin.pipelines.job.slot_meta import SlotMeta
from windjoin.pipelines.job.stored_rows import stored_mini_bits

START = RoutingTable.round_robin(8, 2)  # p3 on slot 1, p4 on slot 0


def _recut(table: RoutingTable, units: dict[Group, int]) -> RoutingTable:
    """`table` with the partitions named in `units` replaced by those units."""
    parts = {g.partition for g in units}
    return table.with_units({**{g: s for g, s in table.groups().items() if g.partition not in parts}, **units})


V1 = _recut(
    START,
    {Group(3, 2, 0): 1, Group(3, 2, 1): 0, Group(3, 2, 2): 2, Group(3, 2, 3): 1, Group(4, 1, 0): 0, Group(4, 1, 1): 0},
)
V2 = V1.with_moves({Group(3, 2, 1): 2, Group(4, 1, 1): 1})
V3 = _recut(V2, {Group(3): 0, Group(4): 0})
V4 = _recut(V3, {Group(5, 1, 0): 1, Group(5, 1, 1): 1})  # in place: p5 is on slot 1
DECISIONS = {1: V1, 4: V2, 7: V3, 9: V4}


@pytest.mark.parametrize("ktype", ["int", "float", "string", "bool"])
def test_stored_rows_find_the_mini_group_the_adapter_routed_them_by(ktype):
    """The hand-over recomputes a stored row's mini-group from its key column: it must be the one the adapter
    routed the record by (hashes agree across Python values and Arrow columns of every key type)."""
    spec = parse_spec(
        {
            "window": {"kind": "time", "size_ms": 1000},
            "streams": {n: {"fields": {"k": ktype}, "topic": n.lower(), "key": "k"} for n in "RS"},
            "tasks": [{"name": "t", "join": ["R", "S"], "on": [{"op": "eq", "left": "R.k", "right": "S.k"}]}],
            "partitions": 4,
            "slots": 4,
        }
    )
    table = RoutingTable.round_robin(4, 4)
    routing = table.with_units({Group(p, 2, x): x for p in range(4) for x in range(4)})  # slot = mini bits
    keys = {
        "int": list(range(-50, 150)),
        "float": [i / 7 for i in range(200)],
        "string": [f"key-{i}" for i in range(200)],
        "bool": [True, False] * 100,
    }[ktype]
    records = [("rs"[i % 2], orjson.dumps({"ts": 1_700_000_000_000 + i, "k": k}), None) for i, k in enumerate(keys)]
    batch = pa.RecordBatch.from_pydict(
        {
            "topic": [r[0] for r in records],
            "partition": [0] * len(records),
            "offset": list(range(len(records))),
            "key": [None] * len(records),
            "value": [r[1] for r in records],
            "timestamp": [r[2] for r in records],
        },
        schema=ARROW_SCHEMA,
    )
    adapted = Adapter(spec, table, (0, 1, 2, 3)).adapt(batch, ControlEpoch(routing))
    assert adapted.column("reason").null_count == len(records)
    slots = adapted.column("slot").to_numpy()
    assert len(set(slots.tolist())) == (2 if ktype == "bool" else 4)  # the keys reach every mini-group
    bits = stored_mini_bits(spec, pa.Table.from_batches([adapted]))
    assert (bits & np.uint64(3)).astype(int).tolist() == slots.tolist()
    # a slot checks the rows it gets belong to its mini-groups (the adapted frame as the join sees it)
    live = pa.Table.from_batches([adapted])
    held = SlotMeta(held={f"{p}.2.1": [1] for p in range(4)})
    check_held(spec, 1, held, live.filter(pc.equal(live["slot"], 1)))
    with pytest.raises(RuntimeError, match=r"slot 1 got tuples of partitions \[.*\] \(or of their mini-groups\)"):
        check_held(spec, 1, held, live)


@pytest.mark.slow
def test_mini_groups_move_split_and_merge_during_the_run_losing_and_duplicating_nothing(
    spark, kafka_bootstrap, redis_url, unique_topic, tmp_path
):
    window = {"kind": "time", "size_ms": 40}
    spec_dict = pipeline_spec(
        unique_topic,
        tmp_path,
        window,
        keyed=True,
        tasks=[*TASKS, *TRACKED],
        max_offsets_per_trigger=250,
        allowed_lateness_ms=0,
    )
    events = pipeline_events(2400, seed=11, keys=64)  # ~8 keys per partition: every mini-group of p3 holds some
    end = max(e["ts"] for e in events)
    waves = (  # close every window (outer and anti rows): the mini-groups left behind keep their flags
        lambda: produce_closers(kafka_bootstrap, spec_dict, end + 100_000, 2, wave=1),
        lambda: produce_closers(kafka_bootstrap, spec_dict, end + 200_000, 2, wave=2),
    )
    seen, parquet, redis = run_holder_changes(
        spark, spec_dict, events, kafka_bootstrap, redis_url, tmp_path, DECISIONS, "moved_out_groups", waves
    )  # fails once after its first announce batch

    def moved(kind: str) -> set[tuple[int, ...]]:
        return {(s["slot_index"], *g) for o in seen for s in o.stats for g in s[f"moved_{kind}_groups"]}

    # v1: p3/01 to slot 0 and p3/10 to slot 2; v2: p3/01 on to slot 2, p4/1 to slot 1; v3: p3 and p4 gathered
    # whole on slot 0 (p4/0 was there all along, so only p4/1 moves out)
    assert moved("in") == {(0, 3, 2, 1), (2, 3, 2, 2), (2, 3, 2, 1), (1, 4, 1, 1), (0, 3, 0, 0), (0, 4, 0, 0)}
    assert moved("out") == {
        (1, 3, 2, 1), (1, 3, 2, 2),  # v1
        (0, 3, 2, 1), (0, 4, 1, 1),  # v2
        (1, 3, 2, 0), (1, 3, 2, 3), (2, 3, 2, 1), (2, 3, 2, 2), (1, 4, 1, 1),  # v3
    }  # fmt: skip
    assert {p for o in seen for s in o.stats for p in s["moved_in"]} == {3, 4}
    assert max(o.routing_version for o in seen) == V4.version
    assert_sinks_equal_the_oracle(spec_dict, events, parquet, redis)
