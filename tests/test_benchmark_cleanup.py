"""A benchmark that fails midway leaves nothing running: its broker, Redis and load generator stop (issue 29).

The run is the benchmark's own `main` with its services really started and a real `windjoin generate` running
when a phase fails (or is interrupted); Spark is replaced by a stand-in, so the test needs no JVM.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

import benchmarks.latency as latency
import benchmarks.pipeline as pipeline
from windjoin.connectors.local import processes, services
from windjoin.connectors.redis.client import ENV_PASSWORD_FILE


class FakeSpark:
    """What the benchmarks' set-up and tear-down touch of a SparkSession."""

    def __init__(self) -> None:
        self.stopped = False
        self.sparkContext = self
        self.streams = self
        self.active: list = []

    def setLogLevel(self, _level: str) -> None:
        pass

    def stop(self) -> None:
        self.stopped = True


class Run:
    """Records what the benchmark started: its services (by PID), its generator, its work folder."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.pids: list[int] = []
        self.generator: subprocess.Popen | None = None
        self.state_dirs: list[Path] = []
        self.spark = FakeSpark()
        real_up = services.up

        def up(config: services.ServicesConfig) -> list:
            started = real_up(config)
            self.pids += [s.service.pid for s in started]
            self.state_dirs.append(config.state_dir)
            return started

        monkeypatch.setattr(services, "up", up)
        # the benchmark names its Redis' password file in os.environ: put the session's back afterwards
        before = os.environ.get(ENV_PASSWORD_FILE)
        monkeypatch.setenv(ENV_PASSWORD_FILE, before or "")  # recorded, so restored (or removed) afterwards
        if before is None:
            monkeypatch.delenv(ENV_PASSWORD_FILE)

    def start_generator_and_fail(self, error: BaseException, bootstrap: str, workdir: Path) -> None:
        """A phase that starts the load generator (as the benchmarks do), then fails while it runs."""
        topics = pipeline.new_topics("cleanup")
        spec = pipeline.spec_dict(pipeline.Params(), topics, workdir / "ckpt", None)
        path = workdir / "spec-cleanup.yaml"
        path.write_text(yaml.safe_dump(spec))
        cmd = pipeline.generate_cmd(path, bootstrap, pipeline.Params(), 200.0, 30.0, pace=True)
        self.generator = pipeline.run_generator(cmd, workdir / "generator-cleanup.log")
        pipeline.schedule_start_ms(workdir / "generator-cleanup.log", self.generator, timeout_s=60)
        assert self.generator.poll() is None  # paced for 30 s: running when the phase fails
        raise error

    def assert_nothing_left(self) -> None:
        assert self.pids and self.generator is not None and self.spark.stopped
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and any(processes.is_alive(pid) for pid in self.pids):
            time.sleep(0.2)
        assert not [pid for pid in self.pids if processes.is_alive(pid)]
        assert self.generator.poll() is not None
        assert not any(d.exists() for d in self.state_dirs)  # the scratch folder is gone with them


@pytest.mark.parametrize("error", [RuntimeError("a phase failed"), KeyboardInterrupt()], ids=["error", "ctrl-c"])
def test_latency_benchmark_stops_its_services_and_generator_when_a_phase_fails(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, error: BaseException
) -> None:
    run = Run(monkeypatch)
    monkeypatch.setattr("windjoin.connectors.spark.session.build_local_spark", lambda **_: run.spark)
    monkeypatch.setattr(latency, "floor", lambda *_a, **_k: {"stateful": {"batch_ms_median": 1.0}})
    monkeypatch.setattr(latency, "pieces_floor", lambda *_a, **_k: {"batch_ms_median": 1.0})

    def failing_variant(_spark: Any, bootstrap: str, _redis: str, workdir: Path, *_a: Any) -> dict:
        run.start_generator_and_fail(error, bootstrap, workdir)
        return {}

    monkeypatch.setattr(latency, "run_variant", failing_variant)
    with pytest.raises(type(error)):
        latency.main(["--quick", "--out", str(tmp_path / "pipeline.json")])
    run.assert_nothing_left()
    assert not (tmp_path / "pipeline.json").exists()


@pytest.mark.parametrize("error", [RuntimeError("a phase failed"), KeyboardInterrupt()], ids=["error", "ctrl-c"])
def test_pipeline_benchmark_stops_its_broker_and_generator_when_a_phase_fails(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, error: BaseException
) -> None:
    run = Run(monkeypatch)

    def open_session(state_dir: Path, _name: str) -> tuple[str, Any]:
        [kafka] = services.up(services.ServicesConfig(state_dir=state_dir, redis=False))
        return kafka.service.url, run.spark

    def failing_prefill(self: pipeline.Bench, _density: float, _events: int) -> dict:
        run.start_generator_and_fail(error, self.bootstrap, self.workdir)
        return {}

    monkeypatch.setattr(pipeline, "open_session", open_session)
    monkeypatch.setattr(pipeline, "adapter_rate", lambda _params: {})
    monkeypatch.setattr(pipeline.Bench, "prefill", failing_prefill)
    with pytest.raises(type(error)):
        pipeline.main(["--quick", "--out", str(tmp_path / "pipeline.json")])
    run.assert_nothing_left()
