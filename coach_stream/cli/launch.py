"""``coach-stream launch | status | logs | stop``: run a preset as supervised processes.

Only this layer reads the environment (``KAFKA_BOOTSTRAP_SERVERS``,
``STORAGE_EMULATOR_HOST``, ``COACH_STREAM_STATE_DIR``) and, failing those, the addresses
of a running ``coach-stream stack``; everything below receives explicit settings.
"""

from __future__ import annotations

import enum
import json
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

import typer
from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from coach_stream.cli.options import (
    DEFAULT_STATE_DIR,
    CheckpointsOption,
    GcsEmulatorOption,
    KafkaOption,
    SeedOption,
    SetOption,
    checkpoint_url,
    load_run_preset,
)
from coach_stream.config import Preset
from coach_stream.errors import ConfigError, OrchestratorError
from coach_stream.orchestrators import (
    LaunchSettings,
    LocalOrchestrator,
    build_run_spec,
    new_run_id,
    warm_supervisor,
)
from coach_stream.orchestrators.launcher import (
    RunOutcome,
    UpdateCallback,
    discard_launch,
    follow,
    prepare_topics,
    validate_launch,
)
from coach_stream.orchestrators.progress import LogFollower, RunProgress, read_progress
from coach_stream.orchestrators.state import RunRecord
from coach_stream.stack import LocalStack, default_cache_dir


class OrchestratorKind(enum.StrEnum):
    local = "local"
    nomad = "nomad"


StateDirOption = typer.Option(
    DEFAULT_STATE_DIR,
    "--state-dir",
    envvar="COACH_STREAM_STATE_DIR",
    help="Where runs keep run.json and their logs (status/logs/stop look here).",
)


OrchestratorOption = typer.Option(
    OrchestratorKind.local, "--orchestrator", help="Who runs the processes (nomad: later)."
)


def _orchestrator(state_dir: Path) -> LocalOrchestrator:
    return LocalOrchestrator(state_dir, config=warm_supervisor())


def _fmt(value: float | None, digits: int = 0) -> str:
    if value is None:
        return "-"
    return f"{value:,.{digits}f}"


def render(
    preset: Preset | None, progress: RunProgress, record: RunRecord, elapsed: float
) -> Table:
    """The live view: figures from the tasks' event lines, states from run.json."""
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


def _print_outcome(outcome: RunOutcome, orchestrator: LocalOrchestrator) -> None:
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
    lines.append(f"logs: {orchestrator.run_dir(outcome.run_id).logs_dir}")
    for line in lines:
        typer.echo(line)


def launch(
    preset: str = typer.Argument(..., help="A built-in preset (cartpole-ppo, ...) or a YAML path."),
    orchestrator_kind: OrchestratorKind = OrchestratorOption,
    workers: int = typer.Option(2, "--workers", "-n", min=1, max=256, help="Rollout workers."),
    run_id: str | None = typer.Option(None, "--run-id", help="Default: <preset>-<time>-<hex>."),
    detach: bool = typer.Option(False, "--detach", help="Start the run and return at once."),
    checkpoints: str | None = CheckpointsOption,
    kafka: str | None = KafkaOption,
    gcs_emulator: str | None = GcsEmulatorOption,
    seed: int | None = SeedOption,
    overrides: list[str] = SetOption,
    timeout: float | None = typer.Option(
        None, "--timeout", min=0.0, help="Stop the run after this many seconds."
    ),
    state_dir: Path = StateDirOption,
    experience_retention: str | None = typer.Option(
        None,
        "--experience-retention",
        help="How long the experience topic keeps data: forever, 7d, 50GiB, 30d,100GiB "
        "(default: the preset's experience_retention).",
    ),
) -> None:
    """Start a trainer, N rollout workers and an evaluator, and follow them to the end.

    Exit code 0 when the target return was reached, 1 when the run ended without it,
    2 for bad input (nothing is started), 130 when interrupted.
    """
    if orchestrator_kind is OrchestratorKind.nomad:
        raise OrchestratorError(
            "The nomad orchestrator is not implemented yet; use --orchestrator local."
        )
    # librdkafka's own lines (a refused connection, "all brokers down") repeat what the one
    # error line of a failed check says; the tasks still log them, into their log files.
    from coach_stream.transport.clients import log as librdkafka_log

    librdkafka_log.disabled = True
    # A launcher killed with SIGTERM (a CI timeout, `kill`) stops its run like Ctrl-C does,
    # from the start: while the run starts, it is undone (`_start`), so nothing is orphaned.
    signal.signal(signal.SIGTERM, _interrupt)
    if experience_retention is not None:  # a preset override, so every task sees it too
        overrides = [*overrides, f"experience_retention={experience_retention}"]
    plan = _plan(
        preset, workers, run_id, checkpoints, kafka, gcs_emulator, seed, overrides, state_dir
    )
    orchestrator = _orchestrator(state_dir)
    _check_run_free(orchestrator, plan)
    _start(orchestrator, plan)
    err = Console(stderr=True, highlight=False, soft_wrap=True)
    settings = plan.settings
    if detach:
        err.print(
            f"started run {settings.run_id} in the background (checkpoints: {plan.checkpoints})"
        )
        err.print(
            f"  coach-stream status {settings.run_id}   |   coach-stream logs {settings.run_id} -f"
        )
        err.print(f"  coach-stream stop {settings.run_id}")
        typer.echo(settings.run_id)
        return
    loaded = plan.preset
    err.print(
        f"run {settings.run_id}: {loaded.env_id} {loaded.algorithm} ({loaded.mode}), "
        f"{workers} workers, checkpoints {plan.checkpoints}"
    )
    outcome = _follow_live(orchestrator, settings.run_id, loaded, err, timeout)
    _print_outcome(outcome, orchestrator)
    raise typer.Exit(_exit_code(outcome, err))


