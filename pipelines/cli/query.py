"""`windjoin query`: one-time and continuous queries against a running query proxy, printed as a table or JSON lines.

`results` pages through a one-time query with the proxy's cursor (or, given a spec file instead of a URL, asks
the spec's Redis and Parquet tiers directly; with Redis unreachable, Parquet answers alone, with a warning).
`follow` reads a continuous query's server-sent events and, when the stream ends (slow consumer, proxy restart,
dropped connection), reconnects with the last cursor; when the feed lost results after it (410: Redis restarted
empty, or trimmed its feed), it follows the 410's cursor, which reads them from Parquet first. Every result is
printed once, in commit order.
"""

from __future__ import annotations

import os
import ssl
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click
import httpx
import orjson

from windjoin.connectors.redis.damage import PREFIX as DAMAGED
from windjoin.operators.query.cursors import ROTATED

DAMAGED_STATUS = 502  # the proxy's answer for stored results that break their own index (pipelines/proxy/app.py)

RETRIES = 5  # consecutive failed connects before `follow` gives up
DEFAULT_PAGE = 1000


@click.group("query")
def query() -> None:
    """One-time and continuous queries of join results through the query proxy (`windjoin proxy`)."""


WHERE_OPTION = click.option(
    "--where",
    multiple=True,
    metavar="COND",
    help='Condition on a result field, repeatable (all must hold): "R.k=5", "R.z!=abc", "S.t>=100", "R.k in 1,2,3".',
)
FIELDS_OPTION = click.option("--fields", metavar="F1,F2", help='Fields to print, e.g. "R.k,S.t,result_time".')
JSON_OPTION = click.option("--json", "as_json", is_flag=True, help="Print JSON lines (one row per line).")
TOKEN_ENV = "WINDJOIN_TOKEN"
TOKEN_FILE_OPTION = click.option(
    "--token-file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    envvar="WINDJOIN_TOKEN_FILE",
    help=f"File holding the proxy's bearer token (env WINDJOIN_TOKEN_FILE; or the token itself in env {TOKEN_ENV}).",
)
CA_FILE_OPTION = click.option(
    "--ca-file",
    type=click.Path(exists=True, dir_okay=False),
    envvar="WINDJOIN_CA_FILE",
    help="CA certificate(s) to verify an https:// proxy with (env WINDJOIN_CA_FILE; default: the system's).",
)


class Connection:
    """How to reach the proxy: its base URL, the bearer token (from a file or the environment, never an argument)
    and the certificates to verify it with."""

    def __init__(self, url: str, token_file: Path | None, ca_file: str | None) -> None:
        self.url = url.rstrip("/")
        if token_file is not None:
            try:
                token = token_file.read_text().strip()
            except OSError as err:
                raise click.ClickException(f"--token-file {token_file}: cannot be read ({err})") from None
            if not token:
                raise click.ClickException(f"--token-file {token_file}: empty (it holds the token, one line)")
        else:
            token = os.environ.get(TOKEN_ENV, "").strip()
        self.headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.verify: ssl.SSLContext | bool = ssl.create_default_context(cafile=ca_file) if ca_file else True

    def client(self, timeout: httpx.Timeout | float) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=timeout, headers=self.headers, verify=self.verify)


@query.command("results")
@click.argument("source", metavar="URL-or-SPEC")
@click.argument("task")
@click.option("--from", "t_from", type=int, required=True, help="Span start: result time, epoch ms.")
@click.option("--to", "t_to", type=int, required=True, help="Span end (inclusive): result time, epoch ms.")
@WHERE_OPTION
@FIELDS_OPTION
@click.option("--limit", type=click.IntRange(min=1), help="Print at most this many rows (default: all).")
@click.option("--page-size", type=click.IntRange(min=1), default=DEFAULT_PAGE, show_default=True)
@click.option("--namespace", default="windjoin", show_default=True, help="With a SPEC: the Redis sink's key prefix.")
@JSON_OPTION
@TOKEN_FILE_OPTION
@CA_FILE_OPTION
def results(
    source: str,
    task: str,
    t_from: int,
    t_to: int,
    where: tuple[str, ...],
    fields: str | None,
    limit: int | None,
    page_size: int,
    namespace: str,
    as_json: bool,
    token_file: Path | None,
    ca_file: str | None,
) -> None:
    """Results of TASK with result time in [--from, --to], in (result_time, batch_id, row) order.

    URL-or-SPEC: the proxy's base URL (http://host:port), or a spec file to read its sinks directly.
    """
    if source.startswith(("http://", "https://")):
        connection = Connection(source, token_file, ca_file)
        pages = _http_pages(connection, task, t_from, t_to, list(where), fields, page_size)
    else:
        pages = _store_pages(Path(source), namespace, task, t_from, t_to, list(where), fields, page_size)
    printer = RowPrinter(as_json)
    for rows in pages:
        if limit is not None:
            rows = rows[: limit - printer.count]
        printer.print(rows)
        if limit is not None and printer.count >= limit:
            break
    printer.finish()
    click.echo(f"{printer.count} rows", err=True)


