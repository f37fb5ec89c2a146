"""A user's own Spark job around `join_stream`, as a test's child process: file-source inputs, Spark's file sink.

python -m tests.pipelines.frames.frame_job SPEC_JSON INPUTS OUTPUT CHECKPOINT [--available-now]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tests.pipelines.frames.frame_files import file_inputs
from windjoin import parse_spec
from windjoin.connectors.spark.session import build_local_spark
from windjoin.spark import join_stream


def main(argv: list[str]) -> None:
    spec_path, inputs, output, checkpoint = (Path(a) for a in argv[:4])
    spec = json.loads(spec_path.read_text())
    spark = build_local_spark(app_name="frame-job")
    writer = (
        join_stream(parse_spec(spec), file_inputs(spark, spec, inputs))
        .writeStream.format("parquet")
        .option("path", str(output))
        .option("checkpointLocation", str(checkpoint))
    )
    writer = (
        writer.trigger(availableNow=True) if "--available-now" in argv else writer.trigger(processingTime="0 seconds")
    )
    writer.start().awaitTermination()


if __name__ == "__main__":
    main(sys.argv[1:])
