"""Moved to `windjoin.operators.result_table` (the result layout is pure logic); this name stays only for
`pipelines/job/join_state.py`, whose owner updates its import, after which this module goes."""

from windjoin.operators.result_table import ARROW_TYPES

__all__ = ["ARROW_TYPES"]
