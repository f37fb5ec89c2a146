"""The job checks every controller decision: a malformed or out-of-range one is refused, the last good one stays."""

from __future__ import annotations

import logging
import uuid
from pathlib import Path

import orjson
import pytest

from windjoin.connectors.kafka.source_options import KafkaSourceOptions
from windjoin.connectors.redis.client import RedisAuth
from windjoin.connectors.redis.control_decisions import DecisionStore
from windjoin.operators.control.config import FineTuningConfig
from windjoin.operators.control.decision_check import MAX_SPLIT_DEPTH, Accepted, DecisionRefused, check_decision
from windjoin.operators.control.declustering import UtilisationState
from windjoin.operators.control.epoch import ControlState, Decision
from windjoin.operators.control.finetune import FINE_DEPTH
from windjoin.operators.control.job_epoch import ControlEpoch, ControlTarget
from windjoin.operators.control.memory import SpillRequest
from windjoin.operators.control.reorganise import Classes
from windjoin.operators.partitioning import Group, RoutingTable
from windjoin.operators.spec import JoinSpec, parse_spec
from windjoin.pipelines.controller.control_loop import EpochOutcome, decision_fields, state_from_fields
from windjoin.pipelines.job import control_feed
from windjoin.pipelines.job.adapted_source import AdaptedStreamReader
from windjoin.pipelines.job.adapter import Adapter
from windjoin.pipelines.job.control_feed import DecisionFeed, RefusalCounts
from windjoin.pipelines.job.job_metrics import JobMetrics

PARTITIONS, SLOTS = 8, 4
START = RoutingTable.round_robin(PARTITIONS, 2)


def recorded(routing: RoutingTable = START, shed_ratio: float = 0.0, epoch: int = 1, spill=None) -> dict[str, str]:
    """A decision as the controller records it (its own encoder), with every value as Redis returns it."""
    state = ControlState(epoch, routing, 2, shed_ratio, UtilisationState(0, 0), spill)
    outcome = EpochOutcome(Decision(state, 0.5, (), ()), 3, {0: 0.5}, Classes((), (), ()), "1-0")
    return {k: str(v) for k, v in decision_fields(outcome, 1.0).items()}


def test_a_controller_decision_passes_and_decodes_as_the_controller_reads_it():
    split = START.with_units(
        {**{g: s for g, s in START.groups().items() if g != Group(3)}, **{Group(3, 1, 0): 1, Group(3, 1, 1): 2}}
    )
    fields = recorded(split.with_spread(5, (1, 3)), 0.25, 4, SpillRequest(2, spill=(1,), cleanup=(6,)))
    target, accepted = check_decision(fields, PARTITIONS, SLOTS)
    state, _ = state_from_fields(fields)
    assert target == ControlTarget(state.routing, state.shed_ratio, state.spill)
    assert accepted == Accepted(4, state.routing.version, 2)


def _edit(fields: dict[str, str], **changes: object) -> dict[str, str]:
    out = {**fields, **{k: v if isinstance(v, str) else orjson.dumps(v).decode() for k, v in changes.items()}}
    return {k: v for k, v in out.items() if v != "null"}


GOOD = recorded()
ROUTING = orjson.loads(GOOD["routing"])
# partition 3 as Group(3, d, 2^(d-1)) for d = 1..40 and Group(3, 40, 0): a tiling, 40 bits deep
DEEP = [[3, d, 1 << (d - 1), 1] for d in range(1, 41)] + [[3, 40, 0, 1]]


