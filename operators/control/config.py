"""The controller's thresholds, typed and validated once; errors name the key, the bad value and what is accepted."""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from windjoin.operators.control.finetune import FINE_DEPTH
from windjoin.operators.spill.config import MemoryAdaptationConfig


class ControlConfigError(ValueError):
    """A controller configuration that cannot be used; one problem per line, by key."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


Fraction = Annotated[float, Field(ge=0, le=1, allow_inf_nan=False, strict=True)]  # a YAML number, not text


class ReorganisationConfig(_Strict):
    """Paper 000: suppliers above th_sup, consumers below th_con, 0 <= th_con < th_sup < 1."""

    th_sup: Fraction = 0.8
    th_con: Fraction = 0.5
    # processing seconds / batch interval, backlog / capacity, or a slot's share of the batch's processing
    # seconds or input tuples
    occupancy: Literal["busy", "backlog", "share", "cpu", "tuples"] = "busy"
    backlog_capacity: Annotated[float, Field(gt=0, allow_inf_nan=False)] | None = None  # tuples; for "backlog"
    seed: int = 0  # the paper picks the yielded group at random; seeded, so a replayed epoch decides the same
    pick: Literal["random", "balance"] = "random"  # random: the paper's; balance: evens the pair (reorganise.py)
    # damping: a unit moved stays put this many epochs after, unless its slot is a supplier that many in a row
    hold_epochs: Annotated[int, Field(ge=0)] = 2

    @model_validator(mode="after")
    def _order(self) -> ReorganisationConfig:
        problems = []
        if not self.th_con < self.th_sup < 1:
            problems.append(
                f"reorganisation.th_sup: must satisfy 0 <= th_con < th_sup < 1 (got th_con={self.th_con}, "
                f"th_sup={self.th_sup})"
            )
        if self.occupancy == "backlog" and self.backlog_capacity is None:
            problems.append("reorganisation.backlog_capacity: required when occupancy is 'backlog' (tuples > 0)")
        if problems:
            raise ValueError("\n".join(problems))
        return self


class DeclusteringConfig(_Strict):
    """Paper 000: grow when N_sup > beta * N_con, shrink when no slot is a supplier (for shrink_after_epochs
    epochs in a row); within [min, max] slots."""

    beta: Annotated[float, Field(gt=0, lt=1, allow_inf_nan=False)] = 0.5
    # shrink after this many epochs in a row without a supplier (paper 000: 1; more stops the count flapping)
    shrink_after_epochs: Annotated[int, Field(ge=1)] = 3
    min_slots: Annotated[int, Field(ge=1)] = 1
    max_slots: Annotated[int, Field(ge=1)] = 64

    @model_validator(mode="after")
    def _range(self) -> DeclusteringConfig:
        if self.min_slots > self.max_slots:
            raise ValueError(
                f"declustering.min_slots: must be <= max_slots (got min_slots={self.min_slots}, "
                f"max_slots={self.max_slots})"
            )
        return self


class UtilisationConfig(_Strict):
    """S2J: 0 < tau0 < tau_star < tau1 <= tau2 <= 1 on average utilisation tau = w / W."""

    tau0: Fraction = 0.2
    tau_star: Fraction = 0.4
    tau1: Fraction = 0.8
    tau2: Fraction = 0.9
    # W: tuples one worker can handle (per batch or per second, by `measure`). Unset, utilisation is not measured:
    # no shedding and no utilisation scaling (a made-up default W would shed everything or nothing)
    capacity: Annotated[float, Field(gt=0, allow_inf_nan=False)] | None = None
    # What w and W count: tuples offered per batch, tuples offered per second of batch time, or tuples arriving
    # per second (appended to the input topics, as the controller reads them from Kafka between epochs). Batches
    # of a micro-batch job grow when they run late, so a per-batch w rises with slowness as well as load; the
    # rate the job took is its processing rate while it falls behind and more than the arrivals while it
    # catches up; the arrivals are the load itself. "arrivals" needs the controller to be given a reader.
    measure: Literal["batch", "rate", "arrivals"] = "batch"
    sustain_epochs: Annotated[int, Field(ge=1)] = 3  # "for a sustained time", counted in control epochs
    min_workers: Annotated[int, Field(ge=1)] = 1
    max_workers: Annotated[int, Field(ge=1)] = 64

    @model_validator(mode="after")
    def _order(self) -> UtilisationConfig:
        problems = []
        if not 0 < self.tau0 < self.tau_star < self.tau1 <= self.tau2 <= 1:
            problems.append(
                "utilisation.tau0: thresholds must satisfy 0 < tau0 < tau_star < tau1 <= tau2 <= 1 (got "
                f"tau0={self.tau0}, tau_star={self.tau_star}, tau1={self.tau1}, tau2={self.tau2})"
            )
        if self.min_workers > self.max_workers:
            problems.append(
                f"utilisation.min_workers: must be <= max_workers (got min_workers={self.min_workers}, "
                f"max_workers={self.max_workers})"
            )
        if problems:
            raise ValueError("\n".join(problems))
        return self


class SheddingConfig(_Strict):
    """S2J: SR = B + (1 - B) * g((tau - tau1) / (1 - tau1)) above tau1, g linear or quadratic."""

    base: Fraction = 0.0  # B
    model: Literal["linear", "quadratic"] = "linear"


class FineTuningConfig(_Strict):
    """Paper 000, Fig. 4b: keep each partition's mini-groups within [theta, 2 theta] window tuples by extendible
    hashing. Tuples, not bytes: the job reports a partition's window tuples by mini bits, so a mini-group's size
    is known before it splits. Directories split at most max_depth bits deep, which the reports bound."""

    enabled: bool = False
    theta: Annotated[int, Field(gt=0)] = 100_000  # window tuples (all streams) of one unit
    max_depth: Annotated[int, Field(ge=1, le=FINE_DEPTH)] = FINE_DEPTH  # up to 2^max_depth mini-groups


class HotConfig(_Strict):
    """SplitJoin: spread a hot partition (a supplier holding only it, or, with pick "balance", a partition whose
    work alone is over th_sup, or the heaviest of a supplier that no move can even: `reorganise.stuck_partition`)
    over k slots, k = ceil(its work / th_con) within [2, max_width]; gather a spread
    partition back to its home slot once its work is under th_con. Only for two-stream tasks over time windows
    (the job refuses spreads otherwise)."""

    spread: bool = False
    max_width: Annotated[int, Field(ge=2)] = 4


class MemoryConfig(MemoryAdaptationConfig):
    """Paper 004 decided by the controller: pushes, relocations and clean-ups from the slots' reported memory
    (the planner's knobs, see MemoryAdaptationConfig; `memory_bytes` is each slot's budget). `query_bytes` is
    M_q, the query's expected memory need, which bounds active-disk's forced pushes (required for it)."""

    enabled: bool = False
    query_bytes: Annotated[int, Field(gt=0)] | None = None

    @model_validator(mode="after")
    def _bounded(self) -> MemoryConfig:
        problems = []
        if self.enabled and self.policy == "active_disk" and self.query_bytes is None:
            problems.append(
                "memory.query_bytes: required with policy 'active_disk' (the query's expected memory need in bytes, "
                "> 0: it bounds the forced pushes)"
            )
        # A clean-up filling memory past theta_m would be pushed again the next epoch: pushes and clean-ups would
        # alternate for as long as the job runs, each forcing a batch (a bounded run would never finish).
        if self.cleanup_below is not None and self.cleanup_below > self.theta_m:
            problems.append(
                f"memory.cleanup_below: must be <= theta_m (got cleanup_below={self.cleanup_below}, "
                f"theta_m={self.theta_m}): a clean-up over theta_m is pushed again at once"
            )
        if problems:
            raise ValueError("\n".join(problems))
        return self


class ControlConfig(_Strict):
    # who sets the slot count: S2J's utilisation thresholds, or paper 000's supplier/consumer rule
    scaling: Literal["utilisation", "declustering"] = "utilisation"
    reorganisation: ReorganisationConfig = ReorganisationConfig()
    declustering: DeclusteringConfig = DeclusteringConfig()
    utilisation: UtilisationConfig = UtilisationConfig()
    shedding: SheddingConfig = SheddingConfig()
    fine_tuning: FineTuningConfig = FineTuningConfig()
    hot: HotConfig = HotConfig()
    memory: MemoryConfig = MemoryConfig()

    @model_validator(mode="after")
    def _whole_partitions_for_memory(self) -> ControlConfig:
        # the job pushes and cleans up whole partitions with one holder only (operators.control.job_epoch)
        clashes = [
            k for k, on in (("hot.spread", self.hot.spread), ("fine_tuning.enabled", self.fine_tuning.enabled)) if on
        ]
        if self.memory.enabled and clashes:
            raise ValueError(
                f"memory.enabled: cannot be combined with {' or '.join(clashes)} (disk pushes and clean-ups take "
                "whole partitions with one holder; spreads and mini-groups split them); accepted: one or the other"
            )
        return self


def parse_control_config(data: Any) -> ControlConfig:
    """Validate a mapping (parsed YAML) into a ControlConfig, or raise ControlConfigError naming every bad key."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ControlConfigError(f"control: a mapping of sections {list(ControlConfig.model_fields)}; got {data!r}")
    try:
        return ControlConfig.model_validate(data)
    except ValidationError as err:
        raise ControlConfigError(_format(err)) from None


