"""Run a STATS file's plan on 3 (or more) site processes over Kafka, and compare the traffic with the planner's.

Steps: plan the query (the planner of `windjoin plan`) and compile the plan for sites; generate events that
follow the STATS rates and value distributions over `span_s` seconds of event time; create the source and
inter-site topics and produce the events; start one `windjoin sites site` process per site; wait for all of them;
collect their results and reports. The measured communication cost is the planner units (tuples × tuple size)
that crossed sites divided by the span of event time, per link and in total, next to the plan's predicted cost.
The results are compared with a centralized MJoin over the same events (one process, all streams), the
single-process reference of the join contract; the tests compare them with a brute-force oracle as well.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time
import uuid
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import yaml

from windjoin.connectors.kafka.admin import create_topics
from windjoin.connectors.kafka.producer import BatchProducer
from windjoin.connectors.kafka.security import PLAINTEXT, KafkaSecurity
from windjoin.connectors.local import processes
from windjoin.operators.batch import Arrivals
from windjoin.operators.mjoin import MJoin
from windjoin.operators.pmjoin.execution import ExecutionError, ExecutionPlan, compile_plan, time_window_ms
from windjoin.operators.pmjoin.model import RateModel
from windjoin.operators.pmjoin.planner import PlannerOptions, plan_query
from windjoin.operators.pmjoin.render import report_text
from windjoin.operators.pmjoin.stats import StatsError, StatsFile, load_stats, load_stats_file
from windjoin.operators.spec import parse_spec
from windjoin.operators.workloads.sites import StreamEvents, generate
from windjoin.pipelines.sites.site import END_KEY, site_topic, source_topic

PRODUCER_CONFIG = {"linger.ms": 20, "batch.num.messages": 10_000}


@dataclass(frozen=True)
class SitesRunConfig:
    stats_path: Path
    bootstrap: str
    out_dir: Path
    span_s: float = 300.0
    seed: int = 0
    prefix: str | None = None  # topic prefix; default: a fresh one per run
    timeout_s: float = 240.0
    reference: bool = True  # compare with a centralized MJoin
    method: str | None = None  # override planner.partitioning.method (e.g. "none": the unpartitioned plan)
    partitions: int | None = None  # override planner.partitioning.partitions
    security: KafkaSecurity = PLAINTEXT  # every client's TLS / SASL: the driver's and the sites' (see stats_security)


class SitesRunError(RuntimeError):
    """A site failed or timed out; the message carries the tails of the site logs."""


def stats_window_ms(stats_path: Path) -> int:
    """The single time window (ms) of the STATS file's streams; count windows cannot run on sites."""
    data = yaml.safe_load(Path(stats_path).read_text(encoding="utf-8"))
    stats = StatsFile.model_validate(data)
    counted = [name for name, s in stats.streams.items() if s.window.time is None]
    if counted:
        raise ExecutionError(f"streams {counted}: site execution runs time windows only (window: {{time: SECONDS}})")
    return time_window_ms({name: float(s.window.time) for name, s in stats.streams.items() if s.window.time})


def stats_security(stats_path: Path) -> KafkaSecurity:
    """The STATS file's `kafka:` section (the join spec's: security_protocol, sasl_mechanism, username,
    password_file or password_env, ca_file) as the settings of every Kafka client of the run."""
    return KafkaSecurity.from_spec(load_stats_file(stats_path).kafka)


def write_security(security: KafkaSecurity, path: Path) -> Path:
    """The `kafka:` section for the site processes (`--kafka-config`): where the password is, never the password."""
    section = {k: v for k, v in dataclasses.asdict(security).items() if v is not None}
    path.write_text(yaml.safe_dump(section, sort_keys=False), encoding="utf-8")
    return path


def prepare(
    stats_path: Path, method: str | None = None, partitions: int | None = None
) -> tuple[ExecutionPlan, str, Any]:
    """The compiled plan (partitioning method/count overridden if given), the plan as text, and the query."""
    query, options = load_stats(stats_path)
    if method is not None or partitions is not None:
        how = options.partitioning
        how = replace(how, method=method or how.method, partitions=partitions or how.partitions)
        options = PlannerOptions(how, options.optimal_max_streams)
    window_ms = stats_window_ms(stats_path)
    report = plan_query(query, options)
    return compile_plan(report.plan, query, window_ms), report_text(report, RateModel(query)), query


