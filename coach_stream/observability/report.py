"""A finished (or stopped) run folded into the figures ``coach-stream report`` draws.

Three of the run's topics hold everything, so a run is reported from Kafka alone, after
the fact, wherever its tasks ran: the telemetry topic (every task's "progress" events:
each worker's env steps/s, the trainer's consumer lag per partition and its own mean
policy lag; the trainer's "started"/"finished"), the control topic (the evaluator's
``EvaluationReport`` rounds with the env steps they stand for, every ``PolicyVersion`` with
its time, the ``RunFinished``) and, for the policy-lag histogram, the experience topic
(each chunk's behaviour version and creation time), read only for runs whose trainer
did not report its lag per chunk. Nothing here touches Kafka::

    report = RunReport("r1")
    for task, event in telemetry_events:
        report.feed_event(task, event)
    for message in control_messages:        # before the chunks: they need the versions
        report.feed_control(message)
    for batch in chunk_batches:                # only if report.needs_chunks
        report.feed_chunks(batch.columns.policy_version, batch.columns.created_at_ms)
    print("\\n".join(report.summary_lines()))

Policy lag of a chunk, as Sample Factory measures it: the trainer's version when it read
the chunk minus the version the worker acted with (0 = current). The trainer counts chunks
per lag in each progress event (``rollout/policy_lag_counts``); the report sums them. For
a run recorded before the trainer counted them, the lag is taken when the chunk was
written instead: the newest version announced at the chunk's creation minus its version
(stale chunks a SYNC trainer drops are mostly written current and read one version late,
so that figure is lower).
"""

from __future__ import annotations

import bisect
import json
import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from coach_stream.core import ControlMessage, EvaluationReport, PolicyVersion, RunFinished
from coach_stream.observability.fold import EVALUATOR, TRAINER, number

SOLVED_REASON = "target_reached"


@dataclass(frozen=True)
class EvaluationPoint:
    """One evaluation round: the greedy returns of one policy version."""

    time: float
    """Epoch seconds the round was published."""
    env_steps: int
    """Env steps the trainer had consumed when it published the version evaluated."""
    policy_version: int
    mean_return: float
    min_return: float
    max_return: float
    episodes: int


@dataclass(frozen=True)
class Sample:
    """One figure a task reported at ``time`` (epoch seconds)."""

    time: float
    value: float


