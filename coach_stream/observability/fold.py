"""A run's events folded per task: the one view ``launch``, ``status`` and the scalar logs read.

For every task it keeps when it was last heard from, its last two "progress" events (rates
between them), the port of its metrics endpoint and whether it has exited, plus the
evaluator's rounds (the return's trend) and the launcher's figures (``figure``,
``mean_eval_return``, ``finished``). Feeding is incremental, so ``status --watch`` folds
only what arrived since its last refresh. Events come from the run's telemetry topic
(``feed``) or from its task logs, one JSON line at a time (``feed_line``)::

    telemetry = RunTelemetry("r1")
    for task, event in reader.read_to_end(10.0):
        telemetry.feed(task, event)
    telemetry.tasks["rollout-0"].last_seen   # epoch seconds of its newest event
    telemetry.figure("time/env_steps")       # from the trainer's last "progress" event
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

TRAINER = "trainer"
EVALUATOR = "evaluator"


def number(value: object) -> float | None:
    """A finite number from an event field, else None (missing, null, text, bool, NaN)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def nested(value: object) -> dict[Any, Any]:
    """A nested event field: a dict in a JSON line, JSON text on the telemetry topic; {}
    when it is neither."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return {}
    return value if isinstance(value, dict) else {}


def parse_event(line: str) -> dict[str, Any] | None:
    """The JSON event on a log ``line``, or None for human log lines and partial writes."""
    text = line.strip()
    if not text.startswith("{") or '"event"' not in text:
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) and isinstance(value.get("event"), str) else None


@dataclass
class TaskTelemetry:
    """What one task (trainer, rollout-N, evaluator) has reported so far."""

    name: str
    first_seen: float
    last_seen: float
    """Epoch seconds (the task's clock) of its newest event of any kind."""
    starts: int = 0
    """"started" events: more than one means the task was restarted."""
    progress: dict[str, Any] | None = None
    previous: dict[str, Any] | None = None
    """The "progress" event before ``progress`` (rates between the two)."""
    evaluation: dict[str, Any] | None = None
    """Its last "evaluation" event (the evaluator's rounds)."""
    metrics_url: str | None = None
    """Its Prometheus endpoint, from its "metrics" event."""
    exited: str | None = None
    """Why it ended ("exit" of a worker, "finished" of the trainer), None while running."""
    reports: int = 0
    """Its "progress" events (an evaluator's: "evaluation" events) so far."""
    last_report: float | None = None
    longest_gap_s: float = 0.0
    """The longest time between two of its reports: how often a task that does not state
    its interval (the evaluator, one report per round) is heard from."""

    @property
    def log_every_s(self) -> float | None:
        """The reporting interval the task announced in its progress events."""
        fields = self.progress or {}
        return number(fields.get("log_every_s", fields.get("time/log_every_s")))

    def figure(self, key: str) -> float | None:
        return number((self.progress or {}).get(key))


@dataclass
class EvaluationRound:
    time: float
    policy_version: int | None
    mean_return: float
    episodes: int


@dataclass
class RunTelemetry:
    """Every task's events of one run, folded as they arrive."""

    run_id: str
    eval_episodes: int = 20
    """How many of the last evaluation episodes ``mean_eval_return`` averages."""
    tasks: dict[str, TaskTelemetry] = field(default_factory=dict)
    evaluations: list[EvaluationRound] = field(default_factory=list)
    run_info: dict[str, Any] = field(default_factory=dict)
    """The trainer's "started" fields: preset, algorithm, env, target, budget, workers."""
    finished: dict[str, Any] | None = None
    """The trainer's "finished" event: reason, final_version, checkpoint_uri."""
    trainer_starts: int = 0
    """How many times the trainer started (restarts resume from a checkpoint)."""
    resumed: list[dict[str, Any]] = field(default_factory=list)
    """Events in which a restarted trainer reported where it resumed from."""

    @property
    def first_time(self) -> float | None:
        return min((t.first_seen for t in self.tasks.values()), default=None)

    @property
    def trainer(self) -> TaskTelemetry | None:
        return self.tasks.get(TRAINER)

    @property
    def trainer_progress(self) -> dict[str, Any]:
        """The trainer's last "progress" event: namespaced keys (``time/env_steps``,
        ``time/policy_version``, ``rollout/policy_lag_mean``, ``eval/mean_return``,
        ``train/loss``, ...; docs/algorithms.md lists them); empty until it reports."""
        trainer = self.trainer
        return (trainer.progress if trainer else None) or {}

    @property
    def worker_progress(self) -> dict[str, dict[str, Any]]:
        """Each other task's last "progress" event (the rollout workers')."""
        return {
            name: task.progress
            for name, task in self.tasks.items()
            if name != TRAINER and task.progress is not None
        }

    def figure(self, key: str) -> float | None:
        """A number from the trainer's last progress event by its namespaced key, such as
        ``"time/env_steps_per_s"`` (None until reported)."""
        return number(self.trainer_progress.get(key))

    @property
    def env_steps(self) -> int | None:
        value = self.figure("time/env_steps")
        return int(value) if value is not None else None

    @property
    def worker_env_steps_per_s(self) -> float | None:
        """Sum of the rollout workers' latest rates: how fast experience is produced."""
        rates = [number(w.get("env_steps_per_s")) for w in self.worker_progress.values()]
        known = [rate for rate in rates if rate is not None]
        return sum(known) if known else None

    @property
    def mean_eval_return(self) -> float | None:
        """Mean greedy return over the last ``eval_episodes`` evaluation episodes.

        The trainer's figure is the one that ends the run, so it wins once reported; until
        then the evaluator's round means stand in, each for its episodes.
        """
        finished = self.finished or {}
        for exact in (
            finished.get("eval_mean_return"),
            self.trainer_progress.get("eval/mean_return"),
        ):
            if (value := number(exact)) is not None:
                return value
        total, count = 0.0, 0
        for round_ in reversed(self.evaluations):
            taken = min(max(0, round_.episodes), self.eval_episodes - count)
            total, count = total + round_.mean_return * taken, count + taken
            if count >= self.eval_episodes:
                break
        return total / count if count else None

    def feed_line(self, task: str, line: str) -> None:
        """One line of a task's log: its JSON event, if it is one (``parse_event``)."""
        if task == TRAINER and line.startswith("# coach-stream") and ": start trainer" in line:
            self.trainer_starts += 1  # the supervisor's header: a log has no "started" event
        event = parse_event(line)
        if event is not None:
            self.feed(task, event)

    def feed(self, task: str, event: dict[str, Any]) -> None:
        """One event as ``TelemetryReader`` decodes it (``event``, ``time``, fields...)."""
        when = number(event.get("time")) or 0.0
        seen = self.tasks.get(task)
        if seen is None:
            seen = self.tasks[task] = TaskTelemetry(task, when, when)
        else:
            seen.last_seen = max(seen.last_seen, when)
        kind = event["event"]
        if kind == "progress" or (kind == "evaluation" and task != TRAINER):
            if seen.last_report is not None:
                seen.longest_gap_s = max(seen.longest_gap_s, when - seen.last_report)
            seen.reports += 1
            seen.last_report = when
        if kind == "started":
            seen.starts += 1
            seen.exited = None
            seen.previous = seen.progress = None  # rates never span a restart
            seen.last_report = None
            if task == TRAINER:  # published on the telemetry topic only
                self.trainer_starts += 1
                self.run_info = {k: v for k, v in event.items() if k not in ("event", "time")}
        elif kind == "progress":
            seen.previous, seen.progress = seen.progress, event
        elif kind == "evaluation":
            seen.evaluation = event
        elif kind == "metrics":
            url = event.get("url")
            seen.metrics_url = url if isinstance(url, str) else None
        elif kind in ("exit", "finished"):
            seen.exited = str(event.get("reason") or kind)
        if kind == "finished" and task == TRAINER:
            self.finished = event
        elif kind == "resumed" and task == TRAINER:
            self.resumed.append(event)
        elif kind == "evaluation" and task != TRAINER:  # the trainer echoes the evaluator
            self._add_round(when, event)

    def _add_round(self, when: float, event: dict[str, Any]) -> None:
        mean = number(event.get("mean_return"))
        episodes = event.get("episodes")
        version = event.get("policy_version")
        if mean is not None:
            self.evaluations.append(
                EvaluationRound(
                    when,
                    version if isinstance(version, int) else None,
                    mean,
                    episodes if isinstance(episodes, int) else 0,
                )
            )
