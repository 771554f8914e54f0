"""Following a launched run in the terminal: the live view, its outcome and exit code.

``follow_live`` drives ``launcher.follow`` with a refreshing table on a terminal (a line
every 5 s otherwise); ``print_outcome`` puts the result on stdout, one fact per line, and
``exit_code`` turns it into the command's code. ``render`` is also the figures table of
``status`` when a run's telemetry topic cannot be read.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType

import typer
from rich.console import Console
from rich.live import Live
from rich.table import Table

from coach_stream.config import Preset
from coach_stream.errors import OrchestratorError
from coach_stream.observability.fold import RunTelemetry
from coach_stream.orchestrators.launcher import (
    FollowableOrchestrator,
    RunOutcome,
    UpdateCallback,
    follow,
)
from coach_stream.orchestrators.state import RunRecord
from coach_stream.transport.settings import KafkaSettings


def _fmt(value: float | None, digits: int = 0) -> str:
    if value is None:
        return "-"
    return f"{value:,.{digits}f}"


def render(
    preset: Preset | None, progress: RunTelemetry, record: RunRecord, elapsed: float
) -> Table:
    """The live view: figures from the tasks' events, states from the orchestrator."""
    table = Table(title=f"run {record.run_id} — {record.state}", show_header=False, box=None)
    table.add_column(style="bold")
    table.add_column()
    budget = f" / {preset.env_step_budget:,}" if preset else ""
    target = f" (target {preset.target_return:g})" if preset else ""
    consumed, produced = progress.figure("time/env_steps_per_s"), progress.worker_env_steps_per_s
    rows = [
        ("elapsed", f"{elapsed:,.0f} s"),
        ("env steps", f"{_fmt(progress.figure('time/env_steps'))}{budget}"),
        ("env steps/s", f"{_fmt(consumed)} trained on, {_fmt(produced)} produced by workers"),
        ("updates", _fmt(progress.figure("time/updates"))),
        ("policy version", _fmt(progress.figure("time/policy_version"))),
        ("policy lag", _fmt(progress.figure("rollout/policy_lag_mean"), 2)),
        ("dropped stale", _fmt(progress.figure("rollout/dropped_stale"))),
        ("mean eval return", f"{_fmt(progress.mean_eval_return, 1)}{target}"),
    ]
    for name, value in rows:
        table.add_row(name, value)
    tasks = ", ".join(
        f"{t.spec.name} {t.state}" + (f" (restarts {t.restarts})" if t.restarts else "")
        for t in record.tasks
    )
    table.add_row("tasks", tasks)
    return table


def print_outcome(outcome: RunOutcome, logs_hint: str) -> None:
    """The result on stdout, one fact per line (scripts grep these; no wrapping)."""
    progress = outcome.progress
    how = "timed out" if outcome.timed_out else (outcome.reason or str(outcome.state))
    lines = [f"run {outcome.run_id}: {how} after {outcome.wall_s:.1f} s"]
    if progress.env_steps is not None:
        lines.append(f"env steps: {progress.env_steps:,}")
    if outcome.checkpoint_uri:
        lines.append(f"checkpoint: {outcome.checkpoint_uri}")
    if progress.mean_eval_return is not None:
        lines.append(
            f"final evaluation: mean return {progress.mean_eval_return:.1f} over the last "
            f"{progress.eval_episodes} episodes"
        )
    lines.append(f"logs: {logs_hint}")
    for line in lines:
        typer.echo(line)


def print_timing(outcome: RunOutcome, running_s: float, follow_at_s: float, err: Console) -> None:
    """Launch to every task running, and to the trainer's last word (solved or not)."""
    ended = "solved" if outcome.solved else "ended"
    err.print(
        f"timing: tasks running {running_s:.1f} s after launch, {ended} "
        f"{follow_at_s + outcome.wall_s:.1f} s after launch"
    )


def exit_code(outcome: RunOutcome, err: Console) -> int:
    """0 solved; 2 when a task refused its input (its own error line); 1 otherwise."""
    if outcome.solved:
        return 0
    if outcome.failure is not None:
        raise OrchestratorError(f"run {outcome.run_id} failed: {outcome.failure}")
    if outcome.state.value == "failed" and outcome.finished is None:
        err.print(
            f"run {outcome.run_id} failed before its trainer finished (a task kept crashing); "
            f"read why with `coach-stream logs {outcome.run_id} --task trainer`."
        )
    return 1


@contextlib.contextmanager
def scalars_written(
    kafka: KafkaSettings, run_id: str, tensorboard: Path | None, err: Console
) -> Iterator[Callable[[], None]]:
    """TensorBoard/CSV written from the run's telemetry while the launcher follows it:
    a poll to call at each refresh (a no-op without ``--tensorboard``)."""
    if tensorboard is None:
        yield lambda: None
        return
    from coach_stream.cli.status import TelemetryScalars

    with TelemetryScalars(kafka, run_id, tensorboard) as scalars:
        err.print(f"run {run_id}: TensorBoard scalars and metrics.csv in {scalars.path}")
        yield scalars.poll


def interrupt(signum: int, frame: FrameType | None) -> None:
    """A SIGTERM handler: stop like Ctrl-C does."""
    raise KeyboardInterrupt


@contextlib.contextmanager
def stopped_on_interrupt(orchestrator: FollowableOrchestrator, run_id: str) -> Iterator[None]:
    """A KeyboardInterrupt (Ctrl-C, or SIGTERM via ``interrupt``) stops the run: exit 130."""
    try:
        yield
    except KeyboardInterrupt:
        orchestrator.stop(run_id)  # follow() stops it too; this makes Ctrl-C twice safe
        Console(stderr=True).print(f"stopped run {run_id}")
        raise typer.Exit(130) from None


def follow_live(
    orchestrator: FollowableOrchestrator,
    run_id: str,
    preset: Preset,
    err: Console,
    timeout: float | None,
    poll_scalars: Callable[[], None],
) -> RunOutcome:
    """``launcher.follow`` with the live view (a terminal) or a line every 5 s."""
    started = time.monotonic()
    if err.is_terminal:
        with Live(console=err, refresh_per_second=2, transient=False) as live:

            def update(progress: RunTelemetry, record: RunRecord) -> None:
                poll_scalars()
                live.update(render(preset, progress, record, time.monotonic() - started))

            return _follow(orchestrator, run_id, preset, update, timeout)
    last_print = [0.0]

    def plain(progress: RunTelemetry, record: RunRecord) -> None:
        poll_scalars()
        now = time.monotonic()
        if now - last_print[0] < 5.0:
            return
        last_print[0] = now
        err.print(
            f"[{now - started:6.0f} s] steps {_fmt(progress.figure('time/env_steps'))} "
            f"steps/s {_fmt(progress.figure('time/env_steps_per_s'))} "
            f"version {_fmt(progress.figure('time/policy_version'))} "
            f"lag {_fmt(progress.figure('rollout/policy_lag_mean'), 2)} "
            f"eval {_fmt(progress.mean_eval_return, 1)}"
        )

    return _follow(orchestrator, run_id, preset, plain, timeout)


def _follow(
    orchestrator: FollowableOrchestrator,
    run_id: str,
    preset: Preset,
    update: UpdateCallback,
    timeout: float | None,
) -> RunOutcome:
    with stopped_on_interrupt(orchestrator, run_id):  # follow() stopped it too
        return follow(
            orchestrator,
            run_id,
            eval_episodes=preset.eval_episodes,
            on_update=update,
            timeout_s=timeout,
        )
