"""The control loop's epoch: the load reports since the last epoch in, one recorded decision out.

Each epoch reads the join job's load reports published after the previous epoch's cursor, averages them into
the epoch's load (`control.load.aggregate_epoch`), runs one control step (`control.epoch.control_step`:
shed ratio, slot count, fine tuning into mini-groups, reorganisation moves) and records the decision (hash +
stream in Redis, see `connectors.redis.control_decisions`) together with the new cursor, so a restarted controller
resumes from the recorded state and never counts a report twice. An epoch with no reports decides nothing.
A malformed report entry (`operators.control.load_entry_check`) is skipped with a warning naming its id and the reason,
counted (`on_skip`, the metrics' counter), and read past: the cursor recorded with the next decision is beyond it.
An epoch whose computation fails all the same (a bug, a number no check foresaw) is recorded as failed, with the
reason, under the next epoch number and the previous decision's state, the cursor past its reports, and counted
(`on_fail`): a report can never make the controller crash-loop on it.
Applying a decision in the join job (the routing version with its state transfer, the slot count, the shed
ratio) is not done here.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from windjoin.connectors.redis.control_decisions import DecisionStore, encode_decision, state_from_fields
from windjoin.connectors.redis.control_decisions import recorded_moves as recorded_moves  # re-exported for readers
from windjoin.connectors.redis.load_reports import LoadReports
from windjoin.operators.control.config import ControlConfig
from windjoin.operators.control.epoch import Decision, control_step
from windjoin.operators.control.epoch_state import ControlState
from windjoin.operators.control.load import aggregate_epoch
from windjoin.operators.control.load_entries import LoadEntry, fine_histograms, fine_work, shed_records, slot_batches
from windjoin.operators.control.load_entry_check import ReportBounds
from windjoin.operators.control.memory import SpillRequest
from windjoin.operators.control.memory_history import MemoryHistory
from windjoin.operators.control.reorganise import Classes, classify

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class EpochOutcome:
    """One decided epoch: the decision, the load it came from, and the cursor after the reports it used."""

    decision: Decision
    batches: int
    occupancy: dict[int, float]
    classes: Classes
    cursor: str
    shed: int = 0  # records the adapter shed in the epoch's batches (offered load = joined + shed)

    def line(self) -> str:
        """One line for the console."""
        d, state = self.decision, self.decision.state
        occupancy = " ".join(f"{s}:{f:.2f}" for s, f in sorted(self.occupancy.items()))
        moves = ", ".join(f"p{m.group.key} {m.source}->{m.target}" for m in d.moves) or "none"
        hot = f", hot {list(d.hot)}" if d.hot else ""
        hot += f", held {' '.join('p' + g.key for g in d.held)}" if d.held else ""
        units = state.routing.groups()
        recut = " ".join(f"p{p}:{sum(g.partition == p for g in units)}" for p in d.retuned)
        fine = f", re-cut into units {recut}" if recut else ""
        request = state.spill
        if request is not None and request.version == state.epoch:  # asked this epoch
            fine += f", push {list(request.spill)} clean up {list(request.cleanup)}"
        return (
            f"epoch {state.epoch}: {self.batches} batches, tau {d.tau:.3f}, occupancy {occupancy}, "
            f"suppliers {list(self.classes.suppliers)} consumers {list(self.classes.consumers)}, moves {moves}{hot}"
            f"{fine}, "
            f"routing v{state.routing.version}, slots {state.slots}, shed ratio {state.shed_ratio:.3f}"
        )


@dataclass(frozen=True)
class EpochFailed:
    """An epoch whose load reports gave no decision (the reason names the error): recorded with `failed`, the
    previous decision holding, the cursor past its reports."""

    epoch: int
    reason: str
    cursor: str

    def line(self) -> str:
        """One line for the console."""
        return f"epoch {self.epoch}: failed, the last decision holds ({self.reason})"


class Controller:
    """Runs epochs over one job's load reports; resumes from the latest recorded decision when there is one."""

    def __init__(
        self,
        reports: LoadReports,
        decisions: DecisionStore,
        config: ControlConfig,
        partitions: int,
        slots: int,
        clock: Callable[[], float] = time.time,
        arrivals: Callable[[], int] | None = None,
        on_skip: Callable[[str, str], None] | None = None,
        on_fail: Callable[[int, str], None] | None = None,
    ) -> None:
        self.reports, self.decisions, self.config, self.clock = reports, decisions, config, clock
        self.on_skip = on_skip  # called with (entry id, reason) of each load report entry skipped
        self.on_fail = on_fail  # called with (epoch, reason) of each epoch that failed
        # Records appended to the input topics so far (`connectors.kafka.arrivals`), for `measure: arrivals`:
        # read at every decided epoch, the difference over the time between readings is the arrival rate.
        self.arrivals = arrivals
        self.arrived = (arrivals(), clock()) if arrivals is not None else None
        self.memory = MemoryHistory()  # paper 004's per-group totals, for `memory.enabled`
        recorded = decisions.latest()
        if recorded is None:
            self.state, self.cursor = ControlState.initial(partitions, slots), "0-0"
        else:
            self.state, self.cursor = state_from_fields(recorded)
            if self.state.routing.partitions != partitions:
                raise ValueError(
                    f"the recorded decision routes {self.state.routing.partitions} partitions but the spec has "
                    f"{partitions}: use another namespace for this job"
                )
        # the job reports its own slots (indexes below the spec's count), whatever count the controller wants
        self.bounds = ReportBounds(partitions, max(slots, self.state.slots))

    def step(self) -> EpochOutcome | EpochFailed | None:
        """One epoch over the reports published since the last: its decision, or EpochFailed when no decision could
        be made of them (recorded so; the previous decision holds); None (nothing recorded) when there were none."""
        read = self.reports.scan(after=self.cursor, bounds=self.bounds)
        for entry_id, reason in read.skipped:
            log.warning("load report entry %s skipped: %s", entry_id, reason)
            if self.on_skip is not None:
                self.on_skip(entry_id, reason)
        entries = read.entries
        if not entries:
            self.cursor = read.last_id or self.cursor  # past skipped entries; recorded with the next decision
            return None
        cursor, arrival_rate = read.last_id or self.cursor, self._arrival_rate()
        try:
            outcome = self._decide(entries, cursor, arrival_rate)
            fields = decision_fields(outcome, self.clock())
        except Exception as err:  # any bug or number a report brings: this epoch fails, the next ones go on
            log.exception("epoch %d failed: no decision from its load reports", self.state.epoch + 1)
            return self._fail(cursor, f"{type(err).__name__}: {err}"[:500])
        self.decisions.record(fields)
        self.state, self.cursor = outcome.decision.state, outcome.cursor
        return outcome

    def _decide(self, entries: list[LoadEntry], cursor: str, arrival_rate: float | None) -> EpochOutcome:
        """The epoch's decision from its load entries (pure but for the memory history it folds them into)."""
        r = self.config.reorganisation
        load = aggregate_epoch(
            slot_batches(entries), range(self.state.slots), kind=r.occupancy, backlog_capacity=r.backlog_capacity
        )
        occupancy = {s: load.occupancy.get(s, 0.0) for s in range(self.state.slots)}
        classes = classify(occupancy, r.th_sup, r.th_con)
        shed = shed_records(entries)
        seconds = sum({e.batch_id: e.interval_s for e in entries}.values())  # a replayed batch counts once
        fine = fine_histograms(entries) if self.config.fine_tuning.enabled else None
        memory = None
        if self.config.memory.enabled:
            self.memory.add(entries)
            memory = self.memory.view(self.state.slots)
        decision = control_step(
            self.state,
            load,
            self.config,
            shed=shed,
            seconds=seconds,
            arrival_rate=arrival_rate,
            fine=fine,
            memory=memory,
            fine_work=fine_work(entries) if fine is not None else None,
        )
        return EpochOutcome(decision, load.batches, occupancy, classes, cursor, shed)

    def _fail(self, cursor: str, reason: str) -> EpochFailed:
        """Record the epoch as failed: the previous decision's state under the next epoch number, with `failed`
        naming the reason and the cursor past the epoch's reports, so a restart does not read them again."""
        state = replace(self.state, epoch=self.state.epoch + 1)
        held = EpochOutcome(Decision(state, 0.0, (), ()), 0, {}, Classes((), (), ()), cursor)
        self.decisions.record({**decision_fields(held, self.clock()), "failed": reason})
        self.state, self.cursor = state, cursor
        if self.on_fail is not None:
            self.on_fail(state.epoch, reason)
        return EpochFailed(state.epoch, reason, cursor)

    def request_cleanup(self) -> SpillRequest:
        """Record a request to merge every partition's generations on disk (paper 004's clean-up at the end of a
        bounded run): the job emits the pairs still missing in its next batch, which runs even when no record
        arrives. A partition without generations is left as it is; a request not taken yet is replaced."""
        whole = tuple(p for p in range(self.state.routing.partitions) if len(self.state.routing.holders(p)) == 1)
        split = {g.partition for g, _ in self.state.routing.split}
        request = SpillRequest(self.state.epoch + 1, cleanup=tuple(p for p in whole if p not in split))
        state = replace(self.state, epoch=self.state.epoch + 1, spill=request)
        outcome = EpochOutcome(Decision(state, 0.0, (), ()), 0, {}, Classes((), (), ()), self.cursor)
        self.decisions.record(decision_fields(outcome, self.clock()))
        self.state = state
        return request

    def _arrival_rate(self) -> float | None:
        """Records/s appended to the input topics since the previous decided epoch (None without a reader)."""
        if self.arrivals is None or self.arrived is None:
            return None
        count, now = self.arrivals(), self.clock()
        before, then = self.arrived
        self.arrived = (count, now)
        return (count - before) / (now - then) if now > then else None


def decision_fields(outcome: EpochOutcome, decided_at: float) -> dict[str, str | int | float]:
    """The recorded form of an epoch's decision (`connectors.redis.control_decisions` holds the wire format)."""
    o = outcome
    return encode_decision(o.decision, o.occupancy, o.classes, o.batches, o.shed, o.cursor, decided_at)
