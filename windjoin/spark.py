"""windjoin on your own Spark pipeline: `join_stream(spec, {stream: DataFrame})` returns the results as a streaming
DataFrame, for any `writeStream` sink (README "The join in your Spark pipeline"; docs/streaming.md)."""

from windjoin.pipelines.frames.join_stream import join_stream

__all__ = ["join_stream"]
