"""The sink kinds a spec's `sinks:` section accepts, each with its config model: the spec validates against them.

Pure: a sink's module registers its config model here (via `pipelines.job.sinks.register_sink`), so the spec
accepts the new key without an edit in `spec.py`. The built-in kinds (parquet, redis) register in `spec.py`.
"""

from __future__ import annotations

from pydantic import BaseModel

_CONFIGS: dict[str, type[BaseModel]] = {}


def register_sink_config(kind: str, model: type[BaseModel]) -> None:
    """Accept `sinks.<kind>` in a spec, validated by `model`; registering the same model again is a no-op."""
    known = _CONFIGS.get(kind)
    if known is not None and known is not model:
        raise ValueError(f"sink kind {kind!r} is registered already, with {known.__name__}")
    _CONFIGS[kind] = model


def sink_config_model(kind: str) -> type[BaseModel]:
    """The config model of `kind`; ValueError naming the registered kinds when there is none."""
    model = _CONFIGS.get(kind)
    if model is None:
        raise ValueError(f"unknown sink kind {kind!r} (registered kinds: {sink_kinds()})")
    return model


def sink_kinds() -> list[str]:
    """The registered sink kinds, in registration order."""
    return list(_CONFIGS)
