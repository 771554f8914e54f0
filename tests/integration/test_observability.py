"""Observability on a real local run: ``status`` from Kafka alone and a live /metrics.

A cartpole-ppo run with 4 workers (a target it cannot reach, so it runs until stopped) is
followed by the status view's own source (telemetry topic + broker). Once every task
reports, the trainer's and a worker's Prometheus endpoints answer with the named series;
then rollout-1 is stopped with SIGSTOP, and status must show it, and only it, SILENT
within the stated time (``silent_after``: max(10 s, 3x its report interval)) plus one
refresh. The ``status`` command prints the same from a fresh read of the topic.
"""

from __future__ import annotations

import os
import signal
import time
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest
from prometheus_client.parser import text_string_to_metric_families

from coach_stream.cli.main import main
from coach_stream.cli.status import StatusSource
from coach_stream.observability.status import RunStatus, silent_after
from coach_stream.orchestrators import LaunchSettings, LocalOrchestrator, build_run_spec
from coach_stream.orchestrators.launcher import prepare_topics
from coach_stream.transport.settings import KafkaSettings

pytestmark = pytest.mark.timeout(240)

WORKERS = [f"rollout-{i}" for i in range(4)]
UNREACHABLE = ("env_step_budget=1000000000000", "target_return=1000000000.0")
START_S = 150.0  # six processes starting on two shared cores
REFRESH_S = 0.5
T = TypeVar("T")


def until(get: Callable[[], T], ok: Callable[[T], bool], timeout: float, what: str) -> T:
    """Poll ``get`` (each call waits on the broker) until ``ok``, or fail saying ``what``."""
    deadline = time.monotonic() + timeout
    value = get()
    while not ok(value):
        assert time.monotonic() < deadline, f"{what} within {timeout:g} s; last: {value}"
        value = get()
    return value


def scrape(url: str) -> dict[tuple[str, str], float]:
    """``(series, task) -> value`` of the coach_stream series at ``url`` (via 127.0.0.1)."""
    port = url.rsplit(":", 1)[1].split("/", 1)[0]
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    return {
        (sample.name, sample.labels["task"]): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name.startswith("coach_stream_") and "partition" not in sample.labels
    }


def everyone_reports(status: RunStatus) -> bool:
    rows = {row.task: row for row in status.tasks}
    return (
        all(
            name in rows and rows[name].state == "running" and rows[name].metrics_url
            for name in ["trainer", *WORKERS]
        )
        and (status.trainer.policy_version or 0) >= 1
    )


def test_a_stopped_worker_is_shown_silent_and_live_tasks_serve_metrics(
    orchestrator: LocalOrchestrator,
    kafka_bootstrap: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    run_id = f"obs-{uuid.uuid4().hex[:8]}"
    settings = LaunchSettings(
        preset="cartpole-ppo", run_id=run_id, workers=4, kafka_bootstrap=kafka_bootstrap,
        checkpoints=(tmp_path / "ckpt").as_uri(), overrides=("metrics_port=0", *UNREACHABLE),
    )  # fmt: skip
    prepare_topics(settings)
    orchestrator.submit(build_run_spec(settings))
    kafka = KafkaSettings(bootstrap_servers=kafka_bootstrap)

    with StatusSource(kafka, run_id) as source:
        status = until(
            lambda: source.refresh(REFRESH_S), everyone_reports, START_S,
            "the trainer and 4 workers reporting, each with its /metrics URL",
        )  # fmt: skip
        assert status.silent == [] and status.state == "running"

        trainer = scrape(status.task("trainer").metrics_url or "")
        assert trainer[("coach_stream_env_steps_total", "trainer")] > 0
        assert trainer[("coach_stream_policy_version", "trainer")] >= 1
        assert ("coach_stream_updates_total", "trainer") in trainer
        assert ("coach_stream_transitions_consumed_total", "trainer") in trainer
        worker = scrape(status.task("rollout-2").metrics_url or "")
        assert worker[("coach_stream_env_steps_total", "rollout-2")] > 0
        assert ("coach_stream_chunks_produced_total", "rollout-2") in worker
        assert status.trainer.partitions and len(status.trainer.partitions) == 4  # broker lag

        pid = next(s.pid for s in orchestrator.status(run_id) if s.name == "rollout-1")
        assert pid is not None
        limit = silent_after(source.telemetry.tasks["rollout-1"])
        assert limit == 10.0  # log_every_s 1 s: the 10 s floor
        os.kill(pid, signal.SIGSTOP)
        stopped, stopped_epoch = time.monotonic(), time.time()
        try:
            status = until(
                lambda: source.refresh(REFRESH_S), lambda s: "rollout-1" in s.silent,
                limit + 15.0, "rollout-1 SILENT",
            )  # fmt: skip
            took = time.monotonic() - stopped
            before_stop = stopped_epoch - source.telemetry.tasks["rollout-1"].last_seen
            with capsys.disabled():
                print(
                    f"\nrollout-1 shown SILENT {took:.1f} s after SIGSTOP, its last event "
                    f"{before_stop:.1f} s before it (limit {limit:g} s)"
                )
            assert status.silent == ["rollout-1"], status.tasks
            assert all(status.task(w).state == "running" for w in WORKERS if w != "rollout-1")
            # Not before the limit has passed since its last event (about one report interval
            # before the SIGSTOP, more on a loaded machine). How soon after is bounded by the
            # wait above (limit + 15 s): a loaded machine stretches each refresh, so a bound of
            # a few refreshes measured the machine, not the view.
            assert before_stop >= -0.1  # nothing it sent after it was stopped
            assert took >= limit - before_stop - 0.1

            monkeypatch.setenv("COLUMNS", "200")
            assert main(["status", run_id, "--kafka", kafka_bootstrap]) == 0
            shown = capsys.readouterr().out
            row = next(line for line in shown.splitlines() if "rollout-1" in line and "│" in line)
            assert "SILENT" in row
            others = [line for line in shown.splitlines() if "rollout-" in line and "│" in line]
            assert sum("SILENT" in line for line in others) == 1 and len(others) == 4
        finally:
            os.kill(pid, signal.SIGCONT)
