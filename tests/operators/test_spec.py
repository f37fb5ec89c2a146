"""Spec validation: every error names the key, the bad value and what is accepted."""

from __future__ import annotations

import copy

import pytest
import yaml

from windjoin.operators.spec import SpecError, load_spec, parse_spec

BASE = {
    "window": {"kind": "time", "size_ms": 60000},
    "streams": {
        "R": {"timestamp": "ts", "fields": {"k": "int", "x": "int", "y": "float", "z": "string"}},
        "S": {"timestamp": "ts", "fields": {"k": "int", "a": "int", "b": "float"}},
    },
    "tasks": [
        {
            "name": "band",
            "join": ["R", "S"],
            "on": [
                {"op": "eq", "left": "R.k", "right": "S.k"},
                {"op": "band", "left": "R.x", "right": "S.a", "width": 10},
                {"op": "outside", "left": "R.y", "right": "S.b", "width": 5},
                {"op": "lt", "left": "R.y", "right": "S.b"},
            ],
        }
    ],
}


BOUNDS = {"kind": "time", "lower_ms": -300_000, "upper_ms": 60_000}


def test_issue_example_is_accepted():
    spec = parse_spec(BASE)
    assert spec.window.size_ms == 60000
    assert [p.op for p in spec.task("band").on] == ["eq", "band", "outside", "lt"]


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        (lambda d: d["window"].update(kind="tumble"), ["window", "'time', 'count'", "tumble"]),
        (lambda d: d["window"].update(size_ms=-1), ["window.size_ms", "greater than or equal to 0", "-1"]),
        (lambda d: d["window"].update(size_ms="big"), ["window.size_ms", "integer", "big"]),
        (lambda d: d.update(allowed_lateness_ms=-5), ["allowed_lateness_ms", "greater than or equal to 0"]),
        (lambda d: d.update(windw=1), ["windw", "Extra inputs"]),
        (lambda d: d["streams"]["R"]["fields"].update(q="decimal"), ["streams.R.fields.q", "'bool'", "decimal"]),
        (lambda d: d["tasks"][0]["on"][1].pop("width"), ["tasks[0].on[1].width", "needs a width"]),
        (lambda d: d["tasks"][0]["on"][0].update(width=3), ["tasks[0].on[0].width", "does not take"]),
        (lambda d: d["tasks"][0]["on"][0].update(op="like"), ["tasks[0].on[0].op", "'band'", "like"]),
        (lambda d: d["tasks"][0]["on"][0].update(left="R.nope"), ["tasks[0].on[0].left", "nope", "'k'"]),
        (lambda d: d["tasks"][0]["on"][0].update(left="Rk"), ["tasks[0].on[0].left", "pattern", "Rk"]),
        (lambda d: d["tasks"][0].update(join=["R", "T"]), ["tasks[0].join", "'T'", "['R', 'S']"]),
        (lambda d: d["tasks"][0].update(join=["R", "R"]), ["tasks[0].join", "itself"]),
        (lambda d: d["tasks"][0].update(join=["R"]), ["tasks[0].join", "at least 2"]),
        (lambda d: d["tasks"][0]["on"][3].update(left="R.z"), ["tasks[0].on[3]", "string", "float"]),
        (lambda d: d["tasks"][0]["on"][1].update(left="R.z"), ["tasks[0].on[1]", "compares numbers"]),
        (lambda d: d["tasks"][0]["on"][1].update(width=float("inf")), ["tasks[0].on[1].width", "finite"]),
        (lambda d: d["tasks"].append(copy.deepcopy(d["tasks"][0])), ["tasks[1].name", "unique"]),
        (lambda d: d["streams"].update(task=d["streams"]["S"]), ["streams.task", "reserved"]),
        (lambda d: d["streams"]["R"]["fields"].update(ts="int"), ["streams.R.fields.ts", "implicit"]),
        (lambda d: d.pop("tasks"), ["tasks", "Field required"]),
        (lambda d: d["window"].update(lower_ms=-5), ["window", "not both", "lower_ms"]),
        (
            lambda d: d["window"].update(size_ms=None, lower_ms=-5),
            ["window", "missing ['upper_ms']", "lower_ms: -300000"],
        ),
        (
            lambda d: d.update(window={"kind": "time", "lower_ms": 10, "upper_ms": -10}),
            ["window", "lower_ms: 10 is above upper_ms (-10)", "lower_ms <= upper_ms"],
        ),
        (
            lambda d: d["window"].update(size_ms=None, lower_ms=0, upper_ms=10**15),
            ["window.upper_ms", "less than or equal to"],
        ),
        (
            lambda d: d.update(window={"kind": "count", "size": 5}) or d["tasks"][0].update(window=BOUNDS),
            ["tasks[0].window", "need the spec's window to be a time window"],
        ),
        (lambda d: d["tasks"][0].update(window={"kind": "count", "size": 5}), ["tasks[0].window.kind", "'time'"]),
    ],
)
def test_errors_name_key_value_and_accepted(mutate, expected):
    data = copy.deepcopy(BASE)
    mutate(data)
    with pytest.raises(SpecError) as err:
        parse_spec(data)
    for fragment in expected:
        assert fragment in str(err.value)


