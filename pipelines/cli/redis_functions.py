"""`windjoin redis-functions`: the function library for a Redis you run yourself (the chart loads the bundled one's)."""

from __future__ import annotations

import click

from windjoin.connectors.redis.functions import LIBRARY


@click.command("redis-functions")
def redis_functions() -> None:
    """Print the windjoin Redis Functions library; its users may call only these functions, so load it as the
    Redis' administrator before starting the job: `windjoin redis-functions | redis-cli --user ADMIN
    -x FUNCTION LOAD REPLACE` (again after each windjoin upgrade)."""
    click.echo(LIBRARY, nl=False)