@pytest.mark.parametrize(
    ("fields", "reason", "says"),
    [
        ({k: v for k, v in GOOD.items() if k != "routing"}, "schema", "'routing' is missing"),
        (_edit(GOOD, routing="{not json"), "schema", "not JSON"),
        (_edit(GOOD, routing=[1, 2]), "schema", "JSON object"),
        (_edit(GOOD, routing={**ROUTING, "slot_of": [0, "1"] * 4}), "schema", "list of whole numbers"),
        (_edit(GOOD, routing={**ROUTING, "slot_of": [0, True] * 4}), "schema", "list of whole numbers"),
        (_edit(GOOD, routing={**ROUTING, "split": [[1, 1, 0]]}), "schema", "split entries"),
        (_edit(GOOD, epoch="x"), "schema", "'epoch' must be a whole number"),
        (_edit(GOOD, routing_version="1.5"), "schema", "'routing_version'"),
        (_edit(GOOD, shed_ratio="lots"), "schema", "'shed_ratio' must be a number"),
        (_edit(GOOD, shed_ratio="1.5"), "shed_ratio", r"not within \[0, 1\]"),
        (_edit(GOOD, shed_ratio="-0.1"), "shed_ratio", r"not within \[0, 1\]"),
        (_edit(GOOD, shed_ratio="nan"), "shed_ratio", r"not within \[0, 1\]"),
        (_edit(GOOD, shed_ratio="inf"), "shed_ratio", r"not within \[0, 1\]"),
        (_edit(GOOD, routing={**ROUTING, "slot_of": [0, 1] * 3}), "routing", "places 6 partitions, the job has 8"),
        (_edit(GOOD, routing={**ROUTING, "slot_of": [0, 9] * 4}), "routing", r"slot\(s\) \[9\] outside"),
        (_edit(GOOD, routing={**ROUTING, "slot_of": [0, -1] * 4}), "routing", r"slot\(s\) \[-1\] outside"),
        # partition 3 split into halves with one half missing, or twice over: not tiled exactly once
        (_edit(GOOD, routing={**ROUTING, "split": [[3, 1, 0, 1]]}), "routing", "not tiled exactly once"),
        (_edit(GOOD, routing={**ROUTING, "split": [[3, 1, 0, 1], [3, 1, 1, 0], [3, 0, 0, 1]]}), "routing", "tiled"),
        (_edit(GOOD, routing={**ROUTING, "split": [[3, 1, 0, 1], [3, 1, 0, 1], [3, 1, 1, 1]]}), "routing", "twice"),
        (_edit(GOOD, routing={**ROUTING, "split": [[9, 1, 0, 1], [9, 1, 1, 1]]}), "routing", "outside"),
        (_edit(GOOD, routing={**ROUTING, "spread": [[9, [0, 1]]]}), "routing", "routing version"),
        (_edit(GOOD, routing={**ROUTING, "spread": [[2, [1, 0]]]}), "routing", "spread of partition 2"),
        (_edit(GOOD, spill={"version": 1, "spill": [8], "cleanup": []}), "routing", r"partition\(s\) \[8\]"),
        (_edit(GOOD, spill={"version": "1"}), "schema", "'spill'"),
        # integers the executors carry as signed 64-bit, and an epoch no later decision could pass
        (_edit(GOOD, routing_version=str(2**64)), "schema", r"routing_version must be within 0\.\."),
        (_edit(GOOD, routing_version=str(2**63)), "schema", r"routing_version must be within 0\.\.9223372036854775807"),
        (_edit(GOOD, epoch="1" + "0" * 4000), "schema", "'epoch' must be a whole number"),
        (_edit(GOOD, epoch="-1"), "schema", "epoch must be within"),
        (_edit(GOOD, epoch="\u0661"), "schema", "'epoch'"),  # an Arabic-Indic one: int() reads it
        (_edit(GOOD, epoch="1_0"), "schema", "'epoch'"),
        (_edit(GOOD, spill={"version": 2**63, "spill": [1]}), "schema", r"spill\.version must be within"),
        (_edit(GOOD, shed_ratio="0.2_5"), "schema", r"no '_' or spaces"),
        (_edit(GOOD, shed_ratio=" 0.5 "), "schema", r"no '_' or spaces"),
        # a partition tiled 40 bits deep (half, quarter, ...): routing would allocate 2^40 directory entries
        (
            _edit(GOOD, routing={**ROUTING, "split": DEEP}),
            "routing",
            r"depth\(s\) \[9, 10, 11, 12, 13\] outside .* 0\.\.8",
        ),
        (_edit(GOOD, routing={**ROUTING, "split": [[0, 1, 0, 0]] * 2049}), "routing", "at most 2048"),
        (_edit(GOOD, routing={**ROUTING, "spread": [[2, [0, 1]], [2, [0, 3]]]}), "routing", "a partition twice"),
        (_edit(GOOD, spill={"version": 1, "spill": [1] * 9}), "schema", r"spill\.spill lists 9 partitions"),
    ],
)
def test_a_bad_decision_is_refused_with_its_reason(fields, reason, says):
    with pytest.raises(DecisionRefused, match=says) as refused:
        check_decision(fields, PARTITIONS, SLOTS)
    assert refused.value.reason == reason


