"""TensorBoard scalars and the CSV of a run, written from its telemetry events."""

from __future__ import annotations

import csv
from pathlib import Path

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from coach_stream.observability.scalars import CSV_COLUMNS, CSV_NAME, ScalarLog

T0 = 1_700_000_000.0


def events() -> list[tuple[str, dict[str, object]]]:
    return [
        ("trainer", {"event": "started", "time": T0, "workers": 1}),
        ("trainer", {"event": "progress", "time": T0 + 1, "time/env_steps": 256,
                     "time/updates_per_s": 2.0, "rollout/dropped_stale_steps": 32,
                     "eval/mean_return": None, "time/log_every_s": 1.0}),
        ("rollout-0", {"event": "progress", "time": T0 + 1, "worker_id": 0, "env_steps": 300,
                       "env_steps_per_s": 150.0, "acked_chunk_seqs": '{"0/0": 3}'}),
        ("evaluator", {"event": "evaluation", "time": T0 + 2, "policy_version": 1,
                       "env_steps": 200, "mean_return": 42.0, "episodes": 20}),
        ("trainer", {"event": "evaluation", "time": T0 + 2, "mean_return": 42.0}),  # an echo
        ("trainer", {"event": "progress", "time": T0 + 3, "time/env_steps": 512,
                     "time/updates_per_s": 3.0}),
    ]  # fmt: skip


def write_all(directory: Path, tensorboard: bool = True) -> Path:
    with ScalarLog(directory, "r1", tensorboard=tensorboard) as log:
        for task, event in events():
            log.write(task, event)
    return directory / "r1"


def test_the_csv_has_every_series_once_in_long_form(tmp_path: Path) -> None:
    run_dir = write_all(tmp_path, tensorboard=False)
    with (run_dir / CSV_NAME).open() as handle:
        rows = list(csv.DictReader(handle))
    assert tuple(rows[0]) == CSV_COLUMNS
    got = {(r["task"], r["series"], int(r["step"])): float(r["value"]) for r in rows}
    assert got == {
        ("trainer", "time/env_steps", 256): 256.0,
        ("trainer", "time/updates_per_s", 256): 2.0,
        ("trainer", "rollout/dropped_stale_steps", 256): 32.0,
        ("trainer", "time/transitions_consumed", 256): 288.0,
        ("rollout-0", "env_steps", 300): 300.0,
        ("rollout-0", "env_steps_per_s", 300): 150.0,
        ("evaluator", "mean_return", 200): 42.0,  # at the env steps of the version evaluated
        ("evaluator", "episodes", 200): 20.0,
        ("evaluator", "policy_version", 200): 1.0,
        ("evaluator", "env_steps", 200): 200.0,
        ("trainer", "time/env_steps", 512): 512.0,
        ("trainer", "time/updates_per_s", 512): 3.0,
        ("trainer", "time/transitions_consumed", 512): 512.0,
    }
    assert float(rows[1]["time"]) == T0 + 1


def test_tensorboard_reads_the_same_scalars_and_a_rebuild_does_not_repeat_them(
    tmp_path: Path,
) -> None:
    write_all(tmp_path)
    run_dir = write_all(tmp_path)  # the launcher, then `status --tensorboard`: rebuilt once
    assert len(list(run_dir.glob("events.out.tfevents.*"))) == 1
    board = EventAccumulator(str(run_dir))
    board.Reload()
    tags = set(board.Tags()["scalars"])
    assert {"trainer/time/env_steps", "rollout-0/env_steps_per_s", "evaluator/mean_return"} <= tags
    steps = [(s.step, s.value) for s in board.Scalars("trainer/time/updates_per_s")]
    assert steps == [(256, 2.0), (512, 3.0)]
    (eval_point,) = board.Scalars("evaluator/mean_return")
    assert (eval_point.step, eval_point.value, eval_point.wall_time) == (200, 42.0, T0 + 2)
