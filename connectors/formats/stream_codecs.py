"""Each stream's codec as its spec says: JSON, or Avro with the stream's .avsc (relative to the spec file) or with
the writer schemas of the spec's schema registry, fetched by id."""

from __future__ import annotations

from pathlib import Path

from windjoin.connectors.formats.avro_codec import SchemaRegistry
from windjoin.connectors.formats.codec import Codec, codec_for
from windjoin.operators.spec import JoinSpec


def stream_codec(spec: JoinSpec, stream: str) -> Codec:
    """The codec that decodes one stream; Avro schema files resolve against `spec.base_dir`."""
    s = spec.streams[stream]
    if s.format == "json":
        return codec_for("json")
    if spec.schema_registry is not None:
        # imported here: the registry client (with its HTTP and JOSE stack) costs every process ~0.4 s to import
        from windjoin.connectors.formats.schema_registry import RegistryConnection, RegistrySchemas

        schemas = RegistrySchemas(RegistryConnection.from_spec(spec.schema_registry))
        return codec_for("avro", registry=schemas, schema_id=None)
    path = Path(s.schema_file)
    if not path.is_absolute():
        path = Path(spec.base_dir) / path
    registry = SchemaRegistry()
    schema_id = registry.load_avsc(path, s.schema_id)
    return codec_for("avro", registry=registry, schema_id=schema_id)


def stream_codecs(spec: JoinSpec) -> dict[str, Codec]:
    return {name: stream_codec(spec, name) for name in spec.streams}
