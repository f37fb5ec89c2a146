"""The one way every component builds its Redis client: a URL without secrets plus credentials kept apart.

A password in a URL ends up in ConfigMaps, pod arguments and logs. So the URL names only the server
(`redis://host:6379/0`, or `rediss://` for TLS) and `RedisAuth` says where the credentials are: a user name, a
password read from a file (a mounted Secret) or from an environment variable, and a CA file for TLS. The password
is read when a client is built, on whichever process builds it (driver or executor), and never stored in an
object that Spark ships to tasks.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import redis

from windjoin.connectors.secret_files import read_secret
from windjoin.operators.url_secrets import secret_query_keys

ENV_USERNAME = "WINDJOIN_REDIS_USERNAME"
ENV_PASSWORD_FILE = "WINDJOIN_REDIS_PASSWORD_FILE"
ENV_PASSWORD = "WINDJOIN_REDIS_PASSWORD"
ENV_CA_FILE = "WINDJOIN_REDIS_CA_FILE"


class RedisAuthError(ValueError):
    """Redis credentials that cannot be used; the message names the key or variable."""


@dataclass(frozen=True)
class RedisAuth:
    """Where a component's Redis credentials come from (none of the fields is a secret itself)."""

    username: str | None = None
    password_file: str | None = None
    password_env: str | None = None  # the name of an environment variable holding the password
    ca_file: str | None = None

    def __post_init__(self) -> None:
        if self.password_file and self.password_env:
            raise RedisAuthError("redis: give password_file or password_env, not both")

    def password(self) -> str | None:
        """The password, read now (None: no password)."""
        return read_secret(self.password_file, self.password_env, "redis", RedisAuthError)

    @staticmethod
    def from_env(environ: Mapping[str, str] | None = None) -> RedisAuth:
        """Credentials from WINDJOIN_REDIS_USERNAME, WINDJOIN_REDIS_PASSWORD_FILE or WINDJOIN_REDIS_PASSWORD,
        WINDJOIN_REDIS_CA_FILE (for components started without a spec: proxy, controller, query CLI)."""
        env = os.environ if environ is None else environ
        return RedisAuth(
            username=env.get(ENV_USERNAME) or None,
            password_file=env.get(ENV_PASSWORD_FILE) or None,
            password_env=ENV_PASSWORD if env.get(ENV_PASSWORD) and not env.get(ENV_PASSWORD_FILE) else None,
            ca_file=env.get(ENV_CA_FILE) or None,
        )

    def or_env(self) -> RedisAuth:
        """These credentials when any is set, else those of the environment (`from_env`)."""
        return self if self != RedisAuth() else RedisAuth.from_env()


def check_url(url: str) -> str:
    """Refuse a URL that carries a password: it would land in ConfigMaps, arguments and logs."""
    parts = urlsplit(url)
    if parts.scheme not in ("redis", "rediss", "unix"):
        raise RedisAuthError(f"redis url {url!r}: the scheme must be redis://, rediss:// (TLS) or unix://")
    if parts.password or secret_query_keys(url):  # redis-py also logs in with ?password=
        raise RedisAuthError(
            "redis url: holds a password; give the server only (redis://host:port/db) and the password by "
            "password_file or WINDJOIN_REDIS_PASSWORD_FILE"
        )
    return url


def redis_client(url: str, auth: RedisAuth | None = None, **options: Any) -> redis.Redis:
    """A client for `url` with `auth`'s credentials (None: the environment's, `RedisAuth.from_env`), and its CA when
    the URL is rediss://."""
    check_url(url)
    auth = RedisAuth.from_env() if auth is None else auth
    extra: dict[str, Any] = {}
    if auth.username:
        extra["username"] = auth.username
    password = auth.password()
    if password is not None:
        extra["password"] = password
    if auth.ca_file:
        if not url.startswith("rediss://"):
            raise RedisAuthError(f"redis.ca_file is set but the url {url!r} is not rediss:// (TLS)")
        extra.update(ssl_ca_certs=auth.ca_file, ssl_cert_reqs="required")
    return redis.Redis.from_url(url, **extra, **options)


def spec_auth(redis_spec: Any) -> RedisAuth:
    """The credentials of a spec's `sinks.redis` (username, password_file/password_env, ca_file), or, when it gives
    none, the environment's (so each component of a deployment logs in as its own user with one shared spec)."""
    if redis_spec is None:
        return RedisAuth.from_env()
    auth = RedisAuth(redis_spec.username, redis_spec.password_file, redis_spec.password_env, redis_spec.ca_file)
    return auth.or_env()
