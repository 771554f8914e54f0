"""Reading a run's progress from the JSON event lines in its task logs."""

from __future__ import annotations

import json
from pathlib import Path

from coach_stream.observability.fold import RunTelemetry, parse_event
from coach_stream.orchestrators.progress import LogFollower, fold_run_logs


def event(name: str, **fields: object) -> str:
    return json.dumps({"event": name, **fields})


def test_only_json_event_lines_are_events() -> None:
    assert parse_event(event("progress", env_steps=3)) == {"event": "progress", "env_steps": 3}
    assert parse_event("INFO trainer started") is None
    assert parse_event('{"event": "progress", "env_st') is None  # half a line
    assert parse_event('{"no_event": 1}') is None


def test_the_follower_returns_only_new_complete_lines(tmp_path: Path) -> None:
    log = tmp_path / "trainer.log"
    log.write_bytes(b"one\ntw")
    follower = LogFollower(tmp_path)
    assert follower.poll() == [("trainer", "one")]
    with log.open("ab") as handle:
        handle.write(b"o\nthree\n")
    assert follower.poll() == [("trainer", "two"), ("trainer", "three")]
    assert follower.poll() == []


def test_the_fold_keeps_the_latest_figures_and_the_last_eval_episodes() -> None:
    progress = RunTelemetry("r1", eval_episodes=4)
    progress.feed_line(
        "trainer", "# coach-stream 2026-01-01T00:00:00+00:00: start trainer (restarts: 0)"
    )
    progress.feed_line(
        "trainer", event("progress", **{"time/env_steps": 100, "time/policy_version": 2})
    )
    progress.feed_line(
        "trainer", event("progress", **{"time/env_steps": 200, "time/policy_version": 3})
    )
    progress.feed_line("rollout-0", event("progress", env_steps=50, env_steps_per_s=10.0))
    progress.feed_line("rollout-1", event("progress", env_steps=60, env_steps_per_s=12.5))
    progress.feed_line("evaluator", event("evaluation", mean_return=10.0, episodes=2))
    progress.feed_line("evaluator", event("evaluation", mean_return=20.0, episodes=2))
    progress.feed_line("evaluator", event("evaluation", mean_return=40.0, episodes=2))

    assert (progress.env_steps, progress.figure("time/policy_version")) == (200, 3.0)
    assert progress.worker_env_steps_per_s == 22.5
    assert progress.mean_eval_return == 30.0  # the last 4 episodes: 20, 20, 40, 40
    assert progress.trainer_starts == 1
    assert progress.finished is None

    progress.feed_line("trainer", event("evaluation", mean_return=99.0, episodes=2))  # an echo
    assert progress.mean_eval_return == 30.0
    progress.feed_line(
        "trainer", event("progress", **{"time/env_steps": 300, "eval/mean_return": 31.5})
    )
    assert progress.mean_eval_return == 31.5  # the trainer's exact figure wins

    progress.feed_line(
        "trainer", event("finished", reason="target_reached", eval_mean_return=480.0)
    )
    assert progress.finished is not None and progress.finished["reason"] == "target_reached"
    assert progress.mean_eval_return == 480.0


def test_fold_run_logs_reads_every_task_log(tmp_path: Path) -> None:
    trainer_line = event("progress", **{"time/env_steps": 7, "train/loss": float("nan")})
    (tmp_path / "trainer.log").write_text(trainer_line + "\n")
    (tmp_path / "evaluator.log").write_text(
        event("evaluation", mean_return=500, episodes=20) + "\n"
    )
    progress = fold_run_logs(tmp_path, "r1")
    assert progress.env_steps == 7
    assert progress.figure("train/loss") is None
    assert progress.mean_eval_return == 500