def produce_events(
    bootstrap: str, prefix: str, events: list[StreamEvents], client: Mapping[str, str] | None = None
) -> int:
    """Each stream's events, in timestamp order, onto its source topic, closed by an end-of-stream record.
    `client`: the producer's TLS / SASL settings."""
    total = 0
    with BatchProducer(bootstrap, {**PRODUCER_CONFIG, **(client or {})}) as producer:
        for stream in events:
            records = [(None, orjson.dumps(r), int(r["ts"])) for r in stream.records()]
            records.append((END_KEY, b"{}", None))
            total += producer.produce_batch(source_topic(prefix, stream.name), records, partition=0)
    return total


def start_sites(plan_path: Path, plan: ExecutionPlan, config: SitesRunConfig, prefix: str) -> dict[str, int]:
    pids = {}
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    for site in plan.sites:
        argv = [
            sys.executable,
            "-m",
            "windjoin.pipelines.cli.sites",
            "site",
            str(plan_path),
            "--site",
            site,
            "--bootstrap",
            config.bootstrap,
            "--prefix",
            prefix,
            "--out",
            str(config.out_dir),
            "--timeout",
            str(config.timeout_s),
        ]
        if config.security != PLAINTEXT:
            argv += ["--kafka-config", str(write_security(config.security, config.out_dir / "kafka.yaml"))]
        pids[site] = processes.spawn(argv, config.out_dir / f"{site}.log", env=env)
    return pids


def wait_sites(pids: dict[str, int], config: SitesRunConfig) -> None:
    """Wait for every site to exit; a failure or the timeout stops the others (by PID) and raises."""
    deadline = time.monotonic() + config.timeout_s + 30
    running = dict(pids)
    failed = {}
    while running and time.monotonic() < deadline:
        for site, pid in list(running.items()):
            code = processes.exit_code(pid)
            if code is not None:
                running.pop(site)
                if code != 0:
                    failed[site] = code
        if failed:
            break
        time.sleep(0.1)
    for pid in running.values():
        processes.stop(pid, grace_s=5)
    if failed or running:
        tails = "\n".join(
            f"--- {site} (exit {failed.get(site, 'killed')}):\n{processes.log_tail(config.out_dir / f'{site}.log')}"
            for site in [*failed, *running]
        )
        raise SitesRunError(f"sites failed {sorted(failed)} / did not finish {sorted(running)}:\n{tails}")


def result_ids(plan: ExecutionPlan, records: list[dict]) -> Counter:
    """The multiset of results as tuples of ids in the plan's stream order."""
    names = [s.name for s in plan.streams]
    return Counter(tuple(r[n]["id"] for n in names) for r in records)


def centralized_ids(plan: ExecutionPlan, events: list[StreamEvents], chunk: int = 4096) -> Counter:
    """The results of one MJoin over every stream in one process (events merged in timestamp order)."""
    streams = {}
    for b, info in enumerate(plan.streams):
        streams[f"s{b}"] = {"fields": {"id": "int", **{f"a{j}": t for j, t in enumerate(info.types)}}}
    names = [s.name for s in plan.streams]
    preds = []
    for cls in plan.classes:
        refs = [
            f"s{names.index(m)}.a{plan.streams[names.index(m)].attributes.index(a)}"
            for m, a in zip(cls.members, cls.attributes, strict=True)
        ]
        preds += [{"op": "eq", "left": refs[0], "right": r} for r in refs[1:]]
    spec = parse_spec(
        {
            "window": {"kind": "time", "size_ms": plan.window_ms},
            "streams": streams,
            "tasks": [{"name": "all", "join": list(streams), "on": preds}],
        }
    )
    join = MJoin(spec)
    ts = np.concatenate([e.columns["ts"] for e in events])
    owner = np.repeat(np.arange(len(events)), [len(e) for e in events])
    row = np.concatenate([np.arange(len(e)) for e in events])
    order = np.lexsort((row, owner, ts))
    out: Counter = Counter()
    for start in range(0, len(order), chunk):
        part = order[start : start + chunk]
        arrivals = {}
        for b, stream in enumerate(events):
            mine = part[owner[part] == b]
            if not len(mine):
                continue
            rows = row[mine]
            cols = {"ts": stream.columns["ts"][rows], "id": stream.columns["id"][rows]}
            for j, attr in enumerate(plan.streams[b].attributes):
                cols[f"a{j}"] = stream.columns[attr][rows]
            arrivals[f"s{b}"] = Arrivals(cols, np.flatnonzero(owner[part] == b))
        [combos] = join.process(arrivals).pairs
        ids = [combos.sides[f"s{b}"]["id"].tolist() for b in range(len(events))]
        out.update(zip(*ids, strict=True))
    return out


