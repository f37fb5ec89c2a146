"""A Redis URL given outside a spec (the proxy's, the controller's --redis-url) cannot carry a password in its
query either (issue 47): redis-py logs in with `?password=`."""

from __future__ import annotations

import pytest

from windjoin.connectors.redis.client import RedisAuthError, check_url


@pytest.mark.parametrize("url", ["redis://h:6379/0?password=pw", "rediss://h:6379/0?ssl_password=pw"])
def test_a_password_in_the_query_is_refused(url: str) -> None:
    with pytest.raises(RedisAuthError, match="redis url: holds a password"):
        check_url(url)
    assert check_url("redis://h:6379/0?socket_timeout=5") == "redis://h:6379/0?socket_timeout=5"
