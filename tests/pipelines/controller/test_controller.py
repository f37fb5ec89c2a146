"""The controller on real Redis: load reports of a skewed assignment, published through the driver's publisher,
become a recorded decision (classes, a move from the hottest slot, shed ratio), in process and via the CLI."""

from __future__ import annotations

import json
import logging
import re
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np
import orjson
import pytest
from prometheus_client.parser import text_string_to_metric_families

from dashboards import build as dashboards
from tests.support.controller_load import (
    BUSY,
    CONFIG,
    PARTITIONS,
    SLOTS,
    publish,
    skewed_outcome,
    spec_file,
)
from windjoin.connectors.redis.control_decisions import DecisionStore
from windjoin.connectors.redis.load_reports import LoadReports
from windjoin.operators.control.config import parse_control_config
from windjoin.operators.partitioning import Group
from windjoin.pipelines.controller.control_loop import Controller, recorded_moves, state_from_fields
from windjoin.pipelines.controller.metrics import ControllerMetrics
from windjoin.pipelines.job.join_job import BatchOutcome
from windjoin.pipelines.job.load_publisher import LoadPublisher, slot_reports


def test_skewed_epoch_classifies_slots_moves_a_group_off_the_hottest_and_records_it(redis_url, namespace):
    publish(redis_url, namespace, range(5))
    decisions = DecisionStore(redis_url, namespace)
    control = Controller(LoadReports(redis_url, namespace), decisions, parse_control_config(CONFIG), PARTITIONS, SLOTS)
    outcome = control.step()
    assert outcome is not None and outcome.batches == 5
    assert outcome.occupancy == pytest.approx(BUSY)
    assert outcome.classes.suppliers == (0,) and outcome.classes.consumers == (1, 3)
    [move] = outcome.decision.moves
    assert move.source == 0 and move.target == 1  # hottest slot to the idlest consumer
    assert move.group.partition % SLOTS == 0  # one of the groups slot 0 held
    state = outcome.decision.state
    assert state.routing.version == 1 and state.routing.slot_of_group(move.group) == 1
    assert state.slots == SLOTS
    tau = 800 / 4 / 220.0
    assert outcome.decision.tau == pytest.approx(tau)
    assert state.shed_ratio == pytest.approx(0.1 + 0.9 * (tau - 0.8) / 0.2)

    recorded = decisions.latest()
    assert recorded is not None and recorded["epoch"] == "1" and recorded["routing_version"] == "1"
    assert recorded_moves(recorded) == [(move.group, 0, 1)]
    assert json.loads(recorded["suppliers"]) == [0] and json.loads(recorded["consumers"]) == [1, 3]
    assert float(recorded["shed_ratio"]) == pytest.approx(state.shed_ratio)
    assert [fields["epoch"] for _, fields in decisions.history()] == ["1"]
    assert state_from_fields(recorded) == (state, outcome.cursor)

    metrics = ControllerMetrics()
    metrics.observe(outcome)
    value = metrics.registry.get_sample_value
    assert value("windjoin_controller_routing_version") == 1
    assert value("windjoin_controller_moves_total") == 1
    assert value("windjoin_controller_slot_class", {"slot": "0"}) == 1
    assert value("windjoin_controller_slot_class", {"slot": "1"}) == -1
    assert value("windjoin_controller_slot_occupancy", {"slot": "2"}) == pytest.approx(0.6)
    assert value("windjoin_controller_shed_ratio") == pytest.approx(state.shed_ratio)

    # The next epoch sees only what was published since: nothing yet, so nothing is decided.
    assert control.step() is None
    # A restarted controller resumes from the recorded decision and reads only the new reports.
    publish(redis_url, namespace, range(5, 8))
    again = Controller(LoadReports(redis_url, namespace), decisions, parse_control_config(CONFIG), PARTITIONS, SLOTS)
    assert again.state == state
    second = again.step()
    assert second is not None and second.batches == 3 and second.decision.state.epoch == 2
    # the job did not apply the first move (out of scope), so slot 0 still reports its load: another move
    [move2] = second.decision.moves
    assert move2.source == 0 and move2.group != move.group and second.decision.state.routing.version == 2
    assert [fields["epoch"] for _, fields in decisions.history()] == ["1", "2"]


