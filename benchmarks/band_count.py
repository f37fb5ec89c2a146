"""The exact number of band-join pairs of two columnar streams, counted independently of windjoin's operators.

Both the Flink peer and the SplitJoin benchmark check a system's pair count against it: S sorted by `a`, each R
row's candidates found by binary search, the candidates checked vectorised in blocks of R rows (memory stays
bounded by the block's candidates, never R x S)."""

from __future__ import annotations

import numpy as np

BLOCK = 1 << 14  # R rows per vectorised step


def band_pairs(r: dict[str, np.ndarray], s: dict[str, np.ndarray], width: float, window_ms: int) -> int:
    """Pairs with |R.x - S.a| <= width, |R.y - S.b| <= width and |R.ts - S.ts| <= window_ms."""
    order = np.argsort(s["a"], kind="stable")
    a, b, ts_s = s["a"][order], s["b"][order], s["ts"][order]
    total = 0
    for start in range(0, len(r["x"]), BLOCK):
        x, y, ts_r = (r[k][start : start + BLOCK] for k in ("x", "y", "ts"))
        lo, hi = np.searchsorted(a, x - width, "left"), np.searchsorted(a, x + width, "right")
        counts = hi - lo
        probe = np.repeat(np.arange(len(x)), counts)
        stored = np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts) + np.repeat(lo, counts)
        ok = (np.abs(y[probe] - b[stored]) <= width) & (np.abs(ts_r[probe] - ts_s[stored]) <= window_ms)
        total += int(ok.sum())
    return total
