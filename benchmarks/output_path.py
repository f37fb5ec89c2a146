"""Output path benchmark: result pairs per second from the slots' executors into Parquet and Redis, alone, and
the Redis memory each retained pair takes.

The join's output path without the join: two slot processes (one per core, as the job's executors run them) each
stage their piece of every batch through the product's `pipelines.job.slot_output.write_slot` (ordering, then every
sink's `stage`), and a driver process closes the batch with each sink's `commit`, as `join_job.BatchSink` does.
Result tables have the pipeline benchmark's shape (R(ts, k, x) joined with S(ts, k, a), equi on k) and are built
before the clock starts. A real redis-server (the embedded one) and Parquet files on local disk.

Phases, each over the same batches: Parquet alone, Redis alone, both (the job's default output path with both
sinks); the layout before issue 30 beside them (`pairs_redis`, `pairs_both`: a sorted-set member per pair, copied
into the feed, `benchmarks.pair_layout`); and the floor in the same run: the same bytes alone, prepared before the
clock starts and written without ordering, staging or fencing (`pyarrow.parquet.write_table` to a file with the
sink's encoding options, and the piece's compressed chunks sent as the HSETs the Redis sink sends: Redis' own
ingest plus Parquet's encoding).
The Kafka results sink in a section of its own (`output_path_kafka`), on an embedded Apache Kafka broker: rows/s
through the sink (JSON, one transaction per piece) beside a bare producer of the same records in the same run.
The Delta Lake sink (`delta_sink`) in a section of its own, at 10,000-pair batches (`delta_pairs_per_batch`, over
both slots): Parquet alone, Delta alone, and both, in the same run; what Delta adds per batch is the batch time of
both less Parquet's alone (the slots' second file and the driver's Delta commit), and its commit alone is timed too.
Rate = pairs / time of (the slowest slot's staging, both running in parallel, then the driver's commit), over all
batches; a slot's time starts when it starts writing (the floor's preparation is left out). Redis is emptied before
each phase; bytes per pair = Redis' `used_memory` after the phase less before, over the phase's pairs.

    python -m benchmarks.output_path [--quick]

Writes benchmarks/results/output_path.json.
"""

from __future__ import annotations

import multiprocessing
import os
import shutil
import statistics
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from benchmarks.machine import machine_facts
from benchmarks.output_path_kafka import run_kafka
from benchmarks.params_cli import benchmark_parser, params_from
from benchmarks.pipeline import load_avg
from benchmarks.results_file import write_results

RESULTS = Path(__file__).parent / "results" / "output_path.json"
TASK = "eq"
SPEC = {
    "window": {"kind": "time", "size_ms": 10_000},
    "streams": {
        "R": {"timestamp": "ts", "fields": {"k": "int", "x": "int"}},
        "S": {"timestamp": "ts", "fields": {"k": "int", "a": "int"}},
    },
    "tasks": [{"name": TASK, "join": ["R", "S"], "on": [{"op": "eq", "left": "R.k", "right": "S.k"}]}],
}
PHASES = ("floor", "parquet", "redis", "both", "pairs_redis", "pairs_both")
DELTA_PHASES = ("parquet", "delta", "parquet_delta")
QUICK = {"batches": 3, "pairs_per_batch": 40_000, "delta_batches": 5}


@dataclass(frozen=True)
class Params:
    batches: int = 10
    pairs_per_batch: int = 200_000  # over both slots: the ~190k-pair batches of the demo at 4,000 events/s
    slots: int = 2
    delta_batches: int = 40
    delta_pairs_per_batch: int = 10_000  # the Delta sink's target: at most 50 ms added per batch at this size


def slot_tables(params: Params, piece: int) -> list[pa.Table]:
    """One piece per batch: pairs of the pipeline benchmark's shape, a second of event time per batch."""
    rng = np.random.default_rng(piece)
    rows = params.pairs_per_batch // params.slots
    tables = []
    for batch in range(params.batches):
        base = 1_700_000_000_000 + batch * 1000
        k = rng.integers(0, 10**7, rows)
        r_ts, s_ts = base + rng.integers(0, 1000, rows), base + rng.integers(0, 1000, rows)
        r = pa.StructArray.from_arrays([r_ts, k, rng.integers(0, 10**6, rows)], ["ts", "k", "x"])
        s = pa.StructArray.from_arrays([s_ts, k, rng.integers(0, 10**6, rows)], ["ts", "k", "a"])
        tables.append(pa.table({"R": r, "S": s}))
    return tables


