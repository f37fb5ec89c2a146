"""A slot's metadata keeps the stored form checkpoints hold: written as before, and older forms still read."""

import orjson

from windjoin.operators.partitioning import Group
from windjoin.pipelines.job.slot_meta import SlotMeta

# as the job stored it when the metadata was an untyped dict: a partition pushed and cleaned up, a mini-group held
STORED = {
    "nonce": "9f0c",
    "next_segment": 7,
    "segments": [
        {"id": 5, "max_ts": {"3": 1200, "4": 1190}, "min_ts": {"3": 1100, "4": 1150}, "ends": {"3": {"R": 4, "S": 2}}},
        {"id": 6, "max_ts": {"4": 1300}, "min_ts": {"4": 1250}, "ends": {"4": {"S": 9}}},
    ],
    "max_ts": {"3": 1200, "4": 1300},
    "counts": {"3": {"R": 4, "S": 2}, "4": {"S": 9}},
    "watermark": 1180,
    "held": {"3": [0], "4.1.1": [0, 1]},
    "spill": {
        "3": {
            "next_gen": 2,
            "gens": [],
            "pushed_tuples": 40,
            "pushed_bytes": 9000,
            "reload_bytes": 0,
            "cleanups": 1,
            "span": None,
            "retired": [0, 1],
        }
    },
}


def test_stored_metadata_is_written_back_unchanged():
    meta = SlotMeta.from_stored(orjson.dumps(STORED))
    assert orjson.loads(meta.to_stored()) == STORED
    assert meta.held_groups() == {Group(3): (0,), Group(4, 1, 1): (0, 1)}
    assert meta.positions(4) == {"max_ts": 1300, "counts": {"S": 9}, "watermark": meta.watermark}


def test_a_new_slot_stores_what_it_always_did():
    assert orjson.loads(SlotMeta().to_stored()) == {
        "nonce": "",
        "next_segment": 0,
        "segments": [],
        "max_ts": {},
        "counts": {},
    }


def test_fields_older_checkpoints_lack_read_as_their_defaults():
    older = {
        **STORED,
        "segments": [{"id": 5, "max_ts": {"3": 1200}, "ends": {"3": {"R": 4}}}],  # before min_ts was recorded
        "spill": {"3": {"next_gen": 1, "gens": [0], "pushed_tuples": 4, "pushed_bytes": 90, "cleanups": 0}},
    }
    del older["watermark"], older["held"]
    meta = SlotMeta.from_stored(orjson.dumps(older))
    assert meta.watermark is None and meta.held is None
    assert meta.segments[0].min_ts == {}
    spill = meta.spill["3"]
    assert (spill.reload_bytes, spill.span, spill.retired) == (0, None, [])
    stored = orjson.loads(meta.to_stored())
    assert "watermark" not in stored and "held" not in stored  # still unset: a first batch takes them up
    assert stored["spill"]["3"] == {**older["spill"]["3"], "reload_bytes": 0, "span": None}


def test_the_watermark_never_moves_back():
    meta = SlotMeta()
    meta.take_watermark(None)
    assert meta.watermark is None
    meta.take_watermark(100)
    meta.take_watermark(90)
    assert meta.watermark == 100
