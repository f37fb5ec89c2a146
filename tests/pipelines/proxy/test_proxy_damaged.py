"""Redis results that break their index entry, through a real `windjoin proxy` process (issue 47): a crafted zstd
Arrow chunk of 20M rows stored under an entry that says 10, and a malformed index member, are a 502 "damaged"
naming the task and batch, counted, with none of their rows served, while the proxy's peak resident set stays
within 50 MB of its size before the query (before: 310 MB -> 3.87 GB and the rows served); a continuous query that
reaches a damaged piece ends saying so, with a cursor past it, and resuming from that cursor goes on with the next
batch instead of meeting the damage again."""

from __future__ import annotations

from pathlib import Path

import httpx
import orjson

from tests.pipelines.proxy_helpers import AUTH, ProxyProcess, Results, make_spec, new_namespace
from tests.support.damaged_chunks import crafted_chunk, damage
from windjoin.connectors.redis.client import redis_client
from windjoin.pipelines.cli.query import sse_events

CRAFTED_ROWS = 20_000_000
MB = 1 << 20


def test_a_chunk_past_its_entry_is_damaged_never_served_nor_decoded(redis_url: str, tmp_path: Path) -> None:
    results = Results(make_spec(redis_url, None), new_namespace(), redis_url, None)
    chunk = crafted_chunk(results, "a", CRAFTED_ROWS)
    print(f"crafted chunk: {len(chunk) / 1024:.0f} KiB of zstd, {CRAFTED_ROWS} rows, under an entry of 10")
    damage(results, 0, chunk)  # batch 0: result times in [0, 50)
    results.write(10, t0=100)  # batch 1: sound
    admin = redis_client(redis_url)
    namespace = ["--namespace", results.namespace]
    with ProxyProcess(results.spec, tmp_path, namespace) as proxy, httpx.Client(headers=AUTH, timeout=120) as client:
        base = f"{proxy.url}/v1/tasks/a"
        warm = client.get(f"{base}/results", params={"from": 100, "to": 200})  # batch 1 alone
        assert warm.status_code == 200 and len(warm.json()["rows"]) == 10, warm.text
        idle = proxy.status("VmRSS")
        proxy.reset_peak()
        page = client.get(f"{base}/results", params={"from": 0, "to": 200})
        one_time_peak = proxy.status("VmHWM")
        assert page.status_code == 502, page.text[:300]
        assert page.json()["detail"].startswith("damaged: task 'a' batch 0: its Redis results break their index")
        assert "Traceback" not in proxy.log.read_text()

        proxy.reset_peak()
        started = client.get(f"{base}/stream", params={"from": 0})  # the feed's first piece is the damaged one
        stream_peak = proxy.status("VmHWM")
        assert started.status_code == 502 and started.json()["detail"].startswith("damaged: task 'a' batch 0")
        past = started.json()["cursor"]  # past the damaged piece: batch 1 comes next
        with client.stream("GET", f"{base}/stream", params={"cursor": past}) as response:
            events = sse_events(response.iter_lines())
            kind, cursor, data = next(events)
            assert kind == "ready" or (kind == "results" and {r["batch_id"] for r in orjson.loads(data)} == {1})
            if kind == "ready":
                kind, cursor, data = next(events)
            assert kind == "results" and [r["batch_id"] for r in orjson.loads(data)] == [1] * 10
            proxy.reset_peak()
            damage(results, 2, chunk)  # a damaged batch while the stream is open
            kind, _, data = next(events)
            live_peak = proxy.status("VmHWM")
        assert kind == "end", data
        end = orjson.loads(data)
        assert end["error"].startswith("damaged: task 'a' batch 2") and end["cursor"] != cursor
        results.write(10, t0=300)  # batch 3: the resumed stream goes on with it, past batch 2
        with client.stream("GET", f"{base}/stream", params={"cursor": end["cursor"]}) as response:
            events = (e for e in sse_events(response.iter_lines()) if e[0] != "ready")
            kind, _, data = next(events)
            assert kind == "results" and [r["batch_id"] for r in orjson.loads(data)] == [3] * 10

        admin.zadd(f"{results.namespace}:{{a}}:index", {"4:0:0:not an entry": 150})  # a malformed index member
        bad_member = client.get(f"{base}/results", params={"from": 100, "to": 150})
        assert bad_member.status_code == 502 and "damaged: task 'a' batch 4" in bad_member.json()["detail"]
        metrics = client.get(f"{proxy.url}/metrics").text
        log = proxy.log.read_text()
    print(
        f"proxy RSS {idle / MB:.0f} MB before; peak +{(one_time_peak - idle) / MB:.1f} MB over the one-time query, "
        f"+{(stream_peak - idle) / MB:.1f} MB over the stream's start, +{(live_peak - idle) / MB:.1f} MB while it met "
        "the damaged batch"
    )
    assert max(one_time_peak, stream_peak, live_peak) - idle < 50 * MB
    assert 'windjoin_proxy_damaged_results_total{kind="results"} 2.0' in metrics
    assert 'windjoin_proxy_damaged_results_total{kind="stream"} 2.0' in metrics
    assert "Traceback" not in log