def _bad_slots(**changes: object) -> bytes:
    """One slot report of a good batch, changed as a writer that should not have could change it."""
    report = slot_reports(skewed_outcome(9))[0]
    return orjson.dumps([{**report, **changes}])


@pytest.mark.parametrize(
    ("fields", "says"),
    [
        ({"batch_id": "2", "finished_at": "1002.0", "interval_s": "1.0", "slots": "[{"}, "slots is not JSON"),
        ({"batch_id": "two", "finished_at": "1002.0", "interval_s": "1.0", "slots": "[]"}, "batch_id must be"),
        ({"batch_id": "2", "finished_at": "1_002", "interval_s": "1.0", "slots": "[]"}, "finished_at must be"),
        (
            {"batch_id": "2", "finished_at": "1002.0", "interval_s": "1.0", "slots": _bad_slots(seconds="fast")},
            "seconds",
        ),
        ({"batch_id": "2", "finished_at": "1002.0", "interval_s": "1.0", "slots": _bad_slots(slot=None)}, "slot"),
        (
            {
                "batch_id": "2",
                "finished_at": "1002.0",
                "interval_s": "1.0",
                "slots": _bad_slots(groups={"part": [0, 4]}),
            },
            "column 'tuples_in' is missing",
        ),
        (
            {
                "batch_id": "2",
                "finished_at": "1002.0",
                "interval_s": "1.0",
                "slots": _bad_slots(groups={**slot_reports(skewed_outcome(9))[0]["groups"], "part": [0, 4, 8, 99]}),
            },
            r"partition\(s\) \[99\] outside the job's 0\.\.15",
        ),
    ],
)
def test_a_malformed_load_report_is_skipped_counted_and_read_past(redis_url, namespace, caplog, fields, says):
    """The job's Redis user may write the load stream: one bad entry made the controller raise, and a restarted
    one resumed at the same entry (a crash loop). It is skipped with a warning, counted, and never read again."""
    reports = LoadReports(redis_url, namespace)
    publish(redis_url, namespace, range(2))
    bad_id = reports.client.xadd(reports.key, fields).decode()
    publish(redis_url, namespace, range(3, 5))
    decisions, metrics = DecisionStore(redis_url, namespace), ControllerMetrics()
    config = parse_control_config(CONFIG)
    control = Controller(reports, decisions, config, PARTITIONS, SLOTS, on_skip=metrics.skipped_report)
    with caplog.at_level(logging.WARNING, logger="windjoin.pipelines.controller.control_loop"):
        outcome = control.step()
    assert outcome is not None and outcome.batches == 4  # the good entries on either side
    [warning] = caplog.records
    assert warning.getMessage().startswith(f"load report entry {bad_id} skipped: ")
    assert re.search(says, warning.getMessage())
    assert metrics.registry.get_sample_value("windjoin_controller_load_reports_skipped_total") == 1
    # restarted: resumes after the last entry read, the bad one not read (nor counted) again
    restarted = Controller(reports, decisions, config, PARTITIONS, SLOTS, on_skip=metrics.skipped_report)
    assert restarted.step() is None
    assert metrics.registry.get_sample_value("windjoin_controller_load_reports_skipped_total") == 1


def test_an_epoch_of_malformed_reports_only_decides_nothing_and_reads_past_them(redis_url, namespace):
    reports = LoadReports(redis_url, namespace)
    reports.client.xadd(reports.key, {"batch_id": "0", "slots": "[]"})  # no finished_at, no interval_s
    skipped: list[str] = []
    control = Controller(
        reports,
        DecisionStore(redis_url, namespace),
        parse_control_config(CONFIG),
        PARTITIONS,
        SLOTS,
        on_skip=lambda entry_id, reason: skipped.append(reason),
    )
    assert control.step() is None and control.step() is None
    assert skipped == ["finished_at is missing"]  # read once
    publish(redis_url, namespace, range(2))
    assert control.step().batches == 2


