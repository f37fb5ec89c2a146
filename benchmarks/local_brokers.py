"""The two local brokers side by side: how long `windjoin services up` takes until each answers, and its memory.

For Tansu and Apache Kafka (connectors/local/services.py), in fresh state dirs: the first start (Apache Kafka
formats its storage then), then `--restarts` restarts on the same state dir (Apache Kafka on its log); each timed
from the call to `up` until the broker answers a metadata request (what `up` waits for). Memory: the broker
process' resident set (VmRSS) after `--idle-s` seconds idle, and after producing and reading back `--records`
records of 100 bytes on one topic. Docs/streaming.md takes its figures from the results file.

    python -m benchmarks.local_brokers [--quick]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.machine import machine_facts
from benchmarks.results_file import write_results
from windjoin.connectors.kafka.admin import create_topics
from windjoin.connectors.kafka.producer import produce
from windjoin.connectors.local import services

RESULTS = Path(__file__).resolve().parent / "results" / "local_brokers.json"


def rss_mb(pid: int) -> float:
    """The process' resident set, MB (VmRSS in /proc/<pid>/status)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


def _timed_up(config: services.ServicesConfig) -> tuple[float, services.RunningService]:
    start = time.monotonic()
    [started] = services.up(config)
    return time.monotonic() - start, started.service


def measure(broker: str, state_dir: Path, restarts: int, idle_s: float, records: int) -> dict[str, Any]:
    """Start-up seconds (first, restarts) and RSS (idle, after a load) of one broker."""
    config = services.ServicesConfig(state_dir=state_dir, redis=False, broker=broker)
    first_s, service = _timed_up(config)
    try:
        time.sleep(idle_s)
        idle = rss_mb(service.pid)
        topic = f"bench-{broker}"
        create_topics(service.url, topic, 1)
        produce(service.url, topic, [(None, b"x" * 100, 1_700_000_000_000 + i) for i in range(records)])
        loaded = rss_mb(service.pid)
    finally:
        services.down(state_dir)
    restart_s = []
    for _ in range(restarts):
        seconds, _service = _timed_up(config)
        restart_s.append(seconds)
        services.down(state_dir)
    return {"first_start_s": first_s, "restart_s": restart_s, "idle_rss_mb": idle, "loaded_rss_mb": loaded}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one restart, 1 s idle, 10,000 records")
    parser.add_argument("--restarts", type=int, default=3)
    parser.add_argument("--idle-s", type=float, default=10.0)
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    if args.quick:
        args.restarts, args.idle_s, args.records = 1, 1.0, 10_000
    result: dict[str, Any] = {
        "benchmark": "local_brokers",
        "machine": machine_facts(),
        "params": {"restarts": args.restarts, "idle_s": args.idle_s, "records": args.records},
        "load_before": list(os.getloadavg()),
        "brokers": {},
    }
    with tempfile.TemporaryDirectory(prefix="windjoin-brokers-") as tmp:
        for broker in services.BROKERS:
            figures = measure(broker, Path(tmp) / broker, args.restarts, args.idle_s, args.records)
            result["brokers"][broker] = figures
            restarts = ", ".join(f"{s:.2f}" for s in figures["restart_s"])
            print(
                f"{broker:6} first start {figures['first_start_s']:.2f} s, restarts {restarts} s; "
                f"RSS idle {figures['idle_rss_mb']:.0f} MB, after {args.records:,} records "
                f"{figures['loaded_rss_mb']:.0f} MB"
            )
    result["load_after"] = list(os.getloadavg())
    print(write_results(result, args.out, _plot))


def _plot(result: dict[str, Any], png: Path) -> None:
    import matplotlib.pyplot as plt

    brokers = list(result["brokers"])
    fig, (left, right) = plt.subplots(1, 2, figsize=(8, 3.2))
    left.bar(brokers, [result["brokers"][b]["first_start_s"] for b in brokers])
    left.set_ylabel("first start, s")
    right.bar(brokers, [result["brokers"][b]["idle_rss_mb"] for b in brokers])
    right.set_ylabel("idle RSS, MB")
    fig.tight_layout()
    fig.savefig(png)
    plt.close(fig)


if __name__ == "__main__":
    main()