@query.command("follow")
@click.argument("url")
@click.argument("task")
@WHERE_OPTION
@FIELDS_OPTION
@click.option("--from", "t_from", type=int, help="Start with results emitted at or after this time (epoch ms).")
@click.option("--cursor", help="Resume after this cursor (printed on exit).")
@click.option(
    "--max-rows",
    type=click.IntRange(min=1),
    help="Stop once this many rows were printed, at the end of an event (default: run until ^C).",
)
@JSON_OPTION
@TOKEN_FILE_OPTION
@CA_FILE_OPTION
def follow(
    url: str,
    task: str,
    where: tuple[str, ...],
    fields: str | None,
    t_from: int | None,
    cursor: str | None,
    max_rows: int | None,
    as_json: bool,
    token_file: Path | None,
    ca_file: str | None,
) -> None:
    """New results of TASK as they are committed (a continuous query), from now, --from or --cursor."""
    printer = RowPrinter(as_json)
    stream = FollowStream(Connection(url, token_file, ca_file), task, list(where), fields, t_from, cursor)
    try:
        for rows in stream.batches():
            printer.print(rows)  # whole events: the cursor printed on exit resumes right after the last row shown
            if max_rows is not None and printer.count >= max_rows:
                break
    except KeyboardInterrupt:
        pass
    finally:
        printer.finish()
        click.echo(f"{printer.count} rows; resume with --cursor {stream.cursor}", err=True)


def _http_pages(
    connection: Connection, task: str, t_from: int, t_to: int, where: list[str], fields: str | None, page_size: int
) -> Iterator[list[dict[str, Any]]]:
    params: dict[str, Any] = {"from": t_from, "to": t_to, "where": where, "limit": page_size}
    if fields:
        params["fields"] = fields
    with connection.client(timeout=60) as client:
        refusals = 0
        while True:
            try:
                response = client.get(f"/v1/tasks/{task}/results", params=params)
            except httpx.TransportError as err:
                raise click.ClickException(f"{connection.url}: {err}") from None
            if response.status_code == 429 and refusals < RETRIES:
                refusals += 1
                _wait_as_told(response)
                continue
            refusals = 0
            body = _json_or_fail(response)
            yield body["rows"]
            if not body["next_cursor"]:
                return
            params["cursor"] = body["next_cursor"]


def _store_pages(
    spec_path: Path,
    namespace: str,
    task: str,
    t_from: int,
    t_to: int,
    where: list[str],
    fields: str | None,
    page_size: int,
) -> Iterator[list[dict[str, Any]]]:
    """Pages read from the spec's sinks (`connectors.results.result_pages`: Parquet alone when Redis fails), its errors
    as command-line errors."""
    import redis

    from windjoin.connectors.results.result_pages import result_pages
    from windjoin.operators.query.errors import QueryError
    from windjoin.pipelines.cli.options import load_spec_or_fail

    if not spec_path.is_file():
        raise click.BadParameter(f"{spec_path} is neither an http(s):// URL nor a spec file", param_hint="URL-or-SPEC")
    spec = load_spec_or_fail(spec_path)
    names = [name.strip() for name in fields.split(",")] if fields else None
    where_from = spec.sinks.redis.url if spec.sinks.redis is not None else "Parquet"
    try:
        yield from result_pages(
            spec,
            task,
            t_from,
            t_to,
            where,
            names,
            page_size,
            namespace,
            lambda why: click.echo(f"warning: {why}", err=True),
        )
    except QueryError as err:
        raise click.ClickException(str(err)) from None
    except ValueError as err:  # no queryable sink
        raise click.ClickException(str(err)) from None
    except (redis.RedisError, OSError) as err:
        raise click.ClickException(f"cannot read the results at {where_from}: {err}") from None


def _wait_as_told(response: httpx.Response) -> None:
    """Sleep for a 429's Retry-After (seconds; at most a minute), saying so."""
    try:
        wait = min(max(float(response.headers.get("Retry-After", "1")), 0.0), 60.0)
    except ValueError:
        wait = 1.0
    click.echo(f"the proxy asks to slow down (429); retrying in {wait:g} s", err=True)
    time.sleep(wait)


def _json_or_fail(response: httpx.Response) -> Any:
    if response.status_code != 200:
        try:
            detail = response.json().get("detail", response.text)
        except ValueError:
            detail = response.text
        raise click.ClickException(f"{response.status_code} from {response.request.url}: {detail}")
    return response.json()


