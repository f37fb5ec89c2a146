"""Delta tables read back without delta-rs: the log's JSON commits replayed here (add and remove actions, the
application transactions) and the live files read by DuckDB, so a test compares the sink's table through a
reader that shares no code with the writer (polars' `read_delta` resolves the log through delta-rs).

Only what windjoin's tables use: JSON commits from version 0 (a checkpoint file beside them changes nothing, the
commits stay until log clean-up, 30 days by default), partition values as strings.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote

import duckdb
import orjson
import pyarrow as pa

COMMIT = re.compile(r"([0-9]{20})\.json")


@dataclass
class DeltaLog:
    """The state of a table at its latest version, as its JSON commits say."""

    version: int = -1
    files: dict[str, dict[str, str | None]] = field(default_factory=dict)  # live path -> partition values
    transactions: dict[str, int] = field(default_factory=dict)  # app id -> version
    adds_per_version: dict[int, int] = field(default_factory=dict)


def read_log(table: str | os.PathLike[str]) -> DeltaLog:
    log_dir = Path(table) / "_delta_log"
    commits = sorted(int(m.group(1)) for name in os.listdir(log_dir) if (m := COMMIT.fullmatch(name)))
    assert commits == list(range(len(commits))), f"{log_dir}: versions not contiguous from 0: {commits}"
    state = DeltaLog()
    for version in commits:
        adds = 0
        for line in (log_dir / f"{version:020d}.json").read_bytes().splitlines():
            action = orjson.loads(line)
            if "add" in action:
                state.files[unquote(action["add"]["path"])] = action["add"]["partitionValues"]
                adds += 1
            elif "remove" in action:
                state.files.pop(unquote(action["remove"]["path"]), None)
            elif "txn" in action:
                state.transactions[action["txn"]["appId"]] = action["txn"]["version"]
        state.adds_per_version[version] = adds
        state.version = version
    return state


def read_rows(table: str | os.PathLike[str], columns: list[str]) -> pa.Table:
    """The live rows of the table's latest version: `columns` of its files (DuckDB's reader), plus each file's
    partition values as columns."""
    state = read_log(table)
    parts = []
    for path, partitions in sorted(state.files.items()):
        rows = duckdb.read_parquet(str(Path(table) / path)).select(*columns).to_arrow_table()
        for name, value in partitions.items():
            rows = rows.append_column(name, pa.array([value] * rows.num_rows, pa.string()))
        parts.append(rows)
    return pa.concat_tables(parts) if parts else pa.table({})