def test_a_recorded_decision_for_another_partition_count_is_refused(redis_url, namespace):
    publish(redis_url, namespace, range(2))
    decisions = DecisionStore(redis_url, namespace)
    Controller(LoadReports(redis_url, namespace), decisions, parse_control_config(CONFIG), PARTITIONS, SLOTS).step()
    with pytest.raises(ValueError, match="routes 16 partitions but the spec has 32"):
        Controller(LoadReports(redis_url, namespace), decisions, parse_control_config(CONFIG), 32, SLOTS)


def _cli(*args: str) -> subprocess.CompletedProcess:
    script = Path(sys.executable).with_name("windjoin")
    cli = [str(script)] if script.exists() else [sys.executable, "-m", "windjoin.pipelines"]
    return subprocess.run([*cli, *args], capture_output=True, text=True, timeout=120)


def test_cli_once_decides_one_epoch_and_records_it(redis_url, namespace, tmp_path):
    publish(redis_url, namespace, range(4))
    config = tmp_path / "control.yaml"
    config.write_text(json.dumps(CONFIG))
    spec = spec_file(tmp_path, redis_url)
    done = _cli("controller", str(spec), "--once", "--config", str(config), "--namespace", namespace)
    assert done.returncode == 0, done.stderr
    [line] = done.stdout.splitlines()
    assert line.startswith("epoch 1: 4 batches, tau 0.909")
    assert "suppliers [0] consumers [1, 3], moves p" in line and " 0->1, routing v1, slots 4" in line
    recorded = DecisionStore(redis_url, namespace).latest()
    assert recorded is not None and recorded["epoch"] == "1"
    assert orjson.loads(recorded["moves"])[0][3:] == [0, 1]
    # run again: no reports since, nothing decided, the recorded epoch stays
    again = _cli("controller", str(spec), "--once", "--config", str(config), "--namespace", namespace)
    assert again.returncode == 0 and "no load reports since the last epoch" in again.stdout
    assert DecisionStore(redis_url, namespace).latest()["epoch"] == "1"


def test_cli_names_bad_config_keys(redis_url, tmp_path):
    config = tmp_path / "control.yaml"
    config.write_text("reorganisation: {th_sup: 0.8, th_con: 0.5, thsup: 0.9}\nutilisaton: {tau1: 0.7}\n")
    done = _cli("controller", str(spec_file(tmp_path, redis_url)), "--once", "--config", str(config))
    assert done.returncode != 0
    assert "reorganisation.thsup" in done.stderr and "utilisaton" in done.stderr
    assert "accepted keys" in done.stderr
    config.write_text("utilisation: {tau0: 0.5, tau_star: 0.4}\n")
    done = _cli("controller", str(spec_file(tmp_path, redis_url)), "--once", "--config", str(config))
    assert done.returncode != 0 and "utilisation.tau0" in done.stderr and "tau0=0.5" in done.stderr


def test_cli_needs_a_redis_url_without_a_redis_sink(tmp_path):
    spec = json.loads(spec_file(tmp_path, "redis://127.0.0.1:1/0").read_text())
    del spec["sinks"]
    path = tmp_path / "bare.yaml"
    path.write_text(json.dumps(spec))
    done = _cli("controller", str(path), "--once")
    assert done.returncode != 0 and "--redis-url" in done.stderr


def test_recorded_state_round_trips_split_groups():
    from windjoin.operators.control.epoch import ControlState
    from windjoin.operators.partitioning import RoutingTable

    table = RoutingTable.round_robin(4, 2).with_units(
        {Group(0): 0, Group(1, 1, 0): 1, Group(1, 1, 1): 0, Group(2): 0, Group(3): 1}
    )
    state = ControlState(3, table, 2, 0.25)
    fields = {
        "epoch": "3",
        "routing_version": str(table.version),
        "routing": orjson.dumps({"slot_of": table.slot_of, "split": [[1, 1, 0, 1], [1, 1, 1, 0]]}).decode(),
        "slots": "2",
        "shed_ratio": "0.25",
        "sustained_above": "0",
        "sustained_below": "0",
        "load_cursor": "5-0",
    }
    assert state_from_fields(fields) == (state, "5-0")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _metric(port: int, name: str) -> float | None:
    try:
        body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2).read().decode()
    except OSError:
        return None
    for family in text_string_to_metric_families(body):
        for sample in family.samples:
            if sample.name == name and not sample.labels:
                return sample.value
    return None


