"""The per-batch time budget (operators.batch_budget) and how `windjoin run` shows it."""

from __future__ import annotations

from windjoin.operators.batch_budget import batch_budget, budget_text, spark_parts
from windjoin.pipelines.cli.run import Progress
from windjoin.pipelines.job.join_job import BatchOutcome


def _slot(seconds: float, load: float, join: float, write: float, tasks: list | None = None) -> dict:
    phases = {"state_load_ms": load, "join_ms": join, "state_write_ms": write}
    return {"rows": 10, "window_tuples": 5, "seconds": seconds, "phases": phases, "read_tasks": tasks or []}


def test_the_parts_add_up_to_the_batch_and_spark_is_what_no_part_measured() -> None:
    tasks = [{"read_ms": 30.0, "adapt_ms": 10.0, "records": 5}, {"read_ms": 20.0, "adapt_ms": 40.0, "records": 9}]
    stats = [_slot(0.2, 5, 150, 20, tasks), _slot(0.1, 50, 30, 10)]
    budget = batch_budget(stats, execute_ms=700, sinks_ms=30, driver_ms=5)
    # the slowest read task (60 ms) and the slowest slot (200 ms) are inside the job's 700 ms
    assert budget == {
        "read": 20.0,
        "adapt": 40.0,
        "state_load": 50.0,
        "join": 150.0,
        "state_write": 20.0,
        "sink_stage": 0.0,
        "spark": 440.0,
        "sink_commit": 30.0,
        "driver": 5.0,
    }
    assert budget_text(budget, {}).startswith(", time 0.76 s = read 0.02 + adapt 0.04")


def test_spark_reports_plan_and_commit_of_a_finished_batch() -> None:
    progress = {
        "batchId": 4,
        "durationMs": {"latestOffset": 10, "getBatch": 1, "queryPlanning": 20, "walCommit": 30, "commitOffsets": 40},
    }
    assert spark_parts(progress) == {"batch_id": 4, "plan": 61.0, "commit": 40.0, "total": 0.0}
    assert spark_parts(None) == {}


def test_the_progress_line_ends_with_the_limit_and_the_budget() -> None:
    outcome = BatchOutcome(7, stats=[_slot(0.2, 1, 2, 3)], finished_at=10.0, batch_limit=5000)
    outcome.budget = batch_budget(outcome.stats, 300, 10, 1)
    outcome.previous_spark = {"batch_id": 6, "plan": 80.0, "commit": 40.0}
    line = Progress().line(outcome)
    assert ", batch limit 5,000, time 0.12 s = read 0.00" in line  # 1 + 2 + 3 + spark (300 - 200) + 10 + 1 ms
    assert line.endswith("(previous batch's plan 0.08, commit 0.04)")