@dataclass(frozen=True)
class _LaunchPlan:
    """A validated launch: the preset as the tasks will load it, and their settings."""

    preset: Preset
    settings: LaunchSettings
    state_dir: Path

    @property
    def checkpoints(self) -> str:
        return self.settings.checkpoints


def _plan(
    preset: str,
    workers: int,
    run_id: str | None,
    checkpoints: str | None,
    kafka: str | None,
    gcs_emulator: str | None,
    seed: int | None,
    overrides: list[str],
    state_dir: Path,
) -> _LaunchPlan:
    """Everything the flags and the preset decide, checked without touching any service."""
    # Loaded exactly as every task will load it (with --seed), so a value a task would
    # refuse is refused here, once, instead of by N crash-looping processes.
    loaded = load_run_preset(preset, seed, overrides)
    url = checkpoint_url(checkpoints, state_dir)
    stack = LocalStack(default_cache_dir())
    kafka = kafka or stack.kafka_bootstrap()
    if url.startswith("gs://"):
        gcs_emulator = gcs_emulator or stack.gcs_endpoint()
    settings = LaunchSettings(
        preset=preset,
        run_id=run_id or new_run_id(loaded.name),
        workers=workers,
        kafka_bootstrap=kafka or "",
        checkpoints=url,
        gcs_emulator=gcs_emulator if url.startswith("gs://") else None,
        seed=seed,
        overrides=tuple(overrides),
    )
    return _LaunchPlan(loaded, settings, state_dir)


def _check_run_free(orchestrator: LocalOrchestrator, plan: _LaunchPlan) -> None:
    """The run id is new here, in Kafka and in the store; the env and services answer."""
    run_dir = orchestrator.run_dir(plan.settings.run_id)
    if run_dir.exists():
        raise ConfigError(
            f"Run id {plan.settings.run_id!r} already exists in {run_dir.path.parent}; choose "
            "another --run-id."
        )
    validate_launch(plan.settings, plan.preset.env_id)


def _start(orchestrator: LocalOrchestrator, plan: _LaunchPlan) -> None:
    """Create the run's topics and start its supervisor; a failure leaves nothing behind."""
    try:
        prepare_topics(plan.settings, experience_retention=plan.preset.experience_retention)
        orchestrator.submit(build_run_spec(plan.settings))
    except BaseException as error:
        if orchestrator.run_dir(plan.settings.run_id).exists():
            orchestrator.stop(plan.settings.run_id)  # whatever its supervisor had started
        discard_launch(plan.settings, orchestrator.state_dir)
        if isinstance(error, KeyboardInterrupt):
            Console(stderr=True).print(f"stopped run {plan.settings.run_id} before it started")
        raise


def _exit_code(outcome: RunOutcome, err: Console) -> int:
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


def _follow_live(
    orchestrator: LocalOrchestrator,
    run_id: str,
    preset: Preset,
    err: Console,
    timeout: float | None,
) -> RunOutcome:
    started = time.monotonic()
    if err.is_terminal:
        with Live(console=err, refresh_per_second=2, transient=False) as live:

            def update(progress: RunProgress, record: RunRecord) -> None:
                live.update(render(preset, progress, record, time.monotonic() - started))

            return _follow_interruptible(orchestrator, run_id, preset, update, timeout)
    last_print = [0.0]

    def plain(progress: RunProgress, record: RunRecord) -> None:
        now = time.monotonic()
        if now - last_print[0] < 5.0:
            return
        last_print[0] = now
        rate = progress.figure("time/env_steps_per_s")
        err.print(
            f"[{now - started:6.0f} s] steps {_fmt(progress.figure('time/env_steps'))} "
            f"steps/s {_fmt(rate)} "
            f"version {_fmt(progress.figure('time/policy_version'))} "
            f"lag {_fmt(progress.figure('rollout/policy_lag_mean'), 2)} "
            f"eval {_fmt(progress.mean_eval_return, 1)}"
        )

    return _follow_interruptible(orchestrator, run_id, preset, plain, timeout)


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def _follow_interruptible(
    orchestrator: LocalOrchestrator,
    run_id: str,
    preset: Preset,
    update: UpdateCallback,
    timeout: float | None,
) -> RunOutcome:
    try:
        return follow(
            orchestrator,
            run_id,
            eval_episodes=preset.eval_episodes,
            on_update=update,
            timeout_s=timeout,
        )
    except KeyboardInterrupt:
        orchestrator.stop(run_id)  # follow() stopped it too; this makes Ctrl-C twice safe
        Console(stderr=True).print(f"stopped run {run_id}")
        raise typer.Exit(130) from None


