"""The status view as a pure function of folded telemetry, the broker's figures and a clock."""

from __future__ import annotations

import json
from typing import Any

import pytest
from rich.console import Console

from coach_stream.observability.fold import RunTelemetry
from coach_stream.observability.status import (
    SILENT_MIN_S,
    build_status,
    eval_trend,
    render_status,
    reported_positions,
    silent_after,
)
from coach_stream.transport.lag import BrokerFigures, PartitionOffsets

T0 = 1_700_000_000.0
NO_BROKER = BrokerFigures()


def trainer_progress(t: float, version: int, steps: int, **extra: Any) -> dict[str, Any]:
    return {
        "event": "progress", "time": t, "time/env_steps": steps, "time/policy_version": version,
        "time/updates_per_s": 2.0, "time/env_steps_per_s": 500.0, "time/log_every_s": 1.0,
        "rollout/dropped_stale": 3, "rollout/dropped_stale_steps": 96, **extra,
    }  # fmt: skip


def worker_progress(t: float, worker: int, version: int, **extra: Any) -> dict[str, Any]:
    return {
        "event": "progress", "time": t, "worker_id": worker, "env_steps": int(100 * t - 100 * T0),
        "env_steps_per_s": 100.0, "chunks": 7, "episodes": 4, "policy_version": version,
        "log_every_s": 1.0, **extra,
    }  # fmt: skip


def run_with_four_workers(stopped: str = "rollout-1", stop_after_s: float = 5.0) -> RunTelemetry:
    """A run whose trainer and 4 workers report every second for 20 s, but ``stopped``
    reports last at ``stop_after_s``."""
    telemetry = RunTelemetry("r1")
    telemetry.feed("trainer", {"event": "started", "time": T0, "preset": "cartpole-ppo"})
    for worker in range(4):
        telemetry.feed(f"rollout-{worker}", {"event": "started", "time": T0, "worker_id": worker})
    for second in range(1, 21):
        t = T0 + second
        telemetry.feed("trainer", trainer_progress(t, version=second, steps=1000 * second))
        for worker in range(4):
            task = f"rollout-{worker}"
            if task == stopped and second > stop_after_s:
                continue
            telemetry.feed(task, worker_progress(t, worker, version=second - worker % 2))
    return telemetry


def test_a_worker_is_silent_only_after_the_stated_time() -> None:
    telemetry = run_with_four_workers(stopped="rollout-1", stop_after_s=5)
    last_heard = T0 + 5
    assert silent_after(telemetry.tasks["rollout-1"]) == SILENT_MIN_S == 10.0

    before = build_status(telemetry, NO_BROKER, now=last_heard + 9.9)
    assert before.silent == []  # rollout-1 quiet for 9.9 s; the others for 0 s (now < T0+20)

    after = build_status(telemetry, NO_BROKER, now=T0 + 20.5)  # 15.5 s since rollout-1
    assert after.silent == ["rollout-1"]
    assert after.task("rollout-1").state == "SILENT"
    assert after.task("rollout-1").last_seen_s == pytest.approx(15.5)
    assert {t.task: t.state for t in after.tasks if t.task != "rollout-1"} == {
        "trainer": "running", "rollout-0": "running", "rollout-2": "running",
        "rollout-3": "running",
    }  # fmt: skip
    assert after.state == "running"
    text = _text(after)
    assert "rollout-1" in text and "silent: rollout-1" in text


def test_the_silence_limit_is_three_report_intervals_when_that_is_longer() -> None:
    telemetry = RunTelemetry("r1")
    telemetry.feed("rollout-0", worker_progress(T0, 0, 1, log_every_s=5.0))
    assert silent_after(telemetry.tasks["rollout-0"]) == 15.0
    assert not build_status(telemetry, NO_BROKER, now=T0 + 14.0).tasks[0].silent
    assert build_status(telemetry, NO_BROKER, now=T0 + 16.0).tasks[0].silent


