"""The spec's `sinks.delta` section: where the Delta Lake table of results is (`connectors.files.delta_sink`).

Pure: validated at the edge like the Parquet sink's path. A URL carrying credentials is refused (`results_url`), and
so is one with query options: pyarrow reads those, delta-rs does not, so the table's store is configured from the
environment only (AWS_ENDPOINT_URL, AWS_REGION, ...), the same variables for the files and for the log.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, field_validator

from windjoin.operators.results_url import check_results_url

PATH_KEY = "sinks.delta.path"


class DeltaSinkSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    # The table's folder, or an object store's URL (s3://bucket/prefix): one Delta table, partitioned by task.
    path: Annotated[str, Field(min_length=1)]

    @field_validator("path")
    @classmethod
    def _plain_location(cls, path: str) -> str:
        check_results_url(path, PATH_KEY)
        if "://" in path and ("?" in path or "#" in path):
            raise ValueError(
                f"{PATH_KEY}: {path!r} has query options, which delta-rs does not read; give the store's options in "
                "the environment (AWS_ENDPOINT_URL, AWS_REGION, ...) (accepted: a folder, or scheme://bucket/prefix)"
            )
        return path