def test_a_zero_size_time_window_is_accepted():
    """size_ms 0 pairs tuples with equal event times; only a negative size is refused."""
    data = copy.deepcopy(BASE)
    data["window"]["size_ms"] = 0
    assert parse_spec(data).window.size_ms == 0


def test_asymmetric_bounds_per_spec_and_per_task():
    """lower_ms <= second.ts - first.ts <= upper_ms in the task's join order; size_ms is [-size_ms, size_ms]; what
    the state keeps below the watermark follows the bounds per stream."""
    data = copy.deepcopy(BASE)
    data["window"] = BOUNDS
    data["tasks"].append({"name": "wide", "join": ["S", "R"], "window": {"kind": "time", "size_ms": 1000}})
    spec = parse_spec(data)
    assert spec.bounds(spec.task("band")) == (-300_000, 60_000)
    assert spec.bounds(spec.task("wide")) == (-1000, 1000)
    # band: R is first (an S may come up to 60 s after it), S second (an R up to 300 s after it); wide: 1 s
    assert (spec.history_ms("R"), spec.history_ms("S")) == (60_000, 300_000)
    assert spec.max_history_ms == spec.reach_ms == 300_000
    data["tasks"] = data["tasks"][:1]
    data["window"] = {"kind": "time", "lower_ms": 5_000, "upper_ms": 8_000}
    spec = parse_spec(data)
    assert (spec.history_ms("R"), spec.history_ms("S"), spec.reach_ms) == (8_000, 0, 8_000)


def test_n_way_tasks_keep_a_symmetric_window():
    data = copy.deepcopy(BASE)
    data["streams"]["T"] = {"fields": {"k": "int"}}
    data["tasks"] = [
        {
            "name": "three",
            "join": ["R", "S", "T"],
            "on": [{"op": "eq", "left": "R.k", "right": "S.k"}, {"op": "eq", "left": "S.k", "right": "T.k"}],
        }
    ]
    assert parse_spec({**data, "window": {"kind": "time", "lower_ms": -50, "upper_ms": 50}})
    with pytest.raises(SpecError, match=r"tasks\[0\].join: tasks of three or more streams need a symmetric window"):
        parse_spec({**data, "window": BOUNDS})
    data["tasks"][0]["window"] = {"kind": "time", "size_ms": 5}
    with pytest.raises(SpecError, match=r"tasks\[0\].window: tasks of three or more streams join within"):
        parse_spec(data)


def test_all_problems_reported_at_once():
    data = copy.deepcopy(BASE)
    data["window"]["size_ms"] = -1
    data["tasks"][0]["on"][0]["left"] = "R.nope"
    with pytest.raises(SpecError) as err:
        parse_spec(data)
    assert "window.size_ms" in str(err.value)


