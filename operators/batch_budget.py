"""The per-batch time budget: where a micro-batch's wall time goes, from the measurements of its own parts.

Parts (milliseconds, wall time of the batch unless said otherwise):
- `read`, `adapt`: the slowest read task's time in the Kafka reads and in the input adapter (the read stage
  waits for its slowest task); measured in the read tasks and carried to the first slot by a timing row;
- `state_load`, `join`, `state_write`: the slowest slot's time loading its window state (cache or segments),
  joining, and writing its state back (segments, expiry, metadata);
- `sink_stage`: the slowest slot's time ordering its results and staging them into the sinks (the executors
  write the results; pipelines.job.slot_output);
- `spark`: the rest of the batch's Spark job: task scheduling, the shuffle, Python worker hand-offs, the state
  store's commit (the job's wall time less the slowest read task and the slowest slot);
- `sink_commit`: the driver closing the batch in every sink; `driver`: the rest of the driver's batch work
  (the slots' summaries, snapshots, marks);
- `plan`, `commit`: Spark's planning (latestOffset, getBatch, queryPlanning, walCommit) and offset commit, from
  Spark's progress report, which exists only once a batch ended: a batch carries its predecessor's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

SLOT_PHASES = ("state_load", "join", "state_write")
PLAN_DURATIONS = ("latestOffset", "getBatch", "queryPlanning", "walCommit")


def batch_budget(stats: Sequence[Mapping[str, Any]], execute_ms: float, sinks_ms: float, driver_ms: float) -> dict:
    """The budget of one batch from its slots' stats and the driver's own timings (see the module docstring)."""
    tasks = [t for s in stats for t in s.get("read_tasks", [])]
    slowest_task = max(tasks, key=lambda t: t["read_ms"] + t["adapt_ms"], default={"read_ms": 0.0, "adapt_ms": 0.0})
    slowest_slot = max((s.get("seconds", 0.0) * 1000 for s in stats), default=0.0)
    budget = {"read": slowest_task["read_ms"], "adapt": slowest_task["adapt_ms"]}
    for phase in SLOT_PHASES:
        budget[phase] = max((s.get("phases", {}).get(f"{phase}_ms", 0.0) for s in stats), default=0.0)
    staging = (1000 * (s.get("stage_seconds", 0.0) + s.get("order_seconds", 0.0)) for s in stats)
    budget["sink_stage"] = max(staging, default=0.0)
    budget["spark"] = max(0.0, execute_ms - slowest_task["read_ms"] - slowest_task["adapt_ms"] - slowest_slot)
    budget["sink_commit"], budget["driver"] = sinks_ms, driver_ms
    return {part: round(ms, 1) for part, ms in budget.items()}


def spark_parts(progress: Mapping[str, Any] | None) -> dict:
    """Spark's planning and commit time of a finished batch (its progress report), with its batch id."""
    if not progress:
        return {}
    durations = progress.get("durationMs", {})
    return {
        "batch_id": progress.get("batchId"),
        "plan": float(sum(durations.get(k, 0) for k in PLAN_DURATIONS)),
        "commit": float(durations.get("commitOffsets", 0)),
        "total": float(durations.get("triggerExecution", 0)),
    }


def budget_text(budget: Mapping[str, float], previous: Mapping[str, Any]) -> str:
    """The budget as a progress-line fragment: "time 0.93 s = read 0.02 + adapt 0.01 + ...", in seconds."""
    if not budget:
        return ""
    parts = " + ".join(f"{part} {ms / 1000:.2f}" for part, ms in budget.items())
    if previous:
        parts += f" (previous batch's plan {previous['plan'] / 1000:.2f}, commit {previous['commit'] / 1000:.2f})"
    return f", time {sum(budget.values()) / 1000:.2f} s = {parts}"
