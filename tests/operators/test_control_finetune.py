"""Extendible-hash fine tuning of a partition's state into mini-groups (paper 000, Fig. 4b)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from windjoin.operators.control.finetune import (
    Directory,
    bucket_size,
    fine_sizes,
    retune,
    routing_with,
    unit_weights,
)
from windjoin.operators.partitioning import Group, RoutingTable, key_hash, mini_bits, partition_of


def test_split_doubles_the_directory_when_local_depth_is_global():
    d = Directory.whole(3).split(Group(3))
    assert d.global_depth == 1 and d.entries == (Group(3, 1, 0), Group(3, 1, 1))
    d = d.split(Group(3, 1, 1))  # entries 0..3: bits 00, 01, 10, 11
    assert d.global_depth == 2
    assert d.entries == (Group(3, 1, 0), Group(3, 2, 1), Group(3, 1, 0), Group(3, 2, 3))
    d2 = d.split(Group(3, 1, 0))  # local depth 1 < global 2: no doubling
    assert d2.global_depth == 2
    assert d2.entries == (Group(3, 2, 0), Group(3, 2, 1), Group(3, 2, 2), Group(3, 2, 3))


def test_merge_shrinks_the_directory():
    d = Directory.whole(0).split(Group(0)).split(Group(0, 1, 1))
    merged = d.merge(Group(0, 2, 3))
    assert merged == Directory.whole(0).split(Group(0))
    assert merged.merge(Group(0, 1, 0)) == Directory.whole(0)
    with pytest.raises(ValueError, match="no buddy"):
        d.merge(Group(0, 1, 0))  # its buddy (pattern 1) is split deeper


def _reverse(x: int, bits: int) -> int:
    return int(format(x, f"0{bits}b")[::-1], 2) if bits else 0


@settings(max_examples=200, deadline=None)
@given(splits=st.lists(st.integers(0, 50), max_size=12))
def test_buddies_match_the_papers_formula(splits):
    """The paper writes buddies as l_bud = l +/- 2^(d-d') for a bucket's first entry l in a directory whose
    entries are contiguous per bucket; ours are strided (d' low bits), i.e. its index bit-reversed."""
    d = Directory.whole(0)
    for s in splits:
        d = d.split(d.buckets()[s % len(d.buckets())])
    g = d.global_depth
    for b in d.buckets():
        if b.depth == 0:
            continue
        first = _reverse(b.pattern, b.depth) << (g - b.depth)  # first entry in the contiguous layout
        step = 1 << (g - b.depth)
        first_bud = first + step if first % (2 * step) == 0 else first - step
        buddy = d.buddy(b)
        if buddy is not None:
            assert _reverse(buddy.pattern, buddy.depth) << (g - buddy.depth) == first_bud
        # every entry in a contiguous run points to the same bucket
        assert {d.entries[_reverse(i, g)] for i in range(first, first + step)} == {b}


@settings(max_examples=200, deadline=None)
@given(keys=st.lists(st.integers(-1000, 1000), min_size=1, max_size=300), splits=st.lists(st.integers(0, 99)))
def test_bucket_of_a_tuple_is_the_bucket_that_contains_its_hash(keys, splits):
    d = Directory.whole(2)
    for s in splits[:10]:
        d = d.split(d.buckets()[s % len(d.buckets())])
    h = key_hash(np.asarray(keys, dtype=np.int64))
    parts, bits = partition_of(np.asarray(keys, dtype=np.int64), 5), mini_bits(h, 5)
    got = d.bucket_of(bits)
    for i, bucket in enumerate(got):
        assert bucket.contains(parts[i : i + 1], bits[i : i + 1])[0] or parts[i] != 2
    assert Directory.of(2, d.buckets()) == d


def test_retune_by_hand():
    theta = 10.0
    # 8 bins of the 3 low mini bits; the partition holds 70 > 2 theta
    sizes = np.array([30.0, 2, 3, 2, 30, 1, 1, 1])
    d = retune(Directory.whole(0), sizes, theta)
    # pattern 0 (bins 0,2,4,6: 64) splits; its half x00 (bins 0,4: 60) splits again into 000 (30) and 100 (30),
    # which cannot split further (one bin each); 10 (bins 2,6: 4) stays; x1 (bins 1,3,5,7: 5) stays
    assert d.buckets() == [Group(0, 1, 1), Group(0, 2, 2), Group(0, 3, 0), Group(0, 3, 4)]
    for b in d.buckets():
        assert bucket_size(b, sizes) <= 2 * theta or b.depth == 3
    # the load falls: small buddies merge back, but not above 2 theta
    calm = np.array([6.0, 2, 3, 2, 6, 1, 1, 1])
    assert retune(d, calm, theta).buckets() == [
        Group(0, 1, 0),
        Group(0, 1, 1),
    ]  # 16 and 5: together 21 >= 2 theta, so they stay apart


def test_retune_does_not_merge_across_slots():
    d = Directory.of(0, [Group(0, 1, 0), Group(0, 1, 1)])
    sizes = np.array([1.0, 1.0])
    assert retune(d, sizes, 10.0, {Group(0, 1, 0): 0, Group(0, 1, 1): 1}) == d
    assert retune(d, sizes, 10.0, {Group(0, 1, 0): 1, Group(0, 1, 1): 1}) == Directory.whole(0)


@settings(max_examples=200, deadline=None)
@given(sizes=st.lists(st.integers(0, 100), min_size=16, max_size=16), theta=st.integers(1, 60))
def test_retune_keeps_buckets_within_theta_and_two_theta_where_it_can(sizes, theta):
    sizes = np.asarray(sizes, dtype=float)
    d = retune(Directory.whole(0), sizes, theta)
    assert Directory.of(0, d.buckets()) == d  # still a tiling
    for b in d.buckets():
        size = bucket_size(b, sizes)
        assert size <= 2 * theta or b.depth == 4  # only a single bin may stay too big
        buddy = d.buddy(b)
        if size < theta and buddy is not None:  # a small bucket is left alone only if merging would overflow
            assert size + bucket_size(buddy, sizes) >= 2 * theta


def test_fine_sizes_count_the_partitions_tuples_by_bits():
    keys = np.arange(2000)
    h = key_hash(keys)
    sizes = fine_sizes(h, 4, partition=1, max_depth=3)
    parts, bits = partition_of(keys, 4), mini_bits(h, 4)
    for i in range(8):
        assert sizes[i] == sum(1 for p, b in zip(parts.tolist(), bits.tolist(), strict=True) if p == 1 and b % 8 == i)
    assert fine_sizes(h, 4, 1, 3, weights=np.full(2000, 2.0)).tolist() == (2 * sizes).tolist()


def test_routing_follows_the_directories_and_mini_groups_are_movable():
    table = RoutingTable.round_robin(4, 2)
    d = Directory.whole(1).split(Group(1))
    split = routing_with(table, [d])
    assert split.groups()[Group(1, 1, 0)] == split.groups()[Group(1, 1, 1)] == 1
    moved = split.with_moves({Group(1, 1, 1): 0})
    keys = np.arange(500)
    h = key_hash(keys)
    part, bits = partition_of(keys, 4), mini_bits(h, 4)
    expected = [0 if p == 1 and b % 2 == 1 else (1 if p == 1 else p % 2) for p, b in zip(part, bits, strict=True)]
    assert moved.route(h).tolist() == expected
    with pytest.raises(ValueError, match="move it together first"):
        routing_with(moved, [Directory.whole(1)])
    assert routing_with(table, [Directory.whole(0)]) is table


def test_retune_splits_no_deeper_than_max_depth():
    sizes = np.zeros(16)
    sizes[5] = 1000.0  # one hot bin: splitting goes as deep as allowed
    assert max(b.depth for b in retune(Directory.whole(0), sizes, 10.0).buckets()) == 4
    assert max(b.depth for b in retune(Directory.whole(0), sizes, 10.0, max_depth=2).buckets()) == 2


def test_mini_groups_weigh_their_share_of_the_partitions_tuples():
    table = RoutingTable.round_robin(2, 2).with_units({Group(0, 1, 0): 0, Group(0, 1, 1): 1, Group(1): 1})
    hist = np.array([3.0, 1.0])  # bins by the low mini bit: pattern 0 holds 3/4
    weights = unit_weights({Group(0): 8.0, Group(1): 2.0}, table, {0: hist})
    assert weights[Group(0, 1, 0)] == 6.0 and weights[Group(0, 1, 1)] == 2.0 and weights[Group(1)] == 2.0
    assert unit_weights({Group(0): 8.0}, table, {})[Group(0, 1, 1)] == 4.0  # no histogram: evenly by depth
