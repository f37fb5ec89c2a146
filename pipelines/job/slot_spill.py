"""A slot's disk pushes and exact clean-ups (paper 004, decided per batch in the control epoch).

After joining a batch, the holder of a partition to push writes the partition's stored rows as the next
*generation* file (`connectors.files.spill_files`, under <checkpoint>/spill, numbered from the slot's meta so a
replayed batch rewrites the same file) and forgets them in state and window; its positions stay, so lateness is
judged as before, and its later tuples form the memory-resident generation. A clean-up merges every pushed
generation with the memory-resident one (`operators.spill.cleanup`) and emits exactly the pairs no generation
produced alone, then takes the pushed tuples that can still join a future tuple back into the window; the merged
files are deleted in the slot's next batch (which runs only once the clean-up batch committed, so a replay still
finds them). Time windows and two-stream tasks only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from windjoin.connectors.files.spill_files import SpillFiles
from windjoin.operators.control.job_epoch import check_spillable
from windjoin.operators.join import Pairs
from windjoin.operators.partitioning import Group
from windjoin.operators.spec import JoinSpec
from windjoin.operators.spill.cleanup import missing_results
from windjoin.pipelines.job.segment_store import SegmentStore
from windjoin.pipelines.job.slot_meta import PartitionSpill, SlotMeta
from windjoin.pipelines.job.slot_windows import SlotWindows
from windjoin.pipelines.job.stored_rows import generation


@dataclass
class SpillReport:
    """A batch's pushes and clean-ups at a slot, as its stats report them."""

    pushed_tuples: int = 0
    pushed_bytes: int = 0
    pushed: list[list[int]] = field(default_factory=list)  # [partition, generation] written
    cleaned: list[int] = field(default_factory=list)  # partitions cleaned up
    cleanup_pairs: int = 0

    def with_totals(self, meta: SlotMeta) -> dict[str, Any]:
        """This batch's figures and the slot's generations now on disk, with its totals so far."""
        spills = meta.spill.values()
        return {
            "pushed_tuples": self.pushed_tuples,
            "pushed_bytes": self.pushed_bytes,
            "pushed": self.pushed,
            "cleaned": self.cleaned,
            "cleanup_pairs": self.cleanup_pairs,
            "generations": {p: len(s.gens) for p, s in meta.spill.items() if s.gens},
            "reload_bytes": {p: s.reload_bytes for p, s in meta.spill.items() if s.gens},
            "total_pushed_tuples": sum(s.pushed_tuples for s in spills),
            "total_pushed_bytes": sum(s.pushed_bytes for s in spills),
            "cleanups": sum(s.cleanups for s in spills),
        }


class SlotSpill:
    """Pushes and clean-ups of the partitions a slot holds whole, in the job's spill folder."""

    def __init__(self, spec: JoinSpec, spill_root: str | None, segments: SegmentStore) -> None:
        self.spec = spec
        self.spill_root = spill_root
        self.segments = segments

    def _files(self) -> SpillFiles:
        if self.spill_root is None:
            raise RuntimeError("disk pushes need a spill folder: build JoinProcessor with spill_root")
        check_spillable(self.spec)
        return SpillFiles(self.spill_root)

    def push(self, meta: SlotMeta, windows: SlotWindows, parts: tuple[int, ...], report: SpillReport) -> None:
        """Write each asked partition's stored rows as its next generation and forget them here (positions kept)."""
        mine = _mine_whole(meta, parts)
        if not mine:
            return
        files = self._files()
        groups = [Group(p) for p in mine]
        held = windows.held()
        rows_by_piece, rests = self.segments.cut(meta, groups)
        for group in groups:
            part = group.partition
            if not rows_by_piece[group]:
                continue  # nothing stored: no generation
            table = pa.concat_tables(rows_by_piece[group])
            spill = meta.spill.setdefault(str(part), PartitionSpill())
            gen = spill.next_gen
            spill.next_gen += 1
            path = files.write_table(part, gen, table)
            spill.gens.append(gen)
            ts = table.column("ts")
            low, high = pc.min(ts).as_py(), pc.max(ts).as_py()
            span = spill.span or [low, high]
            spill.span = [min(span[0], low), max(span[1], high)]
            size = path.stat().st_size
            spill.pushed_tuples += table.num_rows
            spill.pushed_bytes += size
            # the window bytes pushed, as the load reports count them: what a clean-up brings back into memory
            spill.reload_bytes += held[part].bytes if part in held else 0
            report.pushed_tuples += table.num_rows
            report.pushed_bytes += size
            report.pushed.append([part, gen])
            self.segments.rebuild(meta, windows, part, rests)

    def cleanup(self, meta: SlotMeta, windows: SlotWindows, parts: tuple[int, ...], report: SpillReport) -> list[Pairs]:
        """Merge each asked partition's generations: the pairs across generations, each once; the pushed tuples
        a future tuple can still join go back into the window; the merged files are retired."""
        out: list[Pairs] = []
        for part in _mine_whole(meta, parts):
            spill = meta.spill.get(str(part))
            if spill is None or not spill.gens:
                continue
            files = self._files()
            pushed = [files.read_table(part, gen) for gen in spill.gens]
            memory = self.segments.partition_rows(meta, part)  # the memory-resident generation
            gens = [generation(self.spec, t) for t in [*pushed, memory]]
            found = [r for r in missing_results(self.spec, gens) if len(r)]
            out.extend(found)
            report.cleanup_pairs += sum(len(r) for r in found)
            report.cleaned.append(part)
            horizon = -np.inf if meta.watermark is None else meta.watermark - self.spec.max_history_ms
            back = pa.concat_tables(pushed)
            back = back.filter(pc.greater_equal(back.column("ts"), horizon))
            self.segments.take_rows(meta, windows, part, [back], meta.watermark)
            spill.retired = spill.retired + spill.gens
            spill.gens, spill.span, spill.reload_bytes = [], None, 0
            spill.cleanups += 1
        return out

    def forget_retired(self, meta: SlotMeta) -> None:
        """Delete generation files merged by an earlier (so committed) batch's clean-up."""
        for part, spill in meta.spill.items():
            retired, spill.retired = spill.retired, []
            for gen in retired:
                SpillFiles(self.spill_root).delete_generation(int(part), gen)


def _mine_whole(meta: SlotMeta, parts: tuple[int, ...]) -> list[int]:
    """The partitions among `parts` this slot holds whole (their only holder: the epoch checked that)."""
    return sorted(p for p in set(parts) if str(p) in (meta.held or {}))