def _scrape(port: int) -> dict[str, dict[str, float]]:
    """Sample name → {slot label or "": value} from the controller's /metrics."""
    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2).read().decode()
    samples: dict[str, dict[str, float]] = {}
    for family in text_string_to_metric_families(body):
        for sample in family.samples:
            samples.setdefault(sample.name, {})[sample.labels.get("slot", "")] = sample.value
    return samples


def _expected_from_decisions(decisions: DecisionStore) -> dict[str, dict[str, float]]:
    """What the controller's metrics should show after the recorded decisions (the latest for gauges)."""
    latest = decisions.latest()
    assert latest is not None
    occupancy = json.loads(latest["occupancy"])
    suppliers, consumers = json.loads(latest["suppliers"]), json.loads(latest["consumers"])
    c = "windjoin_controller_"
    return {
        f"{c}epoch": {"": float(latest["epoch"])},
        f"{c}epoch_batches": {"": float(latest["batches"])},
        f"{c}routing_version": {"": float(latest["routing_version"])},
        f"{c}desired_slots": {"": float(latest["slots"])},
        f"{c}shed_ratio": {"": float(latest["shed_ratio"])},
        f"{c}utilisation": {"": float(latest["tau"])},
        f"{c}hot_slots": {"": float(len(json.loads(latest["hot"])))},
        f"{c}moves_total": {"": float(sum(len(json.loads(f["moves"])) for _, f in decisions.history()))},
        f"{c}slot_occupancy": {s: pytest.approx(v) for s, v in occupancy.items()},
        f"{c}slot_class": {s: 1.0 if int(s) in suppliers else -1.0 if int(s) in consumers else 0.0 for s in occupancy},
    }


def _dashboard_controller_metrics() -> set[str]:
    """Every controller metric a Grafana dashboard queries (dashboards/build.py)."""
    return {m for text in dashboards.render().values() for m in re.findall(r"\bwindjoin_controller_[a-z0-9_]+", text)}


def test_cli_loop_decides_an_epoch_per_period_and_serves_metrics(redis_url, namespace, tmp_path):
    """The real process in its loop: an epoch for the reports present, none while nothing new arrives, the next
    one after new reports, its /metrics showing the recorded decisions for every metric a dashboard queries;
    stopped by its PID."""
    publish(redis_url, namespace, range(3))
    config = tmp_path / "control.yaml"
    config.write_text(json.dumps(CONFIG))
    port = _free_port()
    script = Path(sys.executable).with_name("windjoin")
    cli = [str(script)] if script.exists() else [sys.executable, "-m", "windjoin.pipelines"]
    args = ["controller", str(spec_file(tmp_path, redis_url)), "--config", str(config), "--namespace", namespace]
    out = tmp_path / "controller.out"
    with out.open("wb") as sink:
        proc = subprocess.Popen(
            [*cli, *args, "--epoch-s", "0.5", "--metrics-port", str(port)], stdout=sink, stderr=subprocess.STDOUT
        )
    try:

        def wait_for_epoch(epoch: int) -> None:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                assert proc.poll() is None, out.read_text()
                if _metric(port, "windjoin_controller_epoch") == epoch:
                    return
                time.sleep(0.2)
            raise AssertionError(f"no epoch {epoch}: {out.read_text()}")

        wait_for_epoch(1)
        assert _metric(port, "windjoin_controller_routing_version") == 1
        time.sleep(1.5)  # three periods without reports: no decision
        assert _metric(port, "windjoin_controller_epoch") == 1
        publish(redis_url, namespace, range(3, 6))
        wait_for_epoch(2)
        assert _metric(port, "windjoin_controller_moves_total") == 2
        assert _metric(port, "windjoin_controller_epoch_batches") == 3
        # Every controller metric the dashboard queries shows the recorded decisions (observe() sets the epoch
        # gauge first: retry briefly until the rest of the epoch's values are in).
        used = _dashboard_controller_metrics()
        expected = _expected_from_decisions(DecisionStore(redis_url, namespace))
        assert used and used <= set(expected), f"no expectation for dashboard metrics {used - set(expected)}"
        deadline = time.monotonic() + 5
        while True:
            scraped = _scrape(port)
            shown = {m: scraped.get(m) for m in used}
            if all(shown[m] == expected[m] for m in used) or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert shown == {m: expected[m] for m in used}
        assert shown["windjoin_controller_slot_class"] == {"0": 1, "1": -1, "2": 0, "3": -1}
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    lines = out.read_text().splitlines()
    assert [line.split(":")[0] for line in lines if " batches, tau " in line] == ["epoch 1", "epoch 2"]
    assert DecisionStore(redis_url, namespace).latest()["epoch"] == "2"


