"""Pre-encoded paced load: the records are exactly the per-event encoder's, whichever path encodes them (pure)."""

from __future__ import annotations

import pytest

from windjoin.connectors.formats.stream_encoder import stream_encoder
from windjoin.operators.spec import parse_spec
from windjoin.operators.workloads.b_model import Workload, WorkloadConfig
from windjoin.pipelines.cli.preencoded import _columnar, encode_schedule, lead_s

INT_STREAMS = {  # JSON, int fields only: encoded as whole columns
    "R": {"topic": "r", "key": "k", "fields": {"k": "int", "x": "int"}},
    "S": {"topic": "s", "key": "k", "fields": {"k": "int", "a": "int"}},
}
MIXED_STREAMS = {  # floats, strings and bools: encoded event by event
    "R": {"topic": "r", "fields": {"k": "int", "y": "float", "z": "string", "b": "bool"}},  # no key: none in Kafka
    "S": {"topic": "s", "fields": {"k": "int", "a": "int"}},  # ints: whole columns, beside R event by event
}


def spec_of(streams: dict) -> object:
    task = {"name": "t", "join": ["R", "S"], "on": [{"op": "eq", "left": "R.k", "right": "S.k"}]}
    return parse_spec({"window": {"kind": "time", "size_ms": 1000}, "streams": streams, "tasks": [task]})


@pytest.mark.parametrize(("streams", "columnar"), [(INT_STREAMS, True), (MIXED_STREAMS, False)], ids=["ints", "mixed"])
def test_preencoded_records_equal_the_per_event_encoders(streams: dict, columnar: bool) -> None:
    spec = spec_of(streams)
    encoders = {name: stream_encoder(spec, name, validate_records=False) for name in spec.streams}
    config = WorkloadConfig(rate=3000.0, duration_s=0.4, seed=5, n_keys=50, start_ms=1_790_000_000_000)
    expected: dict[str, list] = {"R": [], "S": []}
    for piece in Workload(spec, config).slices():
        for name, event in zip(piece.streams, piece.events, strict=True):
            expected[name].append(tuple(encoders[name].encode(event)))
    got: dict[str, list] = {"R": [], "S": []}
    schedule = encode_schedule(Workload(spec, config), encoders)
    assert [due for due, _ in schedule] == pytest.approx([0.05 * (i + 1) for i in range(8)])
    for _, per_stream in schedule:
        for name, records in per_stream.items():
            assert len(records) == len(list(records))
            got[name].extend(records)
    assert got == expected and all(expected.values())
    first = next(Workload(spec, config).column_slices())[1]
    assert _columnar(encoders["R"], first["R"]) == columnar and _columnar(encoders["S"], first["S"])


def test_lead_covers_encoding_the_schedule() -> None:
    spec = spec_of(INT_STREAMS)
    encoders = {name: stream_encoder(spec, name, validate_records=False) for name in spec.streams}
    config = WorkloadConfig(rate=5000.0, duration_s=3.0, seed=1)
    assert 0.5 <= lead_s(Workload(spec, config), encoders) < 30
