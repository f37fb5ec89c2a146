"""The memory-adaptation settings, validated once: an error names the key, the bad value and what is accepted."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field


class MemoryAdaptationConfig(BaseModel):
    """Paper 004's knobs. Fractions are of a slot's memory budget; times are event-time milliseconds.

    - `policy`: `lazy_disk` (Fig. 18: balance memory across slots first, push to disk only where a slot overflows)
      or `active_disk` (Fig. 19: when memory is balanced but one slot's output rate per group is `theta_f` times
      below another's, push that slot's groups to disk so productive groups can move there);
    - `memory_bytes`: a slot's budget M_a; a disk push starts when used / budget > `theta_m`;
    - `push_fraction`: share of the slot's used memory pushed per disk adaptation (the paper settles on 0.3);
    - `choose`: which groups go first: `least_productive` (largest P_s/P_o, the paper's throughput-oriented
      choice), `most_productive` (the opposite end, the paper's baseline in Fig. 11);
    - `theta_t_ms`: a group without insertions for longer than this is inactive and pushed before any other;
    - `theta_d`: a relocation starts when M_l / M_m < theta_d (least over most used slot memory);
    - `theta_f`: active-disk forces a push when Max_rate / Min_rate > theta_f;
    - `active_from`: active-disk forces pushes only once some slot uses this share of its budget (not in the
      paper, which bounds forced pushes by M_q - M_c only: forcing while memory is plentiful costs results and
      frees nothing that is needed yet);
    - `cleanup_below`: clean up pushed groups during the run while memory allows: a slot under theta_m cleans
      the groups whose pushed bytes fit below this share of its budget (None: only at the end of the run).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    policy: Literal["lazy_disk", "active_disk"] = "lazy_disk"
    memory_bytes: Annotated[int, Field(gt=0)] = 256 << 20
    theta_m: Annotated[float, Field(gt=0, le=1)] = 0.9
    push_fraction: Annotated[float, Field(gt=0, le=1)] = 0.3
    choose: Literal["least_productive", "most_productive"] = "least_productive"
    theta_t_ms: Annotated[int, Field(gt=0)] | None = None
    theta_d: Annotated[float, Field(gt=0, lt=1)] = 0.8
    theta_f: Annotated[float, Field(gt=1)] = 2.0
    active_from: Annotated[float, Field(ge=0, le=1)] = 0.7
    cleanup_below: Annotated[float, Field(gt=0, le=1)] | None = None
