"""Issue 5's skew must-show end to end (real Kafka, Redis, Spark), and issue 22's spread by work.

On a b-model (b = 0.7) workload the static round-robin placement gives the busiest slot over 3x the mean slot's
work; the controller's moves, applied while the job runs, even it out, and the results still equal the oracle.

What is asserted is the work each slot was given, from the counts the slots report (`joined` tuples and `outputs`
pairs in the slot stats), weighed by the documented per-tuple and per-pair CPU (TUPLE_US, PAIR_US; docs/controller.md):
these depend on where the controller placed the partitions, not on how the machine's cores were shared while the
test ran. Each slot's CPU seconds in the join's Python worker (`cpu_seconds`: what the controller balances,
`occupancy: cpu`) are printed and only compared within the run (settled below static): on 2 cores shared by two
pytest workers and Spark the settled CPU ratio read 1.15-1.57 around a 1.5 bound it once asserted (issue 51).
Both figures come from the same run: the first STATIC batches run on the round-robin placement (the controller's
first epoch reads them); then it decides every EPOCH batches (occupancy = each slot's share of the batch's CPU
seconds; the yielded group is the one whose measured work, output pairs included, best evens the supplier/consumer
pair, `pick: balance`; a partition whose work alone outweighs a slot would be spread; moved units are damped). The
first batch that installs moved state fails after its sinks wrote and is replayed after a restart. Each ratio is
the slowest slot's sum over the mean slot's, over the static batches (but the first, which warms the workers up)
and over the last SETTLED batches.

The workload: `skew_over="slots"`, the b-model over the 64 hash partitions with its first three splits lined up
with the 8 round-robin slots (the static placement's worst case for this skew: the busiest slot gets 0.7^3 of
the tuples, 2.74x the mean; mixed over the slots as they come, round robin gives 1.3-2.1x). Few keys per
partition make a partition's outputs, and so its join time, grow faster than its tuples.

Issue 5 asks for >= 3x static: in work the lined-up placement gives the busiest slot 3.43x the mean (tuples 2.75x,
outputs 3.94x: the data and the placement fix it, asserted >= 3), while its CPU reads 2.4-3.2x. Every slot pays
~7-22 ms of CPU per batch whatever it holds (state calls, pandas framing, segment writes; 4-9 ms on 2026-11-29's
faster machine, where the work's skew shows more and 12 batches left the controller still moving: settled 1.51-1.71
in four runs of the code before and after that day's changes, 1.22-1.43 with 16; ~10 ms under the two-worker
suite, where the hot partition moved once weighed about the mean slot, no move could even its slot and the
controller stalled at 1.57-1.66 until a supplier so stuck spreads its heaviest partition, `stuck_partition`, which
took to epoch 6 of the 8 that 16 batches give: hence 20), against ~2.5 us per tuple and ~0.5 us per output pair
(a least-squares fit of one run's slot CPU: 6.9 ms, 2.3 us, 0.53 us). The controller evens CPU, that fixed part
included, and stops moving once no slot is a consumer (`th_con`), so the work it leaves is less even than the CPU,
and how much less follows its decisions on CPU measured under whatever load. Beside a second busy pytest worker
(issue 51), 14 runs settled at work 1.29 1.37 1.61 (the old test, from its trace) 1.49 1.51 1.42 1.74 1.51 1.53 1.55
2.09 1.61 1.63 1.56, where the CPU read 1.15-1.57 (above 1.5 in 3 of them). The 2.09 is a run whose first epoch
moved the hottest partition whole to a slot it then overloaded, and that slot was still handing small partitions
away at the end (a stuck supplier, as above). Hence a bound relative to the static placement rather than 1.5: the
moves take at least 40% of the busiest slot's excess work away (EXCESS_LEFT = 0.6: 3.43 -> at most 2.46), which
the static placement fails by far. The static ratio in CPU nears the work ratio only when the mean slot's work is
several times the fixed part: batches of ~100k tuples here, whose outputs (millions of pairs) the oracle cannot
check within a test's time, and whose hottest partition alone then outweighs 1.5 mean slots (only a SplitJoin
spread relieves it). benchmarks/reorganisation.py measures larger batches.

The second test makes that spread happen: one partition carries most of the join work, more than `th_sup` of all
the slots' work, so no slot can carry it; the controller spreads it by its measured work (stored at its slot,
probed at both) rather than moving it, then evens the rest with a whole-partition move; the batch installing the
spread is replayed, and the results still equal the oracle.
"""

