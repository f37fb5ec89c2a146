"""The stateful join inside Spark: one `transformWithStateInPandas` group per slot, windows kept as segments.

Per slot and batch: a handful of state calls, never one per row. The slot's accepted tuples of a batch are
appended as one Arrow IPC *segment* (MapState, keyed by segment id); a small metadata value (ValueState)
lists the live segments with the zone facts that decide their expiry, the per-partition event-time and
count positions, and a fresh nonce. The decoded windows (one `WindowJoin` per hash partition) stay cached
in the Python worker between batches; the cache is used only while its nonce equals the stored one, so a
batch replayed after a failure (state rolled back) rebuilds from the segments instead of seeing windows
that already hold the failed attempt's tuples.

Holder changes (`operators.control.job_epoch`) move *pieces*: whole partitions or mini-groups of split ones. A slot
holding some mini-groups of partition p keeps just their tuples in its one WindowJoin for p, which is exact
because keyed tasks are equi-joins on the key, so tuples of different mini-groups never pair. A mini-group's
stored rows are picked out at hand-over by recomputing their key hash from the stored key column (moves are
rare; storing the hash would cost 8 bytes per tuple in every segment written). Lateness and expiry (time
windows) follow the batch's watermark, planned with its offsets over every input partition
(connectors.event_time) and the same at every slot, so p's pieces judge each tuple alike wherever they are
held, and a replay judges as the first time. Positions handed over carry p's arrival counts (count windows
number arrivals per partition) and its event-time high mark.

Disk pushes and exact clean-up (paper 004, decided per batch in the control epoch): after joining a batch, the
holder of a partition to push writes the partition's stored rows as the next *generation* file
(`connectors.spill_files`, under <checkpoint>/spill, numbered from the slot's meta so a replayed batch rewrites
the same file) and forgets them in state and window; its positions stay, so lateness is judged as before, and
its later tuples form the memory-resident generation. A clean-up merges every pushed generation with the
memory-resident one (`operators.spill.cleanup`) and emits exactly the pairs no generation produced alone, then
takes the pushed tuples that can still join a future tuple back into the window; the merged files are deleted
in the slot's next batch (which runs only once the clean-up batch committed, so a replay still finds them).
While a partition has pushed generations, segments that may hold its tuples within W of the pushed event times
outlive their expiry: those tuples met no pushed tuple on arrival, and the clean-up reads them from the segments.
Time windows and two-stream tasks only; a partition with generations cannot move.
"""

from __future__ import annotations

import functools
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import orjson
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.streaming import StatefulProcessor, StatefulProcessorHandle

from windjoin.connectors.move_store import MovedGroup, MoveStore
from windjoin.connectors.result_table import ARROW_TYPES
from windjoin.connectors.spill_files import SpillFiles
from windjoin.operators.batch import Arrivals
from windjoin.operators.control.job_epoch import ControlEpoch, Holders, check_spillable, pieces, unit_holders
from windjoin.operators.control.slot_load import GroupLoadMeter, join_state
from windjoin.operators.join import Pairs, WindowJoin
from windjoin.operators.mjoin import join_operator
from windjoin.operators.partitioning import Group, RoutingTable, key_hash, mini_bits
from windjoin.operators.schema import LATE
from windjoin.operators.spec import CountWindow, JoinSpec
from windjoin.operators.spill.cleanup import missing_results
from windjoin.pipelines.job.adapter import CONTROL, PUNCTUATION, SHED, TIMING, field_column, key_column
from windjoin.pipelines.job.slot_output import SlotOutputs, current_batch_id, write_slot
from windjoin.pipelines.job.window_cache import WindowFiles

OUTPUT_DDL = "slot int, stats binary"  # one row per slot and batch: its summary as JSON (results leave elsewhere)
ORDER = ["ts", "topic", "kpartition", "koffset"]  # arrival order inside a batch: deterministic on replay
DEAD_COLUMNS = ["stream", "topic", "kpartition", "koffset", "reason", "detail"]


@dataclass
class SlotWindows:
    """A slot's decoded windows, one join per hash partition, valid for the state version `nonce`."""

    nonce: str
    joins: dict[int, WindowJoin] = field(default_factory=dict)
    # Per partition and stream, arrivals no longer held (expired before a rebuild): a store counts only what
    # it holds, the metadata counts every arrival, so count-window expiry stays in one numbering.
    forgotten: dict[int, dict[str, int]] = field(default_factory=dict)


# Lives in an importable module (not __main__) so Python workers keep it between batches.
_CACHE: dict[int, SlotWindows] = {}


def _new_spill() -> dict[str, Any]:
    """A partition's pushes in the slot's meta: generation numbers on disk, the next one, totals."""
    return {"next_gen": 0, "gens": [], "pushed_tuples": 0, "pushed_bytes": 0, "reload_bytes": 0, "cleanups": 0}


def _new_meta() -> dict[str, Any]:
    return {"nonce": "", "next_segment": 0, "segments": [], "max_ts": {}, "counts": {}}


