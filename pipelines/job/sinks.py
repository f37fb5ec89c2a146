"""The job's sink extension point: what the job calls on a sink, the registry of sink kinds, and `build_sinks`.

A sink kind is the key of the spec's `sinks:` section. One module adds a kind: it defines the sink (the `Sink`
protocol), its config model (a pydantic model), and calls `register_sink(kind, model, build)`; once that module
is imported, specs accept `sinks.<kind>` and `build_sinks` makes the sink. The job, the CLI and the proxy need no
edit. Driver-side steps that run after every sink committed a batch (the snapshot committer) are not sinks: they
register with `register_after_commit` and follow the `AfterCommit` protocol.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import pyarrow as pa
from pydantic import BaseModel

from windjoin.connectors.files.snapshots import Snapshot
from windjoin.operators.sink_configs import register_sink_config
from windjoin.operators.spec import JoinSpec


@runtime_checkable
class Sink(Protocol):
    """A sink written in two phases: each slot stages its piece of a batch from its executor (the sink is pickled
    there, so it holds no live client when pickled), then the driver commits the batch from the pieces the slots
    reported. Both are idempotent per batch id: a replayed batch is skipped, an older one refused.

    A sink that also records which checkpoint writes each task (`sink_fence.OwnedSink`) is fenced at start."""

    name: str

    def stage(self, batch_id: int, piece: int, tables: Mapping[str, pa.Table]) -> dict[str, int]:
        """Stage one slot's `piece` of `batch_id`, per task; returns rows staged per task by this call."""
        ...

    def commit(
        self,
        batch_id: int,
        pieces: Mapping[str, Collection[int]],
        *,
        schemas: Mapping[str, pa.Schema],
        batch_max: Mapping[str, int],
    ) -> Iterable[str]:
        """Close `batch_id` per task from its staged `pieces`; returns the tasks committed by this call."""
        ...


@runtime_checkable
class AfterCommit(Protocol):
    """A driver-side step after every sink committed a batch (the snapshot committer); returns the snapshots it
    closed, for the batch's outcome."""

    def after_batch(self, batch_id: int, punctuations: int = 0) -> list[Snapshot]: ...


SinkFactory = Callable[[Any, JoinSpec], Sink]  # (the kind's validated config, the spec) -> the sink
# (the spec, the sinks built by kind, a wall clock in seconds) -> the step, or None when the spec needs none
AfterCommitFactory = Callable[[JoinSpec, Mapping[str, Sink], Callable[[], float]], AfterCommit | None]


@dataclass(frozen=True)
class SinkKind:
    config: type[BaseModel]
    build: SinkFactory


_KINDS: dict[str, SinkKind] = {}
_AFTER_COMMIT: list[AfterCommitFactory] = []


def register_sink(kind: str, config: type[BaseModel], build: SinkFactory) -> None:
    """Make `sinks.<kind>` a valid spec key, validated by `config`, whose sink `build(config, spec)` makes."""
    register_sink_config(kind, config)
    _KINDS[kind] = SinkKind(config, build)


def register_after_commit(build: AfterCommitFactory) -> None:
    """Add a driver-side step after each batch's commit, made by `build(spec, sinks, clock)` (once per factory)."""
    if build not in _AFTER_COMMIT:
        _AFTER_COMMIT.append(build)


def build_sinks(spec: JoinSpec, clock: Callable[[], float] = time.time) -> list[Sink | AfterCommit]:
    """The sinks the spec names, in the kinds' registration order, then the after-commit steps they need."""
    import windjoin.pipelines.job.builtin_sinks  # noqa: F401 - registers parquet, redis and snapshots

    sinks = {kind: _KINDS[kind].build(config, spec) for kind, config in spec.sinks.configured().items()}
    steps = [step for build in _AFTER_COMMIT if (step := build(spec, sinks, clock)) is not None]
    return [*sinks.values(), *steps]


def bind_job_broker(parts: Sequence[Any], bootstrap: str) -> None:
    """Give the job's broker to the sinks that write to Kafka and were given none (`bind_broker`)."""
    for part in parts:
        bind = getattr(part, "bind_broker", None)
        if callable(bind):
            bind(bootstrap)


def split_sinks(parts: Sequence[Any]) -> tuple[tuple[Sink, ...], tuple[AfterCommit, ...]]:
    """The staged sinks and the after-commit steps among `parts`; TypeError for anything that is neither."""
    sinks, steps = [], []
    for part in parts:
        if isinstance(part, AfterCommit):
            steps.append(part)
        elif isinstance(part, Sink):
            sinks.append(part)
        else:
            raise TypeError(
                f"sink {part!r}: results are written by the executors, so a sink needs name, stage() and commit() "
                "(the Sink protocol, pipelines.job.sinks); a driver-side step needs after_batch() (AfterCommit)"
            )
    return tuple(sinks), tuple(steps)
