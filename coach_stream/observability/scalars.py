"""A run's scalars as TensorBoard event files and one CSV, written from its telemetry.

Written by whoever follows the run from its telemetry topic (``launch --tensorboard DIR``,
or ``status RUN --tensorboard DIR [--watch]`` for a detached or Nomad run), not by the
trainer: on Nomad the trainer's disk is an allocation's on some node, while the topic is
reachable wherever the person is, and it holds every task's series (workers and evaluator
too), from the run's beginning, even after the run. The files are rebuilt from the topic
each time, so ``DIR/<run_id>/`` holds the run once:

- ``metrics.csv``: one row per figure, ``time,task,series,step,value`` (long form, so a
  figure added later needs no new column);
- TensorBoard scalars tagged ``<task>/<series>`` (``trainer/time/env_steps``,
  ``rollout-0/env_steps_per_s``, ``evaluator/mean_return``), at the task's own env steps
  (the evaluator's: those of the version it evaluated), with the event's wall time.
"""

from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import IO, Any

from coach_stream.core import ClosingContext
from coach_stream.observability.prometheus import derived_fields

CSV_NAME = "metrics.csv"
CSV_COLUMNS = ("time", "task", "series", "step", "value")
_NOT_SERIES = frozenset(
    {
        "event",
        "task",
        "time",
        "worker_id",
        "log_every_s",
        "time/log_every_s",
        "time/checkpoint_saved_at",
    }
)


def numeric_fields(event: dict[str, Any]) -> dict[str, float]:
    """The event's finite numbers (bools, text and nulls are not series)."""
    out: dict[str, float] = {}
    for key, value in event.items():
        if key in _NOT_SERIES or isinstance(value, bool) or not isinstance(value, int | float):
            continue
        if math.isfinite(value):
            out[key] = float(value)
    return out


class ScalarLog(ClosingContext):
    """``write(task, event)`` for each telemetry event; CSV always, TensorBoard optionally."""

    def __init__(self, directory: Path, run_id: str, tensorboard: bool = True) -> None:
        self.path = directory / run_id
        self.path.mkdir(parents=True, exist_ok=True)
        for old in self.path.glob("events.out.tfevents.*"):
            old.unlink()  # rebuilt from the topic's beginning: the old points would repeat
        self._csv_file: IO[str] = (self.path / CSV_NAME).open("w", newline="")
        self._csv = csv.writer(self._csv_file)
        self._csv.writerow(CSV_COLUMNS)
        self._tb: Any = None
        if tensorboard:
            from torch.utils.tensorboard import SummaryWriter  # torch: only when asked for

            self._tb = SummaryWriter(log_dir=str(self.path), flush_secs=5)
        self._trainer_steps = 0
        self.rows = 0

    def write(self, task: str, event: dict[str, Any]) -> None:
        kind, when = event.get("event"), float(event.get("time") or 0.0)
        if kind == "progress":
            figures = numeric_fields(event)
            if task == "trainer":
                figures.update(derived_fields(event))
                step = int(figures.get("time/env_steps", self._trainer_steps))
                self._trainer_steps = step
            else:
                step = int(figures.get("env_steps", 0))
        elif kind == "evaluation" and task != "trainer":  # the trainer echoes the evaluator
            figures = numeric_fields(event)
            step = int(figures.get("env_steps", self._trainer_steps))  # its version's steps
        else:
            return
        for series, value in sorted(figures.items()):
            self._csv.writerow((f"{when:.3f}", task, series, step, repr(value)))
            if self._tb is not None:
                self._tb.add_scalar(f"{task}/{series}", value, global_step=step, walltime=when)
        self.rows += len(figures)

    def flush(self) -> None:
        self._csv_file.flush()
        if self._tb is not None:
            self._tb.flush()

    def close(self) -> None:
        if not self._csv_file.closed:
            self._csv_file.close()
        if self._tb is not None:
            self._tb.close()
            self._tb = None
