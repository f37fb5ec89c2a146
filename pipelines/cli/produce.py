"""`windjoin produce` (a JSON Lines file onto a stream's topic) and `windjoin generate` (the paper's workload).

Both encode events with the stream's codec (`connectors.formats.stream_encoder`), create missing topics, produce with
delivery checked (a failed delivery ends the run with an error), and show a tqdm bar on stderr. `generate --pace
--preencode` encodes its whole schedule before the schedule starts (`preencoded`), so that pacing only sends.
Register with: ``from windjoin.pipelines.cli.produce import generate, produce``.
"""

from __future__ import annotations

import os
import sys
import time
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import click
import numpy as np
from tqdm import tqdm

from windjoin.connectors.formats.codec_errors import DecodeError
from windjoin.connectors.formats.jsonl_file import read_events
from windjoin.connectors.formats.stream_encoder import (
    OTHER_STREAM,
    STREAM_ENTRY,
    EventEncodeError,
    StreamEncoder,
    stream_encoder,
)
from windjoin.connectors.kafka.admin import create_topics, list_topics
from windjoin.connectors.kafka.producer import BatchProducer, DeliveryError, Record
from windjoin.connectors.kafka.security import KafkaSecurity, KafkaSecurityError
from windjoin.operators.spec import JoinSpec
from windjoin.operators.workloads.b_model import (
    CHUNK_S,
    PAPER_BIAS,
    PAPER_KEYS,
    PAPER_RATE,
    SKEW_OVER,
    Workload,
    WorkloadConfig,
)
from windjoin.pipelines.cli.options import (
    BOOTSTRAP_OPTION,
    SPEC_ARGUMENT,
    STATE_DIR_OPTION,
    load_spec_or_fail,
    resolve_bootstrap,
)
from windjoin.pipelines.cli.preencoded import encode_schedule, lead_s

DEFAULT_TOPIC_PARTITIONS = 4
PRODUCE_BATCH = 20_000  # records per delivery check when reading a file
# murmur2 on the key, as Java clients partition: records of one key land in one partition whoever produces them.
PRODUCER_CONFIG = {"partitioner": "murmur2_random", "linger.ms": 5, "compression.type": "none"}

_PARTITIONS = click.option(
    "--topic-partitions",
    type=click.IntRange(min=1),
    default=DEFAULT_TOPIC_PARTITIONS,
    show_default=True,
    help="Partitions of a topic created because it is missing (an existing topic is left as it is).",
)
_PROGRESS = click.option("--progress/--no-progress", default=None, help="Progress bar on stderr (default: on a tty).")


def ensure_topics(
    bootstrap: str, topics: Iterable[str], partitions: int, client: Mapping[str, object] | None = None
) -> dict[str, tuple[int, bool]]:
    """Create the missing topics with `partitions` partitions; per topic: (partition count, created now).
    `client`: the admin client's settings (TLS, SASL)."""
    topics = list(dict.fromkeys(topics))
    try:
        existing = list_topics(bootstrap, config=client)
    except Exception as err:  # KafkaException: the broker does not answer
        raise click.ClickException(f"cannot reach the Kafka broker at {bootstrap}: {err}") from err
    missing = [t for t in topics if t not in existing]
    if missing:
        try:
            create_topics(bootstrap, missing, partitions, exist_ok=True, client=client)
        except Exception as err:  # KafkaException, TimeoutError: say which topics and where
            raise click.ClickException(f"cannot create topic(s) {missing} on {bootstrap}: {err}") from err
    return {t: (existing[t], False) if t in existing else (partitions, True) for t in topics}


def client_security(spec: JoinSpec) -> dict[str, str]:
    """The spec's `kafka:` settings for a client (the password read now), or a click error naming the key."""
    try:
        return KafkaSecurity.from_spec(spec.kafka).client_config()
    except KafkaSecurityError as err:
        raise click.ClickException(str(err)) from None


def _encoder(spec: JoinSpec, name: str, validate_records: bool = True) -> StreamEncoder:
    try:
        return stream_encoder(spec, name, validate_records=validate_records)
    except ValueError as err:
        raise click.ClickException(str(err)) from None


def _say_topics(topics: dict[str, tuple[int, bool]]) -> None:
    for topic, (partitions, created) in topics.items():
        click.echo(f"topic {topic}: {'created' if created else 'exists'}, {partitions} partitions", err=True)


