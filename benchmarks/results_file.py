"""Writing a benchmark's results: the JSON file, and beside it the PNG plot when matplotlib is installed."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any


def write_results(result: dict[str, Any], out: Path, plot: Callable[[dict[str, Any], Path], object]) -> str:
    """Write `result` to `out` as JSON and `plot(result, png)` to `out` with suffix .png; say what was written.

    `plot` may import matplotlib.pyplot freely: it is called only once matplotlib is known to import, on the
    non-interactive Agg backend.
    """
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    try:
        import matplotlib
    except ImportError:
        return f"written: {out} (no matplotlib: no plot)"
    matplotlib.use("Agg")
    png = out.with_suffix(".png")
    plot(result, png)
    return f"written: {out}, {png}"
