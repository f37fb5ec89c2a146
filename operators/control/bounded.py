"""The controller's arithmetic on reported numbers, kept finite: ratios capped, counts from ceilings capped.

A load report's numbers pass `load_entry_check`, but their quotients need not stay finite: a busy second over a
tiny interval, tuples over a tiny capacity. An infinite utilisation once reached `math.ceil` and crashed every
restart of the controller (OverflowError). Every division and ceiling a policy makes of reported numbers goes
through here, so a decision is always made of finite numbers.
"""

from __future__ import annotations

import math

MAX_RATIO = 1e12  # an occupancy or utilisation beyond this is overload beyond measure; products stay finite


def ratio(numerator: float, denominator: float) -> float:
    """numerator / denominator within [0, MAX_RATIO]; 0 when either is not positive (nothing measured) or NaN."""
    if not (numerator > 0 and denominator > 0):
        return 0.0
    try:
        return min(numerator / denominator, MAX_RATIO)
    except OverflowError:  # an int too large for a float
        return MAX_RATIO


def ceil_within(x: float, low: int, high: int) -> int:
    """ceil(x) within [low, high] (infinities included); ValueError for NaN, which no policy may decide by."""
    if math.isnan(x):
        raise ValueError("a policy computed NaN where it needs a count")
    if x >= high:
        return high
    return low if x <= low else math.ceil(x)