def test_exited_and_starting_tasks_are_not_silent() -> None:
    telemetry = RunTelemetry("r1")
    telemetry.feed("rollout-0", worker_progress(T0, 0, 1))
    telemetry.feed("rollout-0", {"event": "exit", "time": T0 + 1, "reason": "target_reached"})
    telemetry.feed("rollout-1", {"event": "started", "time": T0, "worker_id": 1})
    status = build_status(telemetry, NO_BROKER, now=T0 + 30)
    assert status.task("rollout-0").state == "exited (target_reached)"
    assert status.task("rollout-1").state == "starting"  # loading, waiting for version 0
    assert status.silent == []
    assert build_status(telemetry, NO_BROKER, now=T0 + 61).silent == ["rollout-1"]


def test_the_evaluator_is_judged_by_its_own_rhythm() -> None:
    telemetry = RunTelemetry("r1")
    for round_, t in enumerate((0.0, 8.0, 16.0)):  # one round every 8 s
        event = {"event": "evaluation", "time": T0 + t, "policy_version": round_,
                 "mean_return": 10.0 * round_, "episodes": 20}  # fmt: skip
        telemetry.feed("evaluator", event)
    assert silent_after(telemetry.tasks["evaluator"]) == 24.0
    row = build_status(telemetry, NO_BROKER, now=T0 + 16).task("evaluator")
    assert (row.state, row.policy_version, row.episodes) == ("running", 2, 20)
    assert not build_status(telemetry, NO_BROKER, now=T0 + 16 + 23).silent
    assert build_status(telemetry, NO_BROKER, now=T0 + 16 + 25).silent == ["evaluator"]


def test_policy_lag_of_each_worker_is_behind_the_trainers_newest_version() -> None:
    status = build_status(run_with_four_workers(), NO_BROKER, now=T0 + 20)
    assert status.task("trainer").policy_version == 20
    assert status.task("trainer").policy_lag is None  # it announces the versions
    assert status.task("rollout-0").policy_lag == 0  # acts with 20
    assert status.task("rollout-3").policy_lag == 1  # acts with 19
    assert status.task("rollout-1").policy_lag == 16  # stopped while acting with 4
    assert status.task("rollout-2").chunks == 7 and status.task("rollout-2").episodes == 4


def test_trainer_figures_rates_and_checkpoint_age() -> None:
    telemetry = RunTelemetry("r1")
    telemetry.feed("trainer", trainer_progress(T0, 3, 1000))
    telemetry.feed(
        "trainer",
        trainer_progress(
            T0 + 2, 4, 1400, **{"rollout/dropped_stale_steps": 196,
                                "time/checkpoint_version": 4, "time/checkpoint_saved_at": T0 + 1,
                                "train/samples_per_insert": 31.5}
        ),
    )  # fmt: skip
    trainer = build_status(telemetry, NO_BROKER, now=T0 + 7).trainer
    assert trainer.consumed_per_s == pytest.approx((1400 + 196 - 1000 - 96) / 2)  # stale too
    assert trainer.updates_per_s == 2.0 and trainer.env_steps_per_s == 500.0
    assert trainer.checkpoint_version == 4 and trainer.checkpoint_age_s == pytest.approx(6.0)
    assert trainer.samples_per_insert == 31.5 and trainer.stale_chunks == 3


def test_consumer_lag_in_records_and_seconds_per_partition() -> None:
    broker = BrokerFigures(
        partitions=(
            PartitionOffsets(0, end=500, committed=450, position=480,
                             oldest_unread_ms=int((T0 - 4.0) * 1000)),
            PartitionOffsets(1, end=300, committed=300, position=300),
            PartitionOffsets(2, end=90, committed=None, position=0, oldest_unread_ms=None),
        ),
        dead_letters=2,
    )  # fmt: skip
    status = build_status(RunTelemetry("r1"), broker, now=T0)
    rows = {p.partition: p for p in status.trainer.partitions}
    assert (rows[0].lag_records, rows[0].lag_s) == (20, pytest.approx(4.0))
    assert (rows[1].lag_records, rows[1].lag_s) == (0, 0.0)
    assert (rows[2].lag_records, rows[2].lag_s) == (90, None)  # its timestamp is unknown
    assert status.trainer.lag_records == 110 and status.trainer.lag_s == pytest.approx(4.0)
    assert status.dead_letters == 2
    assert "110 records" in _text(status)


