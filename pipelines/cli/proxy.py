"""`windjoin proxy`: serve the query proxy (one-time and continuous queries) over a spec's Redis and Parquet sinks."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from windjoin.operators.redis_namespace import DEFAULT_NAMESPACE
from windjoin.operators.spec import JoinSpec
from windjoin.pipelines.cli.options import SPEC_ARGUMENT, load_spec_or_fail
from windjoin.pipelines.proxy.config import (
    FEED_QUEUE_CHUNKS,
    FEED_QUEUE_MB,
    MAX_PAGE,
    MAX_PAGE_BYTES,
    METRICS_MODES,
    Access,
    Bounds,
    Limits,
    trusted_proxies,
)
from windjoin.pipelines.proxy.token_file import DEFAULT_CHECK_S, TokenFile

if TYPE_CHECKING:
    from windjoin.operators.query.cursors import CursorCodec

NAMESPACE_OPTION = click.option(
    "--namespace", default=DEFAULT_NAMESPACE, show_default=True, help="Key prefix the Redis sink writes under."
)


def store_from_spec(
    spec: JoinSpec,
    namespace: str = DEFAULT_NAMESPACE,
    redis_share: float = 1.0,
    bounds: Bounds | None = None,
    cursors: CursorCodec | None = None,
):  # -> ResultStore (lazily)
    """`ResultStore.from_spec`, its refusal as a command-line error; `redis_share`: the most of Redis' time its
    one-time queries take together; `bounds`: the bytes and the time budget of a page; `cursors`: signs and checks
    the cursors (None: a random key)."""
    from windjoin.connectors.results.result_query import ResultStore

    bounds = bounds or Bounds()
    try:
        return ResultStore.from_spec(
            spec,
            namespace,
            redis_share,
            page_bytes=bounds.max_page_bytes,
            time_budget_s=bounds.query_budget_ms / 1000,
            cursors=cursors,
        )
    except ValueError as err:
        raise click.ClickException(str(err)) from None


@click.command("proxy")
@SPEC_ARGUMENT
@click.option("--host", default="127.0.0.1", show_default=True, help="Interface to listen on.")
@click.option("--port", type=click.IntRange(min=0, max=65535), default=8080, show_default=True)
@click.option(
    "--queue-size",
    type=click.IntRange(min=1),
    default=FEED_QUEUE_CHUNKS,
    show_default=True,
    help="Pending result chunks per stream subscriber before it counts as slow and is disconnected.",
)
@click.option(
    "--queue-mb",
    type=click.IntRange(min=1, max=4096),
    default=FEED_QUEUE_MB,
    show_default=True,
    help="MiB of pending result rows per stream subscriber before it counts as slow and is disconnected (the "
    "subscribers of a task share them: about this much per task).",
)
@NAMESPACE_OPTION
@click.option(
    "--tokens-file",
    type=click.Path(dir_okay=False, path_type=Path),
    envvar="WINDJOIN_PROXY_TOKENS_FILE",
    help="YAML file of bearer tokens (SHA-256 hashes) and the tasks each may read (env WINDJOIN_PROXY_TOKENS_FILE).",
)
@click.option(
    "--tokens-check-s",
    type=click.FloatRange(min=0, max=3600),
    default=DEFAULT_CHECK_S,
    show_default=True,
    help="Look at most this often (seconds) whether the tokens file changed, and re-read it: revoked, added and "
    "expiring tokens take effect without a restart; a rewrite that does not parse keeps the last good tokens.",
)
@click.option(
    "--cursor-key-file",
    type=click.Path(dir_okay=False, path_type=Path),
    envvar="WINDJOIN_PROXY_CURSOR_KEY_FILE",
    help="File holding the key (32 to 4096 bytes, e.g. `openssl rand -hex 32`) cursors are signed with, the same "
    "for every replica: cursors then survive restarts and work on any replica. Default: a random key made at start "
    "(env WINDJOIN_PROXY_CURSOR_KEY_FILE).",
)
@click.option(
    "--previous-cursor-key-file",
    "previous_cursor_key_files",
    multiple=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="A key cursors were signed with before the --cursor-key-file one (repeatable): its cursors still verify and "
    "get 410 with the same cursor signed by the current key. Rotate by adding the new key here on every replica, "
    "then swapping the two files, then dropping this one once clients resumed.",
)
@click.option(
    "--insecure-no-auth", is_flag=True, help="Serve without authentication: anyone who reaches the port reads all."
)
@click.option(
    "--tls-cert-file", type=click.Path(exists=True, dir_okay=False), help="Serve HTTPS with this certificate."
)
@click.option("--tls-key-file", type=click.Path(exists=True, dir_okay=False), help="The certificate's private key.")
@click.option(
    "--rate-limit",
    type=click.FloatRange(min=0, min_open=True),
    default=20.0,
    show_default=True,
    help="Requests per second per token.",
)
@click.option(
    "--rate-burst", type=click.IntRange(min=1), default=40, show_default=True, help="Requests a token may send at once."
)
@click.option(
    "--max-streams",
    type=click.IntRange(min=1),
    default=4,
    show_default=True,
    help="Continuous queries a token may hold open.",
)
@click.option(
    "--max-span-ms",
    type=click.IntRange(min=1),
    default=Bounds.max_span_ms,
    show_default=True,
    help="Largest to - from of a one-time query.",
)
@click.option(
    "--max-limit",
    type=click.IntRange(min=1, max=MAX_PAGE),
    default=MAX_PAGE,
    show_default=True,
    help="Largest page (limit) of a one-time query.",
)
@click.option(
    "--max-page-bytes",
    type=click.IntRange(min=1024, max=MAX_PAGE_BYTES * 16),
    default=MAX_PAGE_BYTES,
    show_default=True,
    help="About the most bytes of row values one page of a one-time query holds (the first row always fits).",
)
@click.option(
    "--query-budget-ms",
    type=click.IntRange(min=100, max=600_000),
    default=Bounds.query_budget_ms,
    show_default=True,
    help="How long a one-time query reads one page; then it answers the rows known first and a cursor for the rest.",
)
@click.option(
    "--max-queries",
    type=click.IntRange(min=1, max=256),
    default=Bounds.max_queries,
    show_default=True,
    help="One-time queries read at once (the others wait); the proxy's memory stays about this many pages.",
)
@click.option(
    "--metrics",
    type=click.Choice(METRICS_MODES),
    default="token",
    show_default=True,
    help="/metrics: any valid token may read it (token), anyone (open), or not served (off).",
)
@click.option(
    "--redis-share",
    type=click.FloatRange(min=0, max=1, min_open=True),
    default=0.25,
    show_default=True,
    help="The most of Redis' time one-time queries take together (reads are paced; the job's writes keep the rest).",
)
@click.option(
    "--forwarded-allow-ips",
    envvar="WINDJOIN_PROXY_FORWARDED_ALLOW_IPS",
    default="",
    help="Reverse proxies (IP addresses or CIDR networks, comma-separated) whose X-Forwarded-For names the client: "
    "the rightmost address not among them (uvicorn's rule). Default: none, the connection's own address counts "
    "(env WINDJOIN_PROXY_FORWARDED_ALLOW_IPS).",
)
@click.option("--docs/--no-docs", default=True, show_default=True, help="Serve /docs, /redoc and /openapi.json.")
def proxy(
    spec_path: Path,
    host: str,
    port: int,
    queue_size: int,
    queue_mb: int,
    namespace: str,
    tokens_file: Path | None,
    tokens_check_s: float,
    cursor_key_file: Path | None,
    previous_cursor_key_files: tuple[Path, ...],
    insecure_no_auth: bool,
    tls_cert_file: str | None,
    tls_key_file: str | None,
    rate_limit: float,
    rate_burst: int,
    max_streams: int,
    max_span_ms: int,
    max_limit: int,
    max_page_bytes: int,
    query_budget_ms: int,
    max_queries: int,
    metrics: str,
    redis_share: float,
    forwarded_allow_ips: str,
    docs: bool,
) -> None:
    """Serve one-time and continuous queries of SPEC's results over HTTP(S) to holders of a token."""
    import uvicorn

    from windjoin.pipelines.proxy.app import create_app
    from windjoin.pipelines.proxy.cursor_key import cursor_codec
    from windjoin.pipelines.proxy.feed import FeedConfig

    spec = load_spec_or_fail(spec_path)
    if (tls_cert_file is None) != (tls_key_file is None):
        raise click.UsageError("--tls-cert-file and --tls-key-file go together (give both or neither)")
    if tokens_file is not None and insecure_no_auth:
        raise click.UsageError("--tokens-file and --insecure-no-auth exclude each other")
    if tokens_file is None and not insecure_no_auth:
        raise click.UsageError(
            "no --tokens-file (or WINDJOIN_PROXY_TOKENS_FILE): the proxy does not serve results without "
            "authentication; pass --insecure-no-auth to do so anyway"
        )
    try:
        tasks = [t.name for t in spec.tasks]
        tokens = None if tokens_file is None else TokenFile(tokens_file, tasks, tokens_check_s)
        access = Access(tokens, Limits(rate_limit, rate_burst, max_streams), metrics, docs)
        bounds = Bounds(max_span_ms, max_limit, max_page_bytes, query_budget_ms, max_queries)
        proxies = trusted_proxies(forwarded_allow_ips)
        cursors = cursor_codec(cursor_key_file, previous_cursor_key_files)
    except ValueError as err:
        raise click.ClickException(str(err)) from None
    if tokens is None:
        click.secho(
            "windjoin proxy: WARNING: AUTHENTICATION IS OFF (--insecure-no-auth): anyone who reaches "
            f"{host}:{port} reads every task's results",
            err=True,
            fg="red",
            bold=True,
        )
    app = create_app(
        store_from_spec(spec, namespace, redis_share, bounds, cursors),
        FeedConfig(queue_size=queue_size, queue_bytes=queue_mb << 20),
        access=access,
        bounds=bounds,
    )
    scheme = "https" if tls_cert_file else "http"
    click.echo(f"windjoin proxy: {scheme}://{host}:{port} (docs: {docs}, metrics: {metrics})", err=True)
    uvicorn.run(
        app,
        host=host,
        port=port,
        log_level="info",
        ssl_certfile=tls_cert_file,
        ssl_keyfile=tls_key_file,
        # uvicorn believes X-Forwarded-For from 127.0.0.1 unless told otherwise: anyone on loopback could pick
        # the client address (and with --insecure-no-auth a fresh rate-limit bucket per request)
        proxy_headers=bool(proxies),
        forwarded_allow_ips=proxies,
    )
