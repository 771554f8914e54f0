"""``coach-stream report`` without Kafka: a run's events and control messages folded into a
``RunReport`` (summary, series, policy lag) and drawn as a six-panel PNG."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

from coach_stream.core import EvaluationReport, PolicyVersion, RunFinished
from coach_stream.observability.report import RunReport, Sample, series
from coach_stream.observability.report_figure import DPI, PANELS, SIZE_IN, draw_report, save_report

# One worker draws both figures: matplotlib's first figure in a process (fonts, backends)
# costs 2-3 s of a core, which `make unit` would otherwise pay on both workers.
pytestmark = pytest.mark.xdist_group("report-drawing")

T0 = 1_800_000_000.0
RUN = "r1"


def event(kind: str, t: float, **fields: Any) -> dict[str, Any]:
    return {"event": kind, "time": T0 + t, **fields}


def trainer_progress(t: float, steps: int, lag_counts: dict[int, int], **extra: Any) -> Any:
    return event(
        "progress", t, **{
            "time/env_steps": steps, "time/env_steps_per_s": 1000.0, "time/log_every_s": 1.0,
            "rollout/policy_lag_mean": (
                sum(k * n for k, n in lag_counts.items()) / sum(lag_counts.values())
                if lag_counts else None
            ),
            # as the telemetry topic carries them: dicts as JSON text, keys as strings
            "rollout/policy_lag_counts": json.dumps(lag_counts),
            "rollout/consumer_lag": json.dumps({"0": steps % 7, "1": 3}),
            "rollout/dropped_stale": 2, **extra,
        },
    )  # fmt: skip


def worker_progress(t: float, rate: float) -> dict[str, Any]:
    return event("progress", t, env_steps=int(rate * t), env_steps_per_s=rate, log_every_s=1.0)


def version(v: int, t: float, steps: int = 0) -> PolicyVersion:
    return PolicyVersion(RUN, v, f"file:///p/{v}.pt", "0" * 64, 1, v, steps, int((T0 + t) * 1000))


def evaluation(v: int, t: float, steps: int, returns: tuple[float, ...]) -> EvaluationReport:
    return EvaluationReport(RUN, v, steps, returns, int((T0 + t) * 1000))


def solved_run() -> RunReport:
    report = RunReport(RUN)
    telemetry = [
        (
            "trainer",
            event(
                "started",
                0.0,
                preset="cartpole-ppo",
                env_id="CartPole-v1",
                algorithm="ppo",
                workers=2,
                target_return=475.0,
            ),
        ),
        ("rollout-0", event("started", 0.5)),
        ("rollout-1", event("started", 0.6)),
        *[(f"rollout-{w}", worker_progress(t, 500.0 + w)) for t in range(2, 11) for w in (0, 1)],
        *[("trainer", trainer_progress(t, 1000 * t, {0: 10, 1: 1})) for t in range(2, 11)],
        ("trainer", trainer_progress(10.05, 10_240, {0: 2})),  # the last one, as it ends
        (
            "trainer",
            event(
                "finished",
                10.1,
                reason="target_reached",
                env_steps=10_240,
                eval_mean_return=480.5,
                wall_s=9.0,
            ),
        ),
        ("rollout-0", event("exit", 10.3, reason="target_reached")),
    ]
    for task, fields in telemetry:
        report.feed_event(task, fields)
    for i in range(11):
        report.feed_control(version(i, 1.0 + i * 0.9, steps=1000 * i))
        report.feed_control(evaluation(i, 1.2 + i * 0.9, 1000 * i, (40.0 * i + 10, 48.0 * i)))
    report.feed_control(RunFinished(RUN, 10, "target_reached", int((T0 + 10.1) * 1000)))
    report.dead_letters = 0
    return report


def test_summary_of_a_solved_run() -> None:
    report = solved_run()
    lines = report.summary_lines()
    text = "\n".join(lines)
    assert lines[0] == "run r1: cartpole-ppo CartPole-v1 ppo"
    assert lines[1] == "result: SOLVED (target_reached) (target 475)"
    assert "final evaluation return: 480.5 (11 evaluation rounds)" in text  # the trainer's
    assert "env steps: 10,240" in text
    assert "wall time: 10.1 s" in text  # first event to the trainer's "finished"
    assert "workers: 2; 1,014 env steps/s overall" in text
    # 9 intervals of {0: 10, 1: 1} and one of {0: 2}: 101 chunks, 9 of them one behind
    assert "policy lag: mean 0.09 versions when read (101 chunks)" in text
    assert "stale chunks dropped by the trainer: 2" in text
    assert "dead letters: 0" in text
    assert report.solved and not report.needs_chunks


def test_a_run_that_never_finished_says_so_and_takes_the_last_round() -> None:
    report = RunReport(RUN)
    report.feed_event("trainer", event("started", 0.0, workers=1, target_return=1e9))
    report.feed_event("rollout-0", worker_progress(2.0, 300.0))
    report.feed_control(evaluation(3, 4.0, 3000, (100.0, 120.0)))
    lines = report.summary_lines()
    assert lines[1].startswith("result: not finished: no RunFinished")
    assert "target" not in lines[1]  # an unreachable target (1e9) is not a target
    assert "final evaluation return: 110.0 (1 evaluation round)" in lines
    assert "wall time: 4.0 s" in lines  # first event to the last evaluation
    assert "dead letters: unknown" in lines
    assert not report.solved and report.reason is None


def test_a_budget_exhausted_run_is_not_solved() -> None:
    report = RunReport(RUN)
    report.feed_control(RunFinished(RUN, 4, "budget_exhausted", int(T0 * 1000)))
    assert report.summary_lines()[1] == "result: not solved (budget_exhausted)"


def test_messages_of_another_run_are_not_evidence() -> None:
    report = RunReport(RUN)
    report.feed_control(RunFinished("other", 4, "target_reached", int(T0 * 1000)))
    report.feed_control(EvaluationReport("other", 1, 10, (500.0,), int(T0 * 1000)))
    assert report.reason is None and report.evaluations == []


def test_policy_lag_when_written_against_the_announcements() -> None:
    report = RunReport(RUN)
    for v, t in ((0, 1.0), (1, 2.0), (2, 3.0), (3, 4.0)):
        report.feed_control(version(v, t))
    assert report.needs_chunks  # no counts from the trainer: the experience topic is read
    behaviour = np.array([0, 1, 1, 0, 3, 2], np.int64)
    created = np.array([0.5, 2.5, 3.5, 4.5, 4.5, 9.0]) + T0
    report.feed_chunks(behaviour, (created * 1000).astype(np.int64))
    # before any version: current (0); v1 current at 2.5; v1 at 3.5 when v2 was newest: 1;
    # v0 at 4.5: 3; v3 at 4.5: 0; v2 at 9.0: 1
    counts, when = report.policy_lags
    assert when == "written" and counts == {0: 3, 1: 2, 3: 1}
    assert report.chunk_lag_mean == pytest.approx(5 / 6)


def test_the_trainers_counts_win_over_chunks_read_from_the_topic() -> None:
    report = solved_run()
    report.feed_chunks(np.array([0], np.int64), np.array([int(T0 * 1000)], np.int64))
    counts, when = report.policy_lags
    assert when == "read" and counts == {0: 92, 1: 9}


def test_consumer_lag_is_read_per_partition_from_json_text() -> None:
    report = RunReport(RUN)
    report.feed_event("trainer", trainer_progress(1.0, 3, {}))
    report.feed_event("trainer", event("progress", 2.0, **{"rollout/consumer_lag": "{oops"}))
    report.feed_event("trainer", event("progress", 3.0, **{"rollout/consumer_lag": {"1": 4}}))
    assert report.consumer_lag == [(T0 + 1.0, {0: 3, 1: 3}), (T0 + 3.0, {1: 4})]


def test_a_rate_over_a_sliver_of_the_interval_is_left_out() -> None:
    report = solved_run()
    times = [s.time - T0 for s in report.trainer_rates]
    assert times == [float(t) for t in range(2, 11)]  # not the one 0.05 s after 10 s


def test_a_silent_task_is_a_break_in_its_line() -> None:
    report = RunReport(RUN)
    report.first_time = T0
    samples = [Sample(T0 + t, 5.0) for t in (1, 2, 3, 4, 20, 21)]
    xs, ys = series(samples, report)
    assert len(xs) == 7 and math.isnan(ys[4])  # one NaN between 4 s and 20 s
    assert [x for x, y in zip(xs, ys, strict=True) if not math.isnan(y)] == [1, 2, 3, 4, 20, 21]


# ---------------------------------------------------------------------- the PNG


def _coloured_share(image: Image.Image, box: tuple[int, int, int, int]) -> float:
    """The share of pixels in ``box`` that are clearly coloured (data, not text or grid)."""
    pixels = np.asarray(image.convert("RGB").crop(box), dtype=np.int16)
    spread = pixels.max(axis=2) - pixels.min(axis=2)  # 0 for white, black and greys
    return float((spread > 60).mean())


def _panel_boxes(report: RunReport) -> list[tuple[int, int, int, int]]:
    """Each panel's pixel box in the saved PNG (PIL's top-left origin)."""
    figure = draw_report(report)
    figure.canvas.draw()
    height = figure.bbox.height
    boxes = []
    for ax in figure.axes:
        x0, y0, x1, y1 = ax.get_window_extent().extents
        boxes.append((int(x0), int(height - y1), int(x1), int(height - y0)))
    return boxes


def test_the_png_has_six_panels_each_drawn(tmp_path: Path) -> None:
    report = solved_run()
    path = save_report(report, tmp_path / "nested" / "report.png")
    assert path.stat().st_size > 50_000  # six panels of lines, bars and text
    with Image.open(path) as image:
        assert image.format == "PNG"
        assert image.size == (int(SIZE_IN[0] * DPI), int(SIZE_IN[1] * DPI))
        boxes = _panel_boxes(report)
        assert len(boxes) == len(PANELS) == 6
        for name, box in zip(PANELS, boxes, strict=True):
            assert _coloured_share(image, box) > 0.001, f"panel {name!r} has nothing drawn"


def test_an_empty_report_still_draws_and_shows_no_data(tmp_path: Path) -> None:
    report = RunReport(RUN)
    path = save_report(report, tmp_path / "empty.png")
    with Image.open(path) as image:
        boxes = _panel_boxes(report)
        # nothing to plot: no coloured pixel in the five data panels (the check above can fail)
        for name, box in zip(PANELS[:5], boxes[:5], strict=True):
            assert _coloured_share(image, box) == 0.0, name
