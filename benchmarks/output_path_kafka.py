"""The output path benchmark's Kafka section: result rows per second into Kafka through the Kafka results sink,
beside a bare producer of the same records in the same run (the floor).

An embedded Apache Kafka broker (KRaft, one JVM: the broker with the transactions the sink needs) on the same 2
cores. Both phases use two slot processes, each with its piece of every batch (`output_path.slot_tables`):
- `kafka`: each slot stages its piece through `slot_output.write_slot` into a `KafkaResultsSink` (JSON values,
  keys, result times and the task header encoded in the slot, one transaction per piece with its offset record),
  then the driver commits the batch (the ledger's offset commit), as `join_job.BatchSink` does;
- `kafka_floor`: each slot produces the same records (values, keys, timestamps and header encoded before the
  clock starts) with a plain producer of the same batching settings (no transactions, acks all), then flushes.
Rate = rows / (the slowest slot's time, both in parallel, plus the driver's commit), over the batches after the
first (`rows_per_s`: a worker makes its transactional producers, `init_transactions`, once per job run) and over
all of them (`rows_per_s_all`).
"""

from __future__ import annotations

import itertools
import statistics
import time
import uuid
from pathlib import Path
from typing import Any

_SLOT: dict[str, Any] = {}


def _init_slot(params: Any, piece: int, bootstrap: str, floor_topic: str) -> None:
    from benchmarks.output_path import SPEC, TASK, slot_tables
    from windjoin.connectors.kafka.result_records import json_values, key_fields, record_keys, record_timestamps
    from windjoin.connectors.kafka.results_sink import TASK_HEADER
    from windjoin.operators.spec import parse_spec
    from windjoin.pipelines.job.slot_output import result_tables

    spec = parse_spec(SPEC)
    tables = slot_tables(params, piece)
    _SLOT.update(piece=piece, spec=spec, tables=tables, bootstrap=bootstrap, floor_topic=floor_topic)
    encoded = []  # the floor's records, encoded as the sink encodes them, before any clock starts
    for batch, table in enumerate(tables):
        full = result_tables(spec, batch, {TASK: [table]}, 0)[0][TASK]
        encoded.append((json_values(full), record_keys(full, key_fields(spec, TASK)), record_timestamps(full)))
    _SLOT["encoded"], _SLOT["headers"] = encoded, [(TASK_HEADER, TASK.encode())]


def _stage(phase: str, sink: Any, batch: int) -> float:
    """This slot's piece of `batch` (in a slot process): staged into the sink, or produced bare; its seconds."""
    import pyarrow as pa

    from benchmarks.output_path import TASK
    from windjoin.pipelines.job.slot_output import SlotOutputs, write_slot

    if phase == "kafka":
        refused = pa.table({"reason": pa.array([], pa.string())})
        started = time.perf_counter()
        write_slot(
            SlotOutputs(sinks=(sink,)),
            _SLOT["spec"],
            batch,
            _SLOT["piece"],
            {TASK: [_SLOT["tables"][batch]]},
            refused,
            int(time.time() * 1000),
        )
        return time.perf_counter() - started
    producer = _floor_producer()
    values, keys, timestamps = _SLOT["encoded"][batch]
    topic, headers = _SLOT["floor_topic"], _SLOT["headers"]
    started = time.perf_counter()
    produce, poll = producer.produce, producer.poll
    for value, key, timestamp in zip(values, keys or itertools.repeat(None), timestamps, strict=False):
        try:
            produce(topic, value, key, timestamp=timestamp, headers=headers)
        except BufferError:
            poll(0.5)
            produce(topic, value, key, timestamp=timestamp, headers=headers)
    remaining = producer.flush(120)
    assert remaining == 0, f"{remaining} records of the floor not delivered"
    return time.perf_counter() - started