# The slot process's state, set once by `_init_slot` (a pool worker per slot).
_SLOT: dict[str, Any] = {}


def _init_slot(params: Params, piece: int) -> None:
    from windjoin.operators.spec import parse_spec

    _SLOT.update(piece=piece, spec=parse_spec(SPEC), tables=slot_tables(params, piece))


def _stage(phase: str, outputs: Any, batch: int) -> dict[str, float]:
    """Stage this slot's piece of `batch` (in a slot process); returns its seconds."""
    from windjoin.connectors.files.parquet_sink import dictionary_columns
    from windjoin.connectors.redis.keys import piece_key
    from windjoin.connectors.redis.pieces import encode_piece
    from windjoin.operators.result_table import BATCH_ID, EMITTED_AT, result_schema
    from windjoin.pipelines.job.slot_output import write_slot

    piece, spec, table = _SLOT["piece"], _SLOT["spec"], _SLOT["tables"][batch]
    if phase != "floor":
        started = time.perf_counter()
        refused = pa.table({"reason": pa.array([], pa.string())})
        write_slot(outputs, spec, batch, piece, {TASK: [table]}, refused, int(time.time() * 1000))
        return {"seconds": time.perf_counter() - started}
    # the floor: the same bytes alone, prepared before the clock starts (no ordering, staging or fencing)
    parquet_dir, redis_sink = outputs
    rows = len(table)
    full = table.append_column(EMITTED_AT, pa.array(np.full(rows, 0), pa.int64()))
    full = full.append_column(BATCH_ID, pa.array(np.full(rows, batch), pa.int64()))
    schema = result_schema(spec, TASK)
    full = full.select(schema.names).cast(schema)
    chunks = encode_piece(full, batch, piece, 0).chunks
    key = piece_key(f"{TASK}_floor", batch, piece, redis_sink.namespace)
    started = time.perf_counter()
    pq.write_table(
        full, Path(parquet_dir) / f"floor-{batch}-{piece}.parquet", use_dictionary=dictionary_columns(schema)
    )
    with redis_sink.client.pipeline(transaction=False) as pipe:
        for seq, chunk in enumerate(chunks):
            pipe.hset(key, f"c{seq}", chunk)
        pipe.execute()
    return {"seconds": time.perf_counter() - started}


def _sinks(phase: str, root: Path, redis_url: str) -> tuple[Any, ...]:
    from benchmarks.pair_layout import PairLayoutSink
    from windjoin.connectors.files.parquet_sink import ParquetSink
    from windjoin.connectors.redis.sink import RedisSink

    if phase in ("delta", "parquet_delta"):
        delta = _delta_sink(root / phase / "delta")
        return (delta,) if phase == "delta" else (ParquetSink(root / phase / "parquet"), delta)
    namespace = f"bench_{phase}_{uuid.uuid4().hex[:8]}"
    parquet, redis = ParquetSink(root / phase), RedisSink(redis_url, 10**12, namespace, trim=False, max_bytes=1 << 40)
    pairs = PairLayoutSink(redis_url, namespace)
    return {
        "parquet": (parquet,),
        "redis": (redis,),
        "both": (parquet, redis),
        "floor": (str(root), redis),
        "pairs_redis": (pairs,),
        "pairs_both": (parquet, pairs),
    }[phase]


def _delta_sink(path: Path) -> Any:
    """A Delta sink claimed for a run of its own, as a job's start claims it."""
    from windjoin.connectors.files.delta_sink import DeltaSink, spec_table_schema
    from windjoin.operators.sink_owner import CheckpointId
    from windjoin.operators.spec import parse_spec

    sink = DeltaSink(str(path), spec_table_schema(parse_spec(SPEC)), [TASK])
    sink.claim(TASK, CheckpointId(str(uuid.uuid4()), "output_path benchmark"))
    return sink


