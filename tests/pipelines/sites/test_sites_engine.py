"""Site engines of a compiled plan, wired together in memory (no Kafka): results and shipped tuples vs an oracle.

Messages between sites are delivered in random portions (FIFO per receiving site, as one Kafka partition is),
sources arrive in random batch sizes. Whatever the plan (any partitioning method, multi-attribute queries with
PMJoins feeding MJoins), the union of the final results must equal the brute-force oracle as a multiset, and every
plan edge must carry exactly the sub-join it stands for: the combinations of its streams (predicates among them
only) whose value on the PMJoin's class is in the group's values.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.operators.pmjoin_queries import multi_attribute_queries, single_attribute_queries
from tests.pipelines.sites_oracle import expected_edge_tuples, oracle_for
from windjoin.operators.pmjoin.execution import ExecutionPlan, compile_plan
from windjoin.operators.pmjoin.execution_engine import END, SiteEngine, n_rows, rows_to_records, source_rows
from windjoin.operators.pmjoin.model import Query, RateModel
from windjoin.operators.pmjoin.plan import plan_cost
from windjoin.operators.pmjoin.planner import PlannerOptions, plan_query
from windjoin.operators.pmjoin.pmjoin import Partitioning
from windjoin.operators.pmjoin.stats import load_stats, parse_stats
from windjoin.operators.workloads.sites import StreamEvents, generate

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


def simulate(plan: ExecutionPlan, events: list[StreamEvents], seed: int) -> tuple[list[dict], Counter]:
    """Run every site's engine, shipping rows and watermarks through in-memory queues; (results, tuples/edge)."""
    rng = random.Random(seed)
    engines = {s: SiteEngine(plan, s) for s in plan.sites}
    queues: dict[str, list[tuple]] = {s: [] for s in plan.sites}
    cursor: list[int | None] = [0] * len(events)  # None: the source has ended
    shipped: Counter = Counter()
    results: list[dict] = []
    full = (1 << len(plan.streams)) - 1
    for _ in range(100_000):
        if all(e.finished for e in engines.values()):
            break
        for b, ev in enumerate(events):
            start = cursor[b]
            if start is None:
                continue
            end = start + rng.randint(0, 7)
            cols = {k: v[start:end] for k, v in ev.columns.items()}
            wm = END if end >= len(ev) else int(ev.columns["ts"][end]) - 1
            cursor[b] = None if wm == END else end
            engines[plan.streams[b].site].source(ev.name, source_rows(plan, b, cols), wm)
        for site, engine in engines.items():
            k = rng.randint(0, len(queues[site]))
            todo, queues[site] = queues[site][:k], queues[site][k:]
            for kind, *args in todo:
                engine.receive(*args) if kind == "rows" else engine.remote_watermark(*args)
            out = engine.step()
            for ship in out.ships:
                shipped[(ship.channel, ship.instance, ship.slot)] += n_rows(ship.rows)
                queues[ship.target].append(("rows", ship.channel, ship.instance, ship.slot, ship.rows))
            for mark in out.marks:
                queues[mark.target].append(("wm", mark.channel, mark.watermark))
            for rows in out.results:
                results.extend(rows_to_records(plan, full, rows))
    assert all(e.finished for e in engines.values()), "the sites did not finish"
    return results, shipped


def check(plan: ExecutionPlan, events: list[StreamEvents], seed: int) -> tuple[int, Counter]:
    results, shipped = simulate(plan, events, seed)
    full = (1 << len(plan.streams)) - 1
    records = {e.name: e.records() for e in events}
    want = oracle_for(plan, records, full)
    got = Counter(tuple(r[s.name]["id"] for s in plan.streams) for r in results)
    assert got == want
    assert +shipped == +expected_edge_tuples(plan, records)
    return sum(got.values()), shipped


def common_window(query: Query, seconds: float) -> Query:
    """The same query with one time window (seconds) for every stream, as site execution needs."""
    streams = tuple(replace(s, window=s.rate * seconds) for s in query.streams)
    return replace(query, streams=streams)