class JoinProcessor(StatefulProcessor):
    def __init__(
        self,
        spec: JoinSpec,
        slot_labels: tuple[int, ...] = (),
        initial_routing: RoutingTable | None = None,
        move_root: str | None = None,
        spill_root: str | None = None,
        outputs: SlotOutputs | None = None,
    ) -> None:
        self.spec = spec
        self.outputs = outputs or SlotOutputs()  # where the slot's results and dead letters go
        # grouping-key value -> slot index, for the load reports (without labels a slot reports its key)
        self.slot_index = {label: i for i, label in enumerate(slot_labels)}
        # Where each slot's partitions start out (the source's first control epoch routes by it), and where
        # moved partitions' state is handed over (operators.control.job_epoch).
        self.initial_routing = initial_routing or RoutingTable.round_robin(spec.partitions, spec.slots)
        self.move_root = move_root
        self.spill_root = spill_root  # where pushed generations are written (paper 004)

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.meta_state = handle.getValueState("meta", "meta binary")
        self.segments = handle.getMapState("segments", "id long", "data binary")

    def handleInputRows(self, key: Any, rows: Iterator[pd.DataFrame], timerValues: Any) -> Iterator[pd.DataFrame]:
        slot = int(key[0])
        index = self.slot_index.get(slot, slot)
        frame = pd.concat(list(rows), ignore_index=True)
        started, cpu_started = time.perf_counter(), time.process_time()
        meta = orjson.loads(self.meta_state.get()[0]) if self.meta_state.exists() else _new_meta()
        windows = self._windows(slot, meta)
        phases = {"state_load_ms": (time.perf_counter() - started) * 1000}
        reasons = frame["reason"]
        timings = frame["detail"][reasons == TIMING]
        punctuations = int((reasons == PUNCTUATION).sum())  # only counted: they close snapshots
        shed_rows = frame[reasons == SHED]
        shed = {str(k): int(v) for k, v in shed_rows.groupby("stream")["koffset"].sum().items()}
        control = frame["detail"][reasons == CONTROL]
        detail = orjson.loads(control.iloc[0]) if len(control) else None
        epoch = ControlEpoch.from_json(detail) if detail is not None else None
        clock = (detail or {}).get("clock") or {}
        _take_watermark(meta, clock.get("watermark"))
        for join in windows.joins.values():  # every partition's window expires, whether rows came for it or not
            join.set_watermark(meta.get("watermark"))
        dead = frame[reasons.notna() & ~reasons.isin([PUNCTUATION, SHED, CONTROL, TIMING])]
        live = frame[reasons.isna()].sort_values(ORDER, kind="stable")
        self._forget_retired(meta)
        moved_in = self._install(index, meta, windows, epoch) if epoch is not None else []
        self._check_held(index, meta, live)
        pairs_by_task: dict[str, list[pa.Table]] = {t.name: [] for t in self.spec.tasks}
        columns = _StreamColumns(self.spec, live)
        late_rows, kept_rows = [], []
        meter = GroupLoadMeter()
        join_started = time.perf_counter()
        for part, rows_p in _rows_by_partition(live["part"].to_numpy()):
            part_started = time.perf_counter()
            tables, late = self._join_partition(windows, meta, part, columns, rows_p)
            outputs = sum(len(table) for _, table in tables)
            meter.record(part, len(rows_p), outputs, time.perf_counter() - part_started)
            for task, table in tables:
                pairs_by_task[task].append(table)
            late_rows.append(rows_p[late])
            kept_rows.append(np.delete(rows_p, late))
        phases["join_ms"] = (time.perf_counter() - join_started) * 1000
        kept = live.iloc[np.concatenate([np.zeros(0, np.int64), *kept_rows])]
        write_started = time.perf_counter()
        self._store(meta, kept[kept["stored"].astype(bool)])  # a spread partition's probe-only copies: not here
        phases["state_write_ms"] = (time.perf_counter() - write_started) * 1000
        spill_stats = {"pushed_tuples": 0, "pushed_bytes": 0, "pushed": [], "cleaned": [], "cleanup_pairs": 0}
        if epoch is not None and epoch.spill:
            self._push(meta, windows, epoch.spill, spill_stats)
        if epoch is not None and epoch.cleanup:
            for pairs in self._cleanup(meta, windows, epoch.cleanup, spill_stats):
                pairs_by_task[pairs.task].append(pairs_table(self.spec, pairs))
        late = live.iloc[np.concatenate([np.zeros(0, np.int64), *late_rows])]
        # a late tuple of a spread partition is reported once, by the slot that would have stored it
        late = late[late["stored"].astype(bool)][DEAD_COLUMNS].assign(reason=LATE, detail=_late_detail(meta))
        dead_rows = pd.concat([dead[DEAD_COLUMNS], late])
        # The slot's results leave from here, as its piece of the batch (numbered by the slot's index).
        emitted_at = int(time.time() * 1000)
        output = write_slot(self.outputs, self.spec, current_batch_id(), index, pairs_by_task, dead_rows, emitted_at)
        # The windows as joined, reported below: a piece handed over after this batch is counted where it was
        # joined (its new holder reports it from the next batch on), so its state never vanishes from the reports
        # while in flight.
        joined = dict(windows.joins)
        moved_out = self._hand_over(index, meta, windows, epoch) if epoch is not None else []
        input_marks = _input_marks(frame)
        horizon = _expiry_watermark(meta.get("watermark"), clock.get("marks"), input_marks, self.spec)
        write_started = time.perf_counter()
        self._expire(meta, windows, horizon)
        meta["nonce"] = windows.nonce = uuid.uuid4().hex
        self.meta_state.update((orjson.dumps(meta),))
        phases["state_write_ms"] += (time.perf_counter() - write_started) * 1000
        _CACHE[slot] = windows
        shared_started = time.perf_counter()
        self._window_files().store(slot, windows.nonce, windows)
        phases["state_write_ms"] += (time.perf_counter() - shared_started) * 1000
        seconds = time.perf_counter() - started
        groups = meter.report(joined, seconds)
        spans = _state_spans(meta, horizon, getattr(self.spec.window, "size_ms", None))
        stats = {
            "slot_index": index,
            "routing_version": epoch.routing.version if epoch is not None else 0,
            "shed_ratio": epoch.shed_ratio if epoch is not None else 0.0,
            "shed": shed,
            # partitions whose state (or part of it) moved, and exactly which units/pieces as [p, depth, pattern]
            "moved_in": sorted({g.partition for g in moved_in}),
            "moved_out": sorted({g.partition for g in moved_out}),
            "moved_in_groups": [[g.partition, g.depth, g.pattern] for g in moved_in],
            "moved_out_groups": [[g.partition, g.depth, g.pattern] for g in moved_out],
            # records read, each once (not control rows, shed counts or a spread partition's probe-only copies)
            "rows": len(frame)
            - len(control)
            - len(timings)
            - len(shed_rows)
            - int((~live["stored"].astype(bool)).sum()),
            "joined": len(live),
            "dead": len(dead_rows),
            "punctuations": punctuations,
            "segments": len(meta["segments"]),
            # event time: the batch's clock and watermark, the newest event time read per input partition (the
            # driver reports their maxima over slots to the next batch's plan), the event-time span of the state
            "clock_seq": clock.get("seq"),
            "batch_limit": clock.get("limit"),  # the record limit the batch was planned with
            "watermark": meta.get("watermark"),
            "marks": input_marks,
            "state_span_ms": spans[0],
            "held_span_ms": spans[1],
            "window_tuples": sum(groups["window_tuples"]),
            "state_bytes": sum(groups["state_bytes"]),
            "outputs": sum(groups["outputs"]),
            "seconds": seconds,
            # the time budget's shares measured here: this slot's phases, and the batch's read tasks (reported to
            # the first slot by their timing rows; their slowest task, as the stage waits for it)
            "phases": phases,
            "read_tasks": [orjson.loads(t) for t in timings],
            # this worker's CPU time for the slot: its batch work undiluted by other processes on the machine
            "cpu_seconds": time.process_time() - cpu_started,
            "groups": groups,  # per hash partition, columns slot_load.GROUP_FIELDS
            # disk pushes (paper 004): this batch's pushes and clean-ups, and the generations now on disk
            "spill": {
                **spill_stats,
                "spill_version": epoch.spill_version if epoch is not None else 0,  # the last request taken
                "generations": {p: len(g["gens"]) for p, g in meta.get("spill", {}).items() if g["gens"]},
                "reload_bytes": {p: g.get("reload_bytes", 0) for p, g in meta.get("spill", {}).items() if g["gens"]},
                "total_pushed_tuples": sum(g["pushed_tuples"] for g in meta.get("spill", {}).values()),
                "total_pushed_bytes": sum(g["pushed_bytes"] for g in meta.get("spill", {}).values()),
                "cleanups": sum(g["cleanups"] for g in meta.get("spill", {}).values()),
            },
        }
        stats.update(output)
        yield pd.DataFrame([(slot, orjson.dumps(stats))], columns=["slot", "stats"])

    def close(self) -> None:
        pass

    # -- holder changes (operators.control.job_epoch): install at new holders, hand over at leaving ones ----------

    def _held(self, index: int, meta: dict[str, Any]) -> dict[Group, Holders]:
        """The units (or pieces, after a hand-over) this slot holds state of, each with the holders it last saw."""
        if "held" not in meta:  # first batch of this slot: it holds what the first epoch routes to it
            meta["held"] = dict(_units_at(self.initial_routing, index)[1])
        return {_group_of(k): tuple(h) for k, h in meta["held"].items()}

    def _install(self, index: int, meta: dict[str, Any], windows: SlotWindows, epoch: ControlEpoch) -> list[Group]:
        """Before joining: take up what was handed over of each unit of this slot that gained holders or pieces.
        The slot installs the positions of every hand-over it reads (so it judges lateness like the others);
        a unit's home slot (its first holder) also installs the tuples the leaving holders stored. A unit only
        re-cut on this slot (same pieces, same holders) needs nothing."""
        routing = epoch.routing
        mine, mine_json = _units_at(routing, index)
        if meta.get("held") == mine_json:  # the steady case, every batch: no parsing
            return []
        held = self._held(index, meta)
        if mine == held:
            return []
        known = pieces(held, mine)  # what this slot held of its new units, with the holders it saw
        store, changed = None, []
        for unit, holders in sorted(mine.items()):
            here = {g: old for g, (old, _) in known.items() if unit.covers(g)}
            if _share(here) == _share([unit]) and all(old == holders for old in here.values()):
                continue
            store = store or self._move_store()
            handed = [m for m in store.get_all(routing.version, unit.partition) if unit.covers(m.group)]
            if _share(set(here) | {m.group for m in handed}) != _share([unit]):
                raise store.missing(routing.version, unit)
            self._take_positions(meta, windows, unit.partition, [m.positions for m in handed])
            if holders[0] == index:
                self._take_rows(meta, windows, unit.partition, [m.rows for m in handed])
            changed.append(unit)
        meta["held"] = dict(mine_json)
        return changed

    def _take_positions(self, meta: dict[str, Any], windows: SlotWindows, part: int, positions: list[dict]) -> None:
        """Merge handed-over positions into this slot's: the larger event-time high mark and arrival counts."""
        key = str(part)
        join = windows.joins.setdefault(part, join_operator(self.spec))
        max_ts = [p["max_ts"] for p in positions if p["max_ts"] is not None]
        if key in meta["max_ts"]:
            max_ts.append(meta["max_ts"][key])
        counts = dict(meta["counts"].get(key, {}))
        for p in positions:
            for stream, n in p["counts"].items():
                counts[stream] = max(counts.get(stream, 0), n)
        if max_ts:
            meta["max_ts"][key] = max(max_ts)
            join.advance_event_time(max(max_ts))
        meta["counts"][key] = counts
        windows.forgotten[part] = {s: n - join.stores[s].count for s, n in counts.items()}

    def _take_rows(self, meta: dict[str, Any], windows: SlotWindows, part: int, tables: list[pa.Table]) -> None:
        tables = [t for t in tables if t.num_rows]
        if not tables:
            return
        rows = pa.concat_tables(tables).to_pandas()
        join = windows.joins.setdefault(part, join_operator(self.spec))
        for stream, rows_s in rows.groupby("stream", sort=True):
            join.preload(stream, _columns(self.spec, rows_s, stream))
        forgotten = windows.forgotten.setdefault(part, {})
        for stream, n in rows["stream"].value_counts().items():
            forgotten[stream] = forgotten.get(stream, 0) - int(n)  # now held here, counted by the store
        self._store(meta, rows)

    def _hand_over(self, index: int, meta: dict[str, Any], windows: SlotWindows, epoch: ControlEpoch) -> list[Group]:
        """After joining this batch: for each piece the announced routing takes from this slot, write what this
        slot stored of it (with its positions) to the move store and forget it here; as the home slot of a
        piece gaining holders, write its positions."""
        changes = epoch.changes()
        leaving = sorted(g for g, (now, nxt) in changes.items() if index in now and index not in nxt)
        telling = sorted(
            g for g, (now, nxt) in changes.items() if now[0] == index and index in nxt and set(nxt) - set(now)
        )
        store = self._move_store() if leaving or telling else None
        schema = _segment_schema(self.spec)
        for piece in telling:
            positions = self._positions(meta, piece)
            store.put(epoch.pending.version, index, MovedGroup(piece, schema.empty_table(), positions))
        if not leaving:
            return []
        spilled = sorted({g.partition for g in leaving if meta.get("spill", {}).get(str(g.partition), {}).get("gens")})
        if spilled:
            raise RuntimeError(
                f"slot {index} would hand over partition(s) {spilled} with generations pushed to disk: moving "
                "pushed generations is not supported, clean the partitions up before moving them"
            )
        held = pieces(self._held(index, meta), unit_holders(epoch.pending))
        kept = {g: old for g, (old, new) in held.items() if index in new}
        rows_by_piece, rest_by_segment = self._cut_segments(meta, leaving)
        for piece in leaving:
            rows = pa.concat_tables(rows_by_piece[piece]) if rows_by_piece[piece] else schema.empty_table()
            store.put(epoch.pending.version, index, MovedGroup(piece, rows, self._positions(meta, piece)))
        still = {g.partition for g in kept}
        for part in {g.partition for g in leaving}:
            if part in still:  # some of its mini-groups stay: rebuild its window from the rows left
                self._rebuild(meta, windows, part, rest_by_segment)
            else:
                meta["max_ts"].pop(str(part), None)
                meta["counts"].pop(str(part), None)
                windows.joins.pop(part, None)
                windows.forgotten.pop(part, None)
        meta["held"] = _held_json(kept)
        return leaving

    # -- disk pushes and exact clean-up (paper 004) --------------------------------------------------------

    def _spill_files(self) -> SpillFiles:
        if self.spill_root is None:
            raise RuntimeError("disk pushes need a spill folder: build JoinProcessor with spill_root")
        check_spillable(self.spec)
        return SpillFiles(self.spill_root)

    def _mine_whole(self, meta: dict[str, Any], parts: tuple[int, ...]) -> list[int]:
        """The partitions among `parts` this slot holds whole (their only holder: the epoch checked that)."""
        return sorted(p for p in set(parts) if str(p) in meta.get("held", {}))

    def _push(self, meta: dict[str, Any], windows: SlotWindows, parts: tuple[int, ...], stats: dict) -> None:
        """Write each asked partition's stored rows as its next generation and forget them here (positions kept)."""
        mine = self._mine_whole(meta, parts)
        if not mine:
            return
        files = self._spill_files()
        groups = [Group(p) for p in mine]
        rows_by_piece, rests = self._cut_segments(meta, groups)
        for group in groups:
            part = group.partition
            if not rows_by_piece[group]:
                continue  # nothing stored: no generation
            table = pa.concat_tables(rows_by_piece[group])
            spill = meta.setdefault("spill", {}).setdefault(str(part), _new_spill())
            gen = spill["next_gen"]
            spill["next_gen"] += 1
            path = files.write_table(part, gen, table)
            spill["gens"].append(gen)
            ts = table.column("ts")
            low, high = pc.min(ts).as_py(), pc.max(ts).as_py()
            span = spill.get("span") or [low, high]
            spill["span"] = [min(span[0], low), max(span[1], high)]  # pushed event times, until the clean-up
            size = path.stat().st_size
            spill["pushed_tuples"] += table.num_rows
            spill["pushed_bytes"] += size
            # the window bytes pushed, as the load reports count them: what a clean-up brings back into memory
            held = join_state(windows.joins[part])[1] if part in windows.joins else 0
            spill["reload_bytes"] = spill.get("reload_bytes", 0) + held
            stats["pushed_tuples"] += table.num_rows
            stats["pushed_bytes"] += size
            stats["pushed"].append([part, gen])
            self._rebuild(meta, windows, part, rests)

    def _cleanup(self, meta: dict[str, Any], windows: SlotWindows, parts: tuple[int, ...], stats: dict) -> list[Pairs]:
        """Merge each asked partition's generations: the pairs across generations, each once; the pushed tuples
        a future tuple can still join go back into the window; the merged files are retired."""
        out: list[Pairs] = []
        for part in self._mine_whole(meta, parts):
            spill = meta.get("spill", {}).get(str(part))
            if not spill or not spill["gens"]:
                continue
            files = self._spill_files()
            pushed = [files.read_table(part, gen) for gen in spill["gens"]]
            memory = self._partition_rows(meta, part)
            gens = [self._generation(t) for t in [*pushed, memory]]
            found = [r for r in missing_results(self.spec, gens) if len(r)]
            out.extend(found)
            stats["cleanup_pairs"] += sum(len(r) for r in found)
            stats["cleaned"].append(part)
            watermark = meta.get("watermark")
            horizon = -np.inf if watermark is None else watermark - self.spec.window.size_ms
            back = pa.concat_tables(pushed)
            back = back.filter(pc.greater_equal(back.column("ts"), horizon))
            self._take_rows(meta, windows, part, [back])
            spill["retired"] = spill.get("retired", []) + spill["gens"]
            spill["gens"], spill["span"], spill["reload_bytes"] = [], None, 0
            spill["cleanups"] += 1
        return out

    def _forget_retired(self, meta: dict[str, Any]) -> None:
        """Delete generation files merged by an earlier (so committed) batch's clean-up."""
        for part, spill in meta.get("spill", {}).items():
            retired = spill.pop("retired", [])
            for gen in retired:
                SpillFiles(self.spill_root).delete_generation(int(part), gen)

    def _partition_rows(self, meta: dict[str, Any], part: int) -> pa.Table:
        """The rows this slot stores of a partition, read from its segments (the memory-resident generation)."""
        tables = []
        for segment in meta["segments"]:
            if str(part) not in segment["max_ts"]:
                continue
            table = pa.ipc.open_stream(self.segments.getValue((segment["id"],))[0]).read_all()
            tables.append(table.filter(pc.equal(table.column("part"), part)))
        return pa.concat_tables(tables) if tables else _segment_schema(self.spec).empty_table()

    def _generation(self, table: pa.Table) -> dict[str, dict[str, np.ndarray]]:
        """Stored rows as the clean-up's generation: per stream, the operator's columns."""
        rows = table.to_pandas()
        return {str(stream): _columns(self.spec, rows_s, str(stream)) for stream, rows_s in rows.groupby("stream")}

    def _cut_segments(
        self, meta: dict[str, Any], leaving: list[Group]
    ) -> tuple[dict[Group, list[pa.Table]], list[pa.Table]]:
        """Take the leaving pieces' rows out of the stored segments: the rows per piece, and (in segment order)
        what stays of each segment that held any of their partitions."""
        gone = {g.partition for g in leaving}
        kept_segments, rows_by_piece, rests = [], {g: [] for g in leaving}, []
        for segment in meta["segments"]:
            if not gone & {int(p) for p in segment["max_ts"]}:
                kept_segments.append(segment)
                continue
            table = pa.ipc.open_stream(self.segments.getValue((segment["id"],))[0]).read_all()
            parts = table.column("part").to_numpy()
            bits = self._mini_bits(table) if any(g.depth for g in leaving) else np.zeros(len(parts), np.uint64)
            left = np.zeros(len(parts), dtype=bool)
            for piece in leaving:
                mask = piece.contains(parts, bits)
                rows_by_piece[piece].append(table.filter(pa.array(mask)))
                left |= mask
            rest = table.filter(pa.array(~left))
            if rest.num_rows:
                rests.append(rest)
                self.segments.updateValue((segment["id"],), (_ipc(rest),))
                by_part = rest.group_by("part").aggregate([("ts", "max"), ("ts", "min")]).to_pydict()
                segment["max_ts"] = {str(p): int(t) for p, t in zip(by_part["part"], by_part["ts_max"], strict=True)}
                segment["min_ts"] = {str(p): int(t) for p, t in zip(by_part["part"], by_part["ts_min"], strict=True)}
                segment["ends"] = {p: v for p, v in segment["ends"].items() if p in segment["max_ts"]}
                kept_segments.append(segment)
            else:
                self.segments.removeKey((segment["id"],))
        meta["segments"] = kept_segments
        return rows_by_piece, rests

    def _mini_bits(self, table: pa.Table) -> np.ndarray:
        """The mini-group bits of each stored row, recomputed from its key exactly as the adapter routed it."""
        bits = np.zeros(table.num_rows, dtype=np.uint64)
        streams = table.column("stream").to_numpy(zero_copy_only=False)
        for stream in np.unique(streams):
            rows = streams == stream
            # taken before converting: the column is null on other streams' rows, and a nullable column
            # converts to another dtype (bool to object), which hashes differently
            keys = table.column(key_column(self.spec, stream)).filter(pa.array(rows)).to_numpy(zero_copy_only=False)
            bits[rows] = mini_bits(key_hash(keys), self.spec.partitions)
        return bits

    def _rebuild(self, meta: dict[str, Any], windows: SlotWindows, part: int, rests: list[pa.Table]) -> None:
        """Partition `part`'s window rebuilt from the rows this slot still stores of it (its positions kept)."""
        join = windows.joins[part] = join_operator(self.spec)
        for rest in rests:
            rows = rest.filter(pc.equal(rest.column("part"), part)).to_pandas()
            for stream, rows_s in rows.groupby("stream", sort=True):
                join.preload(stream, _columns(self.spec, rows_s, stream))
        key = str(part)
        if key in meta["max_ts"]:
            join.advance_event_time(meta["max_ts"][key])
        counts = meta["counts"].get(key, {})
        windows.forgotten[part] = {s: n - join.stores[s].count for s, n in counts.items()}

    def _positions(self, meta: dict[str, Any], piece: Group) -> dict[str, Any]:
        """What a receiver of `piece` needs to number arrivals like this slot: its counts and high mark for the
        partition."""
        key = str(piece.partition)
        return {"max_ts": meta["max_ts"].get(key), "counts": meta["counts"].get(key, {})}

    def _check_held(self, index: int, meta: dict[str, Any], live: pd.DataFrame) -> None:
        if "held" not in meta:
            return
        stray = set(live["part"].unique().tolist()) - {int(k.partition(".")[0]) for k in meta["held"]}
        minis = [_group_of(k) for k in meta["held"] if "." in k]
        rows = live[live["part"].isin({g.partition for g in minis})] if minis else live.iloc[:0]
        if len(rows):  # tuples of a partition this slot holds only some mini-groups of: theirs?
            parts, bits = rows["part"].to_numpy(), self._mini_bits(self._key_table(rows))
            owned = np.zeros(len(rows), dtype=bool)
            for g in minis:
                owned |= g.contains(parts, bits)
            stray |= set(parts[~owned].tolist())
        if stray:
            raise RuntimeError(
                f"slot {index} got tuples of partitions {sorted(stray)} (or of their mini-groups) whose state it does "
                "not hold: the routing and the handed-over state disagree, joining them would lose pairs"
            )

    def _key_table(self, rows: pd.DataFrame) -> pa.Table:
        """The stream and key columns of adapted rows, typed as in a stored segment (for `_mini_bits`)."""
        schema = _segment_schema(self.spec)
        keys = {key_column(self.spec, name) for name, s in self.spec.streams.items() if s.key is not None}
        fields = [schema.field("stream"), *(schema.field(c) for c in sorted(keys))]
        return pa.Table.from_pandas(rows[[f.name for f in fields]], schema=pa.schema(fields), preserve_index=False)

    def _move_store(self) -> MoveStore:
        if self.move_root is None:
            raise RuntimeError("partition moves need a move store: build JoinProcessor with move_root")
        return MoveStore(self.move_root)

    def _join_partition(
        self, windows: SlotWindows, meta: dict[str, Any], part: int, columns: _StreamColumns, rows: np.ndarray
    ) -> tuple[list[tuple[str, pa.Table]], np.ndarray]:
        """Join one partition's rows (positions in the batch, in arrival order): its result tables and which of
        its rows (positions in `rows`) were late."""
        join = windows.joins.setdefault(part, join_operator(self.spec))
        join.set_watermark(meta.get("watermark"))
        result = join.process(columns.chunk(rows))
        streams = columns.stream_codes[rows]
        late = np.sort(
            np.concatenate(
                [np.zeros(0, np.int64)]
                + [np.flatnonzero(streams == columns.code[s])[late_s] for s, late_s in result.late.items()]
            )
        )
        self._note_positions(meta, part, join, windows.forgotten.get(part, {}))
        tables = [(pairs.task, pairs_table(self.spec, pairs)) for pairs in result.pairs if len(pairs)]
        return tables, late

    def _window_files(self) -> WindowFiles:
        """This job's shared window files (pipelines.job.window_cache), named after its state folders."""
        return WindowFiles(f"{self.move_root}|{self.spill_root}")

    def _windows(self, slot: int, meta: dict[str, Any]) -> SlotWindows:
        """The cached windows if they match the stored state version, else rebuilt from the segments."""
        cached = _CACHE.get(slot)
        if cached is not None and cached.nonce == meta["nonce"]:
            return cached
        shared = self._window_files().load(slot, meta["nonce"])  # left by another worker on this machine
        if isinstance(shared, SlotWindows) and shared.nonce == meta["nonce"]:
            return shared
        windows = SlotWindows(meta["nonce"])
        for segment in meta["segments"]:
            data = self.segments.getValue((segment["id"],))[0]
            table = pa.ipc.open_stream(data).read_all().to_pandas()
            for part, rows_p in table.groupby("part", sort=True):
                join = windows.joins.setdefault(int(part), join_operator(self.spec))
                for stream, rows_s in rows_p.groupby("stream", sort=True):
                    join.preload(stream, _columns(self.spec, rows_s, stream))
        for part, max_ts in meta["max_ts"].items():
            windows.joins.setdefault(int(part), join_operator(self.spec)).advance_event_time(max_ts)
        for part, counts in meta["counts"].items():
            stores = windows.joins.setdefault(int(part), join_operator(self.spec)).stores
            windows.forgotten[int(part)] = {s: n - stores[s].count for s, n in counts.items()}
        return windows

    def _note_positions(self, meta: dict[str, Any], part: int, join: WindowJoin, forgotten: dict[str, int]) -> None:
        key = str(part)
        if join.max_event_ts is not None:
            meta["max_ts"][key] = join.max_event_ts
        meta["counts"][key] = {s: store.count + forgotten.get(s, 0) for s, store in join.stores.items()}

    def _store(self, meta: dict[str, Any], kept: pd.DataFrame) -> None:
        """Append the batch's accepted tuples as one segment, with what decides its expiry per partition."""
        if kept.empty:
            return
        columns = _segment_schema(self.spec).names
        seg_id = meta["next_segment"]
        meta["next_segment"] += 1
        self.segments.updateValue((seg_id,), (_ipc(pa.Table.from_pandas(kept[columns], preserve_index=False)),))
        by_part = kept.groupby("part")
        meta["segments"].append(
            {
                "id": seg_id,
                "max_ts": {str(p): int(ts) for p, ts in by_part["ts"].max().items()},
                "min_ts": {str(p): int(ts) for p, ts in by_part["ts"].min().items()},
                "ends": {str(p): {s: meta["counts"][str(p)][s] for s in g["stream"].unique()} for p, g in by_part},
            }
        )

    def _owed_to_cleanup(self, meta: dict[str, Any], part: str, segment: dict[str, Any]) -> bool:
        """Whether a segment may hold tuples of `part` that pair with its pushed generations: they met no pushed
        tuple when they arrived, so only the clean-up finds those pairs, and it reads them from the segments."""
        span = meta.get("spill", {}).get(part, {}).get("span")
        if not span or not meta["spill"][part]["gens"]:
            return False
        size = self.spec.window.size_ms
        lowest = segment.get("min_ts", {}).get(part, -np.inf)  # not recorded: assume it reaches back far enough
        return segment["max_ts"][part] >= span[0] - size and lowest <= span[1] + size

    def _expire(self, meta: dict[str, Any], windows: SlotWindows, watermark: int | None) -> None:
        """Drop segments (and window blocks) no future tuple of any of their partitions can join: by count, or
        (time) wholly older than `watermark` (at most every later batch's watermark) less the window."""
        window = self.spec.window
        for join in windows.joins.values():
            join.expire(watermark)
        live = []
        for segment in meta["segments"]:
            if isinstance(window, CountWindow):
                needed = any(
                    end > meta["counts"][p][s] - window.size
                    for p, ends in segment["ends"].items()
                    for s, end in ends.items()
                )
            else:
                needed = watermark is None or any(
                    ts >= watermark - window.size_ms or self._owed_to_cleanup(meta, p, segment)
                    for p, ts in segment["max_ts"].items()
                )
            if needed:
                live.append(segment)
            else:
                self.segments.removeKey((segment["id"],))
        meta["segments"] = live