from __future__ import annotations

import random
import time

import numpy as np
import orjson
import pytest

from tests.pipelines.control_helpers import in_process_control, run_with_one_replay
from tests.pipelines.pipeline_helpers import keyed_eq_spec, produce_events
from tests.support.skew_oracle import FIELDS, oracle_by_key, oracle_rows, sorted_rows
from windjoin.connectors.files.parquet_sink import ParquetSink
from windjoin.operators.partitioning import partition_of
from windjoin.operators.spec import parse_spec
from windjoin.operators.workloads.b_model import PartitionSkewedKeys
from windjoin.pipelines.controller.control_loop import recorded_moves
from windjoin.pipelines.job.join_job import BatchOutcome

PARTITIONS, SLOTS = 64, 8
KEYS, PER_MS, WINDOW_MS = 800, 4, 1_000  # 12.5 keys per partition, 4 events per ms of event time
PER_BATCH, BATCHES = 20_000, 20
STATIC, EPOCH, SETTLED = 4, 2, 4  # batches on the static placement; batches per epoch; batches judged at the end
TUPLE_US, PAIR_US = 2.5, 0.5  # a slot's CPU per tuple joined and per output pair (docs/controller.md)
EXCESS_LEFT = 0.6  # the settled busiest slot's work over the mean less 1, at most this share of the static one's
CONTROL = {
    "utilisation": {"capacity": 1e12, "min_workers": SLOTS, "max_workers": SLOTS},  # no shedding, no scaling
    "reorganisation": {"occupancy": "cpu", "pick": "balance", "th_sup": 1.2 / SLOTS, "th_con": 0.8 / SLOTS},
    "hot": {"spread": True, "max_width": 4},  # a partition whose work outweighs a slot is spread, not moved
}