@pytest.mark.parametrize("name", ["pmjoin_example1.yaml", "pmjoin_sites.yaml"])
def test_edges_add_up_to_the_plans_cost(name):
    query, options = load_stats(EXAMPLES / name)
    report = plan_query(query, options)
    plan = compile_plan(report.plan, query, 500)
    assert sum(e.predicted_units for e in plan.edges()) == pytest.approx(report.cost, rel=1e-12)
    assert plan.predicted_cost == pytest.approx(report.cost, rel=1e-12)
    assert ExecutionPlan.from_dict(plan.to_dict()).to_dict() == plan.to_dict()


def test_example1_string_values_run_exactly():
    """Example 1's plan (values a, b, c; a source and a pair shipped per group) on busier events of each value."""
    query, options = load_stats(EXAMPLES / "pmjoin_example1.yaml")
    plan = compile_plan(plan_query(query, options).plan, query, 500)
    busy = {
        "streams": {
            name: {"node": node, "window": {"time": 0.5}, "attributes": {"dest": {"substreams": rates}}}
            for name, node, rates in [
                ("S1", "n1", {"a": 2, "b": 2, "c": 6}),
                ("S2", "n2", {"a": 2, "b": 6, "c": 2}),
                ("S3", "n3", {"a": 6, "b": 2, "c": 2}),
            ]
        },
        "joins": [{"equal": ["S1.dest", "S2.dest", "S3.dest"]}],
    }
    events = generate(parse_stats(busy)[0], span_s=100, seed=3)
    results, shipped = check(plan, events, seed=3)
    assert results > 50 and len(+shipped) == len(plan.edges())


def test_three_sites_workload_runs_exactly_and_near_the_predicted_cost():
    query, options = load_stats(EXAMPLES / "pmjoin_sites.yaml")
    plan = compile_plan(plan_query(query, options).plan, query, 500)
    span = 200.0
    events = generate(query, span, seed=11)
    results, shipped = check(plan, events, seed=11)
    units = sum(n * plan.size(plan.instance(i).slots[k].mask) for (_, i, k), n in shipped.items())
    assert results > 300
    assert units / span == pytest.approx(plan.predicted_cost, rel=0.1)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    query=st.one_of(single_attribute_queries(max_streams=4, max_values=4), multi_attribute_queries(max_streams=4)),
    method=st.sampled_from(["none", "value", "hash", "range", "rate"]),
    partitions=st.integers(1, 3),
    window_ms=st.sampled_from([50, 200, 1000]),
    seed=st.integers(0, 10_000),
)
def test_any_plan_runs_exactly(query, method, partitions, window_ms, seed):
    query = common_window(query, window_ms / 1000)
    options = PlannerOptions(Partitioning(method, partitions, seed=0), optimal_max_streams=0)
    report = plan_query(query, options)
    plan = compile_plan(report.plan, query, window_ms)
    assert sum(e.predicted_units for e in plan.edges()) == pytest.approx(plan_cost(report.plan, RateModel(query)))
    total_rate = sum(s.rate for s in query.streams)
    span = min(60.0, 150 / total_rate)  # about 150 events: the oracle stays quick, windows still overlap
    events = generate(query, span, seed=seed)
    rng = np.random.default_rng(seed)
    if rng.random() < 0.3:  # pile timestamps onto few milliseconds: ties across streams and sites
        for e in events:
            e.columns["ts"] = np.sort(e.columns["ts"] // 50 * 50)
    check(plan, events, seed)


def test_pmjoin_feeding_an_mjoin_on_another_attribute_runs_exactly():
    """4 streams, 2 equality classes: the three groups' results meet S4 at n2 (one slot, three feeds)."""
    query, options = load_stats(EXAMPLES / "pmjoin_sites_multi.yaml")
    plan = compile_plan(plan_query(query, options).plan, query, 500)
    [parent] = [i for i in plan.instances if not i.group]
    assert parent.final and sorted(len(s.feeds) for s in parent.slots) == [1, 3]
    assert any(len(e.streams) == 3 for e in plan.edges())  # a group's triples are shipped to the parent
    results, shipped = check(plan, generate(query, span_s=60, seed=5), seed=5)
    assert results > 500 and len(+shipped) == len(plan.edges())