@dataclass
class RunReport:
    """Everything the report shows, folded from the run's events and messages."""

    run_id: str
    info: dict[str, Any] = field(default_factory=dict)
    """The trainer's "started" fields: preset, env_id, algorithm, mode, target, workers."""
    first_time: float | None = None
    last_time: float | None = None
    evaluations: list[EvaluationPoint] = field(default_factory=list)
    worker_rates: dict[str, list[Sample]] = field(default_factory=dict)
    """env steps/s of each rollout task, per progress event."""
    worker_steps: dict[str, int] = field(default_factory=dict)
    """Each rollout task's last reported env steps."""
    trainer_rates: list[Sample] = field(default_factory=list)
    """env steps/s the trainer consumed, per progress event."""
    consumer_lag: list[tuple[float, dict[int, int]]] = field(default_factory=list)
    """Records not yet read by the trainer, per partition, at each progress event."""
    trainer_policy_lag: list[Sample] = field(default_factory=list)
    """The trainer's mean policy lag over each progress interval (measured as it reads)."""
    read_lags: Counter[int] = field(default_factory=Counter)
    """Chunks per policy lag when the trainer read them (its progress events' counts)."""
    trainer_progress: dict[str, Any] = field(default_factory=dict)
    """The trainer's last "progress" event."""
    finished: dict[str, Any] | None = None
    """The trainer's "finished" event."""
    run_finished: RunFinished | None = None
    """The ``RunFinished`` on the control topic."""
    versions: list[PolicyVersion] = field(default_factory=list)
    written_lags: Counter[int] = field(default_factory=Counter)
    """Chunks per policy lag when written (versions behind the newest announced then)."""
    dead_letters: int | None = None
    """Records on the run's dead-letter topic (None: not read)."""
    _last_progress: dict[str, float] = field(default_factory=dict)
    _announced_ms: list[int] = field(default_factory=list)
    _announced_version: list[int] = field(default_factory=list)

    # ------------------------------------------------------------------ feeding

    def feed_event(self, task: str, event: dict[str, Any]) -> None:
        """One telemetry event as ``TelemetryReader`` decodes it."""
        when = number(event.get("time"))
        if when is not None:
            self.first_time = when if self.first_time is None else min(self.first_time, when)
            self.last_time = when if self.last_time is None else max(self.last_time, when)
        kind = event.get("event")
        if kind == "started" and task == TRAINER and not self.info:
            self.info = {k: v for k, v in event.items() if k not in ("event", "time", "task")}
        elif kind == "finished" and task == TRAINER:
            self.finished = event
        elif kind == "progress" and when is not None:
            if task == TRAINER:
                self._feed_trainer(when, event)
            elif task != EVALUATOR:
                rates = self.worker_rates.setdefault(task, [])
                self._rate(task, rates, when, event, "env_steps_per_s", "log_every_s")
                steps = number(event.get("env_steps"))
                if steps is not None:
                    self.worker_steps[task] = int(steps)

    def _feed_trainer(self, when: float, event: dict[str, Any]) -> None:
        self.trainer_progress = event
        self._rate(TRAINER, self.trainer_rates, when, event,
                   "time/env_steps_per_s", "time/log_every_s")  # fmt: skip
        lag = number(event.get("rollout/policy_lag_mean"))
        if lag is not None:
            self.trainer_policy_lag.append(Sample(when, lag))
        counts = _int_map(event.get("rollout/policy_lag_counts"))
        for lag, chunks in (counts or {}).items():
            self.read_lags[lag] += chunks
        partitions = _int_map(event.get("rollout/consumer_lag"))
        if partitions is not None:
            self.consumer_lag.append((when, partitions))

    def _rate(
        self,
        task: str,
        samples: list[Sample],
        when: float,
        event: dict[str, Any],
        key: str,
        interval_key: str,
    ) -> None:
        """Keep a rate unless it was measured over a sliver of the task's interval: the
        last event, sent as a task ends, covers a fraction of a second (rates near 0)."""
        previous = self._last_progress.get(task)
        self._last_progress[task] = when
        rate, interval = number(event.get(key)), number(event.get(interval_key))
        if rate is None:
            return
        if previous is not None and interval and when - previous < 0.5 * interval:
            return
        samples.append(Sample(when, rate))

    def feed_control(self, message: ControlMessage) -> None:
        """One control message (policy versions, evaluations, the end of the run)."""
        if message.run_id != self.run_id:
            return  # not this run's (a forged or misrouted record): not its evidence
        if isinstance(message, EvaluationReport):
            if not message.returns:
                return
            self.evaluations.append(
                EvaluationPoint(
                    time=message.created_at_ms / 1000,
                    env_steps=message.env_steps,
                    policy_version=message.policy_version,
                    mean_return=message.mean_return,
                    min_return=min(message.returns),
                    max_return=max(message.returns),
                    episodes=len(message.returns),
                )
            )
        elif isinstance(message, RunFinished):
            self.run_finished = message
        elif isinstance(message, PolicyVersion):
            self.versions.append(message)
            # kept sorted by time; a version is "the newest" from its announcement on
            at = bisect.bisect_right(self._announced_ms, message.created_at_ms)
            self._announced_ms.insert(at, message.created_at_ms)
            self._announced_version.insert(at, message.version)

    def feed_chunks(
        self, policy_versions: npt.NDArray[np.int64], created_at_ms: npt.NDArray[np.int64]
    ) -> None:
        """Chunks' behaviour versions and creation times (after every ``feed_control``)."""
        if len(policy_versions) == 0:
            return
        if not self._announced_ms:
            newest = policy_versions  # no version known: each chunk counts as current
        else:
            announced = np.maximum.accumulate(np.asarray(self._announced_version, np.int64))
            at = np.searchsorted(np.asarray(self._announced_ms, np.int64), created_at_ms, "right")
            # a chunk created before any announcement (clock skew) is taken as current
            newest = np.where(at > 0, announced[np.maximum(at - 1, 0)], policy_versions)
        lags = np.maximum(newest - policy_versions, 0)
        values, counts = np.unique(lags, return_counts=True)
        self.written_lags.update(dict(zip(values.tolist(), counts.tolist(), strict=True)))

    # ------------------------------------------------------------------ figures

    @property
    def start(self) -> float | None:
        """Epoch seconds of the run's first event or message: wall time 0 on the plots."""
        times = [e.time for e in self.evaluations] + [v.created_at_ms / 1000 for v in self.versions]
        if self.first_time is not None:
            times.append(self.first_time)
        return min(times, default=None)

    @property
    def reason(self) -> str | None:
        """Why the run ended (``target_reached``, ``budget_exhausted``, ...); None: it did not."""
        if self.run_finished is not None:
            return self.run_finished.reason
        reason = (self.finished or {}).get("reason")
        return reason if isinstance(reason, str) else None

    @property
    def solved(self) -> bool:
        return self.reason == SOLVED_REASON

    @property
    def target_return(self) -> float | None:
        return number(self.info.get("target_return"))

    @property
    def final_eval_return(self) -> float | None:
        """The trainer's figure that decided the run (mean over its last evaluation
        episodes); else the last round's mean."""
        for exact in ((self.finished or {}).get("eval_mean_return"),
                      self.trainer_progress.get("eval/mean_return")):  # fmt: skip
            if (value := number(exact)) is not None:
                return value
        return self.evaluations[-1].mean_return if self.evaluations else None

    @property
    def env_steps(self) -> int | None:
        for source in ((self.finished or {}).get("env_steps"),
                       self.trainer_progress.get("time/env_steps")):  # fmt: skip
            if (value := number(source)) is not None:
                return int(value)
        return max((v.env_steps for v in self.versions), default=None)

    @property
    def wall_s(self) -> float | None:
        """From the run's first event to the trainer's "finished" (or to its last word)."""
        start = self.start
        end = number((self.finished or {}).get("time"))
        if end is None and self.run_finished is not None:
            end = self.run_finished.created_at_ms / 1000
        if end is None:
            times = [e.time for e in self.evaluations] + [
                v.created_at_ms / 1000 for v in self.versions
            ]
            if self.last_time is not None:
                times.append(self.last_time)
            end = max(times, default=None)
        if start is None or end is None:
            return None
        return max(0.0, end - start)

    @property
    def workers(self) -> int:
        declared = self.info.get("workers")
        if isinstance(declared, int) and not isinstance(declared, bool):
            return declared
        return len(self.worker_rates)

    @property
    def needs_chunks(self) -> bool:
        """Whether the policy-lag histogram needs the experience topic (an older trainer
        reported no counts per lag)."""
        return not self.read_lags

    @property
    def policy_lags(self) -> tuple[Counter[int], str]:
        """Chunks per lag for the histogram and when the lag was taken ("read", "written"),
        or an empty counter when neither is known."""
        if self.read_lags:
            return self.read_lags, "read"
        return self.written_lags, "written"

    @property
    def chunk_lag_mean(self) -> float | None:
        counts, _ = self.policy_lags
        total = sum(counts.values())
        if not total:
            return None
        return sum(lag * n for lag, n in counts.items()) / total

    @property
    def trainer_lag_mean(self) -> float | None:
        """The trainer's per-interval means, averaged (each interval counts once)."""
        values = [s.value for s in self.trainer_policy_lag]
        return sum(values) / len(values) if values else None

    def wall(self, epoch_s: float) -> float:
        """Seconds since the run's start."""
        return epoch_s - (self.start or epoch_s)

    def summary_lines(self) -> list[str]:
        """The summary: solved or not, final return, steps, time, workers, lag, dead letters."""
        info = self.info
        what = " ".join(
            str(v) for v in (info.get("preset"), info.get("env_id"), info.get("algorithm")) if v
        )
        lines = [f"run {self.run_id}" + (f": {what}" if what else "")]
        source = info.get("experience_from")  # a shadow learner (`coach-stream attach`)
        if source:
            lines.append(f"experience: run {source}'s, read in a consumer group of its own")
        target = self.target_return
        target_text = f" (target {target:g})" if target is not None and target < 1e9 else ""
        if self.reason is None:
            lines.append(
                f"result: not finished{target_text}: no RunFinished on the control topic "
                "(still running, or stopped before it ended)"
            )
        else:
            verdict = "SOLVED" if self.solved else "not solved"
            lines.append(f"result: {verdict} ({self.reason}){target_text}")
        final = self.final_eval_return
        rounds = len(self.evaluations)
        lines.append(
            "final evaluation return: "
            + (f"{final:.1f}" if final is not None else "none")
            + f" ({rounds} evaluation round{'s' if rounds != 1 else ''})"
        )
        steps, wall = self.env_steps, self.wall_s
        lines.append(f"env steps: {steps:,}" if steps is not None else "env steps: unknown")
        lines.append(f"wall time: {wall:.1f} s" if wall is not None else "wall time: unknown")
        rate = steps / wall if steps is not None and wall else None
        fleet = "workers: none (a shadow learner)" if source else f"workers: {self.workers}"
        lines.append(fleet + (f"; {rate:,.0f} env steps/s overall" if rate is not None else ""))
        lines.append(f"policy lag: {self._lag_text()}")
        stale = number(self.trainer_progress.get("rollout/dropped_stale"))
        if stale is not None:
            lines.append(f"stale chunks dropped by the trainer: {int(stale):,}")
        lines.append(
            "dead letters: "
            + (str(self.dead_letters) if self.dead_letters is not None else "unknown")
        )
        return lines

    def _lag_text(self) -> str:
        counts, when = self.policy_lags
        chunk_mean = self.chunk_lag_mean
        if chunk_mean is not None:
            total = sum(counts.values())
            text = f"mean {chunk_mean:.2f} versions when {when} ({total:,} chunks)"
            if when == "read":
                return text
            trainer_mean = self.trainer_lag_mean
            if trainer_mean is None:
                return text
            return text + f"; trainer's mean when read {trainer_mean:.2f}"
        if (trainer_mean := self.trainer_lag_mean) is not None:
            return f"mean {trainer_mean:.2f} versions when read (trainer's interval means)"
        return "unknown"