def status(
    run_id: str | None = typer.Argument(None, help="A run id; without it, list the runs."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object instead."),
    state_dir: Path = StateDirOption,
) -> None:
    """Show a run's tasks (state, pid, restarts) and its latest figures."""
    orchestrator = _orchestrator(state_dir)
    out = Console(highlight=False)
    if run_id is None:
        runs = [orchestrator.record(r) for r in orchestrator.runs()]
        if as_json:
            typer.echo(json.dumps([{"run_id": r.run_id, "state": r.state.value} for r in runs]))
            return
        if not runs:
            out.print(f"no runs under {orchestrator.state_dir}")
        for record in runs:
            stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(record.created_at_ms / 1000))
            out.print(f"{record.run_id}  {record.state}  {stamp}  {len(record.tasks)} tasks")
        return
    record = orchestrator.record(run_id)
    progress = read_progress(orchestrator.run_dir(run_id).logs_dir)
    if as_json:
        typer.echo(json.dumps({
            "run_id": run_id,
            "state": record.state.value,
            "tasks": [
                {"name": s.name, "state": s.state.value, "pid": s.pid,
                 "restarts": s.restarts, "exit_code": s.exit_code}
                for s in orchestrator.status(run_id)
            ],
            "progress": progress.trainer,
            "mean_eval_return": progress.mean_eval_return,
            "finished": progress.finished,
            "failure": record.failure,
        }))  # fmt: skip
        return
    tasks = Table(title=f"run {run_id} — {record.state}")
    for column in ("task", "state", "pid", "restarts", "exit code"):
        tasks.add_column(column, no_wrap=True)
    for s in orchestrator.status(run_id):
        exit_code = "-" if s.exit_code is None else str(s.exit_code)
        tasks.add_row(s.name, str(s.state), str(s.pid or "-"), str(s.restarts), exit_code)
    elapsed = ((record.ended_at_ms or time.time() * 1000) - record.created_at_ms) / 1000
    figures = render(None, progress, record, elapsed)
    figures.title = None
    parts: list[Table | Text] = [tasks, figures]
    if progress.finished:
        parts.append(Text(f"finished: {json.dumps(progress.finished)}"))
    if record.failure:
        parts.append(Text(f"failure: {record.failure}"))
    out.print(Group(*parts))


def logs(
    run_id: str = typer.Argument(..., help="The run id."),
    task: str | None = typer.Option(
        None, "--task", "-t", help="One task (trainer, rollout-0, evaluator)."
    ),
    follow_logs: bool = typer.Option(
        False, "--follow", "-f", help="Keep printing until the run ends."
    ),
    state_dir: Path = StateDirOption,
) -> None:
    """Print a run's logs: one task's, or all tasks' prefixed with [task]."""
    orchestrator = _orchestrator(state_dir)
    if not follow_logs:
        for line in orchestrator.logs(run_id, task):
            typer.echo(line)
        return
    if task is not None:
        orchestrator.record(run_id).task(task)  # an unknown task is an error, not silence
    follower = LogFollower(orchestrator.run_dir(run_id).logs_dir)
    try:
        while True:
            for name, line in follower.poll():
                if task is None:
                    typer.echo(f"[{name}] {line}")
                elif name == task:
                    typer.echo(line)
            sys.stdout.flush()
            if orchestrator.record(run_id).state.terminal:
                break
            time.sleep(0.5)
    except KeyboardInterrupt:
        raise typer.Exit(130) from None


def stop(
    run_id: str = typer.Argument(..., help="The run id."),
    state_dir: Path = StateDirOption,
) -> None:
    """Stop a run: SIGTERM every task, SIGKILL what is left after the grace period."""
    orchestrator = _orchestrator(state_dir)
    orchestrator.stop(run_id)
    states = ", ".join(f"{s.name} {s.state}" for s in orchestrator.status(run_id))
    typer.echo(f"run {run_id}: {orchestrator.record(run_id).state} ({states})")


def register(app: typer.Typer) -> None:
    app.command("launch")(launch)
    app.command("status")(status)
    app.command("logs")(logs)
    app.command("stop")(stop)
