"""The spill and memory-control tests' workload: the spec and disordered events, produced to its topics."""

from __future__ import annotations

import random

from tests.pipelines.pipeline_helpers import produce_events
from tests.support.join_tasks import TASKS
from tests.support.pipeline_events import pipeline_events, pipeline_spec


def _disordered(events: list[dict], seed: int, jitter: int) -> list[dict]:
    """Timestamps moved by up to `jitter` ms either way: arrivals out of event-time order (none late)."""
    rng = random.Random(seed)
    return [{**e, "ts": e["ts"] + rng.randint(-jitter, jitter)} for e in events]


def spill_workload(unique_topic, tmp_path, bootstrap: str, seed: int, lateness_ms: int) -> tuple[dict, list[dict]]:
    """The spill tests' spec (time window 300 ms, 8 partitions on 2 slots, 250 records per batch) and 2,400
    disordered events over 24 keys, produced to its topics."""
    window = {"kind": "time", "size_ms": 300}
    spec_dict = pipeline_spec(
        unique_topic,
        tmp_path,
        window,
        keyed=True,
        tasks=TASKS,
        max_offsets_per_trigger=250,
        allowed_lateness_ms=lateness_ms,
        # Its partitions are equally dense, so there is nothing to align; and the memory tests' budgets were
        # set on batches of 250 records from the first (aligned reading starts with a small probe batch, which
        # shifts every later batch and when memory allows a clean-up).
        alignment_ms=None,
    )
    events = _disordered(pipeline_events(2400, seed=seed, keys=24), seed=seed + 1, jitter=150)
    produce_events(bootstrap, spec_dict, events)
    return spec_dict, events
