"""Trying a spec's join in-process: feed it events, and check what it emits against a brute-force reference.

    from windjoin.operators.testing import as_multiset, join_events, oracle_mjoin

    joined = join_events(spec, events)              # the operator, chunk by chunk, in arrival order
    expected, expected_late = oracle_mjoin(spec_dict, events)   # nested loops over plain lists
    assert as_multiset(joined.rows(spec)) == as_multiset(expected) and joined.late == expected_late

`feed` drives the operator (`windjoin join-file` runs on it); `oracle` re-reads the spec's meaning on its own,
importing nothing of the operator, so the two agreeing says something.
"""

from windjoin.operators.testing.feed import EventFeed, Fed, Joined, join_events
from windjoin.operators.testing.oracle import as_multiset, oracle_join, oracle_mjoin

__all__ = ["EventFeed", "Fed", "Joined", "as_multiset", "join_events", "oracle_join", "oracle_mjoin"]
