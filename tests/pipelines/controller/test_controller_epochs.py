"""Load reports cannot crash-loop the controller (issue 47), on real Redis: a report with an interval of 1e-320 s
passed the check and made every restart raise OverflowError at the same entry; an epoch whose computation fails
is recorded as failed and read past; and random reports, well-formed and not, for many epochs never make it raise."""

from __future__ import annotations

import uuid
from typing import Any

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.controller_load import CONFIG, PARTITIONS, SLOTS, publish
from windjoin.connectors.redis.control_decisions import DecisionStore, state_from_fields
from windjoin.connectors.redis.load_reports import LoadReports
from windjoin.operators.control.config import parse_control_config
from windjoin.operators.control.finetune import FINE_DEPTH
from windjoin.pipelines.controller import control_loop
from windjoin.pipelines.controller.control_loop import Controller, EpochFailed, EpochOutcome

RATE = {"utilisation": {"capacity": 1000, "measure": "rate", "sustain_epochs": 1}}


def _controller(redis_url: str, namespace: str, config: dict[str, Any], **hooks: Any) -> Controller:
    reports, decisions = LoadReports(redis_url, namespace), DecisionStore(redis_url, namespace)
    return Controller(reports, decisions, parse_control_config(config), PARTITIONS, SLOTS, **hooks)


def _entry(interval_s: str, batch_id: int = 0, seconds: float = 0.5) -> dict[str, str | bytes]:
    slot = {"slot": 0, "joined": 1000, "seconds": seconds, "groups": {"part": []}}
    return {"batch_id": str(batch_id), "finished_at": "1000.0", "interval_s": interval_s, "slots": orjson.dumps([slot])}


def test_a_denormal_interval_is_refused_by_the_check_and_read_past(redis_url, namespace):
    reports = LoadReports(redis_url, namespace)
    bad_id = reports.client.xadd(reports.key, _entry("1e-320")).decode()
    skipped: list[tuple[str, str]] = []
    control = _controller(redis_url, namespace, RATE, on_skip=lambda *skip: skipped.append(skip))
    assert control.step() is None  # OverflowError: cannot convert float infinity to integer, before
    [(entry_id, reason)] = skipped
    assert entry_id == bad_id and reason.startswith("interval_s must be") and "1e-320" in reason
    reports.client.xadd(reports.key, _entry("1.0", batch_id=1))
    decided = _controller(redis_url, namespace, RATE).step()
    assert isinstance(decided, EpochOutcome) and decided.batches == 1  # the cursor moved past the bad entry


def test_an_epoch_whose_computation_fails_is_recorded_as_failed_and_read_past(redis_url, namespace, monkeypatch):
    publish(redis_url, namespace, range(2))
    failed: list[tuple[int, str]] = []
    control = _controller(redis_url, namespace, CONFIG, on_fail=lambda *fail: failed.append(fail))
    before = control.state

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise ArithmeticError("a policy's bug")

    monkeypatch.setattr(control_loop, "control_step", broken)
    outcome = control.step()  # raised ArithmeticError before, and again on every restart
    assert isinstance(outcome, EpochFailed) and outcome.epoch == 1
    assert failed == [(1, "ArithmeticError: a policy's bug")]
    recorded = DecisionStore(redis_url, namespace).latest()
    assert recorded is not None and recorded["failed"] == "ArithmeticError: a policy's bug"
    state, cursor = state_from_fields(recorded)
    assert state.epoch == 1 and state.routing == before.routing and state.shed_ratio == before.shed_ratio
    assert cursor == LoadReports(redis_url, namespace).last_id()

    monkeypatch.undo()
    restarted = _controller(redis_url, namespace, CONFIG)
    assert restarted.step() is None  # the failed epoch's reports are not read again
    publish(redis_url, namespace, range(2, 4))
    decided = restarted.step()
    assert isinstance(decided, EpochOutcome) and decided.decision.state.epoch == 2
    assert "failed" not in DecisionStore(redis_url, namespace).latest()


# -- random reports for many epochs -------------------------------------------------------------------------------

