"""The STATS format: Example 1 parses to Table 1's query; bad files are refused with the key and what is accepted."""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pytest
import yaml

from windjoin.operators.pmjoin.model import RateModel
from windjoin.operators.pmjoin.planner import plan_query
from windjoin.operators.pmjoin.stats import StatsError, load_stats, parse_stats

EXAMPLE1 = Path(__file__).resolve().parents[2] / "examples" / "pmjoin_example1.yaml"


def example1_data() -> dict:
    return yaml.safe_load(EXAMPLE1.read_text())


def test_example1_file_reproduces_the_paper():
    query, options = load_stats(EXAMPLE1)
    assert [s.rate for s in query.streams] == pytest.approx([100.2, 50.07, 50.03])
    assert [s.window for s in query.streams] == pytest.approx([50.1, 25.035, 25.015])
    report = plan_query(query, options)
    assert report.cost == pytest.approx(0.0696)
    assert report.unpartitioned_cost == pytest.approx(54.0316)
    assert report.centralized_cost == pytest.approx(100.1)


def test_histograms_spread_a_bucket_evenly_and_count_windows_are_tuples():
    data = {
        "streams": {
            "A": {
                "node": "x",
                "rate": 10,
                "window": {"count": 100},
                "attributes": {"k": {"histogram": [{"from": 1, "to": 4, "rate": 4}, {"from": 5, "to": 5, "rate": 4}]}},
            },
            "B": {"node": "y", "window": {"time": 2}, "size": 3, "attributes": {"k": {"substreams": {1: 1, 5: 1}}}},
        },
        "joins": [{"equal": ["A.k", "B.k"]}],
    }
    query, _ = parse_stats(data)
    cls = query.classes[0]
    assert cls.values.tolist() == [1, 2, 3, 4, 5]
    assert cls.weights[0] == pytest.approx([0.125, 0.125, 0.125, 0.125, 0.5])
    assert query.streams[0].window == 100 and query.streams[1].rate == 2 and query.streams[1].window == 4
    # f = Σ_v p_A(v) p_B(v) = 0.125·0.5 + 0.5·0.5
    model = RateModel(query)
    assert model.selectivity(0b11) == pytest.approx(0.3125)
    assert model.size(0b11) == 4


def test_explicit_selectivity_needs_no_histograms():
    data = {
        "streams": {
            "A": {"node": "x", "rate": 5, "window": {"time": 1}},
            "B": {"node": "y", "rate": 7, "window": {"time": 1}},
        },
        "joins": [{"equal": ["A.id", "B.id"], "selectivity": 0.01}],
    }
    query, _ = parse_stats(data)
    assert RateModel(query).rate(0b11) == pytest.approx(0.01 * (5 * 7 + 7 * 5))


def mutate(path: list, value) -> dict:
    data = copy.deepcopy(example1_data())
    target = data
    for key in path[:-1]:
        target = target[key]
    if value is None:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return data


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        (["streams", "S1", "node"], "n9", "streams.S1.node: 'n9' is not among nodes"),
        (["streams", "S1", "window"], {"time": 1, "count": 2}, "streams.S1.window: give exactly one of time"),
        (
            ["streams", "S1", "window"],
            {"seconds": 1},
            "streams.S1.window.seconds: Extra inputs are not permitted (got 1); accepted keys: time, count",
        ),
        (["streams", "S2", "rate"], -1, "streams.S2.rate: Input should be greater than 0"),
        (
            ["planner", "partitioning", "method"],
            "random",
            "planner.partitioning.method: Input should be 'none', 'value'",
        ),
        (["joins"], [{"equal": ["S1.dest", "S9.dest"]}], "joins[0].equal: 'S9.dest' must be STREAM.ATTRIBUTE"),
        (["joins"], [{"equal": ["S1.dest", "S2.port"]}], "streams.S2.attributes has no 'port'"),
        (["joins"], [{"equal": ["S1.dest", "S2.dest"]}], "streams ['S3'] are not joined"),
        (["joins"], [{"equal": ["S1.x", "S2.x", "S3.x"], "selectivity": 0.1}], "joins[0].selectivity: an explicit"),
        (["streams", "S3", "attributes"], None, "streams.S3.rate: missing"),
        (
            ["streams", "S3", "attributes", "dest"],
            {"substreams": {"a": 1}, "histogram": [{"from": 1, "to": 2, "rate": 1}]},
            "give exactly one of",
        ),
    ],
)
def test_bad_stats_name_the_key_and_what_is_accepted(path, value, message):
    with pytest.raises(StatsError) as err:
        parse_stats(mutate(path, value))
    assert message in str(err.value)


def test_load_stats_reports_the_file(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("streams: [1, 2]\n")
    with pytest.raises(StatsError, match=r"bad.yaml: invalid STATS:\nstreams: Input should be a valid dictionary"):
        load_stats(bad)
    assert np.isfinite(load_stats(EXAMPLE1)[0].streams[0].rate)
