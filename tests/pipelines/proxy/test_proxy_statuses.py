"""Each typed query error maps to the HTTP status clients have always seen (the proxy's one mapping)."""

from __future__ import annotations

from windjoin.operators.query import errors
from windjoin.pipelines.proxy.app import status_of


def test_every_query_error_type_has_its_status() -> None:
    assert status_of(errors.BadQuery("x")) == 400
    assert status_of(errors.QueryTooLarge("x")) == 400
    assert status_of(errors.NotFound("x")) == 404
    assert status_of(errors.Gone("x", cursor="c")) == 410
    assert status_of(errors.TryAgain("x")) == 503
    assert status_of(errors.Damaged("x")) == 502
