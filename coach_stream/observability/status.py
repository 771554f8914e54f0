"""The status view of a run: a pure function of its folded telemetry, the broker's figures
and the time, rendered with rich (``coach-stream status RUN [--watch]``).

``build_status(telemetry, broker, now)`` computes every figure; ``render_status`` only
lays them out, so tests check the figures (silence with an injected clock, lag) without
Kafka or a terminal. A task is SILENT when nothing arrived from it for
``max(SILENT_MIN_S, SILENT_INTERVALS x its report interval)``: the interval is the
``log_every_s`` it reports with each "progress" event (1 s by default, so 10 s), or for a
task that reports none (the evaluator: one event per round) the longest gap between its
events so far. A worker stopped with SIGSTOP, hung, or cut off from the broker looks the
same from here; its exit would have been reported.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rich.console import Group
from rich.table import Table
from rich.text import Text

from coach_stream.observability.fold import (
    EVALUATOR,
    TRAINER,
    EvaluationRound,
    RunTelemetry,
    TaskTelemetry,
    nested,
    number,
)
from coach_stream.transport.lag import BrokerFigures

SILENT_MIN_S = 10.0
SILENT_INTERVALS = 3.0
STARTING_GRACE_S = 60.0
"""A task that has reported nothing but "started" is "starting" (loading, waiting for the
first policy) for this long before it too is SILENT."""
TREND_WINDOW = 3
"""Evaluation rounds on each side of the trend's comparison."""


@dataclass(frozen=True)
class TaskRow:
    task: str
    state: str
    """running, SILENT, starting or exited (with the reason)."""
    silent: bool
    last_seen_s: float
    """Seconds since its newest event."""
    silent_after_s: float
    restarts: int = 0
    env_steps_per_s: float | None = None
    episodes: float | None = None
    policy_version: float | None = None
    policy_lag: float | None = None
    """Versions behind the newest one (the trainer's)."""
    chunks: float | None = None
    metrics_url: str | None = None


@dataclass(frozen=True)
class PartitionRow:
    partition: int
    end: int
    position: int
    committed: int | None
    lag_records: int
    lag_s: float | None
    """Age of the oldest record not yet consumed (0 when none waits, None when unknown)."""


@dataclass(frozen=True)
class TrainerFigures:
    updates_per_s: float | None = None
    env_steps_per_s: float | None = None
    """Env steps learned from per second."""
    consumed_per_s: float | None = None
    """Env steps read per second, stale ones included."""
    policy_version: float | None = None
    policy_lag_mean: float | None = None
    samples_per_insert: float | None = None
    stale_chunks: float | None = None
    stale_steps: float | None = None
    checkpoint_version: float | None = None
    checkpoint_age_s: float | None = None
    partitions: tuple[PartitionRow, ...] = ()

    @property
    def lag_records(self) -> int | None:
        return sum(p.lag_records for p in self.partitions) if self.partitions else None

    @property
    def lag_s(self) -> float | None:
        known = [p.lag_s for p in self.partitions if p.lag_s is not None]
        return max(known) if known else None


@dataclass(frozen=True)
class EvalTrend:
    direction: str
    """rising, falling or flat."""
    delta: float
    """Mean of the last rounds minus the mean of the rounds before them."""
    rounds: int


@dataclass(frozen=True)
class RunStatus:
    run_id: str
    state: str
    elapsed_s: float | None
    env_steps: float | None
    eval_mean: float | None
    eval_rounds: int
    trend: EvalTrend | None
    dead_letters: int | None
    tasks: tuple[TaskRow, ...]
    trainer: TrainerFigures
    info: dict[str, Any]
    broker_error: str | None = None

    def task(self, name: str) -> TaskRow:
        return next(t for t in self.tasks if t.task == name)

    @property
    def silent(self) -> list[str]:
        return [t.task for t in self.tasks if t.silent]


def silent_after(task: TaskTelemetry) -> float:
    """Seconds without an event after which ``task`` is SILENT (module docstring)."""
    interval = task.log_every_s
    if interval is None:
        interval = task.longest_gap_s
    return max(SILENT_MIN_S, SILENT_INTERVALS * interval)