def pairs_table(spec: JoinSpec, pairs: Pairs) -> pa.Table:
    """A task's pairs as the Arrow table a slot hands over: one struct column per joined stream (its timestamp
    first, then its fields), in the layout of `connectors.result_table` without `batch_id` and `emitted_at`."""
    arrays, names = [], []
    for stream, columns in pairs.sides.items():
        s = spec.streams[stream]
        types = {s.timestamp: pa.int64(), **{f: ARROW_TYPES[t] for f, t in s.fields.items()}}
        children = [pa.array(columns[name], type=types[name]) for name in types]
        arrays.append(pa.StructArray.from_arrays(children, names=list(types)))
        names.append(stream)
    return pa.Table.from_arrays(arrays, names=names)


def _columns(spec: JoinSpec, rows: pd.DataFrame, stream: str) -> dict[str, np.ndarray]:
    """A stream's rows as the operator's columns: its timestamp and declared fields, typed."""
    s = spec.streams[stream]
    columns = {s.timestamp: rows["ts"].to_numpy(dtype=np.int64)}
    for name, ftype in s.fields.items():
        values = rows[field_column(stream, name)]
        columns[name] = (
            values.to_numpy(dtype=object)
            if ftype == "string"
            else values.to_numpy(dtype={"int": np.int64, "float": np.float64, "bool": np.bool_}[ftype])
        )
    return columns