def _produce(producer: BatchProducer, topic: str, records: list[Record]) -> None:
    try:
        producer.produce_batch(topic, records)
    except (DeliveryError, TimeoutError) as err:
        raise click.ClickException(f"delivery failed: {err}") from err


# ---- produce --------------------------------------------------------------------------------------------------


@click.command("produce")
@SPEC_ARGUMENT
@click.argument("stream")
@click.argument("events", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@BOOTSTRAP_OPTION
@STATE_DIR_OPTION
@_PARTITIONS
@click.option("--topic", help="Produce to this topic instead of the stream's `topic` in SPEC.")
@_PROGRESS
def produce(
    spec_path: Path,
    stream: str,
    events: Path,
    bootstrap: str | None,
    state_dir: Path,
    topic_partitions: int,
    topic: str | None,
    progress: bool | None,
) -> None:
    """Produce the events of STREAM from a JSON Lines file to the stream's Kafka topic, in SPEC's format.

    One event per line, e.g. {"ts": 1700000000000, "k": 3, "x": 7}; a "stream" entry naming another stream
    skips the line (so join-file's input files work as they are). Bad lines are reported on stderr as
    FILE:LINE: REASON: detail and skipped; a count ends the run. Kafka key: the stream's key field as text;
    Kafka timestamp: the event time.
    """
    spec = load_spec_or_fail(spec_path)
    encoder = _encoder(spec, stream)
    topic = topic or encoder.topic
    if topic is None:
        raise click.UsageError(f"streams.{stream}.topic is not set in {spec_path}; set it or pass --topic")
    bootstrap = resolve_bootstrap(bootstrap, state_dir)
    security = client_security(spec)
    _say_topics(ensure_topics(bootstrap, [topic], topic_partitions, security))

    refused: Counter[str] = Counter()
    other = produced = 0
    routed = STREAM_ENTRY not in encoder.stream.fields  # a "stream" entry routes the line
    started = time.perf_counter()
    disable = None if progress is None else not progress
    with (
        BatchProducer(bootstrap, {**PRODUCER_CONFIG, **security}) as producer,
        tqdm(total=events.stat().st_size, unit="B", unit_scale=True, desc=f"producing {topic}", disable=disable) as bar,
    ):
        batch: list[Record] = []
        for line_no, _raw, decoded in read_events(events, bar):
            if routed and type(decoded) is dict and decoded.get(STREAM_ENTRY, stream) != stream:
                other += 1
                continue
            try:
                if isinstance(decoded, DecodeError):
                    raise EventEncodeError(decoded.reason, None, decoded.detail)
                batch.append(encoder.encode(decoded))
            except EventEncodeError as err:
                if err.reason == OTHER_STREAM:
                    other += 1
                    continue
                refused[err.reason] += 1
                bar.clear()
                click.echo(f"{events}:{line_no}: {err.reason}: {err.detail}", err=True)
                continue
            if len(batch) >= PRODUCE_BATCH:
                _produce(producer, topic, batch)
                produced += len(batch)
                bar.set_postfix(events=produced, refresh=False)
                batch = []
        if batch:
            _produce(producer, topic, batch)
            produced += len(batch)
    seconds = time.perf_counter() - started
    rate = produced / seconds if seconds else 0.0
    lines = [f"{produced} events of stream {stream} produced to {topic} in {seconds:.2f} s ({rate:,.0f} events/s)"]
    if other:
        lines.append(f"{other} lines for other streams skipped")
    if refused:
        detail = ", ".join(f"{reason} {n}" for reason, n in sorted(refused.items()))
        lines.append(f"{sum(refused.values())} bad lines skipped: {detail}")
    click.echo("\n".join(lines), err=True)


# ---- generate -------------------------------------------------------------------------------------------------


def _batches(workload: Workload, encoders: dict[str, StreamEncoder], target: int) -> Iterator[tuple[float, dict]]:
    """(schedule time by which the batch is due, {stream: records}) with about `target` events per batch."""
    pending: dict[str, list[Record]] = {name: [] for name in encoders}
    count = 0
    for piece in workload.slices():
        for name, event in zip(piece.streams, piece.events, strict=True):
            pending[name].append(encoders[name].encode(event))
        count += len(piece.events)
        if count >= target:
            yield piece.end_s, pending
            pending, count = {name: [] for name in encoders}, 0
    if count:
        yield workload.config.duration_s, pending


@click.command("generate")
@SPEC_ARGUMENT
@click.option(
    "--rate",
    type=click.FloatRange(min=0, min_open=True),
    default=PAPER_RATE,
    show_default=True,
    help="Events/s per stream.",
)
@click.option("--duration", type=click.FloatRange(min=0, min_open=True), required=True, help="Seconds of schedule.")
@click.option(
    "--seed",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="Same seed, same events (timestamps aside).",
)
@click.option(
    "--skew",
    type=click.FloatRange(0.5, 1.0),
    default=PAPER_BIAS,
    show_default=True,
    help="b-model bias b of the join keys: 0.5 uniform, 0.7 the paper's default.",
)
@click.option(
    "--keys", type=click.IntRange(min=1), default=PAPER_KEYS, show_default=True, help="Join-key values 0..KEYS-1."
)
@click.option(
    "--skew-over",
    type=click.Choice(SKEW_OVER),
    default="keys",
    show_default=True,
    help="What the b-model skews: key values (hashing spreads them evenly over partitions) or the hash "
    "partitions themselves (hot partitions, keys uniform inside each).",
)
@click.option("--pace/--no-pace", default=True, show_default=True, help="Real time, or as fast as possible.")
@click.option(
    "--preencode/--no-preencode",
    default=False,
    show_default=True,
    help="With --pace: encode the whole schedule first and start it after that, so that the paced loop only "
    "sends (keeps the schedule beside a busy consumer; holds every record in memory).",
)
@BOOTSTRAP_OPTION
@STATE_DIR_OPTION
@_PARTITIONS
@_PROGRESS
def generate(
    spec_path: Path,
    rate: float,
    duration: float,
    seed: int,
    skew: float,
    keys: int,
    skew_over: str,
    pace: bool,
    preencode: bool,
    bootstrap: str | None,
    state_dir: Path,
    topic_partitions: int,
    progress: bool | None,
) -> None:
    """Produce the synthetic workload of Chakraborty & Singh to every stream's topic of SPEC.

    Each stream: Poisson arrivals at RATE events/s; its join key (the stream's key, else its first eq field)
    drawn from a b-model with bias SKEW over KEYS values, the same model for every stream; other fields
    uniform (ints 1..10^4, floats [1, 10^4), 8-letter strings, fair bools). Event timestamps are the scheduled
    arrival times from now on; with --pace (default) each event is produced at its time (the schedule starts once
    the producer holds its idempotent producer id, so the first events are not held back), with --no-pace at once.
    """
    spec = load_spec_or_fail(spec_path)
    encoders = {name: _encoder(spec, name, validate_records=False) for name in spec.streams}
    no_topic = [name for name, e in encoders.items() if e.topic is None]
    if no_topic:
        raise click.UsageError(f"{spec_path}: stream(s) {no_topic} have no topic; set streams.<name>.topic")
    bootstrap = resolve_bootstrap(bootstrap, state_dir)
    # Created first: the idempotent producer's id is fetched in the background while the topics are set up.
    security = client_security(spec)
    # Pre-encoded: delivery reports for failures only (a Python callback per record costs the loop its time).
    reports = {"delivery.report.only.error": True} if pace and preencode else {}
    with BatchProducer(bootstrap, {**PRODUCER_CONFIG, **reports, **security}, report_state=pace) as producer:
        topics = [e.topic for e in encoders.values()]
        _say_topics(ensure_topics(bootstrap, topics, topic_partitions, security))  # type: ignore[arg-type]
        if pace and not producer.wait_until_ready(timeout_s=10.0):  # time 0 comes after: the schedule is kept
            click.echo("the producer has no producer id after 10 s; pacing starts anyway", err=True)
        schedule = Schedule(rate, duration, seed, skew, keys, skew_over, pace, pace and preencode)
        _generate(producer, spec, encoders, schedule, progress)


@dataclass(frozen=True)
class Schedule:
    """What `generate` produces and how: per-stream rate, length, seed, key skew; paced; encoded in advance."""

    rate: float
    duration: float
    seed: int
    skew: float
    keys: int
    skew_over: str
    pace: bool
    preencode: bool

    def workload(self, spec: JoinSpec, start_ms: int) -> Workload:
        config = WorkloadConfig(
            rate=self.rate,
            duration_s=self.duration,
            seed=self.seed,
            bias=self.skew,
            n_keys=self.keys,
            start_ms=start_ms,
            skew_over=self.skew_over,
        )
        return Workload(spec, config)


def _prepared(spec: JoinSpec, encoders: dict[str, StreamEncoder], schedule: Schedule) -> tuple[Workload, Iterator]:
    """The workload from schedule time 0 on, and its batches; pre-encoded ones are ready when this returns, and
    time 0 is set just after (waiting for it is left to the caller)."""
    if not schedule.preencode:
        workload = schedule.workload(spec, int(time.time() * 1000))
        return workload, _batches(workload, encoders, 1 if schedule.pace else PRODUCE_BATCH)
    began = time.perf_counter()
    lead = lead_s(schedule.workload(spec, 0), encoders)
    workload = schedule.workload(spec, int((time.time() + lead) * 1000))
    encoded = encode_schedule(workload, encoders)
    total = sum(len(r) for _, per_stream in encoded for r in per_stream.values())
    click.echo(
        f"pre-encoded: {total} events in {time.perf_counter() - began:.2f} s; schedule time 0 at "
        f"{workload.config.start_ms} ms since the epoch (lead {lead:.2f} s)",
        err=True,
    )
    return workload, iter(encoded)


def _generate(
    producer: BatchProducer,
    spec: JoinSpec,
    encoders: dict[str, StreamEncoder],
    schedule: Schedule,
    progress: bool | None,
) -> None:
    began = time.perf_counter()
    try:
        workload, batches = _prepared(spec, encoders, schedule)
    except ValueError as err:
        raise click.UsageError(str(err)) from None
    rate, duration, pace = schedule.rate, schedule.duration, schedule.pace
    # schedule time 0 on the monotonic clock (pre-encoded: in the future)
    started_wall = time.perf_counter() + workload.config.start_ms / 1000 - time.time()
    skewed = {name: field or "(none)" for name, field in workload.join_attributes.items()}
    click.echo(
        f"join keys (b-model b={schedule.skew} over {schedule.skew_over}, {schedule.keys} values): {skewed}",
        err=True,
    )

    counts: Counter[str] = Counter()
    lags: list[float] = []  # per batch: acknowledged this long after its last event was due
    disable = None if progress is None else not progress
    sending_from = max(time.perf_counter(), started_wall)
    with tqdm(total=round(rate * duration * len(encoders)), unit="ev", desc="generating", disable=disable) as bar:
        for due_s, per_stream in batches:
            if pace:
                wait = due_s - (time.perf_counter() - started_wall)
                if wait > 0:
                    time.sleep(wait)
            for name, records in per_stream.items():
                if records:
                    _produce(producer, encoders[name].topic, records)  # type: ignore[arg-type]
                    counts[name] += len(records)
                    bar.update(len(records))
            if pace:
                lags.append(time.perf_counter() - started_wall - due_s)
                if len(lags) == 1 and lags[0] > 0:
                    started_wall += lags[0]  # start-up delay: pace from here (event times stay as scheduled)
                bar.set_postfix(lag_s=f"{lags[-1]:.3f}", refresh=False)
    seconds = time.perf_counter() - (sending_from if schedule.preencode else began)
    total = sum(counts.values())
    click.echo(
        f"{total} events in {seconds:.2f} s ({total / seconds:,.0f} events/s); "
        + ", ".join(f"{name} -> {encoders[name].topic}: {counts[name]}" for name in encoders),
        err=True,
    )
    if lags:
        # The producer holds its id before time 0 (`wait_until_ready`); a first batch late all the same (a slow
        # broker) re-bases pacing, so event times then run that much behind the wall clock, and later lags are steady.
        steady = lags[1:] or [0.0]
        click.echo(
            f"start-up: first batch acknowledged {max(lags[0], 0.0):.3f} s after it was due (pacing re-based); "
            f"then acknowledged behind schedule by mean {sum(steady) / len(steady):.3f} s, "
            f"p99 {float(np.percentile(steady, 99)):.3f} s, max {max(steady):.3f} s "
            f"(slices of {CHUNK_S * 1000:g} ms)",
            err=True,
        )


def main() -> None:  # pragma: no cover - for `python -m windjoin.pipelines.cli.produce generate ...`
    group = click.Group(commands=[produce, generate])
    group(prog_name=os.path.basename(sys.argv[0]))


if __name__ == "__main__":  # pragma: no cover
    main()
