"""The demo's closing summary: delays over the batches after the first, the worst batch's p99, the budget."""

from __future__ import annotations

from windjoin.operators.batch_delays import Delays
from windjoin.pipelines.cli.demo import DemoSummary
from windjoin.pipelines.job.join_job import BatchOutcome


def _batch(batch_id: int, delays_ms: list[int]) -> BatchOutcome:
    return BatchOutcome(batch_id, delays_ms=Delays.of(delays_ms), budget={"read": 20.0, "join": 100.0})


def test_first_batch_is_left_out_and_the_worst_batch_p99_is_shown():
    summary = DemoSummary()
    summary.add(_batch(0, [9_000] * 100))  # Spark and the workers starting: not counted
    summary.add(_batch(1, [500] * 99 + [1_500]))  # p99 500 ms (nearest rank: the 99th of 100)
    summary.add(_batch(2, [700] * 98 + [2_300] * 2))  # p99 2.3 s: the worst batch
    text = summary.text()
    assert "worst batch's p99 2.30 s" in text
    assert "p99 1.51 s," in text  # over both batches: the 198th of 200 delays is 1.5 s (to its 10 ms bucket's edge)
    assert "median batch 0.12 s = read 0.02 + join 0.10" in text
