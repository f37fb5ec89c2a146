"""The streaming job's throughput per window kind on the same topics: the sliding time window, a hopping window,
and an as-of task; and the as-of task's state after 4x the events over the same keys against its state after 1x.

Workload: the pipeline benchmark's (benchmarks/pipeline.py: R(ts, k, x) and S(ts, k, a) on Kafka, Poisson
arrivals, k from paper 000's b-model), prefilled once; each variant's job reads it from the start with the same
batch size, back to back, and its sustained input rows/s (three batches after a window's warm-up) is recorded,
with its pairs. The variants join R.k = S.k: within W of each other (sliding, the pipeline benchmark's task), in
hopping windows of W every W/2 (a pair once per window holding both), and as of each R tuple's time (the latest S
tuple of its key at or before it).

As-of state: two more prefills over a small key domain (`--state-keys`), one of N events and one of 4N with the
same event-time density (4x the time), each drained by an as-of job; the slots' state bytes after the last
batch (Spark's state: the segments, whose expired ones keep only the versions still held) must not grow with the
events: at most 1.2x.

    python -m benchmarks.window_kinds [--quick]
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from benchmarks.machine import machine_facts
from benchmarks.params_cli import benchmark_parser, params_from
from benchmarks.pipeline import Bench, WindjoinDelays, load_avg, open_session, start_windjoin, wait_rows
from benchmarks.pipeline import Params as PipelineParams
from benchmarks.results_file import write_results
from benchmarks.teardown import exit_on_sigterm, tear_down

RESULTS = Path(__file__).parent / "results" / "window_kinds.json"
VARIANTS = ("sliding", "hopping", "asof")


@dataclass
class Params:
    window_s: float = 10.0
    lateness_ms: int = 2000
    density: float = 20_000.0  # event-time density of the prefill, events/s over both streams
    events: int = 800_000
    max_offsets: int = 200_000
    throughput_seconds: float = 200.0
    state_keys: int = 5_000
    state_events: int = 200_000  # the as-of state's 1x run (the other: 4x)
    state_seconds: float = 300.0


QUICK = {
    "window_s": 2.0,
    "density": 8_000.0,
    "events": 60_000,
    "max_offsets": 20_000,
    "throughput_seconds": 60.0,
    "state_keys": 500,
    "state_events": 20_000,
    "state_seconds": 120.0,
}


class KindBench(Bench):
    """The pipeline benchmark's run with the task of one variant (`variant`)."""

    variant = "sliding"

    def spec_dict(self, topics: tuple[str, str], checkpoint: Path, max_offsets: int | None) -> dict[str, Any]:
        spec = super().spec_dict(topics, checkpoint, max_offsets)
        size_ms = int(self.params.window_s * 1000)
        if self.variant == "hopping":
            spec["window"] = {"kind": "hopping", "size_ms": size_ms, "hop_ms": size_ms // 2}
        elif self.variant == "asof":
            spec["tasks"][0]["type"] = "asof"
        return spec


def drained_state(bench: KindBench, events: int, batch_rows: int, seconds: float) -> dict[str, Any]:
    """A fresh prefill of `events` drained by an as-of job in batches of `batch_rows` (many batches, so that
    segments expire): the slots' state after its last batch."""
    prefill = bench.prefill(bench.density, events)
    spec, _ = bench._spec_file(bench.prefill_topics, f"state-{events}", batch_rows)
    sink, outcomes = WindjoinDelays(), []
    started = time.perf_counter()
    query = start_windjoin(bench.spark, spec, bench.bootstrap, sink, outcomes)
    try:
        drained = wait_rows(query, prefill["events"], timeout_s=seconds)
    finally:
        query.stop()
    last = outcomes[-1].stats if outcomes else []
    return {
        "events": prefill["events"],
        "drained": drained,
        "batches": len(outcomes),
        "pairs": sink.pairs,
        "state_bytes": sum(s["state_bytes"] for s in last),
        "segments": sum(s["segments"] for s in last),
        "wall_s": time.perf_counter() - started,
    }


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib.pyplot as plt

    fig, (rates, state) = plt.subplots(1, 2, figsize=(10, 4))
    throughput = result["throughput"]
    rates.bar(list(throughput), [throughput[v]["rows_per_s"] or 0 for v in throughput], color="tab:blue")
    rates.set_ylabel("sustained input rows/s")
    rates.set_title("the job, same topics and batch size", fontsize=9)
    runs = result["asof_state"]
    state.bar(["1x events", "4x events"], [runs["1x"]["state_bytes"], runs["4x"]["state_bytes"]], color="tab:orange")
    state.set_ylabel("as-of task's state bytes after the last batch")
    state.set_title(f"same {result['params']['state_keys']:,} keys: {runs['ratio']:.2f}x", fontsize=9)
    m = result["machine"]
    fig.suptitle(f"window kinds — {m['cores']} cores, {m['cpu_model']}, {m['date']}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv: list[str] | None = None) -> None:
    parser = benchmark_parser(__doc__, Params(), QUICK, RESULTS)
    args = parser.parse_args(argv)
    params = params_from(args, Params(), QUICK)
    workdir = Path(tempfile.mkdtemp(prefix="windjoin-bench-kinds-"))
    pipeline = replace(PipelineParams(), window_s=params.window_s, lateness_ms=params.lateness_ms)
    facts = machine_facts()
    result: dict[str, Any] = {
        "benchmark": "window_kinds",
        "machine": facts,
        "date": facts["date"],
        "quick": args.quick,
        "params": asdict(params),
        "load_avg_start": load_avg(),
    }
    started, spark = time.perf_counter(), None
    exit_on_sigterm()
    try:
        bootstrap, spark = open_session(workdir / "services", "windjoin-bench-window-kinds")
        bench = KindBench(pipeline, workdir, bootstrap, spark)
        result["prefill"] = bench.prefill(params.density, params.events)
        result["throughput"] = {}
        for variant in VARIANTS:
            bench.variant = variant
            run = bench.windjoin_throughput(result["prefill"]["events"], params.max_offsets)
            result["throughput"][variant] = {k: run[k] for k in ("rows_per_s", "batches", "pairs", "wall_s")}
            sliding = result["throughput"]["sliding"]["rows_per_s"]
            result["throughput"][variant]["over_sliding"] = (run["rows_per_s"] or 0) / sliding if sliding else None
            print(f"{variant}: {run['rows_per_s'] or 0:,.0f} rows/s, {run['pairs']:,} pairs; load {load_avg()}")
        bench.variant = "asof"
        bench.params = replace(pipeline, keys=params.state_keys, skew=0.5)
        rows = max(1, params.state_events // 8)  # the same batches for both: the last ones' rows are alike
        one, four = (drained_state(bench, n * params.state_events, rows, params.state_seconds) for n in (1, 4))
        result["asof_state"] = {"1x": one, "4x": four, "ratio": four["state_bytes"] / max(1, one["state_bytes"])}
        print(
            f"as-of state: {one['state_bytes']:,} bytes after 1x, {four['state_bytes']:,} after 4x: "
            f"{result['asof_state']['ratio']:.2f}x"
        )
    finally:
        tear_down(spark, workdir / "services", workdir)
    result["load_avg_end"] = load_avg()
    result["seconds"] = time.perf_counter() - started
    print(write_results(result, args.out, plot))


if __name__ == "__main__":
    main()
