"""Where results go, as the spec names it: a local path or a URL of an object store. Credentials never ride in it:
a spec is a ConfigMap's content and shows up in logs, so a URL with a user, a password or a secret option
(`url_secrets`: keys, tokens, Azure SAS, `client_secret`) is refused here, naming the key.

Azure's `abfs://container@account.dfs.core.windows.net/path` names the container where other URLs put a user:
for the Azure schemes that part is accepted (a password after it is not)."""

from __future__ import annotations

from urllib.parse import urlsplit

from windjoin.operators.url_secrets import secret_query_keys

CONTAINER_SCHEMES = ("abfs", "abfss", "az")  # scheme://container@account.../path


def check_results_url(url: str, key: str) -> str:
    """`url` unchanged when it holds no credentials; ValueError naming `key` and what is accepted otherwise."""
    if "://" not in url:
        return url
    parts = urlsplit(url)
    container = parts.scheme.lower() in CONTAINER_SCHEMES
    if parts.password is not None or (parts.username and not container):
        raise ValueError(
            f"{key}: a URL with credentials is refused; give them in the environment or a mounted file (accepted: "
            "scheme://bucket/prefix, or abfs://container@account.dfs.core.windows.net/prefix)"
        )
    secret = secret_query_keys(url)
    if secret:
        names = ", ".join(secret)
        raise ValueError(
            f"{key}: credentials in the URL ({names}) are refused; give them in the environment (accepted: query "
            "options other than credentials)"
        )
    return url