def run_phase(slots_pools: list[Any], params: Params, phase: str, root: Path, redis_url: str) -> dict[str, Any]:
    """Every batch: the slots stage in parallel, then the driver commits; pairs/s over the phase."""
    from windjoin.connectors.redis.client import redis_client
    from windjoin.operators.result_table import result_schema
    from windjoin.operators.spec import parse_spec
    from windjoin.pipelines.job.slot_output import SlotOutputs

    (root / phase).mkdir(parents=True, exist_ok=True)
    sinks = _sinks(phase, root, redis_url)
    admin = redis_client(redis_url)
    admin.flushall()
    memory_before = int(admin.info("memory")["used_memory"])
    outputs = sinks if phase == "floor" else SlotOutputs(sinks=sinks)
    schemas = {TASK: result_schema(parse_spec(SPEC), TASK)}
    batch_s, stage_s, commit_s = [], [], []
    by_sink: dict[str, list[float]] = {}
    for batch in range(params.batches):
        pending = [pool.apply_async(_stage, (phase, outputs, batch)) for pool in slots_pools]
        slots = [p.get() for p in pending]
        staged = time.perf_counter()
        if phase != "floor":
            pieces = {TASK: list(range(params.slots))}
            for sink in sinks:
                began = time.perf_counter()
                sink.commit(batch, pieces, schemas=schemas, batch_max={TASK: 1_700_000_000_000 + batch * 1000 + 999})
                by_sink.setdefault(type(sink).__name__, []).append(time.perf_counter() - began)
        stage_s.append(max(s["seconds"] for s in slots))
        commit_s.append(time.perf_counter() - staged)
        batch_s.append(stage_s[-1] + commit_s[-1])
    pairs = params.batches * (params.pairs_per_batch // params.slots) * params.slots
    memory = int(admin.info("memory")["used_memory"]) - memory_before
    return {
        "redis_bytes_per_pair": memory / pairs,
        "pairs": pairs,
        "seconds": sum(batch_s),
        "pairs_per_s": pairs / sum(batch_s),
        "batch_s_median": statistics.median(batch_s),
        "slot_stage_s_median": statistics.median(stage_s),
        "driver_commit_s_median": statistics.median(commit_s),
        "commit_s_median_by_sink": {name: statistics.median(times) for name, times in by_sink.items()},
        "load_avg_end": load_avg(),
    }


def run_delta(ctx: Any, params: Params, root: Path, redis_url: str) -> dict[str, Any]:
    """The Delta section: Parquet alone, Delta alone and both at `delta_pairs_per_batch`; what Delta adds."""
    small = replace(params, batches=params.delta_batches, pairs_per_batch=params.delta_pairs_per_batch)
    pools = [ctx.Pool(1, _init_slot, (small, piece)) for piece in range(small.slots)]
    runs: dict[str, Any] = {}
    try:
        for phase in DELTA_PHASES:
            runs[phase] = run_phase(pools, small, phase, root / "delta_section", redis_url)
    finally:
        for pool in pools:
            pool.terminate()
    added_ms = (runs["parquet_delta"]["batch_s_median"] - runs["parquet"]["batch_s_median"]) * 1000
    commit_ms = runs["parquet_delta"]["commit_s_median_by_sink"]["DeltaSink"] * 1000
    out = {
        "pairs_per_batch": small.pairs_per_batch,
        "batches": small.batches,
        "phases": runs,
        "added_batch_ms_median": added_ms,
        "delta_commit_ms_median": commit_ms,
        "delta_alone_commit_ms_median": runs["delta"]["commit_s_median_by_sink"]["DeltaSink"] * 1000,
    }
    for phase, run in runs.items():
        print(
            f"{phase:>13} @{small.pairs_per_batch:,}: batch {run['batch_s_median'] * 1000:.1f} ms "
            f"(slots {run['slot_stage_s_median'] * 1000:.1f} ms, commit {run['driver_commit_s_median'] * 1000:.1f} ms)",
            flush=True,
        )
    print(f"Delta adds {added_ms:.1f} ms per batch to Parquet's ({commit_ms:.1f} ms its commit)", flush=True)
    return out


def main() -> None:
    args = benchmark_parser(__doc__, Params(), QUICK, RESULTS).parse_args()
    params = params_from(args, Params(), QUICK)
    from windjoin.connectors.local import services

    root = Path(tempfile.mkdtemp(prefix="windjoin-bench-output-"))
    facts = machine_facts()
    result: dict[str, Any] = {
        "benchmark": "output_path",
        "workload": "result pairs R(ts,k,x) x S(ts,k,a), staged by 2 slot processes, committed by the driver",
        "machine": facts,
        "date": facts["date"],
        "quick": args.quick,
        "params": asdict(params),
        "load_avg_start": load_avg(),
        "phases": {},
    }
    try:
        [redis] = services.up(services.ServicesConfig(state_dir=root / "services", kafka=False))
        # clients, and the processes started, log in with the embedded Redis' password file
        os.environ["WINDJOIN_REDIS_PASSWORD_FILE"] = str(services.redis_password_file(root / "services"))
        ctx = multiprocessing.get_context("spawn")
        pools = [ctx.Pool(1, _init_slot, (params, piece)) for piece in range(params.slots)]  # a process per slot
        try:
            for phase in PHASES:
                run = run_phase(pools, params, phase, root, redis.service.url)
                result["phases"][phase] = run
                print(
                    f"{phase:>11}: {run['pairs_per_s']:>10,.0f} pairs/s  batch {run['batch_s_median']:.3f} s "
                    f"(slots {run['slot_stage_s_median']:.3f} s, commit {run['driver_commit_s_median']:.3f} s), "
                    f"Redis {run['redis_bytes_per_pair']:.1f} B/pair",
                    flush=True,
                )
        finally:
            for pool in pools:
                pool.terminate()
        result["kafka"] = run_kafka(ctx, params, root)  # its own broker: Apache Kafka, for transactions
        result["delta"] = run_delta(ctx, params, root, redis.service.url)
    finally:
        services.down(root / "services")
        shutil.rmtree(root, ignore_errors=True)
    phases = result["phases"]
    result["ratio_both_to_floor"] = phases["both"]["pairs_per_s"] / phases["floor"]["pairs_per_s"]
    result["ratio_both_to_pairs_layout"] = phases["both"]["pairs_per_s"] / phases["pairs_both"]["pairs_per_s"]
    result["memory_ratio_to_pairs_layout"] = (
        phases["both"]["redis_bytes_per_pair"] / phases["pairs_both"]["redis_bytes_per_pair"]
    )
    result["targets"] = {
        "both_sinks_at_least_1m_pairs_per_s": phases["both"]["pairs_per_s"] >= 1_000_000,
        "redis_memory_per_pair_at_most_a_third_of_the_pairs_layout": result["memory_ratio_to_pairs_layout"] <= 1 / 3,
        "kafka_sink_at_least_500k_rows_per_s": result["kafka"]["phases"]["kafka"]["rows_per_s"] >= 500_000,
        "delta_adds_at_most_50ms_per_batch_at_10k_pairs": result["delta"]["added_batch_ms_median"] <= 50,
    }
    result["cores"] = os.cpu_count()
    print(
        f"both sinks / floor: {result['ratio_both_to_floor']:.2f}x, / the pairs layout: "
        f"{result['ratio_both_to_pairs_layout']:.2f}x; Redis bytes per pair / the pairs layout's: "
        f"{result['memory_ratio_to_pairs_layout']:.3f}; targets {result['targets']}"
    )
    print(write_results(result, args.out, plot))


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib.pyplot as plt

    phases = result["phases"]
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.bar(list(phases), [phases[p]["pairs_per_s"] / 1000 for p in phases], color="#4477aa")
    ax.axhline(1000, color="#cc3311", linestyle="--", label="target 1M pairs/s")
    ax.set_ylabel("thousand pairs/s")
    ax.set_title("Output path alone, 2 slots + driver commit")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    main()
