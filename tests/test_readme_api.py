"""The README's Python API examples, run as written: in process against the oracle, and (slow) on the real broker,
Spark and Redis, the rows `query_results` gives equal to the oracle's for the same events."""

from __future__ import annotations

import json
import random
import re
import uuid
from pathlib import Path

import pytest
import yaml

import windjoin
from tests.pipelines.pipeline_helpers import produce_events
from windjoin.operators.testing.oracle import as_multiset, oracle_join

ROOT = Path(__file__).resolve().parents[1]


def readme_examples(heading: str = "## Python API") -> list[str]:
    text = (ROOT / "README.md").read_text()
    section = text[text.index(heading) :].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", section, re.DOTALL)


def band_spec() -> dict:
    """examples/band.yaml as a dict (read as YAML 1.2, as windjoin reads specs: `on` is a key, not `true`)."""
    spec = yaml.safe_load((ROOT / "examples" / "band.yaml").read_text())
    for task in spec["tasks"]:
        task["on"] = task.pop(True)
    return spec


def run_example(code: str, namespace: dict) -> list[tuple]:
    """Run `code` in `namespace` (its globals, kept for the caller), with `print` collecting its arguments."""
    printed: list[tuple] = []
    namespace["print"] = lambda *args: printed.append(args)
    exec(compile(code, "README.md", "exec"), namespace)  # noqa: S102
    return printed


def test_the_in_process_example_prints_the_oracles_results(monkeypatch):
    monkeypatch.chdir(ROOT)  # the example names examples/band.yaml relative to the checkout
    namespace: dict = {}
    [(results,)] = run_example(readme_examples()[0], namespace)
    spec = band_spec()
    expected, late = oracle_join(spec, namespace["events"])
    assert not late and len(expected) == 2
    assert as_multiset([(r["task"], r["R"], r["S"]) for r in results]) == as_multiset(expected)


def band_events(n: int, seed: int) -> list[dict]:
    """`n` events of examples/band.yaml's streams, 40 ms apart, keys 0-2."""
    rng = random.Random(seed)
    base = 1_700_000_000_000
    events = []
    for i in range(n):
        stream = rng.choice("RS")
        event = {"stream": stream, "ts": base + 40 * i, "k": rng.randrange(3)}
        if stream == "R":
            event |= {"x": rng.randrange(40), "y": rng.uniform(0, 20), "z": f"r{i}"}
        else:
            event |= {"a": rng.randrange(40), "b": rng.uniform(0, 20)}
        events.append(event)
    return events


@pytest.mark.slow
def test_the_spark_pipeline_example_writes_the_oracles_results(spark, tmp_path):
    """The README's `join_stream` example as written, its paths in a folder holding its `in/R` and `in/S`: the
    Parquet files Spark's file sink committed equal the oracle's pairs of both tasks."""
    events = band_events(300, seed=11)
    for stream in "RS":
        (tmp_path / "in" / stream).mkdir(parents=True)
        lines = [json.dumps({k: v for k, v in e.items() if k != "stream"}) for e in events if e["stream"] == stream]
        (tmp_path / "in" / stream / "0.json").write_text("\n".join(lines) + "\n")
    [example] = readme_examples("## The join in your Spark pipeline")
    paths = {"examples/band.yaml": ROOT / "examples" / "band.yaml"}  # Spark's JVM resolves paths in its own cwd
    paths |= {name: tmp_path / name for name in ("in/R", "in/S", "joined", "checkpoint")}
    code = example
    for name, path in paths.items():
        assert f'"{name}"' in code, name
        code = code.replace(f'"{name}"', repr(str(path)))
    run_example(code, {"windjoin": windjoin, "spark": spark})
    rows = [r.asDict(recursive=True) for r in spark.read.parquet(str(tmp_path / "joined")).collect()]
    expected, late = oracle_join(band_spec(), events)
    assert not late and {name for name, _, _ in expected} == {"band", "far"}
    assert as_multiset([(r["task"], r["R"], r["S"]) for r in rows]) == as_multiset(expected)


@pytest.mark.slow
def test_the_streaming_example_queries_the_oracles_results(spark, kafka_bootstrap, redis_url, unique_topic, tmp_path):
    spec = band_spec()
    spec["streams"]["R"]["topic"] = unique_topic("r")
    spec["streams"]["S"]["topic"] = unique_topic("s")
    spec |= {"partitions": 4, "slots": 2, "checkpoint": str(tmp_path / "checkpoint")}
    task = f"band{uuid.uuid4().hex[:8]}"  # Redis keys (and the sink's owner record) of this test only
    spec["tasks"][0]["name"] = task
    spec["sinks"] = {"parquet": {"path": str(tmp_path / "parquet")}, "redis": {"url": redis_url}}
    spec_file = tmp_path / "my.yaml"
    spec_file.write_text(yaml.safe_dump(spec))
    events = band_events(300, seed=7)
    produce_events(kafka_bootstrap, spec, events)

    second = readme_examples()[1]
    assert '"my.yaml"' in second and '"localhost:9092"' in second
    assert '"band"' in second
    code = (
        second.replace('"my.yaml"', repr(str(spec_file)))
        .replace('"localhost:9092"', repr(kafka_bootstrap))
        .replace('"band"', repr(task))
    )
    printed = run_example(code, {"windjoin": windjoin})
    expected, late = oracle_join(spec, events)
    want = [(name, r, s) for name, r, s in expected if name == task and r["k"] == 1]
    assert not late and len(want) > 20
    assert as_multiset([(task, r, s) for r, s in printed]) == as_multiset(want)