def test_the_deepest_split_accepted_leaves_a_margin_over_the_controllers():
    """The controller's fine tuning splits at most FINE_DEPTH bits deep: every such decision must pass."""
    assert FineTuningConfig.model_fields["max_depth"].metadata[-1].le == FINE_DEPTH < MAX_SPLIT_DEPTH
    deepest = {g: 1 for g in (Group(3, MAX_SPLIT_DEPTH, p) for p in range(1 << MAX_SPLIT_DEPTH))}
    split = START.with_units({**{g: s for g, s in START.groups().items() if g != Group(3)}, **deepest})
    target, _ = check_decision(recorded(split), PARTITIONS, SLOTS)
    assert len(target.routing.split) == 1 << MAX_SPLIT_DEPTH


def test_versions_only_grow():
    _, accepted = check_decision(recorded(START.with_moves({Group(0): 1}), epoch=5), PARTITIONS, SLOTS)
    check_decision(recorded(START.with_moves({Group(0): 1}), 0.5, epoch=6), PARTITIONS, SLOTS, accepted)  # same v
    with pytest.raises(DecisionRefused, match="routing_version 0 is below 1") as refused:
        check_decision(recorded(START, epoch=6), PARTITIONS, SLOTS, accepted)  # routing rolled back
    assert refused.value.reason == "version"
    with pytest.raises(DecisionRefused, match="epoch 4 is below 5"):
        check_decision(recorded(START.with_moves({Group(0): 1}), epoch=4), PARTITIONS, SLOTS, accepted)
    spilled = Accepted(5, 1, 3)
    with pytest.raises(DecisionRefused, match="spill version 2 is below 3"):
        check_decision(recorded(START.with_moves({Group(0): 1}), 0, 6, SpillRequest(2)), PARTITIONS, SLOTS, spilled)


@pytest.fixture
def feed(redis_url: str, tmp_path: Path):
    namespace = f"dc{uuid.uuid4().hex[:8]}"
    store = DecisionStore(redis_url, namespace)
    refusals = RefusalCounts(tmp_path / "control-refusals.json")
    yield store, DecisionFeed(redis_url, namespace, partitions=PARTITIONS, slots=SLOTS, refusals=refusals), refusals
    store.client.delete(store.latest_key, store.stream_key)
    store.close()


def _reader(decision_feed) -> tuple[JoinSpec, AdaptedStreamReader]:
    """A two-stream spec and the job's source planner for it, reading decisions from `decision_feed`."""
    spec = parse_spec(
        {
            "window": {"kind": "time", "size_ms": 10},
            "partitions": PARTITIONS,
            "streams": {n: {"fields": {"k": "int"}, "key": "k", "topic": n.lower()} for n in "RS"},
            "tasks": [{"name": "t", "join": ["R", "S"], "on": [{"op": "eq", "left": "R.k", "right": "S.k"}]}],
        }
    )
    options = KafkaSourceOptions.from_options({"bootstrap.servers": "127.0.0.1:1", "topics": "r,s"})
    return spec, AdaptedStreamReader(options, Adapter(spec, START, tuple(range(SLOTS))), decision_feed)


def test_the_job_keeps_the_last_good_decision_through_redis(feed, caplog):
    """Through the real reading path: decisions recorded in Redis, read by the job's source planner."""
    store, decision_feed, refusals = feed
    spec, reader = _reader(decision_feed)
    store.record(recorded(START, 0.25, epoch=1))
    epoch = reader.next_control(ControlEpoch(START).to_json())
    assert ControlEpoch.from_json(epoch).shed_ratio == 0.25
    metrics = JobMetrics(streams=list(spec.streams), refused=refusals.read)
    assert b'windjoin_job_decisions_refused_total{reason="shed_ratio"} 0.0' in metrics.exposition()
    with caplog.at_level(logging.WARNING, logger="windjoin.pipelines.job.control_feed"):
        for bad in (
            _edit(recorded(START, epoch=2), shed_ratio="1.5"),  # shed everything and more
            _edit(recorded(START, epoch=3), routing={**ROUTING, "slot_of": [0, 7] * 4}),  # to slots that don't exist
            _edit(recorded(START, epoch=4), routing="]"),
            _edit(recorded(START, epoch=5), routing={**ROUTING, "split": DEEP}),  # 2^40 directory entries
        ):
            store.record(bad)
            for _ in range(3):  # planned batch after batch: the job goes on under the last good decision
                epoch = reader.next_control(epoch)
                assert ControlEpoch.from_json(epoch) == ControlEpoch(START, 0.25)
    assert [r.getMessage().split(", ")[0] for r in caplog.records] == [
        f"control decision (epoch '{e}') refused" for e in (2, 3, 4, 5)
    ]
    assert "shed_ratio '1.5' is not within [0, 1]" in caplog.records[0].getMessage()
    assert refusals.read() == {"shed_ratio": 1, "routing": 2, "schema": 1}  # each decision counted once
    text = metrics.exposition()
    for reason, n in (("shed_ratio", 1), ("routing", 2), ("schema", 1), ("version", 0)):
        assert f'windjoin_job_decisions_refused_total{{reason="{reason}"}} {n}.0'.encode() in text
    store.record(recorded(START.with_moves({Group(1): 0}), 0.5, epoch=6))  # a good one again: applied
    assert ControlEpoch.from_json(reader.next_control(epoch)).shed_ratio == 0.5