def _rows_by_partition(parts: np.ndarray) -> Iterator[tuple[int, np.ndarray]]:
    """Each partition's row positions, in partition order, each in the rows' (arrival) order."""
    if not len(parts):
        return
    order = np.argsort(parts, kind="stable")
    values, starts = np.unique(parts[order], return_index=True)
    for part, rows in zip(values.tolist(), np.split(order, starts[1:]), strict=True):
        yield int(part), rows


class _StreamColumns:
    """A batch's live rows as numpy columns per stream, converted once for all partitions (slicing a pandas
    frame per partition and stream cost more than joining small partitions)."""

    def __init__(self, spec: JoinSpec, live: pd.DataFrame) -> None:
        names = list(spec.streams)
        self.code = {name: i for i, name in enumerate(names)}
        streams = live["stream"].to_numpy()
        self.stream_codes = np.full(len(live), -1, dtype=np.int64)
        self.rank = np.zeros(len(live), dtype=np.int64)  # a row's position among its stream's rows
        self.columns: dict[str, dict[str, np.ndarray]] = {}
        for name, code in self.code.items():
            mine = np.flatnonzero(streams == name)
            self.stream_codes[mine] = code
            self.rank[mine] = np.arange(len(mine))
            self.columns[name] = _columns(spec, live.iloc[mine], name)
        self.stored = live["stored"].to_numpy(dtype=bool)

    def chunk(self, rows: np.ndarray) -> dict[str, Arrivals]:
        """The operator's input for some rows (positions), per stream in arrival order."""
        codes = self.stream_codes[rows]
        stored = self.stored[rows]
        spread = not stored.all()  # a spread partition: some rows only probe here
        out = {}
        for name, code in self.code.items():
            mask = codes == code
            if not mask.any():
                continue
            ranks = self.rank[rows[mask]]
            out[name] = Arrivals(
                {column: values[ranks] for column, values in self.columns[name].items()},
                np.flatnonzero(mask),
                stored=stored[mask] if spread else None,
            )
        return out


