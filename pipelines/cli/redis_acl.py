"""`windjoin redis-acl`: the ACL file for a Redis you run yourself (the chart writes the bundled one's)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import click

from windjoin.operators.redis_acl import ROLES, acl_file, acl_users


@click.command("redis-acl")
@click.option(
    "--password-file",
    "password_files",
    multiple=True,
    required=True,
    metavar="COMPONENT=PATH",
    help=f"A user's password, read from a file (users: {', '.join(ROLES)}; admin loads the function library).",
)
@click.option("--namespace", default="windjoin", show_default=True, help="The key prefix the users are limited to.")
def redis_acl(password_files: tuple[str, ...], namespace: str) -> None:
    """Print a Redis ACL file (`aclfile`): the default user off, one user per component limited to its keys and
    commands, each with the SHA-256 of its password (the passwords themselves are not printed); with an `admin`
    password also the user that loads the function library (`windjoin redis-functions`)."""
    digests = {}
    for item in password_files:
        component, _, path = item.partition("=")
        if component not in ROLES or not path:
            raise click.BadParameter(f"expected COMPONENT=PATH with COMPONENT one of {list(ROLES)}, got {item!r}")
        try:
            password = Path(path).read_text(encoding="utf-8").rstrip("\r\n")
        except OSError as err:
            raise click.BadParameter(f"{path}: cannot read ({err.strerror})", param_hint="--password-file") from None
        if not password:
            raise click.BadParameter(f"{path}: empty password", param_hint="--password-file")
        digests[component] = hashlib.sha256(password.encode()).hexdigest()
    try:
        click.echo(acl_file(acl_users(digests, namespace)), nl=False)
    except ValueError as err:
        raise click.BadParameter(str(err), param_hint="--namespace") from None
