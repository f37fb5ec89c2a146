"""Routing tables with versioned moves and mini-groups: every tuple goes to the slot of the one unit holding it."""

from __future__ import annotations

import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from windjoin.operators.partitioning import Group, RoutingTable, key_hash, mini_bits, partition_of


def test_old_api_still_works():
    table = RoutingTable.round_robin(6, 4)
    assert table.version == 0
    assert table.slot_of == (0, 1, 2, 3, 0, 1)
    assert table.slots(np.array([5, 0, 3])).tolist() == [1, 0, 3]
    keys = np.array([5, -3, 12])
    assert partition_of(keys, 7).tolist() == partition_of(keys.astype(float), 7).tolist()


def test_moves_make_a_new_version_and_change_only_the_moved_groups():
    table = RoutingTable.round_robin(8, 2, version=3)
    moved = table.with_moves({Group(1): 0, Group(4): 1})
    assert moved.version == 4
    assert moved.slot_of == (0, 0, 0, 1, 1, 1, 0, 1)
    assert moved.moves_from(table) == {Group(1): (1, 0), Group(4): (0, 1)}
    assert table.slot_of == (0, 1, 0, 1, 0, 1, 0, 1)  # the old version is untouched
    with pytest.raises(ValueError, match="not units"):
        table.with_moves({Group(1, 1, 0): 0})  # partition 1 is not split


def test_tiling_is_checked():
    table = RoutingTable.round_robin(2, 2)
    with pytest.raises(ValueError, match="partition 0 is not tiled"):
        table.with_units({Group(0, 1, 0): 0, Group(1): 1})  # half of partition 0 missing
    with pytest.raises(ValueError, match="partition 0 is not tiled"):
        table.with_units({Group(0, 1, 0): 0, Group(0, 1, 1): 1, Group(0, 2, 1): 0, Group(1): 1})  # overlap
    with pytest.raises(ValueError, match="does not fit"):
        Group(0, 1, 2)


@st.composite
def tilings(draw, partitions):
    """Random extendible-hash tilings: each partition whole, or recursively split on the next mini bit."""
    units = {}

    def split(p, depth, pattern):
        if depth < 4 and draw(st.integers(0, 2)) == 0:
            split(p, depth + 1, pattern)
            split(p, depth + 1, pattern | (1 << depth))
        else:
            units[Group(p, depth, pattern)] = draw(st.integers(0, 3))

    for p in range(partitions):
        split(p, 0, 0)
    return units


def _tiled_by_brute_force(units: set[Group], partitions: int) -> bool:
    """Every hash pattern of each partition, at its deepest unit's depth, lies in exactly one of its units."""
    if any(not 0 <= g.partition < partitions for g in units):
        return False
    for p in range(partitions):
        mine = [g for g in units if g.partition == p]
        deepest = max((g.depth for g in mine), default=0)
        for bits in range(1 << deepest):
            if sum(bits % (1 << g.depth) == g.pattern for g in mine) != 1:
                return False
    return True


@st.composite
def unit_sets(draw, partitions):
    """A random tiling, then maybe broken: a unit dropped, an arbitrary one added, one replaced by a child."""
    units = set(draw(tilings(partitions)))
    for _ in range(draw(st.integers(0, 2))):
        change = draw(st.sampled_from(["drop", "add", "child"]))
        if change == "drop" and units:
            units.discard(draw(st.sampled_from(sorted(units))))
        elif change == "add":
            depth = draw(st.integers(0, 5))
            units.add(Group(draw(st.integers(0, partitions)), depth, draw(st.integers(0, (1 << depth) - 1))))
        elif units:
            g = draw(st.sampled_from(sorted(units)))
            units.discard(g)
            units.add(Group(g.partition, g.depth + 1, g.pattern | draw(st.sampled_from([0, 1 << g.depth]))))
    return units


@settings(max_examples=150, deadline=None)
@given(data=st.data(), partitions=st.integers(1, 4))
def test_the_tiling_check_agrees_with_a_brute_force_count(data, partitions):
    units = data.draw(unit_sets(partitions))
    try:
        RoutingTable.round_robin(partitions, 2).check_tiling(units)
        tiled = True
    except ValueError:
        tiled = False
    assert tiled == _tiled_by_brute_force(units, partitions)


def test_the_tiling_check_of_thousands_of_mini_groups_is_quick():
    """It ran for every planned batch testing every pair of a partition's units: 2^11 of them took 2 s."""
    table = RoutingTable.round_robin(4, 2)
    units = {Group(p, 11, pattern) for p in range(4) for pattern in range(1 << 11)}  # 8192 mini-groups
    started = time.process_time()
    table.check_tiling(units)
    with pytest.raises(ValueError, match="partition 3 is not tiled exactly once by its 2049 groups"):
        table.check_tiling(units | {Group(3, 10, 5)})  # overlaps two of partition 3's
    assert time.process_time() - started < 0.5  # the pairwise check takes minutes here


@settings(max_examples=150, deadline=None)
@given(data=st.data(), partitions=st.integers(1, 6), keys=st.lists(st.integers(-50, 50), max_size=80))
def test_route_sends_each_tuple_to_its_units_slot(data, partitions, keys):
    units = data.draw(tilings(partitions))
    table = RoutingTable.round_robin(partitions, 4).with_units(units)
    hashes = key_hash(np.asarray(keys, dtype=np.int64))
    got = table.route(hashes)
    for h, slot in zip(hashes.tolist(), got.tolist(), strict=True):
        part, rest = h % partitions, h // partitions  # plain Python integers, apart from the numpy code
        holders = [g for g in units if g.partition == part and rest % (1 << g.depth) == g.pattern]
        assert len(holders) == 1
        assert slot == units[holders[0]]
    assert table.groups() == units
    assert (partition_of(np.asarray(keys, dtype=np.int64), partitions) == hashes % np.uint64(partitions)).all()


def test_mini_bits_do_not_depend_on_the_partition_count_modulus():
    hashes = key_hash(np.arange(1000))
    # two tuples of one partition differ in their mini bits independently of which partition they fall in
    bits = mini_bits(hashes, 8)
    assert set((bits & np.uint64(1)).tolist()) == {0, 1}
    assert (bits * np.uint64(8) + hashes % np.uint64(8) == hashes).all()


def test_split_since_an_older_version_reports_where_its_tuples_were():
    table = RoutingTable.round_robin(2, 2)
    split = table.with_units({Group(0, 1, 0): 0, Group(0, 1, 1): 1, Group(1): 1})
    assert split.moves_from(table) == {Group(0, 1, 1): (0, 1)}
    merged = split.with_units({Group(0): 1, Group(1): 1})
    with pytest.raises(ValueError, match="several old slots"):
        merged.moves_from(split)  # buddies on different slots must be brought together before merging
