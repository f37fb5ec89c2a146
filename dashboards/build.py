"""Generate windjoin's Grafana dashboards as JSON (dashboards/*.json and the chart's copy).

Run `python dashboards/build.py` after editing; `--check` exits 1 when a committed file differs from what this
script generates (tests/deploy/test_dashboards.py checks the same). Every query uses the metrics of
pipelines/job/job_metrics.py (the join job), pipelines/proxy/metrics.py (the query proxy) and
pipelines/controller/metrics.py (the controller).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
OUT_DIRS = (ROOT / "dashboards", ROOT / "helm" / "windjoin" / "dashboards")
SCHEMA_VERSION = 39
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
WIDTH = 24


def _target(expr: str, legend: str = "", ref: str = "A") -> dict[str, Any]:
    return {"datasource": DATASOURCE, "expr": expr, "legendFormat": legend or "__auto", "refId": ref}


def timeseries(title: str, targets: list[tuple[str, str]], unit: str = "short", description: str = "") -> dict:
    return {
        "type": "timeseries",
        "title": title,
        "description": description,
        "datasource": DATASOURCE,
        "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
        "options": {"legend": {"displayMode": "list", "placement": "bottom"}, "tooltip": {"mode": "multi"}},
        "targets": [_target(e, legend, chr(ord("A") + i)) for i, (e, legend) in enumerate(targets)],
    }


def stat(title: str, expr: str, unit: str = "short", description: str = "") -> dict:
    return {
        "type": "stat",
        "title": title,
        "description": description,
        "datasource": DATASOURCE,
        "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
        "options": {"reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False}},
        "targets": [_target(expr)],
    }


def state_timeline(title: str, expr: str, legend: str, states: dict[str, tuple[str, str]]) -> dict:
    """A state timeline whose values map to named, coloured states (value → (text, colour))."""
    mapping = {v: {"text": name, "color": color, "index": i} for i, (v, (name, color)) in enumerate(states.items())}
    return {
        "type": "state-timeline",
        "title": title,
        "description": "",
        "datasource": DATASOURCE,
        "fieldConfig": {
            "defaults": {
                "mappings": [{"type": "value", "options": mapping}],
                "color": {"mode": "thresholds"},
                "thresholds": {"mode": "absolute", "steps": [{"color": "text", "value": None}]},
            },
            "overrides": [],
        },
        "options": {"showValue": "auto", "mergeValues": True, "legend": {"displayMode": "list", "placement": "bottom"}},
        "targets": [_target(expr, legend)],
    }


def text(title: str, content: str) -> dict:
    return {"type": "text", "title": title, "options": {"mode": "markdown", "content": content}}


def _layout(rows: list[list[dict]]) -> list[dict]:
    """Place panels row by row, each row split evenly; ids in order."""
    panels, y, next_id = [], 0, 1
    for row in rows:
        width = WIDTH // len(row)
        height = 4 if all(p["type"] in ("stat", "text") for p in row) else 8
        for i, panel in enumerate(row):
            panels.append({"id": next_id, "gridPos": {"h": height, "w": width, "x": i * width, "y": y}, **panel})
            next_id += 1
        y += height
    return panels


def dashboard(uid: str, title: str, description: str, rows: list[list[dict]], variables: list[dict]) -> dict:
    return {
        "uid": uid,
        "title": title,
        "description": description,
        "tags": ["windjoin"],
        "editable": True,
        "schemaVersion": SCHEMA_VERSION,
        "version": 1,
        "time": {"from": "now-1h", "to": "now"},
        "refresh": "30s",
        "timezone": "utc",
        "templating": {"list": [_datasource_variable(), *variables]},
        "annotations": {"list": []},
        "panels": _layout(rows),
    }


def _datasource_variable() -> dict:
    return {"name": "datasource", "label": "Prometheus", "type": "datasource", "query": "prometheus"}


def _label_variable(name: str, metric: str, label: str) -> dict:
    return {
        "name": name,
        "label": label,
        "type": "query",
        "datasource": DATASOURCE,
        "query": {"query": f"label_values({metric}, {label})", "refId": "var"},
        "definition": f"label_values({metric}, {label})",
        "includeAll": True,
        "multi": True,
        "refresh": 2,
        "current": {},
    }


def _quantile(q: float, metric: str, by: str = "", selector: str = "") -> str:
    group = f"le, {by}" if by else "le"
    labels = f"{{{selector}}}" if selector else ""
    return f"histogram_quantile({q}, sum by ({group}) (rate({metric}_bucket{labels}[5m])))"


def overview() -> dict:
    job = "windjoin_job"
    return dashboard(
        "windjoin-overview",
        "windjoin / overview",
        "Input, output, dead letters and production delay of the join job; query proxy traffic.",
        [
            [
                stat("Input rows/s", f"sum(rate({job}_input_rows_total[5m]))", "rowsps"),
                stat("Pairs/s", f"sum(rate({job}_pairs_total[5m]))", "rowsps"),
                stat("Delay p99", _quantile(0.99, f"{job}_production_delay_seconds"), "s"),
                stat("Last batch", f"max({job}_batch_id)", "none"),
                stat("Since last batch", f"time() - max({job}_last_batch_timestamp_seconds)", "s"),
                stat(
                    "Shed records/s",
                    f"sum(rate({job}_shed_records_total[5m]))",
                    "rowsps",
                    "Input records dropped by load shedding (0 while the controller sheds nothing).",
                ),
            ],
            [
                timeseries("Input rows/s", [(f"sum(rate({job}_input_rows_total[5m]))", "input")], "rowsps"),
                timeseries("Pairs/s by task", [(f"sum by (task) (rate({job}_pairs_total[5m]))", "{{task}}")], "rowsps"),
            ],
            [
                timeseries(
                    "Production delay",
                    [
                        (_quantile(0.5, f"{job}_production_delay_seconds"), "p50"),
                        (_quantile(0.99, f"{job}_production_delay_seconds"), "p99"),
                    ],
                    "s",
                    "Emission minus the later tuple's event time, over the pairs of the last 5 minutes.",
                ),
                timeseries(
                    "Dead letters/s by reason",
                    [(f"sum by (reason) (rate({job}_dead_letters_total[5m]))", "{{reason}}")],
                    "rowsps",
                ),
            ],
            [
                timeseries("Batches/min", [(f"sum(rate({job}_batches_total[5m])) * 60", "batches")], "short"),
                timeseries(
                    "Proxy queries/s", [("sum by (kind) (rate(windjoin_proxy_queries_total[5m]))", "{{kind}}")], "reqps"
                ),
            ],
            [
                timeseries(
                    "Batch time budget",
                    [(f"max by (part) ({job}_batch_time_ms) / 1000", "{{part}}")],
                    "s",
                    "Where the last batch's time went: read, adapt, Spark (scheduling, shuffle, state commit), state "
                    "load, join, state write, the slots' sink staging, the driver's sink commit and the rest of its "
                    "work; plan and commit are Spark's, of the batch before.",
                ),
            ],
        ],
        [],
    )


def join_slots() -> dict:
    job, sel = "windjoin_job", 'slot=~"$slot"'
    return dashboard(
        "windjoin-join-slots",
        "windjoin / join internals per slot",
        "Per-slot load of the stateful join: rows in, time per batch, window size (what the controller balances).",
        [
            [
                timeseries(
                    "Input rows/s by slot",
                    [(f"sum by (slot) (rate({job}_input_rows_total{{{sel}}}[5m]))", "slot {{slot}}")],
                    "rowsps",
                ),
                timeseries(
                    "Joined rows/s by slot (not refused)",
                    [(f"sum by (slot) (rate({job}_joined_rows_total{{{sel}}}[5m]))", "slot {{slot}}")],
                    "rowsps",
                ),
            ],
            [
                timeseries(
                    "Slot batch seconds p99",
                    [(_quantile(0.99, f"{job}_slot_batch_seconds", "slot", sel), "slot {{slot}}")],
                    "s",
                    "Time one slot spent on its share of a batch: state reads, join, state writes.",
                ),
                timeseries(
                    "Slot batch seconds (mean)",
                    [
                        (
                            f"sum by (slot) (rate({job}_slot_batch_seconds_sum{{{sel}}}[5m]))"
                            f" / sum by (slot) (rate({job}_slot_batch_seconds_count{{{sel}}}[5m]))",
                            "slot {{slot}}",
                        )
                    ],
                    "s",
                ),
            ],
            [
                timeseries(
                    "Window tuples by slot", [(f"sum by (slot) ({job}_window_tuples{{{sel}}})", "slot {{slot}}")]
                ),
                timeseries(
                    "Window segments by slot", [(f"sum by (slot) ({job}_window_segments{{{sel}}})", "slot {{slot}}")]
                ),
            ],
            [
                stat("Routing version applied", f"max({job}_routing_version)", "none"),
                stat("Shed ratio applied", f"max({job}_shed_ratio)", "percentunit"),
                stat("Executors", f"max({job}_executors)", "none", "A local master counts as 1."),
            ],
            [
                timeseries(
                    "Shed records/s by stream",
                    [(f"sum by (stream) (rate({job}_shed_records_total[5m]))", "{{stream}}")],
                    "rowsps",
                    "Records the adapter dropped before the join, decided per record by a hash of its offset.",
                ),
                timeseries(
                    "Control epoch applied and executors",
                    [
                        (f"max({job}_routing_version)", "routing version"),
                        (f"max({job}_shed_ratio)", "shed ratio"),
                        (f"max({job}_executors)", "executors"),
                    ],
                    "none",
                    "What the job's batches ran with: the routing table version and shed ratio of their control "
                    "epoch, and the executors the driver had.",
                ),
            ],
            [
                timeseries(
                    "Pushed to disk (bytes/s) by slot",
                    [(f"sum by (slot) (rate({job}_spill_pushed_bytes_total{{{sel}}}[5m]))", "slot {{slot}}")],
                    "Bps",
                    "Window state pushed to disk as generation files when memory ran short (paper 004).",
                ),
                timeseries(
                    "Clean-up progress",
                    [
                        (f"sum by (slot) ({job}_spill_generations{{{sel}}})", "generations on disk, slot {{slot}}"),
                        (f"sum(rate({job}_cleanup_partitions_total[5m]))", "partitions merged/s"),
                        (f"sum(rate({job}_cleanup_pairs_total[5m]))", "pairs found by clean-ups/s"),
                    ],
                    "none",
                    "Pushed generations still waiting for their clean-up, and what clean-ups merged and found.",
                ),
            ],
        ],
        [_label_variable("slot", f"{job}_window_tuples", "slot")],
    )


def proxy() -> dict:
    p = "windjoin_proxy"
    return dashboard(
        "windjoin-proxy",
        "windjoin / query proxy",
        "One-time and continuous queries: rate, status, latency, rows served, open streams.",
        [
            [
                stat("Queries/s", f"sum(rate({p}_queries_total[5m]))", "reqps"),
                stat("Open streams", f"sum({p}_subscribers)", "none"),
                stat("Latency p99", _quantile(0.99, f"{p}_query_seconds"), "s"),
                stat("Errors/s (5xx)", f'sum(rate({p}_queries_total{{status=~"5.."}}[5m]))', "reqps"),
            ],
            [
                timeseries(
                    "Queries/s by kind and status",
                    [(f"sum by (kind, status) (rate({p}_queries_total[5m]))", "{{kind}} {{status}}")],
                    "reqps",
                ),
                timeseries(
                    "Latency by kind",
                    [
                        (_quantile(0.5, f"{p}_query_seconds", "kind"), "p50 {{kind}}"),
                        (_quantile(0.99, f"{p}_query_seconds", "kind"), "p99 {{kind}}"),
                    ],
                    "s",
                ),
            ],
            [
                timeseries(
                    "Rows served/s", [(f"sum by (kind) (rate({p}_rows_served_total[5m]))", "{{kind}}")], "rowsps"
                ),
                timeseries(
                    "Open streams and slow consumers",
                    [
                        (f"sum({p}_subscribers)", "open streams"),
                        (f"sum(increase({p}_slow_consumers_total[5m]))", "closed as slow (5m)"),
                    ],
                ),
            ],
        ],
        [],
    )


def controller() -> dict:
    c, job, sel = "windjoin_controller", "windjoin_job", 'slot=~"$slot"'
    return dashboard(
        "windjoin-controller",
        "windjoin / controller decisions",
        "The controller's decision per epoch (routing version, group moves, desired slots, shed ratio) and the "
        "per-slot occupancy and classes it decided on; the join job's per-slot imbalance alongside.",
        [
            [
                stat("Epoch", f"max({c}_epoch)", "none"),
                stat("Routing version", f"max({c}_routing_version)", "none"),
                stat("Desired slots", f"max({c}_desired_slots)", "none"),
                stat("Utilisation (tau)", f"max({c}_utilisation)", "percentunit"),
                stat("Shed ratio", f"max({c}_shed_ratio)", "percentunit"),
                stat("Hot slots", f"max({c}_hot_slots)", "none", "Suppliers holding a single group (to spread)."),
            ],
            [
                timeseries(
                    "Utilisation and shed ratio",
                    [(f"max({c}_utilisation)", "utilisation (tau)"), (f"max({c}_shed_ratio)", "shed ratio")],
                    "percentunit",
                    "Average utilisation over the last epoch and the shed ratio decided for the next "
                    "(shedding starts above the control config's utilisation.tau1).",
                ),
                timeseries(
                    "Slots: desired and with input",
                    [
                        (f"max({c}_desired_slots)", "desired"),
                        (f"count(sum by (slot) (rate({job}_input_rows_total[5m])) > 0)", "with input (job)"),
                    ],
                    "none",
                ),
            ],
            [
                timeseries(
                    "Slot occupancy (last epoch)",
                    [(f"max by (slot) ({c}_slot_occupancy{{{sel}}})", "slot {{slot}}")],
                    "percentunit",
                    "A slot's average busy fraction over the last epoch; above reorganisation.th_sup a supplier, "
                    "below th_con a consumer.",
                ),
                state_timeline(
                    "Slot class",
                    f"max by (slot) ({c}_slot_class{{{sel}}})",
                    "slot {{slot}}",
                    {"1": ("supplier", "red"), "0": ("neutral", "text"), "-1": ("consumer", "green")},
                ),
            ],
            [
                timeseries(
                    "Group moves and hot slots",
                    [
                        (f"sum(increase({c}_moves_total[5m]))", "moves (5m)"),
                        (f"max({c}_hot_slots)", "hot slots"),
                    ],
                    "none",
                    "Partition-group moves decided (supplier to consumer); hot slots hold one group and cannot shed "
                    "load by a move.",
                ),
                timeseries(
                    "Epochs and their batches",
                    [
                        (f"sum(changes({c}_epoch[5m]))", "epochs (5m)"),
                        (f"max({c}_epoch_batches)", "batches in the last epoch"),
                    ],
                    "none",
                ),
            ],
            [
                timeseries(
                    "Load share by slot (input rows)",
                    [
                        (
                            f"sum by (slot) (rate({job}_input_rows_total[5m]))"
                            f" / scalar(sum(rate({job}_input_rows_total[5m])))",
                            "slot {{slot}}",
                        )
                    ],
                    "percentunit",
                ),
                timeseries(
                    "Imbalance (max / mean over slots)",
                    [
                        (f"max({job}_window_tuples) / avg({job}_window_tuples)", "window tuples (job)"),
                        (f"max({c}_slot_occupancy) / avg({c}_slot_occupancy)", "occupancy (controller)"),
                    ],
                    "none",
                ),
            ],
            [
                timeseries(
                    "Routing version: decided and applied",
                    [
                        (f"max({c}_routing_version)", "decided (controller)"),
                        (f"max({job}_routing_version)", "applied (job)"),
                    ],
                    "none",
                    "The job applies a decision from a later batch on; a lasting gap means decisions are not applied.",
                ),
                timeseries(
                    "Shed ratio: decided and applied",
                    [(f"max({c}_shed_ratio)", "decided (controller)"), (f"max({job}_shed_ratio)", "applied (job)")],
                    "percentunit",
                ),
                timeseries(
                    "Executors and desired slots",
                    [
                        (f"max({c}_desired_slots)", "desired slots (controller)"),
                        (f"max({job}_executors)", "executors (job)"),
                    ],
                    "none",
                    "With --executors-from-redis the driver follows the desired slots (one executor each).",
                ),
            ],
            [
                timeseries(
                    "Shed records/s (job)",
                    [(f"sum by (stream) (rate({job}_shed_records_total[5m]))", "{{stream}}")],
                    "rowsps",
                    "Records shed per stream; their share of the offered load should follow the decided ratio.",
                ),
            ],
        ],
        [_label_variable("slot", f"{c}_slot_occupancy", "slot")],
    )


DASHBOARDS = {"overview": overview, "join-slots": join_slots, "proxy": proxy, "controller": controller}


def render() -> dict[str, str]:
    """File name → JSON text of every dashboard."""
    return {f"{name}.json": json.dumps(build(), indent=2) + "\n" for name, build in DASHBOARDS.items()}


def main(argv: list[str]) -> int:
    files = render()
    if "--check" in argv:
        stale = [
            str(d / n) for d in OUT_DIRS for n, t in files.items() if not (d / n).exists() or (d / n).read_text() != t
        ]
        for path in stale:
            print(f"stale: {path} (run python dashboards/build.py)", file=sys.stderr)
        return 1 if stale else 0
    for out in OUT_DIRS:
        out.mkdir(parents=True, exist_ok=True)
        for name, content in files.items():
            (out / name).write_text(content)
    print(f"wrote {len(files)} dashboards to " + ", ".join(str(d.relative_to(ROOT)) for d in OUT_DIRS))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