COUNTS = st.sampled_from([0, 1, 2**63 - 1]) | st.integers(0, 2**63 - 1)
SECONDS = st.sampled_from([0.0, 1e-9, 1e6]) | st.floats(0, 1e6)
INTERVALS = st.sampled_from(["0", "1e-06", "1.0", "1000000.0"]) | st.floats(1e-6, 1e6).map(repr)
JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.floats() | st.text(st.characters(codec="utf-8")),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=6,
)
BAD_NUMBERS = st.sampled_from(["1e-320", "5e-324", "1e308", "1e400", "-1", "nan", "inf", "1_0", "", " 1"])
CONFIGS = [
    RATE,
    {
        "utilisation": {"capacity": 1e-300, "sustain_epochs": 1},
        "reorganisation": {"occupancy": "share", "pick": "balance"},
        "hot": {"spread": True},
    },
    {
        "scaling": "declustering",
        "reorganisation": {"occupancy": "backlog", "backlog_capacity": 1e-300, "th_con": 0.0, "th_sup": 0.5},
        "hot": {"spread": True, "max_width": 4},
        "fine_tuning": {"enabled": True, "theta": 1},
    },
    {
        "reorganisation": {"occupancy": "cpu"},
        "memory": {"enabled": True, "memory_bytes": 1000, "policy": "active_disk", "query_bytes": 1},
    },
    {"reorganisation": {"occupancy": "tuples"}, "utilisation": {"capacity": 1e300, "measure": "arrivals"}},
]


@st.composite
def slot_reports(draw: st.DrawFn, slot: int) -> dict[str, Any]:
    parts = draw(st.lists(st.integers(0, PARTITIONS - 1), unique=True, max_size=4))

    def column(values: st.SearchStrategy) -> list:
        return draw(st.lists(values, min_size=len(parts), max_size=len(parts)))

    groups = {name: column(COUNTS) for name in ("tuples_in", "outputs", "window_tuples", "state_bytes")}
    groups.update(part=parts, seconds=column(SECONDS), cpu=column(SECONDS))
    if draw(st.booleans()):
        bins = st.lists(COUNTS, min_size=1 << FINE_DEPTH, max_size=1 << FINE_DEPTH)
        groups.update(fine=column(bins), fine_in=column(bins))
    report = {name: draw(COUNTS) for name in ("joined", "outputs", "window_tuples", "state_bytes", "backlog")}
    report.update(slot=slot, seconds=draw(SECONDS), cpu_seconds=draw(SECONDS), groups=groups, shed={"R": draw(COUNTS)})
    if draw(st.booleans()):
        named = {str(p): draw(COUNTS) for p in parts}
        report["spill"] = {"spill_version": draw(COUNTS), "generations": named, "reload_bytes": named}
    return report


@st.composite
def entries(draw: st.DrawFn) -> dict[str, str | bytes]:
    """One load report entry: well-formed (every number within the check's bounds), or one part of it spoilt."""
    slots = draw(st.lists(st.integers(0, SLOTS - 1), unique=True, max_size=SLOTS))
    reports = [draw(slot_reports(s)) for s in slots]
    fields: dict[str, Any] = {
        "batch_id": str(draw(st.integers(0, 50))),
        "finished_at": repr(draw(st.floats(0, 4e9))),
        "interval_s": draw(INTERVALS),
    }
    spoil = draw(st.sampled_from(["none", "none", "field", "slot"]))
    if spoil == "field":
        fields[draw(st.sampled_from(sorted(fields)))] = draw(BAD_NUMBERS | st.text(max_size=8))
    elif spoil == "slot" and reports:
        report = reports[draw(st.integers(0, len(reports) - 1))]
        report[draw(st.sampled_from([*sorted(report), "slot"]))] = draw(JSON | st.floats(allow_nan=False))
    return {**fields, "slots": orjson.dumps(reports)}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(config=st.sampled_from(CONFIGS), epochs=st.lists(st.lists(entries(), max_size=4), min_size=1, max_size=8))
def test_random_reports_for_many_epochs_never_make_the_controller_raise(redis_url, config, epochs):
    """Every epoch with a report the check lets through is decided or recorded as failed, the recorded cursor past
    its reports; one whose reports were all refused records nothing and still reads past them."""
    namespace = f"t{uuid.uuid4().hex[:8]}"
    reports, decisions = LoadReports(redis_url, namespace), DecisionStore(redis_url, namespace)
    try:
        control = _controller(redis_url, namespace, config)
        for batch in epochs:
            for fields in batch:
                reports.client.xadd(reports.key, fields)
            before = control.state.epoch
            outcome = control.step()
            recorded = decisions.latest()
            if outcome is None:
                assert control.state.epoch == before
                continue
            assert recorded is not None and int(recorded["epoch"]) == before + 1 == control.state.epoch
            assert recorded["load_cursor"] == reports.last_id()
            if isinstance(outcome, EpochFailed):
                assert recorded["failed"] == outcome.reason
            else:
                assert isinstance(outcome, EpochOutcome) and "failed" not in recorded
        restarted = _controller(redis_url, namespace, config)
        assert restarted.state == control.state and restarted.step() is None
    finally:
        reports.client.delete(reports.key, decisions.latest_key, decisions.stream_key)
        reports.close()
        decisions.close()
