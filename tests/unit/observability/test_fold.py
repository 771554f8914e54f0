"""The one fold of a run's events: the figures both the launcher and `status` read."""

from __future__ import annotations

import math

from coach_stream.observability.fold import RunTelemetry, nested, number
from coach_stream.observability.prometheus import MetricsExporter


def test_number_is_finite_or_none() -> None:
    assert number(3) == 3.0 and number(2.5) == 2.5
    assert [number(v) for v in (None, "3", True, math.nan, math.inf)] == [None] * 5


def test_nested_fields_are_dicts_from_json_text_or_dicts() -> None:
    assert nested('{"0": 12}') == {"0": 12}
    assert nested({"0": 12}) == {"0": 12}
    assert nested("not json") == {} and nested(None) == {} and nested("[1]") == {}


def test_the_fold_serves_the_launcher_and_the_status_view_from_one_feed() -> None:
    telemetry = RunTelemetry("r1", eval_episodes=3)
    telemetry.feed("trainer", {"event": "started", "time": 1.0, "preset": "p"})
    telemetry.feed("rollout-0", {"event": "progress", "time": 2.0, "env_steps_per_s": 4.0})
    telemetry.feed("trainer", {"event": "progress", "time": 3.0, "time/env_steps": 64})
    telemetry.feed("evaluator", {"event": "evaluation", "time": 4.0, "mean_return": 1.0,
                                 "episodes": 2, "policy_version": 1})  # fmt: skip
    telemetry.feed("evaluator", {"event": "evaluation", "time": 5.0, "mean_return": 4.0,
                                 "episodes": 2, "policy_version": 2})  # fmt: skip

    assert telemetry.trainer_starts == 1 and telemetry.run_info == {"preset": "p"}
    assert telemetry.env_steps == 64 and telemetry.trainer_progress["time/env_steps"] == 64
    assert telemetry.worker_env_steps_per_s == 4.0
    assert telemetry.mean_eval_return == 3.0  # the last 3 episodes: 1, 4, 4
    assert len(telemetry.evaluations) == 2 and telemetry.tasks["evaluator"].reports == 2


def test_metrics_skip_figures_that_are_not_finite() -> None:
    exporter = MetricsExporter("r1", "trainer")
    exporter("progress", {"time/env_steps": 10, "time/updates_per_s": math.nan})
    names = {family.name for family in exporter.collect()}
    assert "coach_stream_env_steps" in names
    assert "coach_stream_updates_per_second" not in names