def _int_map(value: object) -> dict[int, int] | None:
    """``{"0": 12, "1": 3}`` (a dict travels as JSON text in telemetry) -> ``{0: 12, 1: 3}``."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return None
    if not isinstance(value, dict):
        return None
    counts: dict[int, int] = {}
    for key, count in value.items():
        n = number(count)
        try:
            partition = int(key)
        except (TypeError, ValueError):
            continue
        if n is not None and math.isfinite(n):
            counts[partition] = int(n)
    return counts


def lag_total(partitions: dict[int, int]) -> int:
    return sum(partitions.values())


def series(
    samples: Sequence[Sample], report: RunReport, gap_factor: float = 3.0
) -> tuple[list[float], list[float]]:
    """``(wall seconds, values)`` of ``samples`` for plotting, with a NaN wherever the task
    was silent for more than ``gap_factor`` times its usual interval, so a stopped worker
    shows as a break in its line rather than a straight line across the silence."""
    xs: list[float] = []
    ys: list[float] = []
    gaps = np.diff([s.time for s in samples]) if len(samples) > 2 else np.zeros(0)
    usual = float(np.median(gaps)) if len(gaps) else 0.0
    for i, sample in enumerate(samples):
        if i and usual > 0 and sample.time - samples[i - 1].time > gap_factor * usual:
            xs.append(report.wall(samples[i - 1].time) + 1e-9)
            ys.append(math.nan)
        xs.append(report.wall(sample.time))
        ys.append(sample.value)
    return xs, ys
