"""Grafana dashboards: committed JSON equals dashboards/build.py's output, is valid dashboard JSON, and every
metric a panel queries exists in the join job's, the query proxy's or the controller's metrics registry (that a real
controller run sets the ones the controller dashboard queries: tests/pipelines/controller/test_controller.py)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from dashboards import build
from windjoin.pipelines.controller.metrics import ControllerMetrics
from windjoin.pipelines.job.job_metrics import JobMetrics

ROOT = Path(__file__).resolve().parents[2]
METRIC = re.compile(r"\b(windjoin_[a-z0-9_]+)\b")
SUFFIXES = {
    "counter": ("_total",),
    "histogram": ("_bucket", "_sum", "_count"),
    "gauge": ("",),
    "summary": ("_sum", "_count", ""),
}


def _names(registry: CollectorRegistry) -> set[str]:
    """Every sample name a registry exposes, including those of labelled metrics not yet observed."""
    names = set()
    for family in registry.collect():
        names.update(family.name + s for s in SUFFIXES.get(family.type, ("",)))
        names.update(sample.name for sample in family.samples)
    return names


def _panels(dashboard: dict) -> list[dict]:
    out = []
    for panel in dashboard["panels"]:
        out.append(panel)
        out.extend(panel.get("panels", []))  # collapsed rows
    return out


def _queried_metrics() -> dict[str, set[str]]:
    """Metric name → dashboards querying it."""
    used: dict[str, set[str]] = {}
    for name, text in build.render().items():
        for panel in _panels(json.loads(text)):
            for target in panel.get("targets", []):
                for metric in METRIC.findall(target["expr"]):
                    used.setdefault(metric, set()).add(name)
    return used


def test_committed_dashboards_equal_the_generated_ones():
    generated = build.render()
    for folder in build.OUT_DIRS:
        committed = {p.name: p.read_text() for p in folder.glob("*.json")}
        assert committed == generated, f"{folder} is stale: run python dashboards/build.py"


@pytest.mark.parametrize("name", sorted(build.DASHBOARDS))
def test_dashboard_is_valid_grafana_json(name):
    dash = json.loads((ROOT / "dashboards" / f"{name}.json").read_text())
    assert isinstance(dash["uid"], str) and 0 < len(dash["uid"]) <= 40  # Grafana's uid limit
    assert dash["title"] and isinstance(dash["schemaVersion"], int) and dash["schemaVersion"] >= 36
    assert any(v["type"] == "datasource" and v["name"] == "datasource" for v in dash["templating"]["list"])
    panels = _panels(dash)
    assert panels
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    for panel in panels:
        pos = panel["gridPos"]
        assert pos["x"] + pos["w"] <= 24 and pos["h"] > 0
        if panel["type"] == "text":
            assert panel["options"]["content"]
            continue
        assert panel["datasource"]["type"] == "prometheus"
        assert panel["targets"], f"{panel['title']}: no targets"
        refs = [t["refId"] for t in panel["targets"]]
        assert len(refs) == len(set(refs))
        for target in panel["targets"]:
            assert target["expr"] and target["datasource"] == panel["datasource"]
            assert target["expr"].count("(") == target["expr"].count(")"), target["expr"]


def test_uids_are_distinct():
    uids = [json.loads(t)["uid"] for t in build.render().values()]
    assert len(uids) == len(set(uids))


def test_controller_dashboard_charts_the_controllers_decisions():
    dash = json.loads(build.render()["controller.json"])
    assert not any("waiting for the controller" in json.dumps(p).lower() for p in _panels(dash))
    used = {m for m, d in _queried_metrics().items() if "controller.json" in d}
    decisions = ("epoch", "routing_version", "desired_slots", "shed_ratio", "utilisation", "moves_total")
    per_slot = ("slot_occupancy", "slot_class")
    assert {f"windjoin_controller_{n}" for n in (*decisions, *per_slot)} <= used
    assert "windjoin_job_window_tuples" in used  # the job's per-slot imbalance stays alongside


def test_dashboards_chart_shedding_the_applied_control_epoch_and_executors():
    used = _queried_metrics()
    control = ("shed_records_total", "shed_ratio", "routing_version", "executors")
    for name in control:
        assert {"join-slots.json", "controller.json"} <= used.get(f"windjoin_job_{name}", set()), name


def test_the_join_dashboard_charts_disk_pushes_and_clean_up_progress():
    used = {m for m, d in _queried_metrics().items() if "join-slots.json" in d}
    spill = ("spill_pushed_bytes_total", "spill_generations", "cleanup_partitions_total", "cleanup_pairs_total")
    assert {f"windjoin_job_{n}" for n in spill} <= used


def test_every_job_metric_in_a_dashboard_exists_in_the_job_registry():
    known = _names(JobMetrics().registry)
    used = {m: d for m, d in _queried_metrics().items() if m.startswith("windjoin_job_")}
    assert used
    missing = {m: sorted(d) for m, d in used.items() if m not in known}
    assert not missing, f"dashboards query metrics the join job does not define: {missing}"


def test_every_proxy_metric_in_a_dashboard_exists_in_the_proxy_registry():
    proxy_metrics = pytest.importorskip(
        "windjoin.pipelines.proxy.metrics", reason="the query proxy's metrics module has not landed yet"
    )
    known = _names(proxy_metrics.ProxyMetrics().registry)
    used = {m: d for m, d in _queried_metrics().items() if m.startswith("windjoin_proxy_")}
    assert used
    missing = {m: sorted(d) for m, d in used.items() if m not in known}
    assert not missing, f"dashboards query metrics the query proxy does not define: {missing}"


def test_every_controller_metric_in_a_dashboard_exists_in_the_controller_registry():
    known = _names(ControllerMetrics().registry)
    used = {m: d for m, d in _queried_metrics().items() if m.startswith("windjoin_controller_")}
    assert used
    missing = {m: sorted(d) for m, d in used.items() if m not in known}
    assert not missing, f"dashboards query metrics the controller does not define: {missing}"


def test_no_dashboard_queries_an_unknown_component():
    prefixes = {m.split("_")[1] for m in _queried_metrics()}
    assert prefixes <= {"job", "proxy", "controller"}, prefixes


# Job metrics a run without the controller's decisions leaves at 0 (no shedding, the initial routing table, no
# disk pushes or clean-ups); tests/pipelines/job/test_spill_e2e.py shows the spill ones updated by a run that pushes.
ZERO_WITHOUT_CONTROL = {
    "windjoin_job_shed_records_total",
    "windjoin_job_shed_ratio",
    "windjoin_job_routing_version",
    "windjoin_job_spill_pushed_bytes_total",
    "windjoin_job_spill_generations",
    "windjoin_job_cleanup_partitions_total",
    "windjoin_job_cleanup_pairs_total",
}


@pytest.mark.slow
def test_a_real_pipeline_run_updates_every_job_metric_a_dashboard_queries(
    spark, kafka_bootstrap, unique_topic, tmp_path
):
    from tests.pipelines.pipeline_helpers import keyed_eq_spec, produce_events
    from windjoin.connectors.files.parquet_sink import ParquetSink
    from windjoin.operators.spec import parse_spec
    from windjoin.pipelines.job.executor_scaling import executor_count
    from windjoin.pipelines.job.join_job import start_job

    spec_dict = {**keyed_eq_spec(unique_topic, tmp_path), "max_offsets_per_trigger": 300}
    t0 = 1_700_000_000_000
    events = [{"stream": "RS"[i % 2], "ts": t0 + i, "k": i % 7, "x" if i % 2 == 0 else "a": i} for i in range(1000)]
    events.append({"stream": "R", "ts": t0 + 500, "k": 1, "x": "seven"})  # refused: wrong_type
    produce_events(kafka_bootstrap, spec_dict, events)
    spec = parse_spec(spec_dict)
    sc = spark.sparkContext
    metrics = JobMetrics(  # as windjoin run does
        streams=list(spec.streams), tasks=[t.name for t in spec.tasks], executors=lambda: executor_count(sc)
    )
    outcomes = []

    def on_batch(outcome):
        metrics.observe(outcome)
        outcomes.append(outcome)

    query = start_job(
        spark, spec, kafka_bootstrap, [ParquetSink(tmp_path / "parquet")], available_now=True, on_batch=on_batch
    )
    query.awaitTermination(timeout=600)
    assert query.exception() is None

    value = metrics.registry.get_sample_value
    samples: dict[str, list[float]] = {}
    for family in metrics.registry.collect():
        for sample in family.samples:
            samples.setdefault(sample.name, []).append(sample.value)
    used = sorted(m for m in _queried_metrics() if m.startswith("windjoin_job_"))
    not_updated = [m for m in used if m not in ZERO_WITHOUT_CONTROL and not any(v > 0 for v in samples.get(m, []))]
    assert not not_updated, f"metrics a dashboard queries that the run left at zero or absent: {not_updated}"
    # Without a controller's decision nothing is shed and the routing is the initial one: these series must
    # exist and say exactly what the batches reported (0 today), not be absent.
    assert not [m for m in ZERO_WITHOUT_CONTROL if m in used and m not in samples]
    for stream in spec.streams:
        shed = sum(o.shed.get(stream, 0) for o in outcomes)
        assert value("windjoin_job_shed_records_total", {"stream": stream}) == shed
    assert value("windjoin_job_shed_ratio") == outcomes[-1].shed_ratio
    assert value("windjoin_job_routing_version") == outcomes[-1].routing_version
    assert value("windjoin_job_executors") == 1  # a local master
    assert value("windjoin_job_dead_letters_total", {"reason": "wrong_type"}) == 1
    assert sum(samples["windjoin_job_input_rows_total"]) >= 1000
    assert sum(samples["windjoin_job_pairs_total"]) > 0
    assert value("windjoin_job_batch_id") >= 1  # several batches (max_offsets_per_trigger)