def test_cli_arrivals_measure_reads_the_spec_topics_from_the_broker(redis_url, namespace, tmp_path, kafka_bootstrap):
    config = tmp_path / "control.yaml"
    config.write_text(json.dumps({**CONFIG, "utilisation": {**CONFIG["utilisation"], "measure": "arrivals"}}))
    spec = spec_file(tmp_path, redis_url)
    missing = _cli("controller", str(spec), "--once", "--config", str(config), "--state-dir", str(tmp_path / "none"))
    assert missing.returncode != 0 and "no Kafka broker" in missing.stderr  # names the way to give one
    publish(redis_url, namespace, range(4))
    args = ("--once", "--config", str(config), "--namespace", namespace, "--bootstrap", kafka_bootstrap)
    done = _cli("controller", str(spec), *args)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("epoch 1: 4 batches")


FINE_CONFIG = {
    "scaling": "declustering",
    "declustering": {"min_slots": 2, "max_slots": 2},  # the slot count stays: only fine tuning and moves
    "reorganisation": {"th_sup": 0.8, "th_con": 0.5},
    "fine_tuning": {"enabled": True, "theta": 100},
}


def _fine_outcome(batch_id: int, routing, busy: dict[int, float], tuples: dict[int, np.ndarray]) -> BatchOutcome:
    """One batch as the job would report it under `routing`: each slot reports the partitions it holds units
    of, with the share of each partition's window tuples (16 bins by mini bits) its units cover."""
    stats = []
    for slot, seconds in busy.items():
        mine = [g for g, s in routing.groups().items() if s == slot]
        parts = sorted({g.partition for g in mine})
        fine = []
        for p in parts:
            share = np.zeros(16, dtype=np.int64)
            for g in mine:
                if g.partition == p:
                    covered = (np.arange(16) & ((1 << g.depth) - 1)) == g.pattern
                    share[covered] = tuples[p][covered]
            fine.append(share.tolist())
        n = [int(sum(f)) for f in fine]
        groups = {
            "part": parts,
            "tuples_in": n,
            "outputs": [0] * len(parts),
            "seconds": [seconds / len(parts)] * len(parts),
        }
        groups |= {"window_tuples": n, "state_bytes": [8 * x for x in n], "fine": fine}
        stats.append(
            {"slot": slot, "slot_index": slot, "rows": sum(n), "joined": sum(n), "seconds": seconds, "groups": groups}
        )
    return BatchOutcome(batch_id, stats=stats, finished_at=1000.0 + batch_id)


def _publish_fine(redis_url: str, namespace: str, batches: range, routing, busy, tuples) -> None:
    reports = LoadReports(redis_url, namespace)
    publisher = LoadPublisher(reports, trigger_s=1.0)
    for b in batches:
        assert publisher(_fine_outcome(b, routing, busy, tuples)) is not None
    reports.close()