def _take_watermark(meta: dict[str, Any], watermark: int | None) -> None:
    """The batch's watermark (planned with its offsets, so a replay gets the same); it never moves back."""
    if watermark is not None:
        meta["watermark"] = max(meta.get("watermark", watermark), watermark)


def _late_detail(meta: dict[str, Any]) -> str:
    return (
        f"event time is behind the watermark {meta.get('watermark')} (the newest event time of the slowest "
        "input partition, less allowed_lateness_ms)"
    )


def _input_marks(frame: pd.DataFrame) -> dict[str, list[int]]:
    """The oldest and newest event time of each input (Kafka) partition among the batch's rows of this slot."""
    rows = frame[frame["ts"].notna()]
    if rows.empty:
        return {}
    span = rows.groupby(["topic", "kpartition"])["ts"].agg(["min", "max"])
    return {f"{topic}:{int(part)}": [int(lo), int(hi)] for (topic, part), lo, hi in span.itertuples(name=None)}


def _expiry_watermark(
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


def _state_spans(meta: dict[str, Any], watermark: int | None, window_ms: int | None) -> tuple[int, int]:
    """The widest event-time span of a partition's state in this slot: of its live tuples (from the oldest one a
    future tuple can still join, the expiry `watermark` less the window, to the newest), and of all it holds (segments
    expire whole, so one that still holds a live tuple keeps its expired ones too)."""
    low: dict[str, int] = {}
    high: dict[str, int] = {}
    for segment in meta["segments"]:
        for part, ts in segment["max_ts"].items():
            high[part] = max(high.get(part, ts), ts)
            first = segment.get("min_ts", {}).get(part, ts)
            low[part] = min(low.get(part, first), first)
    horizon = -np.inf if watermark is None or window_ms is None else watermark - window_ms
    live = max((high[p] - max(low[p], horizon) for p in high), default=0)
    return int(max(live, 0)), max((high[p] - low[p] for p in high), default=0)


@functools.lru_cache(maxsize=8)
def _units_at(routing: RoutingTable, index: int) -> tuple[dict[Group, Holders], dict[str, list[int]]]:
    """The units slot `index` holds under `routing` (and their `meta["held"]` form), cached: listing a large
    table's units costs ~0.1 s at 65536 partitions, and every batch asks (callers do not mutate them)."""
    mine = {g: h for g, h in unit_holders(routing).items() if index in h}
    return mine, _held_json(mine)


def _held_json(held: dict[Group, Holders]) -> dict[str, list[int]]:
    """`meta["held"]`: a whole partition as "p", a mini-group as "p.depth.pattern"."""
    return {
        (str(g.partition) if g.depth == 0 else f"{g.partition}.{g.depth}.{g.pattern}"): list(h)
        for g, h in sorted(held.items())
    }


def _group_of(key: str) -> Group:
    return Group(*(int(n) for n in key.split(".")))


def _share(groups: Any) -> float:
    """The fraction of a partition's hashes the (disjoint) groups cover."""
    return sum(2.0**-g.depth for g in groups)


def _segment_schema(spec: JoinSpec) -> pa.Schema:
    """The columns a state segment (and a moved group) keeps of each tuple."""
    fields = [("part", pa.int32()), ("stream", pa.string()), ("ts", pa.int64())]
    for name, s in spec.streams.items():
        fields += [(field_column(name, f), ARROW_TYPES[t]) for f, t in s.fields.items()]
    return pa.schema(fields)


def _ipc(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()
