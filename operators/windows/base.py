"""What a window kind is: which stored tuples a probe may meet, how far back state reaches, when a tuple can pair
no more, whether it needs event time, and what the job may do with its state.

A kind is a spec model (its `kind` tag and settings) whose methods answer those questions with plain arrays; the
join (`operators.join`), the job and the controller ask them instead of testing which kind a window is. A new
kind is one more module in this package that subclasses `WindowKind` and registers itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, NamedTuple

import numpy as np
from pydantic import BaseModel, ConfigDict


class Reach(NamedTuple):
    """Per probe, the closed range [lo, hi] a stored tuple's system column (`system_columns`) must lie in."""

    column: str
    lo: np.ndarray
    hi: np.ndarray


@dataclass(frozen=True)
class ProbeView:
    """What a kind reads of the tuples probing for partners (or of stored tuples whose partners are recalled).

    `first`: they belong to the task's first stream; `bounds`: the task's (lower, upper) on second.ts - first.ts
    (event-time kinds); `seen`: per tuple, the partner stream's arrivals before it (count windows only)."""

    ts: np.ndarray
    window_start: np.ndarray | None
    first: bool
    bounds: tuple[int, int] | None
    seen: np.ndarray | None = None


class WindowKind(BaseModel):
    """One kind of window (see the module docstring). The class attributes say what the job may do with it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: str
    event_time: ClassVar[bool] = True  # tuples carry event time: lateness, the watermark and expiry follow it
    counts_arrivals: ClassVar[bool] = False  # partners are a range of arrival numbers (sseq), not of time
    copies: ClassVar[bool] = False  # each tuple stands in windows of its own: results carry window_start/end
    task_bounds: ClassVar[bool] = False  # a task may give its own bounds (`TaskSpec.window`)
    n_way: ClassVar[bool] = False  # tasks of three or more streams (MJoin) run over it
    # What the job may do with a partition's state: why it may not, naming the kind (`operators.spec_support`).
    splits: ClassVar[str | None] = None  # why its tuples cannot be split over slots by key hash (None: they can)
    spreads: ClassVar[str | None] = None  # why its tuples cannot be stored at one slot and probed at several
    spills: ClassVar[str | None] = None  # why its tuples cannot be pushed to disk and cleaned up later
    pooled: ClassVar[bool] = True  # several partitions may share one window (their tuples are told apart)

    @property
    def bounds(self) -> tuple[int, int]:
        """(lower, upper): how far a partner's event time may lie from a tuple's, second.ts - first.ts."""
        raise ValueError(f"a {self.kind} window has no event-time bounds")

    def window_starts(self, ts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The windows each tuple stands in (`copies` kinds): (row of each copy, its window's start)."""
        rows = np.arange(len(ts))
        return rows, np.zeros(len(ts), dtype=np.int64)

    @property
    def window_ms(self) -> int:
        """A window's length (`copies` kinds): window_end - window_start."""
        raise ValueError(f"a {self.kind} window has no window length")

    def partners(self, probes: ProbeView) -> Reach:
        """Where the stored partners of each probe lie, besides having arrived before it."""
        raise NotImplementedError

    def closing(
        self, first: bool, bounds: tuple[int, int] | None, watermark_ms: int | None, count: int
    ) -> tuple[str, float] | None:
        """Which stored tuples of a task's first (or second) stream can pair no more: those whose column lies
        below the limit, (column, limit); None: none yet (no watermark). `count`: the stream's arrivals so far."""
        raise NotImplementedError

    def history_ms(self, bounds: tuple[int, int], second: bool) -> int:
        """How far below the watermark a stored tuple may still pair with a later one, for a task of these bounds
        (`second`: the tuple is of the task's second stream)."""
        lower, upper = bounds
        return -lower if second else upper