def test_fine_tuning_splits_a_hot_partition_moves_a_mini_group_and_merges_only_on_one_slot(redis_url, namespace):
    """Two partitions on two slots: slot 0's single partition is hot and holds 300 window tuples > 2 theta, so it
    splits into two mini-groups of 150 and one moves to the idle slot; when the state falls below theta, the
    halves on different slots stay apart; a partition split on one slot merges back."""
    decisions = DecisionStore(redis_url, namespace)
    control = Controller(LoadReports(redis_url, namespace), decisions, parse_control_config(FINE_CONFIG), 2, 2)
    big, small = np.full(16, 300 // 16 + 1), np.full(16, 2)  # 17 x 16 = 272 > 2 theta; 32 < theta
    _publish_fine(redis_url, namespace, range(3), control.state.routing, {0: 0.95, 1: 0.1}, {0: big, 1: small})
    first = control.step()
    assert first is not None and first.decision.retuned == (0,)
    [move] = first.decision.moves
    halves = {Group(0, 1, 0), Group(0, 1, 1)}
    assert move.group in halves and (move.source, move.target) == (0, 1)
    routing = first.decision.state.routing
    assert routing.groups() == {move.group: 1, (halves - {move.group}).pop(): 0, Group(1): 1}
    recorded = decisions.latest()
    assert recorded_moves(recorded) == [(move.group, 0, 1)]
    assert sorted(map(tuple, orjson.loads(recorded["routing"])["split"])) == [
        (0, 1, g.pattern, routing.groups()[g]) for g in sorted(halves)
    ]
    assert state_from_fields(recorded)[0] == first.decision.state
    assert ", re-cut into units p0:2, routing v2" in first.line()  # split (v1), then the move (v2)

    # the job applied it: partition 0's halves report from both slots; its state is now small, both slots calm
    _publish_fine(redis_url, namespace, range(3, 5), routing, {0: 0.6, 1: 0.6}, {0: small, 1: small})
    second = control.step()
    assert second is not None and second.decision.retuned == () and second.decision.moves == ()
    assert second.decision.state.routing == routing  # buddies on two slots: not merged

    # partition 1 grows on its own slot and splits (no move: slots are calm), then shrinks and merges back
    _publish_fine(redis_url, namespace, range(5, 7), routing, {0: 0.6, 1: 0.6}, {0: small, 1: big})
    third = control.step()
    assert third is not None and third.decision.retuned == (1,)
    assert {g for g in third.decision.state.routing.groups() if g.partition == 1} == {Group(1, 1, 0), Group(1, 1, 1)}
    _publish_fine(
        redis_url, namespace, range(7, 9), third.decision.state.routing, {0: 0.6, 1: 0.6}, {0: small, 1: small}
    )
    fourth = control.step()
    assert fourth is not None and fourth.decision.retuned == (1,)
    assert fourth.decision.state.routing.groups() == routing.groups()  # partition 1 whole again
    assert state_from_fields(decisions.latest())[0] == fourth.decision.state


def test_cli_refuses_fine_tuning_for_count_windows_and_n_way_tasks(redis_url, tmp_path):
    config = tmp_path / "control.yaml"
    config.write_text(json.dumps({"fine_tuning": {"enabled": True}}))
    spec = json.loads(spec_file(tmp_path, redis_url).read_text())
    path = tmp_path / "count.yaml"
    path.write_text(json.dumps({**spec, "window": {"kind": "count", "size": 100}}))
    streams = {**spec["streams"], "T": {"fields": {"k": "int"}, "key": "k"}}
    on = [{"op": "eq", "left": "R.k", "right": "S.k"}, {"op": "eq", "left": "S.k", "right": "T.k"}]
    n_way = tmp_path / "n_way.yaml"
    n_way.write_text(
        json.dumps({**spec, "streams": streams, "tasks": [{"name": "rst", "join": ["R", "S", "T"], "on": on}]})
    )
    for refused in (path, n_way):
        done = _cli("controller", str(refused), "--once", "--config", str(config))
        assert done.returncode != 0
        assert "fine_tuning.enabled: true needs two-stream tasks over a time window" in done.stderr
        assert "accepted here: false" in done.stderr


def test_cli_refuses_spreads_and_disk_pushes_for_outer_semi_and_anti_tasks(redis_url, tmp_path):
    spec = json.loads(spec_file(tmp_path, redis_url).read_text())
    path = tmp_path / "left.yaml"
    path.write_text(json.dumps({**spec, "tasks": [{**spec["tasks"][0], "type": "left"}]}))
    for key, config in (("hot.spread", {"hot": {"spread": True}}), ("memory.enabled", {"memory": {"enabled": True}})):
        file = tmp_path / "control.yaml"
        file.write_text(json.dumps(config))
        done = _cli("controller", str(path), "--once", "--config", str(file))
        assert done.returncode != 0
        assert f"{key}: true cuts a partition's tuples over slots or onto disk" in done.stderr, done.stderr
        assert "accepted here: false" in done.stderr