def test_the_trainers_reported_positions_are_read_from_json_text() -> None:
    telemetry = RunTelemetry("r1")
    positions = json.dumps({"0": 12, "1": 40})  # nested values travel as JSON text
    telemetry.feed("trainer", trainer_progress(T0, 1, 10, **{"rollout/positions": positions}))
    assert reported_positions(telemetry.trainer) == {0: 12, 1: 40}
    assert reported_positions(None) == {}


def test_run_state_elapsed_and_evaluation_trend() -> None:
    telemetry = run_with_four_workers()
    for i, mean in enumerate((20.0, 30.0, 40.0, 100.0, 150.0, 200.0)):
        telemetry.feed("evaluator", {"event": "evaluation", "time": T0 + 2 * i,
                                     "mean_return": mean, "episodes": 20})  # fmt: skip
    status = build_status(telemetry, NO_BROKER, now=T0 + 20)
    assert status.elapsed_s == 20.0 and status.env_steps == 20_000
    assert status.trend is not None and status.trend.direction == "rising"
    assert status.trend.delta == pytest.approx(150.0 - 30.0) and status.trend.rounds == 6
    assert status.eval_rounds == 6

    telemetry.feed("trainer", {"event": "finished", "time": T0 + 21, "reason": "target_reached",
                               "eval_mean_return": 480.0})  # fmt: skip
    done = build_status(telemetry, NO_BROKER, now=T0 + 100)
    assert done.state == "finished (target_reached)" and done.elapsed_s == 21.0
    assert done.eval_mean == 480.0
    assert done.task("trainer").state == "exited (target_reached)"


def test_a_silent_trainer_is_the_runs_state() -> None:
    status = build_status(run_with_four_workers(), NO_BROKER, now=T0 + 40)
    assert status.state == "trainer SILENT"
    assert set(status.silent) == {"trainer", "rollout-0", "rollout-1", "rollout-2", "rollout-3"}


def test_trend_needs_two_rounds_and_reads_flat_within_two_percent() -> None:
    from coach_stream.observability.fold import EvaluationRound

    def rounds(*means: float) -> list[EvaluationRound]:
        return [EvaluationRound(T0 + i, i, m, 20) for i, m in enumerate(means)]

    assert eval_trend(rounds(10.0)) is None
    flat = eval_trend(rounds(100.0, 101.0))
    assert flat is not None and flat.direction == "flat"
    falling = eval_trend(rounds(200.0, 200.0, 200.0, 150.0, 100.0, 50.0, 20.0))
    assert falling is not None and falling.direction == "falling" and falling.rounds == 6


def test_a_restarted_task_counts_its_restarts_and_rates_start_afresh() -> None:
    telemetry = RunTelemetry("r1")
    telemetry.feed("trainer", trainer_progress(T0, 1, 100))
    telemetry.feed("trainer", {"event": "started", "time": T0 + 1})
    telemetry.feed("trainer", {"event": "started", "time": T0 + 2})
    telemetry.feed("trainer", trainer_progress(T0 + 3, 2, 50))
    status = build_status(telemetry, NO_BROKER, now=T0 + 3)
    assert status.task("trainer").restarts == 1
    assert status.trainer.consumed_per_s is None  # never a rate across a restart


def _text(status: Any) -> str:
    console = Console(record=True, width=160)
    console.print(render_status(status))
    return console.export_text()
