"""The Kafka source's batch plan: offsets, max-min fair limits, ranges and their read tasks (pure, no broker)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from windjoin.operators.offset_plan import (
    KafkaRange,
    fair_split,
    group_ranges,
    make_offset,
    parse_offset,
    plan_end,
    plan_ranges,
)


def test_fair_split_gives_small_partitions_everything_and_shares_the_rest_equally() -> None:
    assert fair_split({"a:0": 5, "a:1": 100, "b:0": 100}, 65) == {"a:0": 5, "a:1": 30, "b:0": 30}
    assert fair_split({"a:0": 5, "a:1": 100, "b:0": 0}, 1000) == {"a:0": 5, "a:1": 100, "b:0": 0}
    assert fair_split({"a:0": 10, "a:1": 10, "a:2": 10}, 0) == {"a:0": 0, "a:1": 0, "a:2": 0}
    # Remainders go to the largest backlog first, ties in key order.
    assert fair_split({"a:0": 10, "a:1": 20, "a:2": 10}, 4) == {"a:0": 1, "a:1": 2, "a:2": 1}
    assert fair_split({"a:0": 10, "a:1": 10, "a:2": 10}, 2) == {"a:0": 1, "a:1": 1, "a:2": 0}


def test_fair_split_starves_no_partition_when_the_limit_is_below_the_partition_count() -> None:
    start = {f"t:{p}": 0 for p in range(5)}
    bounds = {k: (0, 50) for k in start}
    served: set[str] = set()
    positions = dict(start)
    for _ in range(3):
        end = plan_end(positions, bounds, 2)
        served |= {k for k in end if end[k] > positions[k]}
        assert sum(end.values()) - sum(positions.values()) == 2
        positions = end
    assert served == set(start)


@given(
    st.dictionaries(st.from_regex(r"t[a-c]:[0-9]", fullmatch=True), st.integers(0, 500), max_size=8),
    st.integers(0, 2000),
)
def test_fair_split_properties(available: dict[str, int], limit: int) -> None:
    grant = fair_split(available, limit)
    assert set(grant) == set(available)
    assert sum(grant.values()) == min(limit, sum(available.values()))
    for key, n in grant.items():
        assert 0 <= n <= available[key]
    # Max-min fair: a partition left wanting got at least as much as any other partition, less one.
    for key, n in grant.items():
        if n < available[key]:
            assert all(other <= n + 1 for other in grant.values())
    assert fair_split(dict(reversed(available.items())), limit) == grant


def test_plan_end_respects_the_limit_and_enters_new_partitions_at_their_low_watermark() -> None:
    start = {"a:0": 10, "a:1": 0}
    bounds = {"a:0": (0, 110), "a:1": (0, 4), "a:2": (7, 30)}
    assert plan_end(start, bounds, None) == {"a:0": 110, "a:1": 4, "a:2": 7}
    assert plan_end(start, bounds, 20) == {"a:0": 26, "a:1": 4, "a:2": 7}
    # A broker answering with less than the start never moves an offset backwards.
    assert plan_end({"a:0": 50}, {"a:0": (0, 40)}, None) == {"a:0": 50}
    # A partition that disappeared from the metadata keeps its position.
    assert plan_end({"a:0": 5, "gone:0": 9}, {"a:0": (0, 5)}, 10) == {"a:0": 5, "gone:0": 9}


def test_plan_ranges_skips_empty_partitions() -> None:
    ranges = plan_ranges({"b:0": 3, "a:1": 5, "a:0": 0}, {"b:0": 9, "a:1": 5, "a:0": 2, "c:0": 4})
    assert ranges == [KafkaRange("a", 0, 0, 2), KafkaRange("b", 0, 3, 9)]
    with pytest.raises(ValueError, match="before start"):
        plan_ranges({"a:0": 5}, {"a:0": 4})


@given(st.lists(st.integers(1, 10_000), max_size=20), st.one_of(st.none(), st.integers(1, 8)))
def test_group_ranges_deals_every_range_once_to_at_most_the_tasks_asked(counts: list[int], tasks: int | None) -> None:
    ranges = [KafkaRange(f"t{i % 3}", i, 0, n) for i, n in enumerate(counts)]
    groups = group_ranges(ranges, tasks)
    assert sorted(r.partition for g in groups for r in g) == list(range(len(ranges)))
    assert all(groups) and len(groups) <= (len(ranges) if tasks is None else min(tasks, len(ranges)))
    assert all(list(g) == sorted(g, key=lambda r: (r.topic, r.partition)) for g in groups)
    if (
        groups and tasks is not None
    ):  # dealt largest first to the lightest: no task exceeds another by more than a range
        loads = [sum(r.count for r in g) for g in groups]
        assert max(loads) - min(loads) <= max(counts)


def test_offsets_round_trip_through_json_in_canonical_order() -> None:
    offset = make_offset({"b:1": 4, "a:10": 2, "a:2": 9})
    text = json.dumps(offset)
    assert text == '{"partitions": {"a:10": 2, "a:2": 9, "b:1": 4}}'
    assert parse_offset(json.loads(text)) == {"a:10": 2, "a:2": 9, "b:1": 4}
    assert parse_offset({"partitions": {"my.topic-x:0": 1}, "epoch": 3}) == {"my.topic-x:0": 1}  # an older offset
    with pytest.raises(ValueError, match="not a windjoin Kafka offset"):
        parse_offset({"topic:0": 1})
