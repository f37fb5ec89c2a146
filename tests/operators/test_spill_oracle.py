"""Memory adaptation against the brute-force oracles: the normal run's results plus the clean-up's equal, as a
multiset, the oracle's join of every partition's tuples, whatever was pushed to disk, reinstated or relocated.

The reference is the 2-way or n-way oracle (operators/testing/oracle.py) run on each hash partition's
events apart (groups judge lateness per partition, as the Spark job does), results united.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from tests.models.spill_cluster import AdaptiveCluster
from tests.models.spill_group_join import GroupedJoin
from windjoin.connectors.files.spill_files import SpillFiles
from windjoin.operators.arrivals import ChunkBuilder
from windjoin.operators.batch import Arrivals
from windjoin.operators.partitioning import partition_of
from windjoin.operators.results import pair_records
from windjoin.operators.spec import parse_spec
from windjoin.operators.spill.config import MemoryAdaptationConfig
from windjoin.operators.spill.planner import Cleanup, Move, Push
from windjoin.operators.testing.oracle import as_multiset, oracle_join, oracle_mjoin

FIELDS = {"k": "int", "x": "int", "v": "float", "s": "string", "b": "bool"}
PARTITIONS = 4
CLUSTER_PARTITIONS = 12  # many small groups, so relocations find groups that fit (M_m - M_l) / 2
NAMES = "ABC"


def spec_dict(
    n: int, window_ms: int, lateness: int, filters: list[dict], two_tasks: bool, partitions: int = PARTITIONS
) -> dict:
    streams = list(NAMES[:n])
    on = [{"op": "eq", "left": f"{streams[i]}.k", "right": f"{streams[i + 1]}.k"} for i in range(n - 1)]
    tasks = [{"name": "t0", "join": streams, "on": on + filters}]
    if two_tasks:  # a second task over the first two streams, sharing their windows
        tasks.append({"name": "t1", "join": streams[:2][::-1], "on": [on[0]]})
    return {
        "window": {"kind": "time", "size_ms": window_ms},
        "allowed_lateness_ms": lateness,
        "streams": {s: {"fields": FIELDS, "key": "k", **({"timestamp": "t"} if s == "B" else {})} for s in streams},
        "tasks": tasks,
        "partitions": partitions,
        "slots": 1,
    }


@st.composite
def specs(draw, n: int, partitions: int = PARTITIONS):
    filters = []
    for _ in range(draw(st.integers(0, 2))):
        a, b = draw(st.permutations(NAMES[:n]))[:2]
        op = draw(st.sampled_from(["band", "ne", "le", "eq_text", "eq_bool"]))
        if op.startswith("eq_"):  # string and bool columns go through the spill files too
            field = "s" if op == "eq_text" else "b"
            pred = {"op": "eq", "left": f"{a}.{field}", "right": f"{b}.{field}"}
        else:
            pred = {"op": op, "left": f"{a}.{draw(st.sampled_from(['x', 'v']))}", "right": f"{b}.x"}
        if op == "band":
            pred["width"] = draw(st.sampled_from([0, 1, 1.5]))
        filters.append(pred)
    two_tasks = n == 3 and draw(st.booleans())
    window_ms = draw(st.integers(0, 25))  # 0: only equal event times pair
    return spec_dict(n, window_ms, draw(st.integers(0, 8)), filters, two_tasks, partitions)


@st.composite
def events(draw, n: int, max_size: int, keys: int = 6):
    out, clock = [], 0
    for _ in range(draw(st.integers(0, max_size) | st.just(max_size))):
        clock += draw(st.integers(0, 3))  # ties are common
        stream = draw(st.sampled_from(NAMES[:n]))
        out.append(
            {
                "stream": stream,
                "t" if stream == "B" else "ts": max(0, clock - draw(st.integers(0, 10))),  # out of order, some late
                "k": draw(st.sampled_from([0, 0, *range(keys)])),  # skewed keys
                "x": draw(st.integers(0, 2)),
                "v": draw(st.sampled_from([0.0, 0.5, 1.0, 2.0])),
                "s": draw(st.sampled_from(["", "a", "bé"])),
                "b": draw(st.booleans()),
            }
        )
    return out


def partitioned_oracle(spec: dict, evs: list[dict]) -> list[tuple]:
    oracle = oracle_mjoin if any(len(t["join"]) > 2 for t in spec["tasks"]) else oracle_join
    parts = partition_of(np.asarray([e["k"] for e in evs], dtype=np.int64), spec["partitions"]).tolist()
    expected: list[tuple] = []
    for p in range(spec["partitions"]):
        expected.extend(oracle(spec, [e for e, q in zip(evs, parts, strict=True) if q == p])[0])
    return expected


def records(spec, found) -> list[tuple]:
    out = []
    for r in found:
        streams = spec.task(r.task).join
        out.extend((rec["task"], *(rec[s] for s in streams)) for rec in pair_records(r))
    return out


def chunks(spec, evs: list[dict], sizes: list[int]):
    i = 0
    for size in sizes:
        if i >= len(evs):
            break
        builder = ChunkBuilder(spec)
        for e in evs[i : i + size]:
            builder.add(e["stream"], e, 0)
        i += size
        yield builder.take()
    if i < len(evs):
        builder = ChunkBuilder(spec)
        for e in evs[i:]:
            builder.add(e["stream"], e, 0)
        yield builder.take()


@pytest.mark.parametrize("n", [2, 3])
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_forced_pushes_and_cleanup_equal_the_oracle(n, data, tmp_path_factory):
    """Random groups pushed between random chunks, some clean-ups mid-run (state reinstated), one at the end."""
    spec_d = data.draw(specs(n))
    evs = data.draw(events(n, 70 if n == 2 else 50))
    spec = parse_spec(spec_d)
    files = SpillFiles(tmp_path_factory.mktemp("spill"))
    join = GroupedJoin(spec, files)
    rnd = random.Random(data.draw(st.integers(0, 2**32)))
    push_rate = data.draw(st.sampled_from([0.3, 1.0]))  # 1.0: every group pushed after every chunk
    sizes = data.draw(st.lists(st.integers(1, 12), max_size=40))
    got, pushes, mid_cleanups, from_cleanup = [], 0, 0, 0
    for chunk in chunks(spec, evs, sizes):
        got += records(spec, join.process(chunk).results)
        if join.groups and rnd.random() < push_rate:
            every = push_rate == 1.0
            parts = sorted(join.groups) if every else rnd.sample(sorted(join.groups), rnd.randint(1, len(join.groups)))
            pushes += len(parts)
            join.push(parts)
            assert all(files.files(p) for p in parts if join.groups[p].pushed)  # immutable files on disk
        if rnd.random() < 0.1:
            mid_cleanups += 1
            cleaned = records(spec, join.cleanup(reinstate=True))
            got += cleaned
            from_cleanup += len(cleaned)
    cleaned = records(spec, join.cleanup(reinstate=False))
    got += cleaned
    from_cleanup += len(cleaned)
    assert files.files() == []  # every pushed generation merged and deleted
    expected = partitioned_oracle(spec_d, evs)
    event(f"pushes: {min(pushes, 5)}+; mid-run clean-ups: {min(mid_cleanups, 1)}")
    event(f"clean-up results: {'none' if from_cleanup == 0 else 'some'}")
    assert as_multiset(got) == as_multiset(expected)


@pytest.mark.parametrize("policy", ["lazy_disk", "active_disk"])
@pytest.mark.parametrize("n", [2, 3])
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_policies_with_relocations_equal_the_oracle(policy, n, data, tmp_path_factory):
    """Three slots with budgets far below the state: the planner pushes, forces and relocates every round."""
    spec_d = data.draw(specs(n, CLUSTER_PARTITIONS))
    evs = data.draw(events(n, 80 if n == 2 else 50, keys=24))
    spec = parse_spec(spec_d)
    root = tmp_path_factory.mktemp("cluster")
    config = MemoryAdaptationConfig(
        policy=policy,
        memory_bytes=data.draw(st.sampled_from([200, 400, 800])),
        theta_m=0.5,
        push_fraction=0.3,
        choose=data.draw(st.sampled_from(["least_productive", "most_productive"])),
        theta_t_ms=data.draw(st.sampled_from([None, 5])),
        theta_d=data.draw(st.sampled_from([0.3, 0.8])),
        theta_f=1.5,
        cleanup_below=data.draw(st.sampled_from([None, 0.9])),  # 0.9: clean-ups during the run too
    )
    slot_of = {p: data.draw(st.integers(0, 2)) for p in range(CLUSTER_PARTITIONS)}
    slot_of[0], slot_of[1], slot_of[2] = 0, 1, 2  # every slot exists
    cluster = AdaptiveCluster(
        spec, config, lambda i: SpillFiles(root / f"slot{i}"), slot_of, adapt_every=1, query_bytes=10_000
    )
    got = []
    for chunk in chunks(spec, evs, data.draw(st.lists(st.integers(1, 10), max_size=30))):
        got += records(spec, cluster.process(chunk).results)
    got += records(spec, cluster.cleanup(progress=False))
    cleaned = sum(len(d.parts) for _, d in cluster.log.decisions if isinstance(d, Cleanup))
    assert cleaned == cluster.log.cleaned_groups
    kinds = {
        type(d).__name__ + ("(forced)" if isinstance(d, Push) and d.forced else "") for _, d in cluster.log.decisions
    }
    event(f"adaptations: {sorted(kinds)}")
    for _, d in cluster.log.decisions:
        if isinstance(d, Move):  # no group with pushed generations was relocated (take_group refuses them)
            assert d.sender != d.receiver
    assert as_multiset(got) == as_multiset(partitioned_oracle(spec_d, evs))


def test_count_windows_are_refused(tmp_path):
    spec_d = spec_dict(2, 10, 0, [], False)
    spec_d["window"] = {"kind": "count", "size": 5}
    with pytest.raises(ValueError, match="window.kind: 'count'"):
        GroupedJoin(parse_spec(spec_d), SpillFiles(tmp_path))


def test_pushed_groups_are_not_relocated(tmp_path):
    spec = parse_spec(spec_dict(2, 10, 0, [], False))
    join = GroupedJoin(spec, SpillFiles(tmp_path))
    evs = [{"stream": s, "ts": i, "t": i, "k": 0, "x": 0, "v": 0.0, "s": "", "b": True} for i, s in enumerate("ABAB")]
    for chunk in chunks(spec, evs, [4]):
        join.process(chunk)
    (part,) = join.groups
    join.push([part])
    with pytest.raises(ValueError, match="pushed groups are not moved"):
        join.take_group(part)


def test_unknown_streams_are_refused(tmp_path):
    join = GroupedJoin(parse_spec(spec_dict(2, 10, 0, [], False)), SpillFiles(tmp_path))
    with pytest.raises(ValueError, match=r"unknown stream\(s\) \['Z'\]"):
        join.process({"Z": Arrivals({"ts": np.zeros(1, np.int64)}, np.zeros(1, np.int64))})
