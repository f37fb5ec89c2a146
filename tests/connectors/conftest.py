"""Fixtures of the connector tests: both result tiers on the session's Redis, laid out by the test module's
`tiers_layout` fixture."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from tests.connectors.tiers import Tiers, TiersLayout


@pytest.fixture
def tiers_factory(redis_url: str, tiers_layout: TiersLayout) -> Iterator[Callable[..., Tiers]]:
    """Makes Tiers (`make(retain_ms=100)`) and closes them all after the test."""
    made: list[Tiers] = []

    def make(retain_ms: int = 100) -> Tiers:
        made.append(Tiers(redis_url, tiers_layout, retain_ms))
        return made[-1]

    yield make
    for tiers in made:
        tiers.close()
