"""`windjoin proxy`: serve the query proxy (one-time and continuous queries) over a spec's Redis and Parquet sinks."""

from __future__ import annotations

from pathlib import Path

import click

from windjoin.operators.spec import JoinSpec
from windjoin.pipelines.cli_options import SPEC_ARGUMENT, load_spec_or_fail

NAMESPACE = "windjoin"  # the Redis sink's default key prefix (see connectors/redis_sink.py)
NAMESPACE_OPTION = click.option(
    "--namespace", default=NAMESPACE, show_default=True, help="Key prefix the Redis sink writes under."
)


def store_from_spec(spec: JoinSpec, namespace: str = NAMESPACE):  # -> ResultStore (imported lazily)
    """The result store over the sinks the spec configures (Redis, Parquet, or both)."""
    from windjoin.connectors.redis_client import spec_auth
    from windjoin.connectors.result_query import ResultStore

    redis_url = spec.sinks.redis.url if spec.sinks.redis is not None else None
    parquet_path = spec.sinks.parquet.path if spec.sinks.parquet is not None else None
    if redis_url is None and parquet_path is None:
        raise click.ClickException("the spec configures no sink (sinks.redis or sinks.parquet): nothing to query")
    try:
        return ResultStore(spec, redis_url, namespace, parquet_path, auth=spec_auth(spec.sinks.redis))
    except ValueError as err:
        raise click.ClickException(str(err)) from None


@click.command("proxy")
@SPEC_ARGUMENT
@click.option("--host", default="127.0.0.1", show_default=True, help="Interface to listen on.")
@click.option("--port", type=click.IntRange(min=0, max=65535), default=8080, show_default=True)
@click.option(
    "--queue-size",
    type=click.IntRange(min=1),
    default=64,
    show_default=True,
    help="Pending result chunks per stream subscriber before it counts as slow and is disconnected.",
)
@NAMESPACE_OPTION
def proxy(spec_path: Path, host: str, port: int, queue_size: int, namespace: str) -> None:
    """Serve one-time and continuous queries of SPEC's results over HTTP (OpenAPI at /docs)."""
    import uvicorn

    from windjoin.pipelines.proxy import create_app
    from windjoin.pipelines.proxy_feed import FeedConfig

    spec = load_spec_or_fail(spec_path)
    app = create_app(store_from_spec(spec, namespace), FeedConfig(queue_size=queue_size))
    click.echo(f"windjoin proxy: http://{host}:{port} (OpenAPI: /docs, metrics: /metrics)", err=True)
    uvicorn.run(app, host=host, port=port, log_level="info")
