"""The ordering benchmark's quick run: its released streams, read back and checked here, are ordered (outer,
strict) or not (none), and ordering neither loses nor adds results."""

from __future__ import annotations

import numpy as np
import pyarrow.compute as pc
import pyarrow.parquet as pq

from tests.benchmark_runs import run_benchmark


def _times(path):
    """(later, earlier) timestamp of every released pair, in release order."""
    table = pq.read_table(path)
    r = pc.struct_field(table.column("R"), "ts").to_numpy()
    s = pc.struct_field(table.column("S"), "ts").to_numpy()
    return np.maximum(r, s), np.minimum(r, s)


def test_ordering_benchmark_quick_run(tmp_path):
    out, released = tmp_path / "ordering.json", tmp_path / "released"
    result, _ = run_benchmark("ordering", out, "--quick", "--released", str(released), timeout=120)
    assert [row["interval"] for row in result["rows"]] == [64, 1024, 16384]
    assert out.with_suffix(".png").stat().st_size > 0 and result["machine"]["cpu_model"]
    for row in result["rows"]:
        n = row["interval"]
        pairs = {}
        for order in ("none", "outer", "strict"):
            later, earlier = _times(released / f"{order}_{n}.parquet")
            assert len(later) == row[order]["results"] > 0 and row[order]["tuples_per_s"] > 0
            pairs[order] = sorted(zip(later.tolist(), earlier.tolist(), strict=True))
            steps = np.diff(later)
            if order == "none":  # the join cores' outputs one after another: back in time within a batch
                disorder = np.maximum.accumulate(later) - later
                assert disorder.max() == row["none"]["max_disorder_ms"] > 0
                assert np.isclose((disorder > 0).mean(), row["none"]["out_of_order_fraction"])
            else:  # by result time over the whole released stream, across punctuations too
                assert (steps >= 0).all()
                assert 0 < row[order]["order_share"] < 1
            if order == "strict":  # ties in result time: by the earlier tuple's time
                assert (np.diff(earlier)[steps == 0] >= 0).all()
        assert pairs["none"] == pairs["outer"] == pairs["strict"]