class FollowStream:
    """A continuous query's rows, reconnecting with the last event id (the cursor) whenever the stream ends."""

    def __init__(
        self,
        connection: Connection,
        task: str,
        where: list[str],
        fields: str | None,
        t_from: int | None,
        cursor: str | None,
    ) -> None:
        self.connection = connection
        self.url = connection.url
        self.task = task
        self.params: dict[str, Any] = {"where": where}
        if fields:
            self.params["fields"] = fields
        self.t_from = t_from
        self.cursor = cursor

    def batches(self) -> Iterator[list[dict[str, Any]]]:
        failures = 0
        with self.connection.client(timeout=httpx.Timeout(60, read=None)) as client:
            while True:
                params = dict(self.params)
                if self.cursor:
                    params["cursor"] = self.cursor
                elif self.t_from is not None:
                    params["from"] = self.t_from
                try:
                    with client.stream("GET", f"/v1/tasks/{self.task}/stream", params=params) as response:
                        if response.status_code != 200:
                            response.read()
                            if self._resumable(response):
                                continue
                            if response.status_code == 429 and failures < RETRIES:
                                failures += 1
                                _wait_as_told(response)
                                continue
                            _json_or_fail(response)
                        failures = 0
                        for event, event_id, data in sse_events(response.iter_lines()):
                            if event == "ready":
                                self.cursor = event_id or self.cursor
                            elif event == "results":
                                self.cursor = event_id or self.cursor
                                yield orjson.loads(data)
                            elif event == "end":
                                end = orjson.loads(data)
                                self.cursor = end.get("cursor") or self.cursor
                                click.echo(f"stream ended ({end.get('error')}); resuming", err=True)
                                break
                except httpx.TransportError as err:
                    failures += 1
                    if failures > RETRIES:
                        raise click.ClickException(f"{self.url}: {err}") from None
                    click.echo(f"connection lost ({err}); reconnecting", err=True)
                    time.sleep(min(2**failures * 0.1, 5))

    def _resumable(self, response: httpx.Response) -> bool:
        """A 410 with a cursor (the feed lost results after ours and Parquet holds them, or the cursor key was
        rotated), or a damaged piece's 502 with the cursor past it (its rows are not served: said on stderr):
        follow its cursor."""
        if response.status_code not in (410, DAMAGED_STATUS):
            return False
        try:
            body = response.json()
        except ValueError:
            return False
        if not isinstance(body, dict) or not body.get("cursor"):
            return False
        detail = str(body.get("detail", ""))
        if response.status_code == DAMAGED_STATUS and not detail.startswith(DAMAGED):
            return False
        if response.status_code == DAMAGED_STATUS:
            how = "resuming past it"
        else:
            how = "resuming with the current key" if ROTATED in detail else "resuming from Parquet"
        click.echo(f"{detail}: {how}", err=True)
        self.cursor = body["cursor"]
        return True


def sse_events(lines: Iterator[str]) -> Iterator[tuple[str, str | None, str]]:
    """(event, id, data) of each server-sent event in a stream of lines (comments and pings skipped)."""
    event, event_id, data = "message", None, []
    for line in lines:
        if not line:
            if data:
                yield event, event_id, "\n".join(data)
            event, event_id, data = "message", None, []
            continue
        if line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "event":
            event = value
        elif name == "id":
            event_id = value
        elif name == "data":
            data.append(value)


class RowPrinter:
    """Rows as JSON lines, or as a text table whose columns come from the first rows (nested fields flattened)."""

    def __init__(self, as_json: bool, out: Any = None) -> None:
        self.as_json = as_json
        self.out = out or sys.stdout
        self.count = 0
        self.columns: list[str] | None = None
        self.widths: list[int] = []

    def print(self, rows: list[dict[str, Any]]) -> None:
        if not rows:
            return
        if self.as_json:
            self.out.write(b"".join(orjson.dumps(r, option=orjson.OPT_APPEND_NEWLINE) for r in rows).decode())
        else:
            flat = [flatten(r) for r in rows]
            if self.columns is None:
                self.columns = list(flat[0])
                cells = [[_cell(r.get(c)) for c in self.columns] for r in flat]
                self.widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(self.columns)]
                self._line(self.columns)
                self._line(["-" * w for w in self.widths])
            for r in flat:
                self._line([_cell(r.get(c)) for c in self.columns])
        self.out.flush()
        self.count += len(rows)

    def _line(self, cells: list[str]) -> None:
        self.out.write("  ".join(c.rjust(w) for c, w in zip(cells, self.widths, strict=True)).rstrip() + "\n")

    def finish(self) -> None:
        self.out.flush()


def flatten(row: dict[str, Any]) -> dict[str, Any]:
    """`{"R": {"k": 1}, "batch_id": 3}` -> `{"R.k": 1, "batch_id": 3}`."""
    flat: dict[str, Any] = {}
    for key, value in row.items():
        if isinstance(value, dict):
            flat.update({f"{key}.{inner}": v for inner, v in value.items()})
        else:
            flat[key] = value
    return flat


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
