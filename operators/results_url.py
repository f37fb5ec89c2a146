"""Where results go, as the spec names it: a local path or a URL of an object store. Credentials never ride in it:
a spec is a ConfigMap's content and shows up in logs, so a URL with a user, a password or a secret option is
refused here, naming the key."""

from __future__ import annotations

from urllib.parse import parse_qsl, urlsplit

SECRET_OPTIONS = ("access_key", "secret_key", "session_token", "credential", "sas_token", "account_key")


def check_results_url(url: str, key: str) -> str:
    """`url` unchanged when it holds no credentials; ValueError naming `key` otherwise."""
    if "://" not in url:
        return url
    parts = urlsplit(url)
    if parts.username or parts.password:
        raise ValueError(f"{key}: a URL with credentials is refused; give them in the environment or a mounted file")
    secret = sorted(k for k, _ in parse_qsl(parts.query) if k.lower() in SECRET_OPTIONS)
    if secret:
        names = ", ".join(secret)
        raise ValueError(f"{key}: credentials in the URL ({names}) are refused; give them in the environment")
    return url