def test_a_restarted_reader_refuses_a_rollback_below_the_routing_it_runs(feed):
    store, decision_feed, refusals = feed
    running = START.with_moves({Group(0): 1})  # the epoch in the checkpoint's offsets: routing version 1
    _, reader = _reader(decision_feed)
    store.record(recorded(START, 1.0, epoch=1))  # routing version 0 with a shed ratio of 1
    assert ControlEpoch.from_json(reader.next_control(ControlEpoch(running, 0.1).to_json())) == ControlEpoch(
        running, 0.1
    )
    assert refusals.read() == {"version": 1}


def test_a_decision_is_checked_once_however_many_batches_are_planned(feed, monkeypatch):
    """The check walks every mini-group: it ran for every planned batch, now once per recorded decision."""
    store, decision_feed, refusals = feed
    checked = []

    def counting(fields, *args, **kwargs):
        checked.append(fields["epoch"])
        return check_decision(fields, *args, **kwargs)

    monkeypatch.setattr(control_feed, "check_decision", counting)
    moved = START.with_moves({Group(0): 1})
    store.record(recorded(moved, 0.25, epoch=1))
    store.record(_edit(recorded(moved, epoch=2), shed_ratio="1.5"))  # refused
    store.record(recorded(moved, 0.5, epoch=3))
    assert [decision_feed.latest().shed_ratio for _ in range(4)] == [0.5] * 4
    store.record(_edit(recorded(moved, epoch=4), shed_ratio="1.5"))
    assert [decision_feed.latest().shed_ratio for _ in range(4)] == [0.5] * 4
    assert checked == ["3", "4"] and refusals.read() == {"shed_ratio": 1}
    store.record(recorded(moved, 0.75, epoch=5))
    assert decision_feed.latest().shed_ratio == 0.75
    decision_feed.at_least(2, 0)  # restarted under a newer routing: the same decision is checked again, refused
    assert [decision_feed.latest().shed_ratio for _ in range(3)] == [0.75] * 3
    assert checked == ["3", "4", "5", "5"] and refusals.read() == {"shed_ratio": 1, "version": 1}


def test_the_decision_reader_logs_in_from_the_environment_when_the_options_name_no_credentials(tmp_path, monkeypatch):
    """The job's source reads decisions with the credentials its options name, else the environment's, as every
    other client of the job (it used to build an empty login, refused by a Redis with a password)."""
    (tmp_path / "pw").write_text("s3cret\n")
    monkeypatch.setenv("WINDJOIN_REDIS_PASSWORD_FILE", str(tmp_path / "pw"))
    assert control_feed.auth_from_options({}).password() == "s3cret"
    named = control_feed.auth_options(RedisAuth(username="job", password_env="JOB_PW"))
    assert control_feed.auth_from_options(named) == RedisAuth(username="job", password_env="JOB_PW")


def test_a_job_with_outer_semi_or_anti_tasks_refuses_spreads_and_disk_pushes_only():
    """Their tasks must see every pair of the tuples they remember: a spread partition's probe-only copies and
    pushed generations would hide some. Moves, splits and clean-ups pass."""
    spread = START.with_spread(2, (0, 1))
    for fields in (recorded(spread), recorded(spill=SpillRequest(1, spill=(1,)))):
        check_decision(fields, PARTITIONS, SLOTS)  # an inner job takes them
        with pytest.raises(DecisionRefused, match="outer, semi or anti") as refused:
            check_decision(fields, PARTITIONS, SLOTS, exact_pairs_only=True)
        assert refused.value.reason == "unsupported"
    moved = START.with_moves({Group(0): 1})
    split = moved.with_units(
        {**{g: s for g, s in moved.groups().items() if g != Group(3)}, Group(3, 1, 0): 1, Group(3, 1, 1): 2}
    )
    for fields in (recorded(split), recorded(spill=SpillRequest(1, cleanup=(1,)))):
        check_decision(fields, PARTITIONS, SLOTS, exact_pairs_only=True)
