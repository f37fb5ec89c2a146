"""A slot's stored tuples as segments in its state (`slot_state`), and their expiry.

Per batch, the slot's accepted tuples are appended as one Arrow IPC *segment* (keyed by segment id);
the slot's meta lists the live segments with the zone facts that decide their expiry (per partition: event-time
range, and per stream the arrival count through its last tuple). A segment expires whole once no future tuple
of any of its partitions can join it. While a partition has pushed generations (paper 004), segments that may
hold its tuples within W of the pushed event times outlive their expiry: those tuples met no pushed tuple on
arrival, and the clean-up reads them from the segments.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from windjoin.operators.partitioning import Group
from windjoin.operators.spec import AS_OF_TYPES, JoinSpec
from windjoin.pipelines.job.slot_meta import PartKey, SegmentInfo, SlotMeta
from windjoin.pipelines.job.slot_state import SlotState
from windjoin.pipelines.job.slot_windows import SlotWindows, new_windows
from windjoin.pipelines.job.stored_rows import from_ipc, segment_schema, stored_mini_bits, to_ipc


class SegmentStore:
    """The slot's segments (id -> IPC bytes in its `SlotState`), listed and described by its `SlotMeta`."""

    def __init__(self, spec: JoinSpec, state: SlotState) -> None:
        self.spec = spec
        self.state = state

    def _read(self, segment: SegmentInfo) -> pa.Table:
        return from_ipc(self.state.segment(segment.id))

    def windows(self, meta: SlotMeta) -> SlotWindows:
        """The slot's windows rebuilt from its segments and positions, for the stored state version."""
        windows = new_windows(self.spec, meta.nonce)
        for segment in meta.segments:
            windows.load(self._read(segment))
        windows.restore_positions(meta)
        windows.recall_flags(meta.watermark)  # the flags as the last batch (its watermark) closed them
        return windows

    def append(self, meta: SlotMeta, kept: pa.Table) -> None:
        """Append accepted tuples (stored or adapted layout) as one segment, with what decides its expiry per
        partition."""
        if not kept.num_rows:
            return
        seg_id = meta.next_segment
        meta.next_segment += 1
        table = kept.select(segment_schema(self.spec).names)
        self.state.put_segment(seg_id, to_ipc(table))
        spans = table.group_by("part").aggregate([("ts", "max"), ("ts", "min")]).to_pylist()
        streams = table.group_by(["part", "stream"]).aggregate([]).to_pylist()
        ends: dict[str, dict[str, int]] = {}
        for row in streams:
            p = str(row["part"])
            ends.setdefault(p, {})[row["stream"]] = meta.counts[p][row["stream"]]
        meta.segments.append(
            SegmentInfo(
                id=seg_id,
                max_ts={str(r["part"]): int(r["ts_max"]) for r in spans},
                ends=ends,
                min_ts={str(r["part"]): int(r["ts_min"]) for r in spans},
            )
        )

    def take_rows(
        self, meta: SlotMeta, windows: SlotWindows, part: int, tables: list[pa.Table], closed_at: int | None
    ) -> None:
        """Take stored-layout rows of `part` (handed over, or pushed and brought back) into its window and a
        new segment; the window's store now counts them, their flags recalled as their last holder closed them at
        `closed_at` (its watermark then)."""
        tables = [t for t in tables if t.num_rows]
        if not tables:
            return
        rows = pa.concat_tables(tables)
        windows.add_rows(part, rows)
        windows.recall_flags(closed_at)
        self.append(meta, rows)

    def partition_rows(self, meta: SlotMeta, part: int) -> pa.Table:
        """The rows this slot stores of a partition, read from its segments."""
        tables = []
        for segment in meta.segments:
            if str(part) in segment.max_ts:
                table = self._read(segment)
                tables.append(table.filter(pc.equal(table.column("part"), part)))
        return pa.concat_tables(tables) if tables else segment_schema(self.spec).empty_table()

    def cut(self, meta: SlotMeta, pieces: list[Group]) -> tuple[dict[Group, list[pa.Table]], list[pa.Table]]:
        """Take the pieces' rows out of the stored segments: the rows per piece, and (in segment order) what stays
        of each segment that held any of their partitions."""
        gone = {g.partition for g in pieces}
        kept_segments, rows_by_piece, rests = [], {g: [] for g in pieces}, []
        for segment in meta.segments:
            if not gone & {int(p) for p in segment.max_ts}:
                kept_segments.append(segment)
                continue
            table = self._read(segment)
            parts = table.column("part").to_numpy()
            bits = (
                stored_mini_bits(self.spec, table) if any(g.depth for g in pieces) else np.zeros(len(parts), np.uint64)
            )
            left = np.zeros(len(parts), dtype=bool)
            for piece in pieces:
                mask = piece.contains(parts, bits)
                rows_by_piece[piece].append(table.filter(pa.array(mask)))
                left |= mask
            rest = table.filter(pa.array(~left))
            if rest.num_rows:
                rests.append(rest)
                self.state.put_segment(segment.id, to_ipc(rest))
                by_part = rest.group_by("part").aggregate([("ts", "max"), ("ts", "min")]).to_pydict()
                segment.max_ts = {str(p): int(t) for p, t in zip(by_part["part"], by_part["ts_max"], strict=True)}
                segment.min_ts = {str(p): int(t) for p, t in zip(by_part["part"], by_part["ts_min"], strict=True)}
                segment.ends = {p: v for p, v in segment.ends.items() if p in segment.max_ts}
                kept_segments.append(segment)
            else:
                self.state.drop_segment(segment.id)
        meta.segments = kept_segments
        return rows_by_piece, rests

    def rebuild(self, meta: SlotMeta, windows: SlotWindows, part: int, rests: list[pa.Table]) -> None:
        """Partition `part`'s window rebuilt from the rows `cut` left of it, their flags recalled as the last batch
        closed them."""
        rows = [rest.filter(pc.equal(rest.column("part"), part)) for rest in rests]
        windows.rebuild(meta, part, rows)
        windows.recall_flags(meta.watermark)

    def expire(self, meta: SlotMeta, windows: SlotWindows, watermark: int | None) -> None:
        """Drop segments (and window blocks) no future tuple of any of their partitions can join: by count, or
        (time) wholly older than `watermark` (at most every later batch's watermark) less the state's history
        (`JoinSpec.max_history_ms`: a segment holds every stream)."""
        window = self.spec.window
        windows.expire(watermark)
        first_kept = windows.first_kept(meta) if window.counts_arrivals else {}
        live, kept_back = [], []
        versions = any(t.type in AS_OF_TYPES for t in self.spec.tasks)
        for segment in meta.segments:
            if window.counts_arrivals:
                needed = any(
                    end > first_kept.get(p, {}).get(s, meta.counts[p][s] - window.size)
                    for p, ends in segment.ends.items()
                    for s, end in ends.items()
                )
            else:
                needed = watermark is None or any(
                    ts >= watermark - self.spec.max_history_ms or self._owed_to_cleanup(meta, p, segment)
                    for p, ts in segment.max_ts.items()
                )
            if needed:
                live.append(segment)
                kept_back.append(False)
            elif versions and (rest := self._held_rows(windows, segment)) is not None:
                live.append(rest)
                kept_back.append(True)
            else:
                self.state.drop_segment(segment.id)
        meta.segments = self._merge_kept_back(live, kept_back)

    def _held_rows(self, windows: SlotWindows, segment: SegmentInfo) -> SegmentInfo | None:
        """An expiring segment cut down to the rows the windows still hold (as-of versions and waiting tuples,
        which age with their key, not with time), in its place; None when it holds none."""
        table = self._read(segment)
        held = windows.still_held(table)
        if not held.any():
            self.state.drop_segment(segment.id)
            return None
        return self._rewrite(segment, table.filter(pa.array(held)))

    def _rewrite(self, segment: SegmentInfo, rows: pa.Table) -> SegmentInfo:
        """The segment's rows replaced by `rows` (a subset of them, in order), its zone facts with them."""
        self.state.put_segment(segment.id, to_ipc(rows))
        by_part = rows.group_by("part").aggregate([("ts", "max"), ("ts", "min")]).to_pydict()
        segment.max_ts = {str(p): int(t) for p, t in zip(by_part["part"], by_part["ts_max"], strict=True)}
        segment.min_ts = {str(p): int(t) for p, t in zip(by_part["part"], by_part["ts_min"], strict=True)}
        segment.ends = {p: v for p, v in segment.ends.items() if p in segment.max_ts}
        return segment

    def _merge_kept_back(self, segments: list[SegmentInfo], kept_back: list[bool]) -> list[SegmentInfo]:
        """Adjacent segments cut down by `_held_rows` merged into the first of them, in order, so old versions
        take one segment, not one per batch they came in."""
        out: list[SegmentInfo] = []
        run: list[SegmentInfo] = []
        for segment, back in [*zip(segments, kept_back, strict=True), (None, False)]:
            if back:
                run.append(segment)
                continue
            if len(run) > 1:
                rows = pa.concat_tables([self._read(s) for s in run])
                for gone in run[1:]:
                    self.state.drop_segment(gone.id)
                first = run[0]
                for other in run[1:]:  # each partition's arrival count through its last tuple: the latest
                    for part, ends in other.ends.items():
                        merged = first.ends.setdefault(part, {})
                        for stream, end in ends.items():
                            merged[stream] = max(merged.get(stream, end), end)
                out.append(self._rewrite(first, rows))
            else:
                out.extend(run)
            run = []
            if segment is not None:
                out.append(segment)
        return out

    def _owed_to_cleanup(self, meta: SlotMeta, part: PartKey, segment: SegmentInfo) -> bool:
        """Whether a segment may hold tuples of `part` that pair with its pushed generations: they met no pushed
        tuple when they arrived, so only the clean-up finds those pairs, and it reads them from the segments."""
        spill = meta.spill.get(part)
        if spill is None or not spill.span or not spill.gens:
            return False
        size = self.spec.reach_ms
        lowest = segment.min_ts.get(part, -np.inf)  # not recorded: assume it reaches back far enough
        return segment.max_ts[part] >= spill.span[0] - size and lowest <= spill.span[1] + size


def expiry_watermark(
    watermark: int | None, marks_before: dict[str, int] | None, read: dict[str, list[int]], spec: JoinSpec
) -> int | None:
    """The watermark state may expire by after this batch: no later batch judges lateness by less.

    The next batch's watermark is the minimum over the input partitions of their newest event time through this
    batch (less the lateness); each is at least the larger of its mark before this batch (`marks_before`, given
    once every partition has one) and the newest this slot read of it, so their minimum is a lower bound that
    spares a batch's worth of state the batch's own (lagging) watermark would keep. Idle partitions count too: one
    may wake up before the next batch."""
    if marks_before is None:
        return watermark
    newest = min(max(ts, read[key][1]) if key in read else ts for key, ts in marks_before.items())
    bound = newest - spec.allowed_lateness_ms
    return bound if watermark is None else max(watermark, bound)