def measure(plan: ExecutionPlan, reports: dict[str, dict], span_s: float) -> dict[str, Any]:
    """Measured vs predicted planner units per second, per link and in total, from the site reports."""
    links: dict[str, dict[str, float]] = {}
    predicted = plan.predicted_links()
    for report in reports.values():
        for link, t in report["links"].items():
            links[link] = {
                "predicted_units_per_s": predicted.get(link, 0.0),
                "measured_units_per_s": t["units"] / span_s,
                "tuples": t["tuples"],
                "encoded_bytes": t["bytes"],
                "encoded_bytes_per_tuple": t["bytes"] / t["tuples"] if t["tuples"] else None,
                "watermark_messages": t["control_messages"],
                "watermark_bytes": t["control_bytes"],
            }
    for link, units in predicted.items():
        links.setdefault(link, {"predicted_units_per_s": units, "measured_units_per_s": 0.0, "tuples": 0})
    edges = [
        {**e, "measured_units_per_s": e["units"] / span_s, "measured_tuples_per_s": e["tuples"] / span_s}
        for r in reports.values()
        for e in r["edges"]
    ]
    total = sum(v["measured_units_per_s"] for v in links.values())
    return {
        "predicted_cost": plan.predicted_cost,
        "measured_cost": total,
        "ratio": total / plan.predicted_cost if plan.predicted_cost else None,
        "links": dict(sorted(links.items())),
        "edges": edges,
        "encoded_bytes_per_s": sum(v.get("encoded_bytes", 0) for v in links.values()) / span_s,
        "watermark_bytes_per_s": sum(v.get("watermark_bytes", 0) for v in links.values()) / span_s,
    }


def run_sites(config: SitesRunConfig) -> dict[str, Any]:
    """The whole run; returns the report (also written to `<out>/run.json`)."""
    started = time.monotonic()
    config.out_dir.mkdir(parents=True, exist_ok=True)
    plan, text, query = prepare(config.stats_path, config.method, config.partitions)
    plan_path = config.out_dir / "plan.json"
    plan_path.write_bytes(orjson.dumps(plan.to_dict(), option=orjson.OPT_INDENT_2))
    (config.out_dir / "plan.txt").write_text(text + "\n")
    events = generate(query, config.span_s, config.seed)
    prefix = config.prefix or f"wj-sites-{uuid.uuid4().hex[:10]}"
    client = config.security.client_config()  # admin and producer here; each site builds its own
    create_topics(config.bootstrap, [source_topic(prefix, e.name) for e in events], 1, client=client)
    create_topics(config.bootstrap, [site_topic(prefix, s) for s in plan.sites], 1, client=client)
    produced = produce_events(config.bootstrap, prefix, events, client)
    produced_at = time.monotonic()
    pids = start_sites(plan_path, plan, config, prefix)
    wait_sites(pids, config)
    sites_done = time.monotonic()
    reports = {s: orjson.loads((config.out_dir / f"{s}.report.json").read_bytes()) for s in plan.sites}
    records = []
    for s in plan.sites:
        with (config.out_dir / f"{s}.results.jsonl").open("rb") as f:
            records.extend(orjson.loads(line) for line in f)
    got = result_ids(plan, records)
    out: dict[str, Any] = {
        "stats": str(config.stats_path),
        "span_s": config.span_s,
        "seed": config.seed,
        "window_ms": plan.window_ms,
        "partitioning": {"method": config.method, "partitions": config.partitions},
        "events": {e.name: len(e) for e in events},
        "produced_records": produced,
        "topic_prefix": prefix,
        "results": sum(got.values()),
        "results_per_site": {s: r["results"] for s, r in reports.items()},
        "duplicated_results": sum(n - 1 for n in got.values() if n > 1),
        "cost": measure(plan, reports, config.span_s),
        "wall_s": {
            "total": None,
            "plan_generate_produce": produced_at - started,
            "sites": sites_done - produced_at,
            "per_site": {s: r["wall_s"] for s, r in reports.items()},
        },
        "pids": pids,
    }
    if config.reference:
        want = centralized_ids(plan, events)
        out["reference_results"] = sum(want.values())
        out["equals_centralized_mjoin"] = got == want
    out["wall_s"]["total"] = time.monotonic() - started
    (config.out_dir / "run.json").write_bytes(orjson.dumps(out, option=orjson.OPT_INDENT_2))
    return out


__all__ = ["SitesRunConfig", "SitesRunError", "StatsError", "run_sites", "prepare", "result_ids", "stats_security"]