def eval_trend(rounds: list[EvaluationRound], window: int = TREND_WINDOW) -> EvalTrend | None:
    """The last ``window`` rounds' mean return against the ``window`` before (fewer early on)."""
    means = [r.mean_return for r in rounds]
    if len(means) < 2:
        return None
    k = min(window, len(means) // 2)
    recent, before = means[-k:], means[-2 * k : -k]
    delta = sum(recent) / k - sum(before) / k
    scale = 0.02 * max(1.0, abs(sum(before) / k))  # within 2 %: flat
    direction = "rising" if delta > scale else "falling" if delta < -scale else "flat"
    return EvalTrend(direction, delta, 2 * k)


def _order(name: str) -> tuple[int, int, str]:
    if name == TRAINER:
        return (0, 0, name)
    if name == EVALUATOR:
        return (1, 0, name)
    suffix = name.rsplit("-", 1)[-1]
    return (2, int(suffix) if suffix.isdigit() else 0, name)


def _task_row(seen: TaskTelemetry, latest_version: float | None, now: float) -> TaskRow:
    quiet = max(0.0, now - seen.last_seen)
    limit = silent_after(seen)
    restarts = max(0, seen.starts - 1)
    if seen.exited is not None:
        state, silent = f"exited ({seen.exited})", False
    elif seen.reports == 0 or seen.last_report is None:
        silent = quiet > max(limit, STARTING_GRACE_S)
        state = "SILENT" if silent else "starting"
    else:
        silent = quiet > limit
        state = "SILENT" if silent else "running"
    episodes = chunks = lag = None
    if seen.name == TRAINER:  # it announces the versions: no lag of its own
        rate, version = seen.figure("time/env_steps_per_s"), seen.figure("time/policy_version")
    elif seen.progress is None and seen.evaluation is not None:  # the evaluator
        rate, version = None, number(seen.evaluation.get("policy_version"))
        episodes = number(seen.evaluation.get("episodes"))
    else:
        rate, version = seen.figure("env_steps_per_s"), seen.figure("policy_version")
        episodes, chunks = seen.figure("episodes"), seen.figure("chunks")
    if seen.name != TRAINER and version is not None and latest_version is not None:
        lag = max(0.0, latest_version - version)
    return TaskRow(
        seen.name, state, silent, quiet, limit, restarts, rate, episodes, version, lag, chunks,
        seen.metrics_url,
    )  # fmt: skip


def _consumed_per_s(trainer: TaskTelemetry) -> float | None:
    """Env steps read per second between the trainer's last two progress events."""
    now, then = trainer.progress, trainer.previous
    if now is None or then is None:
        return None

    def read(event: dict[str, Any]) -> float | None:
        kept, stale = (
            number(event.get("time/env_steps")),
            number(event.get("rollout/dropped_stale_steps")),
        )
        return None if kept is None else kept + (stale or 0.0)

    steps_now, steps_then = read(now), read(then)
    dt = (number(now.get("time")) or 0.0) - (number(then.get("time")) or 0.0)
    if steps_now is None or steps_then is None or dt <= 0 or steps_now < steps_then:
        return None
    return (steps_now - steps_then) / dt


def reported_positions(trainer: TaskTelemetry | None) -> dict[int, int]:
    """The read positions in the trainer's last progress event (JSON text on the topic)."""
    value = nested((trainer.progress or {}).get("rollout/positions") if trainer else None)
    return {int(p): int(o) for p, o in value.items() if str(p).isdigit() and isinstance(o, int)}


def _trainer_figures(
    trainer: TaskTelemetry | None, broker: BrokerFigures, now: float
) -> TrainerFigures:
    partitions = tuple(
        PartitionRow(
            p.partition, p.end, p.position, p.committed, p.lag_records,
            0.0 if p.lag_records == 0 else (
                None if p.oldest_unread_ms is None else max(0.0, now - p.oldest_unread_ms / 1000)
            ),
        )
        for p in broker.partitions
    )  # fmt: skip
    if trainer is None:
        return TrainerFigures(partitions=partitions)
    saved_at = trainer.figure("time/checkpoint_saved_at")
    return TrainerFigures(
        updates_per_s=trainer.figure("time/updates_per_s"),
        env_steps_per_s=trainer.figure("time/env_steps_per_s"),
        consumed_per_s=_consumed_per_s(trainer),
        policy_version=trainer.figure("time/policy_version"),
        policy_lag_mean=trainer.figure("rollout/policy_lag_mean"),
        samples_per_insert=trainer.figure("train/samples_per_insert"),
        stale_chunks=trainer.figure("rollout/dropped_stale"),
        stale_steps=trainer.figure("rollout/dropped_stale_steps"),
        checkpoint_version=trainer.figure("time/checkpoint_version"),
        checkpoint_age_s=None if saved_at is None else max(0.0, now - saved_at),
        partitions=partitions,
    )


def _run_state(telemetry: RunTelemetry, rows: dict[str, TaskRow]) -> str:
    finished = telemetry.finished
    if finished is not None:
        return f"finished ({finished.get('reason', '?')})"
    trainer = rows.get(TRAINER)
    if trainer is None:
        return "starting (no event from the trainer yet)"
    if trainer.silent:
        return "trainer SILENT"
    if trainer.state.startswith("exited"):
        return f"trainer {trainer.state}"
    return "running"


def build_status(telemetry: RunTelemetry, broker: BrokerFigures, now: float) -> RunStatus:
    """Every figure ``status`` shows, at wall-clock time ``now`` (epoch seconds)."""
    trainer = telemetry.trainer
    versions = [trainer.figure("time/policy_version")] if trainer else []
    versions += [t.figure("policy_version") for n, t in telemetry.tasks.items() if n != TRAINER]
    known = [v for v in versions if v is not None]
    latest = max(known) if known else None
    rows = {
        name: _task_row(seen, latest, now)
        for name, seen in sorted(telemetry.tasks.items(), key=lambda item: _order(item[0]))
    }
    started = trainer.first_seen if trainer else telemetry.first_time
    finished = telemetry.finished
    end = number(finished.get("time")) if finished else None
    elapsed = None if started is None else max(0.0, (end or now) - started)
    return RunStatus(
        run_id=telemetry.run_id,
        state=_run_state(telemetry, rows),
        elapsed_s=elapsed,
        env_steps=trainer.figure("time/env_steps") if trainer else None,
        eval_mean=telemetry.mean_eval_return,
        eval_rounds=len(telemetry.evaluations),
        trend=eval_trend(telemetry.evaluations),
        dead_letters=broker.dead_letters,
        tasks=tuple(rows.values()),
        trainer=_trainer_figures(trainer, broker, now),
        info=telemetry.run_info,
        broker_error=broker.error,
    )


# --------------------------------------------------------------------------- rendering


def _n(value: float | None, digits: int = 0) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _ago(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 120:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.0f} min" if seconds < 7200 else f"{seconds / 3600:.1f} h"


_ARROWS = {"rising": "↑", "falling": "↓", "flat": "→"}


def _header(status: RunStatus) -> Text:
    info = status.info
    what = ", ".join(
        str(info[k]) for k in ("preset", "env_id", "algorithm", "mode") if info.get(k) is not None
    )
    alarming = "SILENT" in status.state or status.state.startswith("gone")
    style = "bold red" if alarming else "bold"
    header = Text(f"run {status.run_id} — ")
    header.append(status.state, style=style)
    if what:
        header.append(f"   ({what})")
    if source := info.get("experience_from"):  # a shadow learner (`coach-stream attach`)
        header.append(f"   learning from run {source}'s experience")
    return header


def _run_table(status: RunStatus) -> Table:
    table = Table(show_header=False, box=None, title="run", title_justify="left")
    table.add_column(style="bold")
    table.add_column()
    info = status.info
    budget = number(info.get("env_step_budget"))
    target = number(info.get("target_return"))
    trend = status.trend
    trend_text = "-" if trend is None else (
        f"{_ARROWS[trend.direction]} {trend.direction} ({trend.delta:+,.1f} over the last "
        f"{trend.rounds} rounds)"
    )  # fmt: skip
    rows = [
        ("elapsed", _ago(status.elapsed_s)),
        ("env steps", _n(status.env_steps) + (f" / {budget:,.0f}" if budget else "")),
        (
            "mean eval return",
            _n(status.eval_mean, 1)
            + (f" (target {target:g})" if target is not None else "")
            + f", {status.eval_rounds} rounds",
        ),
        ("eval trend", trend_text),
        ("dead letters", "-" if status.dead_letters is None else f"{status.dead_letters:,}"),
    ]
    for name, value in rows:
        table.add_row(name, value)
    return table


def _trainer_table(status: RunStatus) -> Table:
    t = status.trainer
    table = Table(show_header=False, box=None, title="trainer", title_justify="left")
    table.add_column(style="bold")
    table.add_column()
    checkpoint = "-"
    if t.checkpoint_version is not None:
        checkpoint = f"v{t.checkpoint_version:.0f}, {_ago(t.checkpoint_age_s)} ago"
    lag = "-"
    if t.lag_records is not None:
        lag = f"{t.lag_records:,} records, oldest unread {_ago(t.lag_s)}"
    rows = [
        ("updates/s", _n(t.updates_per_s, 2)),
        ("env steps/s", f"{_n(t.env_steps_per_s)} learned from, {_n(t.consumed_per_s)} read"),
        ("policy version", _n(t.policy_version)),
        ("policy lag (mean)", _n(t.policy_lag_mean, 2)),
        ("samples per insert", _n(t.samples_per_insert, 1)),
        ("stale dropped", f"{_n(t.stale_chunks)} chunks ({_n(t.stale_steps)} steps)"),
        ("last checkpoint", checkpoint),
        ("consumer lag", lag),
    ]
    for name, value in rows:
        table.add_row(name, value)
    return table


def _partition_table(status: RunStatus) -> Table:
    table = Table(title="experience partitions (trainer's consumer lag)", title_justify="left")
    for column in ("partition", "end", "position", "committed", "lag records", "lag s"):
        table.add_column(column, justify="right", no_wrap=True)
    for p in status.trainer.partitions:
        table.add_row(
            str(p.partition), f"{p.end:,}", f"{p.position:,}", _n(p.committed),
            f"{p.lag_records:,}", _n(p.lag_s, 1),
        )  # fmt: skip
    return table


def _task_table(status: RunStatus) -> Table:
    table = Table(title="tasks", title_justify="left")
    columns = ("task", "state", "last seen", "env steps/s", "episodes", "policy v", "v lag",
               "chunks", "metrics")  # fmt: skip
    for column in columns:
        table.add_column(column, no_wrap=True, justify="left" if column in columns[:3] else "right")
    for row in status.tasks:
        state = Text(row.state, style="bold red" if row.silent else "")
        if row.restarts:
            state.append(f" (restarts {row.restarts})", style="yellow")
        table.add_row(
            row.task, state, f"{_ago(row.last_seen_s)} ago", _n(row.env_steps_per_s),
            _n(row.episodes), _n(row.policy_version), _n(row.policy_lag), _n(row.chunks),
            row.metrics_url or "-",
            style="red" if row.silent else None,  # its figures are as last reported
        )  # fmt: skip
    return table


def render_status(status: RunStatus) -> Group:
    """The whole view: header, run, trainer, partitions, tasks, and the silence rule."""
    side_by_side = Table.grid(padding=(0, 4))
    side_by_side.add_row(_run_table(status), _trainer_table(status))
    parts: list[Any] = [_header(status), side_by_side]
    if status.trainer.partitions:
        parts.append(_partition_table(status))
    parts.append(_task_table(status))
    rule = Text(
        f"SILENT: no event for max({SILENT_MIN_S:g} s, {SILENT_INTERVALS:g} x the task's "
        "report interval)",
        style="dim",
    )
    if status.silent:
        rule = Text("silent: " + ", ".join(status.silent), style="bold red") + Text("   ") + rule
    parts.append(rule)
    if status.broker_error:
        parts.append(Text(status.broker_error, style="yellow"))
    return Group(*parts)