def _format(err: ValidationError) -> str:
    lines = []
    for e in err.errors(include_url=False):
        msg = e["msg"].removeprefix("Value error, ")
        if e["type"] == "value_error":
            lines.extend(msg.split("\n"))
            continue
        key = ".".join(str(part) for part in e["loc"]) or "control"
        accepted = _accepted(e)
        lines.append(f"{key}: {msg} (got {e.get('input')!r}){accepted}")
    return "\n".join(lines)


def _accepted(e: dict) -> str:
    if e["type"] == "extra_forbidden":
        section: Any = ControlConfig
        for part in e["loc"][:-1]:
            section = section.model_fields[part].annotation
        return f"; accepted keys: {sorted(section.model_fields)}"
    if e["type"] == "bool_parsing":
        return "; accepted: true or false"
    if e["type"] == "float_type":  # strict: text such as "0.2_5" or "0.5" is no number here
        return "; accepted: a number written without quotes, such as 0.25"
    return ""


def initial_workers(rate: float, window: float, capacity: float, tau_star: float) -> int:
    """S2J's initial deployment m = ceil(E(rate) * window / (W * tau_star)), at least 1.

    `rate` in tuples per time unit and `window` in the same time unit, so rate * window is the window's tuples;
    `capacity` W in tuples per worker."""
    if rate < 0 or window <= 0 or capacity <= 0 or not 0 < tau_star <= 1:
        raise ValueError(
            f"initial_workers needs rate >= 0, window > 0, capacity > 0, 0 < tau_star <= 1 (got rate={rate}, "
            f"window={window}, capacity={capacity}, tau_star={tau_star})"
        )
    return max(1, math.ceil(rate * window / (capacity * tau_star)))
