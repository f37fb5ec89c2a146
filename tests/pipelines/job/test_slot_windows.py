"""A slot's two window layouts, without Spark: pooled (one join for all its partitions) and per partition must
join the same batches to the same pairs and forget a partition alike."""

from __future__ import annotations

import json
import random
from collections import Counter

import numpy as np
import pyarrow as pa
import pytest

from tests.support.slot_state import keyed_spec, stored_rows
from windjoin.operators.partitioning import partition_of
from windjoin.pipelines.job.slot_batch import StreamColumns
from windjoin.pipelines.job.slot_meta import SlotMeta
from windjoin.pipelines.job.slot_windows import PartitionWindows, PooledWindows, SlotWindows

SPEC = keyed_spec(300)


def _batches(seed: int) -> list[pa.Table]:
    """Five batches of keyed rows in event-time order, each in its key's partition."""
    rng, ts, out = random.Random(seed), 0, []
    for _ in range(5):
        tables = []
        for _ in range(rng.randrange(1, 40)):
            ts += rng.randrange(0, 40)
            key = rng.randrange(6)
            part = int(partition_of(np.array([key]), SPEC.partitions)[0])
            tables.append(stored_rows(SPEC, (part, rng.choice("RS"), ts), key=key))
        out.append(pa.concat_tables(tables))
    return out


def _run(windows: SlotWindows, batches: list[pa.Table]) -> tuple[Counter, dict[int, int]]:
    meta, pairs = SlotMeta(nonce="n0"), Counter()
    for batch in batches:
        live = batch.append_column("stored", pa.array([True] * batch.num_rows))
        joined = windows.join_batch(meta, StreamColumns(SPEC, live), batch.column("part").to_numpy())
        for table in joined.tables["t"]:
            pairs.update(json.dumps(row, sort_keys=True, default=str) for row in table.to_pylist())
    return pairs, {p: s.tuples for p, s in windows.held().items()}


@pytest.mark.parametrize("seed", range(5))
def test_pooled_and_per_partition_windows_join_and_hold_alike(seed):
    batches = _batches(seed)
    pooled, per_partition = _run(PooledWindows(SPEC, "n0"), batches), _run(PartitionWindows(SPEC, "n0"), batches)
    assert pooled[0] == per_partition[0] and sum(pooled[0].values()) > 0
    # each holds what it has not expired yet (a partition's own join expires by the partition's newest tuple,
    # the pooled one by the slot's): the pooled holds no partition it was not given
    assert set(pooled[1]) <= set(per_partition[1])


def test_a_forgotten_partition_leaves_both_layouts():
    batches = _batches(7)
    for windows in (PooledWindows(SPEC, "n0"), PartitionWindows(SPEC, "n0")):
        _, held = _run(windows, batches)
        gone = max(held, key=held.get)
        meta = SlotMeta(nonce="n0", max_ts={str(gone): 1}, counts={str(gone): {"R": 1, "S": 1}})
        windows.forget(meta, gone)
        assert {p: s.tuples for p, s in windows.held().items()} == {p: n for p, n in held.items() if p != gone}
        assert str(gone) not in meta.max_ts and str(gone) not in meta.counts
