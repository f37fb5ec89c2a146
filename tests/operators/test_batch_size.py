"""Batch sizing for a latency target (operators.batch_size): the cost fit and the size it chooses."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from windjoin.operators.batch_size import MIN_ROWS, fit_batch_cost, next_batch_rows, target_rows


def test_the_fit_recovers_fixed_and_per_record_costs() -> None:
    samples = [(n, 0.4 + 5e-6 * n) for n in (1_000, 20_000, 5_000, 60_000, 8_000)]
    fixed, per_row = fit_batch_cost(samples)
    assert abs(fixed - 0.4) < 1e-6 and abs(per_row - 5e-6) < 1e-9


def test_too_few_batches_keep_the_record_cap() -> None:
    assert fit_batch_cost([(100, 0.5)] * 3) is None
    assert next_batch_rows(1000, [(100, 0.5)] * 3, waiting=10**6, max_rows=50_000) == 50_000


@given(
    fixed=st.floats(0.05, 0.9),
    per_row=st.floats(1e-7, 1e-4),
    target_ms=st.integers(200, 20_000),
)
def test_a_batch_of_the_target_size_fits_half_the_target(fixed: float, per_row: float, target_ms: int) -> None:
    rows = target_rows(target_ms, (fixed, per_row))
    assert rows >= MIN_ROWS
    if rows > MIN_ROWS:  # delay ~ two batch times: the batch takes at most half the target
        assert fixed + per_row * rows <= target_ms / 2000 + 1e-9


def test_keeping_up_takes_the_target_size_and_behind_grows_from_the_last_batch() -> None:
    samples = [(n, 0.3 + 1e-5 * n) for n in (1_000, 3_000, 2_000, 4_000)]  # n* = (0.5 - 0.3) / 1e-5 = 20,000
    assert next_batch_rows(1000, samples, waiting=5_000, max_rows=100_000) == 20_000
    behind = [*samples, (30_000, 0.6)]
    assert next_batch_rows(1000, behind, waiting=500_000, max_rows=100_000) == 60_000
    assert next_batch_rows(1000, behind, waiting=500_000, max_rows=40_000) == 40_000
    assert next_batch_rows(1000, behind, waiting=10_000, max_rows=100_000) < 30_000  # caught up: back to n*


def test_sizes_that_do_not_differ_overstate_the_per_record_cost() -> None:
    fixed, per_row = fit_batch_cost([(10_000, 0.5), (10_100, 0.52), (9_900, 0.51), (10_000, 0.5)])
    assert fixed == 0.5 and per_row >= 0.02 / 10_100
