"""Which query parameters of a URL carry a secret: a spec or a command line shows up in ConfigMaps and logs, so a
URL naming one is refused wherever a URL is read.

Secret by name: any parameter whose name holds "password", "secret", "token" or "credential" (redis-py reads
`?password=` as the login; `client_secret`, `session_token`), the object stores' keys, and Azure's shared access
signature (`sig` with its fields `se`, `sp`, `sv`, ...: a SAS token is the signature and its scope together).
"""

from __future__ import annotations

from urllib.parse import parse_qsl, urlsplit

SECRET_WORDS = ("password", "secret", "token", "credential")
SECRET_OPTIONS = ("access_key", "account_key", "sas", "signature")
AZURE_SAS = ("sig", "se", "st", "sp", "sv", "spr", "srt", "ss", "sr", "si", "sip", "skoid", "sktid", "skt", "ske")


def secret_query_keys(url: str) -> list[str]:
    """The names of `url`'s query parameters that carry a secret, sorted ([] when none)."""
    names = {name for name, _ in parse_qsl(urlsplit(url).query, keep_blank_values=True)}
    return sorted(n for n in names if _secret(n.lower()))


def _secret(name: str) -> bool:
    return any(word in name for word in SECRET_WORDS) or name in SECRET_OPTIONS or name in AZURE_SAS