def skewed_events(n: int, seed: int) -> list[dict]:
    keys = PartitionSkewedKeys(KEYS, PARTITIONS, 0.7, seed, slots=SLOTS).sample(n, np.random.default_rng(seed))
    rng = random.Random(seed)
    base = 1_700_000_000_000
    return [
        {"stream": "R", "ts": base + i // PER_MS, "k": int(k), "x": rng.randrange(100)}
        if rng.random() < 0.5
        else {"stream": "S", "ts": base + i // PER_MS, "k": int(k), "a": rng.randrange(100)}
        for i, k in enumerate(keys)
    ]


def installs_state(outcome: BatchOutcome) -> bool:
    """Whether a slot installed handed-over state in this batch (a move or spread took effect)."""
    return any(s["moved_in"] for s in outcome.stats)


def slot_work(outcome: BatchOutcome) -> dict[int, float]:
    """Each slot's work in this batch in microseconds of CPU, from its counts (tuples joined, output pairs): what
    the placement gave it, whatever the machine's load."""
    return {s["slot_index"]: TUPLE_US * s["joined"] + PAIR_US * s["outputs"] for s in outcome.stats}


def slowest_over_mean(batches: list[dict[int, float]], slots: int = SLOTS) -> float:
    """The slowest slot's sum of a per-batch figure (CPU seconds, work) over these batches, over the mean slot's."""
    totals = np.array([sum(b.get(s, 0.0) for b in batches) for s in range(slots)])
    return float(totals.max() / totals.mean())


@pytest.mark.slow
def test_controller_moves_even_out_the_work_of_a_skewed_placement(
    spark, kafka_bootstrap, redis_url, unique_topic, tmp_path
):
    spec_dict = keyed_eq_spec(unique_topic, tmp_path)
    spec_dict.update(partitions=PARTITIONS, slots=SLOTS, max_offsets_per_trigger=PER_BATCH)
    spec_dict["window"] = {"kind": "time", "size_ms": WINDOW_MS}
    events = skewed_events(PER_BATCH * BATCHES, seed=9)
    produce_events(kafka_bootstrap, spec_dict, events)
    keys = np.array([e["k"] for e in events])
    tuples = np.bincount(partition_of(keys, PARTITIONS) % SLOTS, minlength=SLOTS)
    assert tuples.max() / tuples.mean() > 2.5  # an independent count: the b-model lines up with the slots

    decisions, controller, publish, control = in_process_control(redis_url, CONTROL, PARTITIONS, SLOTS)
    cpu: list[dict[int, float]] = []  # per batch with input: slot -> CPU seconds
    work: list[dict[int, float]] = []  # per batch with input: slot -> work from its counts (slot_work)
    trace: list[str] = []
    moved_in: list[tuple[int, int]] = []  # (batch index, partition)

    def after(outcome: BatchOutcome) -> None:
        publish(outcome)
        if not sum(s["joined"] for s in outcome.stats):
            return
        cpu.append({s["slot_index"]: s["cpu_seconds"] for s in outcome.stats})
        work.append(slot_work(outcome))
        moved_in.extend((len(cpu) - 1, p) for s in outcome.stats for p in s["moved_in"])
        trace.append(
            " ".join(
                f"{s['slot_index']}:{s['cpu_seconds'] * 1e3:.0f}ms/{s['joined']}/{s['outputs']}" for s in outcome.stats
            )
        )
        if len(cpu) >= STATIC and (len(cpu) - STATIC) % EPOCH == 0:
            step = controller.step()
            if step is not None:
                trace.append(step.line())

    parquet = ParquetSink(tmp_path / "parquet")
    spec = parse_spec(spec_dict)
    # the first batch installing moved or spread state fails after its sinks wrote and is replayed after a restart
    _, failed = run_with_one_replay(spark, spec, kafka_bootstrap, [parquet], control, after, installs_state)
    print("\n".join(trace))
    print(f"batch {failed} replayed")

    history = [fields for _, fields in decisions.history()]
    moves = [m for fields in history for m in recorded_moves(fields)]
    spread = {p for fields in history for p, _ in orjson.loads(fields["routing"])["spread"]}
    assert moves and moved_in, f"decided {len(moves)} moves, the job applied {len(moved_in)}"
    assert {p for _, p in moved_in} <= {group.partition for group, _, _ in moves} | spread
    print(f"spread partitions: {sorted(spread)}")
    static, settled = slowest_over_mean(work[1:STATIC]), slowest_over_mean(work[-SETTLED:])  # batch 0 warms up
    static_cpu, settled_cpu = slowest_over_mean(cpu[1:STATIC]), slowest_over_mean(cpu[-SETTLED:])
    summary = (
        f"slowest/mean slot work: static {static:.2f}, settled {settled:.2f}; "
        f"slot CPU: static {static_cpu:.2f}, settled {settled_cpu:.2f} over {len(cpu)} batches"
    )
    print(summary)
    assert static >= 3, summary  # issue 5's >= 3x static, in work (the placement and the data fix it)
    assert settled - 1 <= EXCESS_LEFT * (static - 1), summary  # the moves took 40% of the excess work away, or more
    assert settled_cpu < static_cpu, summary  # and what it balances fell too, measured within the run
    assert len(cpu) - SETTLED > min(b for b, _ in moved_in), "the settled batches are not after the first move"
    started = time.perf_counter()
    expected = oracle_by_key(spec_dict, events)
    assert len(expected) > 1000
    got = parquet.read("eq").combine_chunks()
    columns = [got.column(side).chunk(0).field(name).to_numpy() for side, names in FIELDS for name in names]
    assert np.array_equal(sorted_rows(np.column_stack(columns)), sorted_rows(oracle_rows(expected)))
    print(f"{len(expected)} pairs checked in {time.perf_counter() - started:.1f} s")


HOT_SHARE, HOT_KEYS, COLD_KEYS = 0.8, 60, 40  # of the events, on keys of one partition; the rest over the others
SPREAD_CONTROL = {
    "utilisation": {"capacity": 1e12, "min_workers": 2, "max_workers": 2},
    "reorganisation": {"occupancy": "cpu", "pick": "balance", "th_sup": 0.55, "th_con": 0.45},
    "hot": {"spread": True, "max_width": 2},
}


def keys_of(partition: int, partitions: int, n: int, inside: bool) -> np.ndarray:
    """The first n int keys whose hash partition is (inside) or is not (not inside) `partition`."""
    candidates = np.arange(20 * n * partitions)
    chosen = candidates[(partition_of(candidates, partitions) == partition) == inside]
    return chosen[:n]


def hot_partition_events(n: int, partitions: int, hot: int, seed: int) -> list[dict]:
    """R/S events, 4 per ms, HOT_SHARE of them on keys of partition `hot`."""
    rng = np.random.default_rng(seed)
    hot_keys, cold_keys = keys_of(hot, partitions, HOT_KEYS, True), keys_of(hot, partitions, COLD_KEYS, False)
    keys = np.where(rng.random(n) < HOT_SHARE, rng.choice(hot_keys, n), rng.choice(cold_keys, n))
    sides, values = rng.random(n) < 0.5, rng.integers(0, 100, n)
    base = 1_700_000_000_000
    return [
        {"stream": "R", "ts": base + i // PER_MS, "k": int(k), "x": int(v)}
        if r
        else {"stream": "S", "ts": base + i // PER_MS, "k": int(k), "a": int(v)}
        for i, (k, r, v) in enumerate(zip(keys, sides, values, strict=True))
    ]


@pytest.mark.slow
def test_controller_spreads_a_partition_too_heavy_for_any_slot(
    spark, kafka_bootstrap, redis_url, unique_topic, tmp_path
):
    partitions, slots, hot, per_batch, batches = 8, 2, 2, 6_000, 9
    spec_dict = keyed_eq_spec(unique_topic, tmp_path)
    spec_dict.update(partitions=partitions, slots=slots, max_offsets_per_trigger=per_batch)
    spec_dict["window"] = {"kind": "time", "size_ms": WINDOW_MS}
    events = hot_partition_events(per_batch * batches, partitions, hot, seed=22)
    produce_events(kafka_bootstrap, spec_dict, events)

    decisions, controller, publish, control = in_process_control(redis_url, SPREAD_CONTROL, partitions, slots)
    cpu: list[dict[int, float]] = []
    trace: list[str] = []
    installed: list[int] = []  # batch indexes (with input) in which a slot installed handed-over state

    def after(outcome: BatchOutcome) -> None:
        publish(outcome)
        if not sum(s["joined"] for s in outcome.stats):
            return
        cpu.append({s["slot_index"]: s["cpu_seconds"] for s in outcome.stats})
        if installs_state(outcome):
            installed.append(len(cpu) - 1)
        trace.append(
            " ".join(f"{s['slot_index']}:{s['cpu_seconds'] * 1e3:.0f}ms/{s['outputs']}" for s in outcome.stats)
        )
        if len(cpu) >= 3 and (len(cpu) - 3) % 2 == 0:  # 3 batches on the static placement, then an epoch per 2
            step = controller.step()
            if step is not None:
                trace.append(step.line())

    parquet = ParquetSink(tmp_path / "parquet")
    _, failed = run_with_one_replay(
        spark, parse_spec(spec_dict), kafka_bootstrap, [parquet], control, after,
        installs_state,
    )  # fmt: skip
    print("\n".join(trace))
    print(f"batch {failed} replayed")

    history = [fields for _, fields in decisions.history()]
    spread = {p: tuple(holders) for fields in history for p, holders in orjson.loads(fields["routing"])["spread"]}
    moves = [m for fields in history for m in recorded_moves(fields)]
    assert set(spread) == {hot} and len(spread[hot]) == slots, f"spread {spread}, moves {moves}"
    assert not any(group.partition == hot for group, _, _ in moves), moves  # spread, never chased around
    assert installed, "the job never installed the spread"
    static, settled = slowest_over_mean(cpu[1:3], slots), slowest_over_mean(cpu[-2:], slots)
    print(f"slowest/mean slot CPU: static {static:.2f}, spread {settled:.2f}")
    assert settled < static, (static, settled)
    expected = oracle_by_key(spec_dict, events)
    assert len(expected) > 1000
    got = parquet.read("eq").combine_chunks()
    columns = [got.column(side).chunk(0).field(name).to_numpy() for side, names in FIELDS for name in names]
    assert np.array_equal(sorted_rows(np.column_stack(columns)), sorted_rows(oracle_rows(expected)))