def test_load_spec_file_errors(tmp_path):
    with pytest.raises(SpecError, match="cannot read"):
        load_spec(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("window: [unclosed\n")
    with pytest.raises(SpecError, match="not valid YAML"):
        load_spec(bad)
    listy = tmp_path / "list.yaml"
    listy.write_text("- 1\n- 2\n")
    with pytest.raises(SpecError, match="a join spec is a mapping"):
        load_spec(listy)


def test_yaml_on_key_and_yes_no_strings(tmp_path):
    """`on:` is the predicates key, not YAML 1.1's boolean True; yes/no stay strings too."""
    path = tmp_path / "spec.yaml"
    path.write_text(
        "window: {kind: count, size: 10}\n"
        "streams:\n  R: {fields: {k: string}}\n  S: {fields: {k: string}}\n"
        "tasks:\n  - name: t\n    join: [R, S]\n    on:\n      - {op: eq, left: R.k, right: S.k}\n"
    )
    assert load_spec(path).tasks[0].on[0].op == "eq"


def test_bundled_example_spec_loads():
    from pathlib import Path

    spec = load_spec(Path(__file__).parents[2] / "examples" / "band.yaml")
    assert [t.name for t in spec.tasks] == ["band", "far"]


RUNNING = {
    "window": {"kind": "time", "size_ms": 1000},
    "streams": {
        "R": {"fields": {"k": "int"}, "key": "k", "topic": "r-in", "format": "avro", "schema": "r.avsc"},
        "S": {"fields": {"k": "int", "v": "float"}, "key": "k", "topic": "s-in"},
    },
    "tasks": [{"name": "t", "join": ["R", "S"], "on": [{"op": "eq", "left": "S.k", "right": "R.k"}]}],
    "partitions": 16,
    "slots": 4,
    "sinks": {"redis": {"url": "redis://127.0.0.1:6390/0", "retain_ms": 5000}, "parquet": {"path": "out/pq"}},
    "dead_letter_topic": "dead",
}


def test_running_keys_are_accepted():
    spec = parse_spec(RUNNING)
    assert spec.streams["R"].schema_file == "r.avsc" and spec.streams["S"].format == "json"
    assert spec.sinks.redis.retain_ms == 5000 and spec.sinks.parquet.path == "out/pq"
    assert (spec.partitions, spec.slots, spec.trigger_ms) == (16, 4, 1000)


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        (lambda d: d.update(slots=32), ["slots", "<= partitions"]),
        (lambda d: d["streams"]["R"].pop("schema"), ["streams.R.schema", "avro"]),
        (lambda d: d["streams"]["R"].update(format="protobuf"), ["streams.R.format", "'json' or 'avro'"]),
        (lambda d: d["streams"]["R"].update(key="nope"), ["streams.R.key", "nope"]),
        (lambda d: d["streams"]["S"].pop("key"), ["tasks[0].join", "only 'R' has a key"]),
        (lambda d: d["tasks"][0].update(on=[]), ["tasks[0].on", "eq R.k = S.k"]),
        (lambda d: d["streams"]["R"].update(topic="bad topic!"), ["streams.R.topic", "pattern"]),
        (lambda d: d["sinks"]["redis"].update(url="http://x"), ["sinks.redis.url", "rediss?"]),
        (
            lambda d: d["sinks"].update(hdfs={}),
            ["sinks.hdfs", "unknown sink kind", "registered kinds: ['parquet', 'redis'"],
        ),
        (lambda d: d.update(partitions=0), ["partitions", "greater than or equal to 1"]),
    ],
)
def test_running_key_errors(mutate, expected):
    data = copy.deepcopy(RUNNING)
    mutate(data)
    with pytest.raises(SpecError) as err:
        parse_spec(data)
    for fragment in expected:
        assert fragment in str(err.value)


def test_load_spec_records_its_folder(tmp_path):
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(RUNNING))
    assert load_spec(path).base_dir == str(tmp_path.resolve())
