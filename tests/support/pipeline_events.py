"""The end-to-end pipeline tests' spec (R and S over their own topics, 8 partitions on 2 slots) and random
events for it."""

from __future__ import annotations

import random


def pipeline_spec(unique_topic, tmp_path, window: dict, keyed: bool, tasks: list[dict], **extra) -> dict:
    r_fields, s_fields = {"k": "int", "x": "int", "y": "float"}, {"k": "int", "a": "int", "b": "float"}
    spec = {
        "window": window,
        "streams": {
            "R": {"fields": r_fields, "topic": unique_topic("r")},
            "S": {"fields": s_fields, "topic": unique_topic("s")},
        },
        "tasks": tasks,
        "partitions": 8,
        "slots": 2,
        "checkpoint": str(tmp_path / "checkpoint"),
        **extra,
    }
    if keyed:
        spec["streams"]["R"]["key"] = spec["streams"]["S"]["key"] = "k"
    return spec


def pipeline_events(n: int, seed: int, keys: int, per_ms: int = 1) -> list[dict]:
    """`n` events of R or S at random, `per_ms` of them at each millisecond in turn."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        if rng.random() < 0.5:
            out.append(
                {
                    "stream": "R",
                    "ts": 1_700_000_000_000 + i // per_ms,
                    "k": rng.randrange(keys),
                    "x": rng.randrange(50),
                    "y": rng.uniform(0, 50),
                }
            )
        else:
            out.append(
                {
                    "stream": "S",
                    "ts": 1_700_000_000_000 + i // per_ms,
                    "k": rng.randrange(keys),
                    "a": rng.randrange(50),
                    "b": rng.uniform(0, 50),
                }
            )
    return out
