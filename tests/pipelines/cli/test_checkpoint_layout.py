"""A checkpoint refuses a spec that would lay its state out differently (and would silently lose pairs)."""

from __future__ import annotations

import json

import pytest
import yaml
from click.testing import CliRunner

from tests.pipelines.pipeline_helpers import keyed_eq_spec
from windjoin.connectors.files.checkpoint_layout import LAYOUT_FILE, CheckpointLayoutError, check_layout
from windjoin.operators.spec import parse_spec
from windjoin.pipelines.cli.main import cli


def topic(name: str) -> str:
    return f"layout-{name}"


def test_the_first_run_records_the_layout_and_the_same_spec_restarts(tmp_path):
    data = keyed_eq_spec(topic, tmp_path)
    checkpoint = tmp_path / "checkpoint"
    check_layout(parse_spec(data), checkpoint)
    recorded = json.loads((checkpoint / LAYOUT_FILE).read_text())
    assert recorded["partitions"] == 4 and recorded["slots"] == 2
    assert recorded["streams.R.fields"] == {"k": "int", "x": "int"}
    data["window"]["size_ms"] = 500  # a wider window, more lateness: same layout, allowed
    data["allowed_lateness_ms"] = 9000
    check_layout(parse_spec(data), checkpoint)


def test_a_changed_layout_is_refused_naming_each_key_with_old_and_new_values(tmp_path):
    data = keyed_eq_spec(topic, tmp_path)
    check_layout(parse_spec(data), tmp_path / "checkpoint")
    data.update(partitions=8, slots=3)
    data["streams"]["S"]["fields"]["b"] = "string"
    with pytest.raises(CheckpointLayoutError) as err:
        check_layout(parse_spec(data), tmp_path / "checkpoint")
    message = str(err.value)
    assert "partitions: the checkpoint was written with 4, the spec now says 8" in message
    assert "slots: the checkpoint was written with 2, the spec now says 3" in message
    assert "streams.S.fields" in message and "'b': 'string'" in message
    assert "streams.R" not in message  # unchanged keys are not listed
    assert "new folder" in message


def test_windjoin_run_refuses_a_changed_layout_before_starting_spark(tmp_path):
    data = keyed_eq_spec(topic, tmp_path)
    check_layout(parse_spec(data), tmp_path / "checkpoint")
    data["window"] = {"kind": "count", "size": 100}
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(data))
    result = CliRunner().invoke(cli, ["run", str(spec), "--bootstrap", "127.0.0.1:1"])
    assert result.exit_code == 1, result.output
    assert "window.kind: the checkpoint was written with 'TimeWindow', the spec now says 'CountWindow'" in (
        result.output
    )
