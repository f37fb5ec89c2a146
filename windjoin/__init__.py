"""windjoin: distributed sliding-window stream joins (Kafka in, Spark stateful joins, Redis and Parquet out).

The public API is the four things users do (README "Python API"): `load_spec` / `parse_spec` to load and check
a spec, `join_events` to join events in this process, `start_job` to run the streaming job with the spec's
sinks, `query_results` to read results back. The source lives in three folders, installed as sub-packages of
this one: `windjoin.operators` (pure join logic), `windjoin.connectors` (I/O: Kafka, Redis, Parquet, Spark) and
`windjoin.pipelines` (the processes); docs/architecture.md maps them.
"""

from importlib.metadata import PackageNotFoundError, version

from windjoin.api import Joined, JoinSpec, SpecError, join_events, load_spec, parse_spec, query_results, start_job

try:
    __version__ = version("windjoin")
except PackageNotFoundError:  # a source checkout that was never installed
    __version__ = "0+unknown"

__all__ = [
    "JoinSpec",
    "Joined",
    "SpecError",
    "__version__",
    "join_events",
    "load_spec",
    "parse_spec",
    "query_results",
    "start_job",
]
