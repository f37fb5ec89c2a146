"""`join_stream` on a user's own DataFrames vs Spark's built-in stream-stream join on the same DataFrames, same run.

Workload: the pipeline benchmark's streams R(ts, k, x) and S(ts, k, a) (Poisson arrivals at equal rates of
`--density` events/s over both, k from paper 000's b-model: bias 0.7 over [0, 10^7]; x and a uniform over
[0, 10^4)), written once as Parquet files, one folder per stream, each file the same slice of event time in both
folders. Both systems read them with Spark's file source, one file per stream per micro-batch
(`maxFilesPerTrigger` 1), and write every result row with Spark's Parquet file sink, batches back to back:

* windjoin: `windjoin.spark.join_stream(spec, {"R": r, "S": s})` (the spec's task over 64 partitions on 2 slots,
  window state in RocksDB), all its result columns;
* built-in: `r.join(s, ...)` with `withWatermark` on both sides (`benchmarks.builtin_peer.builtin_join`), both
  sides' columns, in each of Spark 4.3's configurations (the default store with state format 2, RocksDB with
  format 4), each shown to be in effect by its checkpoint; the faster is the baseline.

Two tasks, each measured alone: `equi` (R.k = S.k within W) and `band` (R.k = S.k and |R.x - S.a| <= 10 within
W; Spark's stream-stream join needs an equality, so the band is on top of the key). Each system runs at every
batch size of `--sweep-events` (events per batch over both streams) and keeps its best. The rate is input rows
over the summed trigger time of the batches after the first window's warm-up (W + lateness of event time), from
Spark's progress reports; the result rows each system committed are counted and must be equal.

The floor of join_stream's shape, in the same run: the same inputs through the same union, adapter and shuffle by
slot into a stateful processor (RocksDB) that opens the pieces and emits nothing, into the same sink
(`run_floor`): what a batch costs before anything is joined or written. Each run records the mean wall time of
each stage of its steady batches (Spark's REST API: the read stage, then the stateful stage with the sink).

    python -m benchmarks.frames [--quick]
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql.streaming import StatefulProcessor

from benchmarks.builtin_peer import CONFIGS, builtin_join, evidence, start_as
from benchmarks.machine import machine_facts
from benchmarks.params_cli import benchmark_parser, params_from
from benchmarks.pipeline import load_avg
from benchmarks.results_file import write_results
from windjoin.operators.workloads.b_model import BModel, PoissonClock
from windjoin.pipelines.frames.frame_adapter import FrameAdapter

RESULTS = Path(__file__).parent / "results" / "frames.json"
TASKS = ("equi", "band")
SYSTEMS = ("windjoin", "floor", *CONFIGS)
BAND_WIDTH = 10
TARGET = 2.0  # join_stream at least 2x the built-in join at its best, per task


@dataclass
class Params:
    window_s: float = 10.0
    lateness_ms: int = 2000
    keys: int = 10_000_001
    skew: float = 0.7
    density: float = 20_000.0  # event-time density, events/s over both streams
    events: int = 2_400_000
    sweep_events: str = "200000,400000"  # events per micro-batch (both streams) tried; best kept
    partitions: int = 64
    slots: int = 2
    timeout_s: float = 1200.0  # one run's limit


QUICK = {"window_s": 2.0, "keys": 2_000, "density": 8_000.0, "events": 80_000, "sweep_events": "20000"}


def write_inputs(root: Path, params: Params, batch_events: int) -> dict[str, Any]:
    """The workload as Parquet, `root/R/<i>.parquet` and `root/S/<i>.parquet`, file i of both the i-th slice of
    `batch_events` events; modification times one second apart, in order (the file source reads oldest first)."""
    rng = np.random.default_rng(7)
    times = PoissonClock(params.density, rng).until(params.events / params.density * 1.2)[: params.events]
    ts = (1_700_000_000_000 + times * 1000).astype(np.int64)
    stream = rng.random(len(ts)) < 0.5
    keys = BModel(params.keys, params.skew, seed=1).sample(len(ts), rng)
    values = rng.integers(0, 10_000, len(ts))
    files = 0
    for i, start in enumerate(range(0, len(ts), batch_events)):
        part = slice(start, start + batch_events)
        for name, mask, field in (("R", stream[part], "x"), ("S", ~stream[part], "a")):
            folder = root / name
            folder.mkdir(parents=True, exist_ok=True)
            table = pa.table({"ts": ts[part][mask], "k": keys[part][mask], field: values[part][mask]})
            path = folder / f"{i:05d}.parquet"
            pq.write_table(table, path)
            os.utime(path, (1_600_000_000 + i, 1_600_000_000 + i))
        files = i + 1
    return {"events": len(ts), "files_per_stream": files, "event_time_s": float(times[-1])}


def spec_dict(params: Params, task: str) -> dict[str, Any]:
    on = [{"op": "eq", "left": "R.k", "right": "S.k"}]
    if task == "band":
        on.append({"op": "band", "left": "R.x", "right": "S.a", "width": BAND_WIDTH})
    return {
        "window": {"kind": "time", "size_ms": int(params.window_s * 1000)},
        "allowed_lateness_ms": params.lateness_ms,
        "streams": {
            "R": {"fields": {"k": "int", "x": "int"}, "key": "k"},
            "S": {"fields": {"k": "int", "a": "int"}, "key": "k"},
        },
        "tasks": [{"name": task, "join": ["R", "S"], "on": on}],
        "partitions": params.partitions,
        "slots": params.slots,
    }


def inputs(spark: Any, root: Path) -> dict[str, Any]:
    """A streaming DataFrame per stream, one file a micro-batch."""
    schemas = {"R": "ts bigint, k bigint, x bigint", "S": "ts bigint, k bigint, a bigint"}
    return {
        name: spark.readStream.schema(ddl).option("maxFilesPerTrigger", 1).parquet(str(root / name))
        for name, ddl in schemas.items()
    }


def timed(query: Any, timeout_s: float, warmup: float) -> dict[str, Any]:
    """Wait for an AvailableNow query to end; its rate over the batches after the first `warmup` input rows (at
    least one batch left), and the mean wall time of each stage of those batches (Spark's REST API)."""
    started = time.perf_counter()
    try:
        if not query.awaitTermination(timeout_s):
            raise TimeoutError(f"query {query.name} still running after {timeout_s:g} s")
        if query.exception() is not None:
            raise RuntimeError(str(query.exception()))
    finally:
        query.stop()
    wall = time.perf_counter() - started
    batches = [p for p in query.recentProgress if p["numInputRows"]]
    before = np.cumsum([0] + [p["numInputRows"] for p in batches])[:-1]  # rows read before each batch
    steady = [p for p, seen in zip(batches, before, strict=True) if seen >= warmup] or batches[-1:]
    rows = sum(p["numInputRows"] for p in steady)
    ms = sum(p["durationMs"]["triggerExecution"] for p in steady)
    return {
        "rows_per_s": rows / ms * 1000 if ms else None,
        "steady_batches": len(steady),
        "batches": len(batches),
        "rows": sum(p["numInputRows"] for p in batches),
        "wall_s": wall,
        "batch_ms_median": float(np.median([p["durationMs"]["triggerExecution"] for p in steady])) if steady else None,
        "add_batch_ms_median": float(np.median([p["durationMs"].get("addBatch", 0) for p in steady])),
        "stage_ms_mean": stage_walls(query, {p["batchId"] for p in steady}),
    }


def stage_walls(query: Any, batch_ids: set[int]) -> list[float]:
    """The mean wall time (ms) of each stage of a batch, in order (the read stage first: source, adapter, shuffle
    write; then the stateful stage with the sink), over `batch_ids`; empty without Spark's UI."""
    import urllib.request

    from pyspark import SparkContext

    context = SparkContext.getOrCreate()
    if not context.uiWebUrl:
        return []
    url = f"{context.uiWebUrl}/api/v1/applications/{context.applicationId}/stages?status=complete"
    with urllib.request.urlopen(url, timeout=30) as response:
        stages = json.loads(response.read())
    per_batch: dict[int, list[dict]] = {}
    for stage in stages:
        found = re.search(r"runId = (\S+)\s+batch = (\d+)", stage.get("description") or "")
        if found and found.group(1) == str(query.runId) and int(found.group(2)) in batch_ids:
            per_batch.setdefault(int(found.group(2)), []).append(stage)
    walls: list[list[float]] = []
    for stages_of_batch in per_batch.values():
        for i, stage in enumerate(sorted(stages_of_batch, key=lambda st: st["stageId"])):
            start, end = (datetime.strptime(stage[k], "%Y-%m-%dT%H:%M:%S.%f%Z") for k in STAGE_TIMES)
            walls += [[]] * (i + 1 - len(walls))
            walls[i] = [*walls[i], (end - start).total_seconds() * 1000]
    return [float(np.mean(w)) for w in walls]


STAGE_TIMES = ("firstTaskLaunchedTime", "completionTime")


def warmup_rows(params: Params) -> float:
    """Input rows of the first window and lateness of event time: state fills up, workers start."""
    return (params.window_s * 1000 + params.lateness_ms) * params.density / 1000


def measured(spark: Any, params: Params, name: str, frame: Any, work: Path, config: str | None = None) -> dict:
    """`frame` to the end through Spark's Parquet file sink (a fresh folder and checkpoint), timed (`timed`), with
    the result rows it committed and, for a built-in configuration, the evidence that it ran."""
    out = work / f"{name}-{uuid.uuid4().hex[:8]}"  # never an old checkpoint: RocksDB may still write the last one
    writer = (
        frame.writeStream.format("parquet")
        .option("path", str(out / "rows"))
        .option("checkpointLocation", str(out / "checkpoint"))
        .queryName(name)
        .trigger(availableNow=True)
    )
    run = timed(start_as(spark, config, writer) if config else writer.start(), params.timeout_s, warmup_rows(params))
    rows = spark.read.parquet(str(out / "rows"))
    if config:
        run["result_rows"] = rows.count()
        run["evidence"] = evidence(config, out / "checkpoint")
    elif "dead_letter" in rows.columns:
        run["result_rows"] = rows.where("task is not null").count()
        run["dead_letters"] = rows.where("dead_letter is not null").count()
    shutil.rmtree(out, ignore_errors=True)
    return run


def run_windjoin(spark: Any, params: Params, task: str, root: Path, work: Path) -> dict[str, Any]:
    from windjoin import parse_spec
    from windjoin.spark import join_stream

    frame = join_stream(parse_spec(spec_dict(params, task)), inputs(spark, root))
    return measured(spark, params, f"windjoin-{task}", frame, work)


def run_floor(spark: Any, params: Params, task: str, root: Path, work: Path) -> dict[str, Any]:
    """The floor of join_stream's shape: the same inputs through the same union, adapter and shuffle by slot into
    a stateful processor (RocksDB) that opens each piece and emits nothing, into the same sink: what a batch
    costs before anything is joined or written."""
    from windjoin import parse_spec
    from windjoin.pipelines.frames.frame_inputs import union_inputs
    from windjoin.pipelines.job.join_job import slot_labels
    from windjoin.pipelines.job.slot_pieces import PIECE_DDL

    spec = parse_spec(spec_dict(params, task))
    labels = slot_labels(spark, spec.slots)
    union = union_inputs(spec, inputs(spark, root))
    frame = (
        union.mapInArrow(FrameAdapter(spec, labels), PIECE_DDL)
        .groupBy("slot")
        .transformWithStateInPandas(
            statefulProcessor=PieceOpener(), outputStructType="rows long", outputMode="Append", timeMode="EventTime"
        )
    )
    return measured(spark, params, f"floor-{task}", frame, work)


def run_builtin(spark: Any, params: Params, config: str, task: str, root: Path, work: Path) -> dict[str, Any]:
    frames = inputs(spark, root)
    band_width = BAND_WIDTH if task == "band" else None
    joined = builtin_join(
        frames["R"], frames["S"], int(params.window_s * 1000), params.lateness_ms, "inner", band_width
    )
    return measured(spark, params, f"builtin-{config}-{task}", joined, work, config)


class PieceOpener(StatefulProcessor):
    """The floor's stateful processor: opens every piece (Arrow IPC) it is given, counts its rows, emits nothing."""

    def init(self, handle: Any) -> None:
        pass

    def handleInputRows(self, key: Any, rows: Any, timerValues: Any) -> Any:  # noqa: N802, N803 - Spark's names
        for frame in rows:
            for piece in frame["piece"]:
                pa.ipc.open_stream(pa.py_buffer(piece)).read_all()
        return iter(())

    def close(self) -> None:
        pass


def best_of(runs: dict[str, dict[str, Any]]) -> str:
    """The batch size with the highest rate."""
    return max(runs, key=lambda size: runs[size]["rows_per_s"] or 0)


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    systems = ["windjoin", *CONFIGS]
    width = 0.8 / len(systems)
    for j, system in enumerate(systems):
        rates = [result["tasks"][task][system]["best"]["rows_per_s"] or 0 for task in TASKS]
        ax.bar([i + j * width for i in range(len(TASKS))], rates, width, label=system)
    ax.set_xticks([i + width * (len(systems) - 1) / 2 for i in range(len(TASKS))], list(TASKS))
    ax.set_ylabel("input rows/s (file source -> Parquet file sink)")
    ax.legend(fontsize=8)
    m = result["machine"]
    ax.set_title(f"join_stream vs Spark's join — {m['cores']} cores, {m['cpu_model']}, {m['date']}", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv: list[str] | None = None) -> None:
    from windjoin.connectors.local.processes import free_port
    from windjoin.connectors.spark.session import build_local_spark
    from windjoin.pipelines.job.join_job import STATE_CONF

    parser = benchmark_parser(__doc__, Params(), QUICK, RESULTS)
    args = parser.parse_args(argv)
    params = params_from(args, Params(), QUICK)
    facts = machine_facts()
    result: dict[str, Any] = {
        "benchmark": "frames",
        "machine": facts,
        "date": facts["date"],
        "quick": args.quick,
        "params": asdict(params),
        "load_avg_start": load_avg(),
        "inputs": {},
        "tasks": {task: {system: {"sweep": {}} for system in SYSTEMS} for task in TASKS},
    }
    work = Path(tempfile.mkdtemp(prefix="windjoin-bench-frames-"))
    started = time.perf_counter()
    spark = build_local_spark(
        app_name="windjoin-bench-frames",
        conf={
            **STATE_CONF,
            "spark.driver.memory": "4g",
            "spark.sql.streaming.numRecentProgressUpdates": "10000",
            "spark.ui.showConsoleProgress": "false",
            "spark.ui.enabled": "true",  # each stage's wall time from the monitoring REST API
            "spark.ui.port": str(free_port()),
        },
    )
    spark.sparkContext.setLogLevel("ERROR")
    try:
        for size in (int(s) for s in params.sweep_events.split(",")):
            root = work / f"inputs-{size}"
            result["inputs"][str(size)] = write_inputs(root, params, size)
            for task in TASKS:
                runs = result["tasks"][task]
                runs["windjoin"]["sweep"][str(size)] = run = run_windjoin(spark, params, task, root, work)
                print(f"{task} windjoin @{size:,}: {_rate(run)}, {run['result_rows']:,} rows, stages {_ms(run)}")
                runs["floor"]["sweep"][str(size)] = run = run_floor(spark, params, task, root, work)
                print(f"{task} floor @{size:,}: {_rate(run)}, stages {_ms(run)}; load {load_avg()}")
                for config in CONFIGS:
                    runs[config]["sweep"][str(size)] = run = run_builtin(spark, params, config, task, root, work)
                    print(f"{task} {config} @{size:,}: {_rate(run)}, {run['result_rows']:,} rows, stages {_ms(run)}")
                print(f"load {load_avg()}")
            shutil.rmtree(root, ignore_errors=True)
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)
    targets = {}
    for task, runs in result["tasks"].items():
        for system in runs.values():
            system["best"] = {"batch_events": (size := best_of(system["sweep"])), **system["sweep"][size]}
        baseline = max(CONFIGS, key=lambda c: runs[c]["best"]["rows_per_s"] or 0)
        ratio = (runs["windjoin"]["best"]["rows_per_s"] or 0) / (runs[baseline]["best"]["rows_per_s"] or float("inf"))
        counts = {run["result_rows"] for s in ("windjoin", *CONFIGS) for run in runs[s]["sweep"].values()}
        floor = (runs["floor"]["best"]["rows_per_s"] or 0) / (runs[baseline]["best"]["rows_per_s"] or float("inf"))
        runs |= {"baseline": baseline, "ratio": ratio, "floor_ratio": floor, "result_rows_equal": len(counts) == 1}
        targets[f"{task}_at_least_{TARGET:g}x_builtin"] = ratio >= TARGET
        print(
            f"{task}: windjoin / {baseline} = {ratio:.2f}x (the floor of its shape: {floor:.2f}x); "
            f"result rows equal: {runs['result_rows_equal']}"
        )
    result["targets"] = targets
    result["load_avg_end"] = load_avg()
    result["seconds"] = time.perf_counter() - started
    print(write_results(result, args.out, plot))


def _ms(run: dict[str, Any]) -> str:
    return "/".join(f"{ms:.0f}" for ms in run["stage_ms_mean"]) + " ms"


def _rate(run: dict[str, Any]) -> str:
    rate = run["rows_per_s"]
    return f"{rate:,.0f} rows/s" if rate else "no steady batches"


if __name__ == "__main__":
    main()
