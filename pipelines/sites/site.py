"""One site of a distributed PMJoin run: a Kafka consumer loop running the plan's joins placed at this site.

The site reads its local source topics and its own inter-site topic (assigned from offset 0, no consumer group),
feeds the rows to its `SiteEngine` (operators/pmjoin/execution_engine.py), and produces what the engine ships:
each tuple or intermediate result for another site is one message on that site's inter-site topic, with headers
naming the channel, the receiving instance and slot; watermarks travel the same way. Final results are written
to ``<out>/<site>.results.jsonl``; ``<out>/<site>.report.json`` counts what crossed sites, per link and per plan
edge: tuples, planner units (tuples × tuple size, the planner's bytes) and encoded bytes (value + headers), and
separately the watermark messages (control traffic the planner does not price).

Topics (`topic names`): ``<prefix>.src.<stream>`` (one partition, events in timestamp order, closed by a record
keyed ``__end__``) and ``<prefix>.site.<site>`` (one partition). Exactly-once holds for a bounded run without
failures: idempotent producers, every message read once from offset 0; a crashed site is not recovered.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import orjson
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Message, Producer, TopicPartition

from windjoin.connectors.kafka.security import PLAINTEXT, KafkaSecurity, KafkaSecurityError
from windjoin.operators.pmjoin.execution import ExecutionPlan
from windjoin.operators.pmjoin.execution_engine import (
    END,
    SiteEngine,
    n_rows,
    records_to_rows,
    rows_to_records,
    source_rows,
)

log = logging.getLogger(__name__)

END_KEY = b"__end__"  # key of the record closing a source topic
ROWS, WATERMARK = b"r", b"w"


def source_topic(prefix: str, stream: str) -> str:
    return f"{prefix}.src.{stream}"


def site_topic(prefix: str, site: str) -> str:
    return f"{prefix}.site.{site}"


class SiteError(RuntimeError):
    """The site could not finish: a delivery failed, a topic could not be read, or the run timed out."""


@dataclass(frozen=True)
class SiteConfig:
    bootstrap: str
    prefix: str
    out_dir: Path
    timeout_s: float = 300.0
    consume_batch: int = 500  # messages per poll: each poll ends in a join step and watermark messages
    poll_timeout_s: float = 0.05
    security: KafkaSecurity = PLAINTEXT  # TLS / SASL of the site's consumer and producer (the `kafka:` section)


@dataclass
class _Traffic:
    tuples: int = 0
    units: float = 0.0
    bytes: int = 0
    control_messages: int = 0
    control_bytes: int = 0

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class _Counters:
    links: dict[str, _Traffic] = field(default_factory=lambda: defaultdict(_Traffic))
    edges: dict[tuple[str, int, int], _Traffic] = field(default_factory=lambda: defaultdict(_Traffic))
    sources: dict[str, dict[str, int]] = field(default_factory=dict)
    received_rows: int = 0
    received_watermarks: int = 0
    results: int = 0


def _headers_size(headers: list[tuple[str, bytes]]) -> int:
    return sum(len(k) + len(v) for k, v in headers)


class Site:
    """The consumer loop of one site; `run()` returns its report once every local instance has ended."""

    def __init__(self, plan: ExecutionPlan, site: str, config: SiteConfig) -> None:
        self.plan = plan
        self.site = site
        self.config = config
        self.engine = SiteEngine(plan, site)
        self.counters = _Counters()
        self._errors: list[str] = []
        self._stream_index = {s.name: b for b, s in enumerate(plan.streams)}
        self._topic_stream = {source_topic(config.prefix, s): s for s in self.engine.sources}
        self._own_topic = site_topic(config.prefix, site)

    def run(self) -> dict[str, Any]:
        cfg = self.config
        cfg.out_dir.mkdir(parents=True, exist_ok=True)
        results_path = cfg.out_dir / f"{self.site}.results.jsonl"
        try:
            security = cfg.security.client_config()  # the password read now, in this process
        except KafkaSecurityError as err:
            raise SiteError(f"site {self.site}: {err}") from None
        consumer = Consumer(
            {
                "bootstrap.servers": cfg.bootstrap,
                "group.id": f"windjoin-site-{cfg.prefix}-{self.site}",
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "fetch.wait.max.ms": 20,
                **security,
            }
        )
        producer = Producer(
            {
                "bootstrap.servers": cfg.bootstrap,
                "acks": "all",
                "enable.idempotence": True,
                "linger.ms": 5,
                **security,
            }
        )
        topics = [*self._topic_stream, self._own_topic]
        consumer.assign([TopicPartition(t, 0, OFFSET_BEGINNING) for t in topics])
        start = time.monotonic()
        try:
            with results_path.open("wb") as results:
                while not self.engine.finished:
                    if time.monotonic() - start > cfg.timeout_s:
                        raise SiteError(f"site {self.site}: not finished after {cfg.timeout_s:g} s ({self._waiting()})")
                    messages = consumer.consume(num_messages=cfg.consume_batch, timeout=cfg.poll_timeout_s)
                    self._apply(messages)
                    self._emit(self.engine.step(), producer, results)
                    producer.poll(0)
                    if self._errors:
                        raise SiteError(f"site {self.site}: delivery failed: {'; '.join(self._errors[:3])}")
            left = producer.flush(60)
            if left or self._errors:
                raise SiteError(f"site {self.site}: {left} messages undelivered; errors: {self._errors[:3]}")
        finally:
            consumer.close()
        report = self._report(time.monotonic() - start, results_path)
        (cfg.out_dir / f"{self.site}.report.json").write_bytes(orjson.dumps(report, option=orjson.OPT_INDENT_2))
        shipped = ", ".join(
            f"{link}: {t.tuples} tuples, {t.units:g} units, {t.bytes} B (+{t.control_messages} watermarks)"
            for link, t in sorted(self.counters.links.items())
        )
        log.info("site %s finished: %d results; shipped %s", self.site, self.counters.results, shipped or "nothing")
        return report

    # ---- input --------------------------------------------------------------------------------------------

    def _apply(self, messages: list[Message]) -> None:
        by_source: dict[str, list[Message]] = defaultdict(list)
        pending: dict[tuple[str, int, int], list[dict]] = defaultdict(list)
        for msg in messages:
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    continue
                raise SiteError(f"site {self.site}: reading {msg.topic()}: {err}")
            topic = msg.topic()
            if topic in self._topic_stream:
                by_source[self._topic_stream[topic]].append(msg)
                continue
            headers = dict(msg.headers() or [])
            if headers.get("k") == ROWS:
                key = (headers["ch"].decode(), int(headers["to"]), int(headers["slot"]))
                pending[key].append(orjson.loads(msg.value()))
                self.counters.received_rows += 1
            else:  # a watermark: rows before it (of any channel) go in first, so none can follow it unseen
                self._flush_received(pending)
                self.engine.remote_watermark(headers["ch"].decode(), int(msg.value()))
                self.counters.received_watermarks += 1
        self._flush_received(pending)
        for stream, msgs in by_source.items():
            self._apply_source(stream, msgs)

    def _flush_received(self, pending: dict[tuple[str, int, int], list[dict]]) -> None:
        for (channel, instance, slot), records in pending.items():
            mask = self.plan.instance(instance).slots[slot].mask
            self.engine.receive(channel, instance, slot, records_to_rows(self.plan, mask, records))
        pending.clear()

    def _apply_source(self, stream: str, msgs: list[Message]) -> None:
        ended = msgs[-1].key() == END_KEY
        events = [orjson.loads(m.value()) for m in msgs if m.key() != END_KEY]
        b = self._stream_index[stream]
        names = ["ts", "id", *self.plan.streams[b].attributes]
        columns = {n: np.array([e[n] for e in events]) for n in names}
        if not events:
            columns = {n: np.zeros(0, dtype=np.int64) for n in names}
        stats = self.counters.sources.setdefault(stream, {"tuples": 0, "first_ts": None, "last_ts": None})
        if events:
            stats["tuples"] += len(events)
            stats["first_ts"] = events[0]["ts"] if stats["first_ts"] is None else stats["first_ts"]
            stats["last_ts"] = events[-1]["ts"]
        watermark = END if ended else (int(events[-1]["ts"]) - 1 if events else self.engine.watermark(f"src:{stream}"))
        self.engine.source(stream, source_rows(self.plan, b, columns), watermark)

    # ---- output -------------------------------------------------------------------------------------------

    def _emit(self, out, producer: Producer, results) -> None:
        for ship in out.ships:
            mask = self.plan.instance(ship.instance).slots[ship.slot].mask
            unit = self.plan.size(mask)
            headers = [("k", ROWS), ("ch", ship.channel.encode()), ("to", str(ship.instance).encode())]
            headers.append(("slot", str(ship.slot).encode()))
            topic = site_topic(self.config.prefix, ship.target)
            link = self.counters.links[f"{self.site}->{ship.target}"]
            edge = self.counters.edges[(ship.channel, ship.instance, ship.slot)]
            for record in rows_to_records(self.plan, mask, ship.rows):
                value = orjson.dumps(record)
                self._produce(producer, topic, value, headers)
                size = len(value) + _headers_size(headers)
                for t in (link, edge):
                    t.tuples += 1
                    t.units += unit
                    t.bytes += size
        for mark in out.marks:
            headers = [("k", WATERMARK), ("ch", mark.channel.encode())]
            value = str(mark.watermark).encode()
            self._produce(producer, site_topic(self.config.prefix, mark.target), value, headers)
            link = self.counters.links[f"{self.site}->{mark.target}"]
            link.control_messages += 1
            link.control_bytes += len(value) + _headers_size(headers)
        for rows in out.results:
            for record in rows_to_records(self.plan, _full(self.plan), rows):
                results.write(orjson.dumps(record, option=orjson.OPT_APPEND_NEWLINE))
            self.counters.results += n_rows(rows)

    def _produce(self, producer: Producer, topic: str, value: bytes, headers: list[tuple[str, bytes]]) -> None:
        def on_delivery(err: KafkaError | None, _msg: Message) -> None:
            if err is not None:
                self._errors.append(str(err))

        while True:
            try:
                producer.produce(topic, value=value, headers=headers, on_delivery=on_delivery)
                return
            except BufferError:
                producer.poll(0.1)

    # ---- report -------------------------------------------------------------------------------------------

    def _waiting(self) -> str:
        waits = [f"{c}={self.engine.watermark(c)}" for c in self.engine.produced if self.engine.watermark(c) < END]
        return "channels not ended: " + (", ".join(waits) or "none")

    def _report(self, wall_s: float, results_path: Path) -> dict[str, Any]:
        edges = []
        for (channel, instance, slot), t in sorted(self.counters.edges.items()):
            inst = self.plan.instance(instance)
            feeds = inst.slots[slot].feeds
            edges.append(
                {
                    "channel": channel,
                    "to_instance": instance,
                    "slot": slot,
                    "from": self.site,
                    "to": inst.site,
                    "group": inst.group,
                    "streams": list(self.plan.stream_names(inst.slots[slot].mask)),
                    "predicted_units_per_s": sum(f.predicted_units for f in feeds if f.channel == channel),
                    **t.as_dict(),
                }
            )
        return {
            "site": self.site,
            "status": "finished",
            "wall_s": wall_s,
            "sources": self.counters.sources,
            "received": {"rows": self.counters.received_rows, "watermarks": self.counters.received_watermarks},
            "links": {link: t.as_dict() for link, t in sorted(self.counters.links.items())},
            "edges": edges,
            "instances": [
                {
                    "id": i.id,
                    "group": i.group,
                    "streams": list(self.plan.stream_names(i.mask)),
                    "final": i.final,
                    "combinations": self.engine.joins[i.id].combinations,
                    "emitted": self.engine.joins[i.id].emitted,
                }
                for i in self.engine.instances
            ],
            "results": self.counters.results,
            "results_file": str(results_path),
        }


def _full(plan: ExecutionPlan) -> int:
    return (1 << len(plan.streams)) - 1


def run_site(plan: ExecutionPlan, site: str, config: SiteConfig) -> dict[str, Any]:
    return Site(plan, site, config).run()
