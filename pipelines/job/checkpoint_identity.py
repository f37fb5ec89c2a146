"""A checkpoint folder's run id: made on the first start, read back by every later start on the same folder.

Spark numbers a checkpoint's micro-batches from 0, so batch ids say nothing about which checkpoint made them; the
sinks record this run id instead (see `operators.sink_owner`). It lives in the folder itself, so a copied or
moved checkpoint keeps it and a new folder gets a new one.
"""

from __future__ import annotations

import contextlib
import json
import os
import uuid
from pathlib import Path

from windjoin.connectors.files.result_files import fsync_path
from windjoin.operators.sink_owner import CheckpointId, OwnerRecordError

RUN_FILE = "windjoin-run.json"


def predates_run_ids(checkpoint: Path) -> bool:
    """Whether the checkpoint committed batches before run ids were recorded: sinks without an owner were then
    written by it (or by a checkpoint it replaced), and a start on it adopts them rather than refusing an upgrade."""
    commits = checkpoint / "commits"
    return not (checkpoint / RUN_FILE).exists() and commits.is_dir() and any(commits.glob("[0-9]*"))


def checkpoint_identity(checkpoint: Path) -> CheckpointId:
    """The run id recorded in `checkpoint`, recording a new one first when there is none.

    The file is written whole to a temporary name, fsynced and linked into place, which never replaces an
    existing one: two first starts racing agree on the run id that got there first.
    """
    path = checkpoint / RUN_FILE
    if not path.exists():
        checkpoint.mkdir(parents=True, exist_ok=True)
        tmp = checkpoint / f".{RUN_FILE}.tmp-{uuid.uuid4().hex}"
        try:
            tmp.write_text(json.dumps({"run_id": str(uuid.uuid4())}))
            fsync_path(tmp)
            with contextlib.suppress(FileExistsError):
                os.link(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)
        fsync_path(checkpoint)
    try:
        return CheckpointId(json.loads(path.read_text())["run_id"], str(checkpoint))
    except (ValueError, TypeError, KeyError) as err:
        raise OwnerRecordError(
            f"{path}: not a run record ({err}); it names the checkpoint to the sinks, so restore it "
            "or use a new checkpoint folder"
        ) from None