def _floor_producer() -> Any:
    if "producer" not in _SLOT:
        from confluent_kafka import Producer

        from windjoin.connectors.kafka.results_sink import PRODUCER_SETTINGS

        _SLOT["producer"] = Producer(
            {
                "bootstrap.servers": _SLOT["bootstrap"],
                **PRODUCER_SETTINGS,
                "acks": "all",
                "queue.buffering.max.messages": 1_000_000,
            }
        )
    return _SLOT["producer"]


def run_kafka(ctx: Any, params: Any, root: Path) -> dict[str, Any]:
    """The Kafka section (see the module docstring) on an embedded Apache Kafka broker of its own."""
    from benchmarks.output_path import SPEC, TASK
    from benchmarks.pipeline import load_avg
    from windjoin.connectors.kafka.admin import create_topics
    from windjoin.connectors.kafka.result_records import key_fields
    from windjoin.connectors.kafka.results_sink import KafkaResultsSink
    from windjoin.connectors.local import services
    from windjoin.operators.sink_owner import CheckpointId
    from windjoin.operators.spec import parse_spec

    state = root / "kafka-services"
    [broker] = services.up(services.ServicesConfig(state_dir=state, redis=False, broker=services.APACHE_KAFKA))
    bootstrap = broker.service.url
    out: dict[str, Any] = {"broker": "Apache Kafka (embedded, KRaft)", "phases": {}}
    try:
        suffix = uuid.uuid4().hex[:8]
        topic, floor_topic = f"bench-results-{suffix}", f"bench-floor-{suffix}"
        create_topics(bootstrap, [topic, floor_topic], 4)
        spec = parse_spec(SPEC)
        sink = KafkaResultsSink(topic, bootstrap, keys={TASK: key_fields(spec, TASK)})
        sink.claim(TASK, CheckpointId(str(uuid.uuid4()), "output_path benchmark"))
        pools = [ctx.Pool(1, _init_slot, (params, piece, bootstrap, floor_topic)) for piece in range(params.slots)]
        try:
            for phase in ("kafka_floor", "kafka"):
                load_start = load_avg()
                batch_s, stage_s, commit_s = [], [], []
                for batch in range(params.batches):
                    slots = [p.get() for p in [pool.apply_async(_stage, (phase, sink, batch)) for pool in pools]]
                    staged = time.perf_counter()
                    if phase == "kafka":
                        sink.commit(batch, {TASK: list(range(params.slots))})
                    stage_s.append(max(slots))
                    commit_s.append(time.perf_counter() - staged)
                    batch_s.append(stage_s[-1] + commit_s[-1])
                per_batch = (params.pairs_per_batch // params.slots) * params.slots
                rows = params.batches * per_batch
                out["phases"][phase] = run = {
                    "rows": rows,
                    "seconds": sum(batch_s),
                    "rows_per_s_all": rows / sum(batch_s),
                    # after the first batch: a worker's producers are made (init_transactions) once per job run
                    "rows_per_s": (rows - per_batch) / sum(batch_s[1:]) if len(batch_s) > 1 else rows / sum(batch_s),
                    "first_batch_s": batch_s[0],
                    "batch_s_median": statistics.median(batch_s),
                    "slot_s_median": statistics.median(stage_s),
                    "driver_commit_s_median": statistics.median(commit_s),
                    "load_avg_start": load_start,
                    "load_avg_end": load_avg(),
                }
                print(
                    f"{phase:>11}: {run['rows_per_s']:>10,.0f} rows/s ({run['rows_per_s_all']:,.0f} with the first "
                    f"batch, {run['first_batch_s']:.2f} s)  batch {run['batch_s_median']:.3f} s "
                    f"(slots {run['slot_s_median']:.3f} s, commit {run['driver_commit_s_median']:.3f} s)",
                    flush=True,
                )
        finally:
            for pool in pools:
                pool.terminate()
    finally:
        services.down(state)
    out["ratio_sink_to_floor"] = out["phases"]["kafka"]["rows_per_s"] / out["phases"]["kafka_floor"]["rows_per_s"]
    print(f"Kafka sink / bare producer: {out['ratio_sink_to_floor']:.2f}x", flush=True)
    return out
