"""Every number of a join spec is a YAML number within its range, and no URL carries a password in its query
(issue 47): `size_ms: 2^63-1` gave no results without a word, 2^63 a raw OverflowError, `"1_0"` was read as 10
(pydantic's lax mode), and `redis://h/0?password=pw` logged in with its password. Each error names the key and
what is accepted."""

from __future__ import annotations

from typing import Any

import pytest

from windjoin.operators.spec import SpecError, parse_spec
from windjoin.operators.spec_numbers import MAX_BYTES, MAX_COUNT, MAX_MS, MAX_WINDOW_MS


def _spec(**top: Any) -> dict[str, Any]:
    window = top.pop("window", {"kind": "time", "size_ms": 1000})
    return {
        "window": window,
        "streams": {"R": {"fields": {"k": "int"}}, "S": {"fields": {"k": "int"}}},
        "tasks": [{"name": "a", "join": ["R", "S"]}],
        **top,
    }


@pytest.mark.parametrize("size_ms", [2**63 - 1, 2**63, 2**80, MAX_WINDOW_MS + 1])
def test_a_window_size_beyond_ten_years_is_refused_naming_the_key_and_the_bound(size_ms: int) -> None:
    with pytest.raises(SpecError, match=rf"window\.size_ms: Input should be less than or equal to {MAX_WINDOW_MS}"):
        parse_spec(_spec(window={"kind": "time", "size_ms": size_ms}))


@pytest.mark.parametrize("text", ["1_0", "10", " 10", "1e3"])
def test_a_number_written_as_text_is_refused(text: str) -> None:
    with pytest.raises(SpecError, match=r"window\.size_ms: Input should be a valid integer"):
        parse_spec(_spec(window={"kind": "time", "size_ms": text}))
    with pytest.raises(SpecError, match=r"trigger_ms: Input should be a valid integer"):
        parse_spec(_spec(trigger_ms=text))


W = MAX_WINDOW_MS
BOUNDS = [
    ({"window": {"kind": "time", "lower_ms": -W - 1, "upper_ms": 0}}, "window.lower_ms", -W),
    ({"window": {"kind": "count", "size": MAX_COUNT + 1}}, "window.size", MAX_COUNT),
    ({"window": {"kind": "tumbling", "size_ms": 10, "offset_ms": W + 1}}, "window.offset_ms", W),
    ({"window": {"kind": "hopping", "size_ms": 10, "hop_ms": W + 1}}, "window.hop_ms", W),
    ({"allowed_lateness_ms": MAX_MS + 1}, "allowed_lateness_ms", MAX_MS),
    ({"trigger_ms": MAX_MS + 1}, "trigger_ms", MAX_MS),
    ({"max_offsets_per_trigger": MAX_COUNT + 1}, "max_offsets_per_trigger", MAX_COUNT),
    ({"latency_target_ms": MAX_MS + 1}, "latency_target_ms", MAX_MS),
    ({"idle_timeout_ms": MAX_MS + 1}, "idle_timeout_ms", MAX_MS),
    ({"alignment_ms": MAX_MS + 1}, "alignment_ms", MAX_MS),
    ({"max_future_ms": MAX_MS + 1}, "max_future_ms", MAX_MS),
    ({"sinks": {"redis": {"retain_ms": MAX_MS + 1}}}, "sinks.redis.retain_ms", MAX_MS),
    ({"sinks": {"redis": {"feed_batches": MAX_COUNT + 1}}}, "sinks.redis.feed_batches", MAX_COUNT),
    ({"sinks": {"redis": {"max_bytes": MAX_BYTES + 1}}}, "sinks.redis.max_bytes", MAX_BYTES),
    ({"sinks": {"parquet": {"path": "/r", "retain_ms": MAX_MS + 1}}}, "sinks.parquet.retain_ms", MAX_MS),
    (
        {"sinks": {"parquet": {"path": "/r", "snapshots": {"every_ms": MAX_MS + 1}}}},
        "sinks.parquet.snapshots.every_ms",
        MAX_MS,
    ),
]


@pytest.mark.parametrize(("top", "key", "bound"), BOUNDS, ids=[key for _, key, _ in BOUNDS])
def test_every_spec_number_is_bounded(top: dict[str, Any], key: str, bound: int) -> None:
    relation = "greater" if bound < 0 else "less"
    with pytest.raises(SpecError, match=rf"{key}: Input should be {relation} than or equal to {bound}"):
        parse_spec(_spec(**top))


def test_a_task_bound_and_a_band_width_are_bounded() -> None:
    tasks = [{"name": "a", "join": ["R", "S"], "type": "asof", "max_age_ms": MAX_MS + 1}]
    with pytest.raises(SpecError, match=rf"tasks\[0\]\.max_age_ms: Input should be less than or equal to {MAX_MS}"):
        parse_spec({**_spec(), "tasks": tasks})
    band = [{"op": "band", "left": "R.k", "right": "S.k", "width": 2**63}]
    with pytest.raises(SpecError, match=r"tasks\[0\]\.on\[0\]\.width: Input should be less than or equal to"):
        parse_spec({**_spec(), "tasks": [{"name": "a", "join": ["R", "S"], "on": band}]})


@pytest.mark.parametrize("query", ["password=pw", "db=0&password=pw", "ssl_password=pw", "Password=pw"])
def test_a_redis_password_in_the_urls_query_is_refused(query: str) -> None:
    with pytest.raises(SpecError, match=r"sinks\.redis: url: holds credentials in its query \("):
        parse_spec(_spec(sinks={"redis": {"url": f"redis://h:6379/0?{query}"}}))
    assert parse_spec(_spec(sinks={"redis": {"url": "redis://h:6379/0?socket_timeout=5"}})).sinks.redis is not None
