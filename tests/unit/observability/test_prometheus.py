"""The /metrics endpoint: started on port 0, scraped over HTTP, series named and labelled."""

from __future__ import annotations

import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from coach_stream.errors import ConfigError
from coach_stream.observability.prometheus import MetricsEndpoint, task_port

TRAINER_PROGRESS = {
    "time/env_steps": 12_800, "time/updates": 40, "time/updates_per_s": 2.5,
    "time/env_steps_per_s": 640.0, "time/policy_version": 7, "rollout/policy_lag_mean": 0.25,
    "rollout/dropped_stale": 3, "rollout/dropped_stale_steps": 96, "rollout/dead_lettered": 1,
    "train/samples_per_insert": 31.5, "time/checkpoint_version": 6,
    "time/checkpoint_saved_at": 1_700_000_000.5, "eval/mean_return": None,
    "rollout/consumer_lag": '{"0": 5, "1": 0}',
}  # fmt: skip
WORKER_PROGRESS = {
    "worker_id": 2, "env_steps": 4096, "env_steps_per_s": 300.0, "chunks": 128, "episodes": 17,
    "policy_version": 6, "mean_return": 21.5, "rejected_versions": 0,
}  # fmt: skip


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        assert response.status == 200
        text = response.read().decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def labels(task: str, **extra: str) -> tuple[tuple[str, str], ...]:
    return tuple(sorted({"run_id": "r1", "task": task, **extra}.items()))


def test_the_trainer_endpoint_answers_with_the_named_series() -> None:
    with MetricsEndpoint(0, "r1", "trainer", addr="127.0.0.1") as endpoint:
        assert endpoint.port is not None and endpoint.port > 0
        assert endpoint.announcement()["url"] == (
            f"http://{endpoint.announcement()['host']}:{endpoint.port}/metrics"
        )
        assert not any(name.startswith("coach_stream_") for name, _ in scrape(endpoint.port))
        endpoint.exporter("progress", TRAINER_PROGRESS)
        endpoint.exporter("evaluation", {"mean_return": 1.0})  # not a progress event: ignored
        got = scrape(endpoint.port)
    t = labels("trainer")
    assert got[("coach_stream_env_steps_total", t)] == 12_800
    assert got[("coach_stream_updates_total", t)] == 40
    assert got[("coach_stream_updates_per_second", t)] == 2.5
    assert got[("coach_stream_transitions_consumed_total", t)] == 12_800 + 96
    assert got[("coach_stream_policy_version", t)] == 7
    assert got[("coach_stream_policy_lag_versions", t)] == 0.25
    assert got[("coach_stream_samples_per_insert", t)] == 31.5
    assert got[("coach_stream_stale_chunks_dropped_total", t)] == 3
    assert got[("coach_stream_dead_lettered_total", t)] == 1
    assert got[("coach_stream_checkpoint_version", t)] == 6
    assert got[("coach_stream_checkpoint_timestamp_seconds", t)] == 1_700_000_000.5
    assert got[("coach_stream_consumer_lag_records", labels("trainer", partition="0"))] == 5
    assert got[("coach_stream_consumer_lag_records", labels("trainer", partition="1"))] == 0
    assert ("coach_stream_eval_mean_return", t) not in got  # null: unknown, not 0
    assert ("coach_stream_episodes_total", t) not in got  # a worker's series
    assert any(name == "process_resident_memory_bytes" for name, _ in got)


def test_a_worker_endpoint_has_the_worker_series() -> None:
    with MetricsEndpoint(0, "r1", "rollout-2", addr="127.0.0.1") as endpoint:
        assert endpoint.port is not None
        endpoint.exporter("progress", WORKER_PROGRESS)
        got = scrape(endpoint.port)
    w = labels("rollout-2")
    assert got[("coach_stream_env_steps_total", w)] == 4096
    assert got[("coach_stream_env_steps_per_second", w)] == 300.0
    assert got[("coach_stream_chunks_produced_total", w)] == 128
    assert got[("coach_stream_episodes_total", w)] == 17
    assert got[("coach_stream_policy_version", w)] == 6
    assert got[("coach_stream_episode_return_mean", w)] == 21.5
    assert got[("coach_stream_last_report_timestamp_seconds", w)] > 1_700_000_000
    assert ("coach_stream_updates_total", w) not in got


def test_a_taken_port_is_one_clear_error() -> None:
    with MetricsEndpoint(0, "r1", "trainer", addr="127.0.0.1") as first:
        assert first.port is not None
        with pytest.raises(ConfigError, match=f"cannot listen on port {first.port}"):
            MetricsEndpoint(first.port, "r1", "rollout-0", addr="127.0.0.1").start()


@pytest.mark.parametrize(
    ("base", "task", "port"),
    [(None, "trainer", None), (0, "rollout-3", 0), (9100, "trainer", 9100),
     (9100, "rollout-0", 9101), (9100, "rollout-3", 9104), (9100, "evaluator", None)],
)  # fmt: skip
def test_each_task_has_its_own_port(base: int | None, task: str, port: int | None) -> None:
    assert task_port(base, task) == port
