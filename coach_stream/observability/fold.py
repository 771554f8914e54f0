"""A run's telemetry events folded per task: what ``status`` and the scalar logs read.

``RunProgress`` (the launcher's view) keeps only the trainer's latest figures; this keeps,
for every task, when it was last heard from, its last two "progress" events (rates between
them), the port of its metrics endpoint and whether it has exited, plus the evaluator's
rounds (the return's trend). Feeding is incremental, so ``status --watch`` folds only what
arrived since its last refresh::

    telemetry = RunTelemetry("r1")
    for task, event in reader.read_to_end(10.0):
        telemetry.feed(task, event)
    telemetry.tasks["rollout-0"].last_seen   # epoch seconds of its newest event
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from coach_stream.orchestrators.progress import RunProgress

TRAINER = "trainer"
EVALUATOR = "evaluator"


def number(value: object) -> float | None:
    """A finite number from an event field, else None (missing, null, text, bool)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


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
    """Every task's telemetry of one run, folded as it arrives."""

    run_id: str
    eval_episodes: int = 20
    tasks: dict[str, TaskTelemetry] = field(default_factory=dict)
    evaluations: list[EvaluationRound] = field(default_factory=list)
    run_info: dict[str, Any] = field(default_factory=dict)
    """The trainer's "started" fields: preset, algorithm, env, target, budget, workers."""
    progress: RunProgress = field(init=False)

    def __post_init__(self) -> None:
        self.progress = RunProgress(eval_episodes=self.eval_episodes)

    @property
    def first_time(self) -> float | None:
        return min((t.first_seen for t in self.tasks.values()), default=None)

    @property
    def trainer(self) -> TaskTelemetry | None:
        return self.tasks.get(TRAINER)

    @property
    def finished(self) -> dict[str, Any] | None:
        return self.progress.finished

    def feed(self, task: str, event: dict[str, Any]) -> None:
        """One event as ``TelemetryReader`` decodes it (``event``, ``time``, fields...)."""
        self.progress.feed_event(task, event)
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
            if task == TRAINER:
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
        if kind == "evaluation" and task != TRAINER:  # the trainer echoes the evaluator
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
