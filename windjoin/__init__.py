"""windjoin: distributed sliding-window stream joins (Kafka in, Spark stateful joins, Redis and Parquet out).

The source lives in three folders, installed as sub-packages of this one: `windjoin.operators` (pure join
logic), `windjoin.connectors` (I/O: Kafka, Redis, Parquet, Spark) and `windjoin.pipelines` (the processes).
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("windjoin")
except PackageNotFoundError:  # a source checkout that was never installed
    __version__ = "0+unknown"
