"""Refuse to restart a checkpoint under a spec whose state layout differs from the one that wrote it.

The state kept in a checkpoint is laid out by the spec: tuples sit in the slot their hash partition was routed
to (`partitions`, `slots`), segments hold each stream's declared fields, and count and time windows number
their positions differently. Restarting with another layout would not fail loudly: partitions would silently
route to slots that do not hold their windows, and pairs would be lost. So the first run records the layout
beside Spark's offsets and every later run must match it (or use a new checkpoint folder).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from windjoin.operators.spec import JoinSpec

LAYOUT_FILE = "windjoin-layout.json"


class CheckpointLayoutError(ValueError):
    """The spec's state layout differs from the checkpoint's; the message names each key, old and new value."""


def state_layout(spec: JoinSpec) -> dict[str, Any]:
    """The spec keys that decide how the checkpoint's state is laid out, under their spec names."""
    layout: dict[str, Any] = {
        "partitions": spec.partitions,
        "slots": spec.slots,
        "window.kind": type(spec.window).__name__,
    }
    for name, stream in sorted(spec.streams.items()):
        layout[f"streams.{name}.key"] = stream.key
        layout[f"streams.{name}.timestamp"] = stream.timestamp
        layout[f"streams.{name}.fields"] = dict(sorted(stream.fields.items()))
    return layout


def check_layout(spec: JoinSpec, checkpoint: Path) -> None:
    """Record the layout on a new checkpoint; refuse a different one on an existing checkpoint."""
    path = checkpoint / LAYOUT_FILE
    layout = state_layout(spec)
    if not path.exists():
        checkpoint.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(layout, indent=1, sort_keys=True))
        return
    recorded = json.loads(path.read_text())
    differences = [
        f"{key}: the checkpoint was written with {recorded.get(key)!r}, the spec now says {value!r}"
        for key, value in layout.items()
        if recorded.get(key) != value
    ]
    differences += [f"{key}: in the checkpoint, not in the spec" for key in sorted(set(recorded) - set(layout))]
    if differences:
        raise CheckpointLayoutError(
            f"checkpoint {checkpoint} holds state laid out differently from this spec "
            "(restarting would route tuples away from their windows and lose pairs):\n  "
            + "\n  ".join(differences)
            + "\nrestore those values, or set `checkpoint` to a new folder to start with empty state"
        )
