"""``coach-stream launch | status | logs | stop``: run a preset as supervised processes.

Only this layer reads the environment (``KAFKA_BOOTSTRAP_SERVERS``,
``STORAGE_EMULATOR_HOST``, ``COACH_STREAM_STATE_DIR``, Kafka's security variables through
``cli.kafka_env``) and, failing those, the addresses of a running ``coach-stream stack``;
everything below receives explicit settings.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import json
import os
import signal
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

import typer
from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from coach_stream.cli import nomad as nomad_cli
from coach_stream.cli import status as status_cli
from coach_stream.cli.kafka_env import kafka_security, kafka_settings
from coach_stream.cli.options import (
    DEFAULT_STATE_DIR,
    CheckpointsOption,
    GcsEmulatorOption,
    KafkaOption,
    SeedOption,
    SetOption,
    check_writable_dir,
    checkpoint_url,
    load_run_preset,
)
from coach_stream.cli.spinner import spinner
from coach_stream.config import Preset
from coach_stream.errors import ConfigError, OrchestratorError, RunExistsError
from coach_stream.orchestrators import (
    LaunchSettings,
    LocalOrchestrator,
    build_run_spec,
    new_run_id,
    warm_supervisor,
    warm_zygote,
)
from coach_stream.orchestrators.launcher import (
    FollowableOrchestrator,
    RunOutcome,
    UpdateCallback,
    claim_run_id,
    discard_launch,
    follow,
    prepare_topics,
    validate_launch,
)
from coach_stream.orchestrators.nomad_job import job_id as nomad_job_id
from coach_stream.orchestrators.plan import RunSpec, TaskStatus
from coach_stream.orchestrators.progress import LogFollower, RunProgress, read_progress
from coach_stream.orchestrators.state import RunRecord, RunState
from coach_stream.stack import LocalStack, default_cache_dir
from coach_stream.transport.settings import KafkaSettings
from coach_stream.transport.telemetry import TelemetryLines, TelemetryReader


class OrchestratorKind(enum.StrEnum):
    local = "local"
    nomad = "nomad"


MetricsPortOption = typer.Option(
    None,
    "--metrics-port",
    min=0,
    max=65535,
    help="Serve Prometheus /metrics: the trainer on this port, rollout worker i on port+1+i; "
    "0: any free port each (status shows them). Sets the preset's metrics_port.",
)
TensorBoardOption = typer.Option(
    None,
    "--tensorboard",
    help="Write the run's TensorBoard scalars and metrics.csv under DIR/<run_id>/, from its "
    "telemetry (docs/observability.md).",
)
StateDirOption = typer.Option(
    DEFAULT_STATE_DIR,
    "--state-dir",
    envvar="COACH_STREAM_STATE_DIR",
    help="Where runs keep run.json and their logs (status/logs/stop look here).",
)


OrchestratorOption = typer.Option(
    OrchestratorKind.local,
    "--orchestrator",
    help="Who runs the processes: local subprocesses or a Nomad job (NOMAD_ADDR, ...).",
)
WhichOrchestratorOption = typer.Option(
    None,
    "--orchestrator",
    help="Where the run is (default: local if this state dir has it, else nomad when "
    "NOMAD_ADDR or --nomad-addr is set).",
)


def local_orchestrator(state_dir: Path) -> LocalOrchestrator:
    """Supervisors forked from a warm zygote that outlives launches (docs/running.md);
    ``COACH_STREAM_ZYGOTE=off`` starts each as a fresh process instead."""
    off = os.environ.get("COACH_STREAM_ZYGOTE", "").lower() in ("off", "0", "false", "no")
    zygote = None if off else warm_zygote()
    return LocalOrchestrator(state_dir, config=warm_supervisor(), zygote=zygote)


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


def _print_outcome(outcome: RunOutcome, logs_hint: str) -> None:
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
    metrics_port: int | None = MetricsPortOption,
    tensorboard: Path | None = TensorBoardOption,
    dry_run: bool = nomad_cli.DryRunOption,
    job_format: nomad_cli.JobFormat = nomad_cli.FormatOption,
    nomad_addr: str | None = nomad_cli.NomadAddrOption,
    nomad_token: str | None = nomad_cli.NomadTokenOption,
    nomad_namespace: str | None = nomad_cli.NomadNamespaceOption,
    nomad_region: str | None = nomad_cli.NomadRegionOption,
    driver: nomad_cli.Driver = nomad_cli.DriverOption,
    image: str | None = nomad_cli.ImageOption,
    python: str | None = nomad_cli.PythonOption,
    datacenters: list[str] = nomad_cli.DatacenterOption,
    secrets_var: str | None = nomad_cli.SecretsVarOption,
    trainer_gpus: int = nomad_cli.TrainerGpusOption,
    start_timeout: float = nomad_cli.StartTimeoutOption,
) -> None:
    """Start a trainer, N rollout workers and an evaluator, and follow them to the end.

    Exit code 0 when the target return was reached, 1 when the run ended without it,
    2 for bad input (nothing is started), 130 when interrupted.
    """
    started = time.monotonic()  # launch-to-running and launch-to-solved are measured from here
    nomad_flags = nomad_cli.NomadFlags(
        nomad_addr, nomad_token, nomad_namespace, nomad_region, driver, image, python,
        tuple(datacenters), secrets_var, trainer_gpus, start_timeout, dry_run, job_format,
    )  # fmt: skip
    if dry_run and orchestrator_kind is not OrchestratorKind.nomad:
        raise ConfigError("--dry-run prints a Nomad job; add --orchestrator nomad.")
    # A launcher killed with SIGTERM (a CI timeout, `kill`) stops its run like Ctrl-C does,
    # from the start: while the run starts, it is undone (`_start`), so nothing is orphaned.
    signal.signal(signal.SIGTERM, _interrupt)
    if tensorboard is not None:
        check_writable_dir(tensorboard, "--tensorboard")
    if experience_retention is not None:  # a preset override, so every task sees it too
        overrides = [*overrides, f"experience_retention={experience_retention}"]
    if metrics_port is not None:
        overrides = [*overrides, f"metrics_port={metrics_port}"]
    plan = _plan(
        preset, workers, run_id, checkpoints, kafka, gcs_emulator, seed, overrides, state_dir
    )
    if orchestrator_kind is OrchestratorKind.nomad:
        _launch_on_nomad(plan, nomad_flags, detach, timeout, started, tensorboard)
        return
    orchestrator = local_orchestrator(state_dir)
    # Checking the services and starting N processes takes seconds: say which step it is.
    with spinner(f"run {plan.settings.run_id}: checking Kafka and the checkpoint store") as step:
        _check_run_free(orchestrator, plan)
        _start(orchestrator, plan, step)
    # From here until follow() takes over, Ctrl-C or SIGTERM must still stop the run.
    with _stopped_on_interrupt(orchestrator, plan.settings.run_id):
        err = Console(stderr=True, highlight=False, soft_wrap=True)
        settings = plan.settings
        running_s = time.monotonic() - started
        err.print(
            f"run {settings.run_id}: {len(orchestrator.status(settings.run_id))} tasks running "
            f"after {running_s:.1f} s"
        )
        if detach:
            err.print(
                f"started run {settings.run_id} in the background (checkpoints: {plan.checkpoints})"
            )
            err.print(
                f"  coach-stream status {settings.run_id}   |   "
                f"coach-stream logs {settings.run_id} -f"
            )
            err.print(f"  coach-stream stop {settings.run_id}")
            _detached_tensorboard_hint(settings.run_id, tensorboard, err)
            typer.echo(settings.run_id)
            return
        loaded = plan.preset
        err.print(
            f"run {settings.run_id}: {loaded.env_id} {loaded.algorithm} ({loaded.mode}), "
            f"{workers} workers, checkpoints {plan.checkpoints}"
        )
        followed = _LocalWithTelemetry(orchestrator, settings.kafka_settings())
        following = time.monotonic()
        with _scalars(settings.kafka_settings(), settings.run_id, tensorboard, err) as scalars:
            outcome = _follow_live(followed, settings.run_id, loaded, err, timeout, scalars)
        _print_outcome(outcome, str(orchestrator.run_dir(outcome.run_id).logs_dir))
        _print_timing(outcome, running_s, following - started, err)
    raise typer.Exit(_exit_code(outcome, err))


@contextlib.contextmanager
def _scalars(
    kafka: KafkaSettings, run_id: str, tensorboard: Path | None, err: Console
) -> Iterator[status_cli.TelemetryScalars | None]:
    """TensorBoard/CSV written from the run's telemetry while the launcher follows it."""
    if tensorboard is None:
        yield None
        return
    with status_cli.TelemetryScalars(kafka, run_id, tensorboard) as scalars:
        err.print(f"run {run_id}: TensorBoard scalars and metrics.csv in {scalars.path}")
        yield scalars


def _detached_tensorboard_hint(run_id: str, tensorboard: Path | None, err: Console) -> None:
    if tensorboard is not None:
        err.print(
            f"  nothing follows a detached run: write its scalars with "
            f"`coach-stream status {run_id} --watch --tensorboard {tensorboard}`"
        )


def _print_timing(outcome: RunOutcome, running_s: float, follow_at_s: float, err: Console) -> None:
    """Launch to every task running, and to the trainer's last word (solved or not)."""
    ended = "solved" if outcome.solved else "ended"
    err.print(
        f"timing: tasks running {running_s:.1f} s after launch, {ended} "
        f"{follow_at_s + outcome.wall_s:.1f} s after launch"
    )


def _launch_on_nomad(
    plan: _LaunchPlan,
    flags: nomad_cli.NomadFlags,
    detach: bool,
    timeout: float | None,
    started: float,
    tensorboard: Path | None = None,
) -> None:
    """Register the run's job, wait for its allocations, then follow it from Kafka."""
    err = Console(stderr=True, highlight=False, soft_wrap=True)
    settings = plan.settings
    if flags.python:
        settings = dataclasses.replace(settings, python=flags.python)
    conn = nomad_cli.connection(flags.addr, flags.token, flags.namespace, flags.region)
    job_settings = nomad_cli.job_settings(
        flags, conn, settings.kafka_bootstrap, settings.gcs_emulator, settings.kafka_security
    )
    from coach_stream.orchestrators.nomad import NomadOrchestrator

    orchestrator = NomadOrchestrator(
        conn,
        job_settings,
        start_timeout_s=flags.start_timeout_s,
        telemetry=settings.kafka_settings(),
    )
    spec = build_run_spec(settings)
    if flags.dry_run:
        nomad_cli.print_job(orchestrator.job(spec), flags.job_format)
        return
    if settings.checkpoints.startswith("file://"):
        err.print(
            f"note: checkpoints in {settings.checkpoints} work on Nomad only when every node "
            "shares that directory; pass --checkpoints gs://bucket/prefix for a cluster."
        )
    with spinner(f"run {settings.run_id}: checking Kafka and the checkpoint store") as step:
        # Outside the try: a refused launch (a run id taken) must not discard that run.
        validate_launch(settings, plan.preset)
        step(f"run {settings.run_id}: creating its topics")
        claim_run_id(settings)  # a lost race is refused, and undoes nothing
        try:
            prepare_topics(settings, experience_retention=plan.preset.experience_retention)
            step(
                f"run {settings.run_id}: registering Nomad job {nomad_job_id(settings.run_id)}, "
                f"waiting until its {len(spec.tasks)} allocations run"
            )
            orchestrator.submit(spec)  # waits for every allocation; undoes itself on failure
        except BaseException as error:
            discard_launch(settings, plan.state_dir)
            if isinstance(error, KeyboardInterrupt):
                err.print(f"stopped run {settings.run_id} before it started")
            raise
    running_s = time.monotonic() - started
    run_id = settings.run_id
    err.print(
        f"run {run_id}: Nomad job {nomad_job_id(run_id)} registered, "
        f"{len(spec.tasks)} allocations running after {running_s:.1f} s"
    )
    hint = f"coach-stream logs {run_id} --orchestrator nomad --task trainer"
    if detach:
        err.print(f"  coach-stream status {run_id} --orchestrator nomad   |   {hint}")
        err.print(
            f"  coach-stream scale {run_id} --workers N   |   coach-stream stop {run_id} --purge"
        )
        _detached_tensorboard_hint(run_id, tensorboard, err)
        typer.echo(run_id)
        return
    loaded = plan.preset
    err.print(
        f"run {run_id}: {loaded.env_id} {loaded.algorithm} ({loaded.mode}), "
        f"{settings.workers} workers on Nomad, checkpoints {plan.checkpoints}"
    )
    following = time.monotonic()
    with _scalars(settings.kafka_settings(), run_id, tensorboard, err) as scalars:
        outcome = _follow_live(orchestrator, run_id, loaded, err, timeout, scalars)
    _print_outcome(outcome, hint)
    _print_timing(outcome, running_s, following - started, err)
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
        run_id=run_id if run_id is not None else new_run_id(loaded.name),
        workers=workers,
        kafka_bootstrap=kafka or "",
        checkpoints=url,
        gcs_emulator=gcs_emulator if url.startswith("gs://") else None,
        seed=seed,
        overrides=tuple(overrides),
        kafka_security=kafka_security(),  # from the environment; never on the tasks' argv
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
    validate_launch(plan.settings, plan.preset)


def _start(orchestrator: LocalOrchestrator, plan: _LaunchPlan, step: Callable[[str], None]) -> None:
    """Take the run id, create its topics and start its supervisor; a failure leaves
    nothing behind, and a launch that lost the id to another touches nothing of it."""
    run_id = plan.settings.run_id
    step(f"run {run_id}: creating its topics")
    claim_run_id(plan.settings)  # outside the try: a lost race undoes nothing
    state_dir: Path | None = orchestrator.state_dir
    try:
        prepare_topics(plan.settings, experience_retention=plan.preset.experience_retention)
        spec = build_run_spec(plan.settings)
        step(f"run {run_id}: starting {len(spec.tasks)} tasks, waiting until each has started")
        orchestrator.submit(spec)
    except BaseException as error:
        if isinstance(error, RunExistsError):
            state_dir = None  # that directory is another run's
        elif orchestrator.run_dir(run_id).exists():
            orchestrator.stop(run_id)  # whatever its supervisor had started
        discard_launch(plan.settings, state_dir)
        if isinstance(error, KeyboardInterrupt):
            Console(stderr=True).print(f"stopped run {run_id} before it started")
        raise


@contextlib.contextmanager
def _stopped_on_interrupt(orchestrator: LocalOrchestrator, run_id: str) -> Iterator[None]:
    """A KeyboardInterrupt (Ctrl-C, or SIGTERM via ``_interrupt``) stops the run: exit 130."""
    try:
        yield
    except KeyboardInterrupt:
        orchestrator.stop(run_id)  # follow() stops it too; this makes Ctrl-C twice safe
        Console(stderr=True).print(f"stopped run {run_id}")
        raise typer.Exit(130) from None


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
    orchestrator: FollowableOrchestrator,
    run_id: str,
    preset: Preset,
    err: Console,
    timeout: float | None,
    scalars: status_cli.TelemetryScalars | None = None,
) -> RunOutcome:
    started = time.monotonic()
    poll_scalars: Callable[[], None] = scalars.poll if scalars else lambda: None
    if err.is_terminal:
        with Live(console=err, refresh_per_second=2, transient=False) as live:

            def update(progress: RunProgress, record: RunRecord) -> None:
                poll_scalars()
                live.update(render(preset, progress, record, time.monotonic() - started))

            return _follow_interruptible(orchestrator, run_id, preset, update, timeout)
    last_print = [0.0]

    def plain(progress: RunProgress, record: RunRecord) -> None:
        poll_scalars()
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
    orchestrator: FollowableOrchestrator,
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
    orchestrator_kind: OrchestratorKind | None = WhichOrchestratorOption,
    kafka: str | None = KafkaOption,
    nomad_addr: str | None = nomad_cli.NomadAddrOption,
    nomad_token: str | None = nomad_cli.NomadTokenOption,
    nomad_namespace: str | None = nomad_cli.NomadNamespaceOption,
    nomad_region: str | None = nomad_cli.NomadRegionOption,
    watch: bool = typer.Option(
        False, "--watch", "-w", help="Refresh in place until the run finishes (Ctrl-C: exit)."
    ),
    interval: float = typer.Option(2.0, "--interval", min=0.2, help="--watch: seconds."),
    tensorboard: Path | None = TensorBoardOption,
) -> None:
    """Show a run: every task (SILENT when it stopped reporting), the trainer's throughput,
    consumer lag and checkpoint, the return and its trend (docs/observability.md).

    The view comes from Kafka alone (the run's telemetry topic and the broker), for a
    local run and a run on Nomad alike. A run whose topic cannot be read (a stopped broker)
    falls back to its orchestrator: run.json and log files, or the Nomad API. With --json,
    the orchestrator's view as one JSON object.
    """
    if tensorboard is not None:
        check_writable_dir(tensorboard, "--tensorboard")
    if run_id is not None and not as_json:
        ended = None
        if _on_nomad(orchestrator_kind, state_dir, run_id, nomad_addr):
            on_nomad = nomad_cli.orchestrator_for(
                nomad_addr, nomad_token, nomad_namespace, nomad_region
            )
            ended = nomad_cli.ended_state(on_nomad, run_id)
        shown = _status_from_kafka(run_id, kafka, watch, interval, tensorboard, ended)
        if shown:
            _print_local_failure(state_dir, run_id)
            return
        if watch or tensorboard is not None:
            raise ConfigError(
                f"status --watch/--tensorboard read the run's telemetry on Kafka, and no broker "
                f"at {kafka or 'the local stack'} has run {run_id!r}; pass --kafka or check "
                "the run id."
            )
    if run_id is not None and _on_nomad(orchestrator_kind, state_dir, run_id, nomad_addr):
        kafka = kafka or LocalStack(default_cache_dir()).kafka_bootstrap()
        on_nomad = nomad_cli.orchestrator_for(
            nomad_addr, nomad_token, nomad_namespace, nomad_region, kafka
        )
        nomad_cli.status(on_nomad, run_id, as_json, render)
        return
    orchestrator = local_orchestrator(state_dir)
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
    progress = _local_progress(orchestrator, run_id, kafka)
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
    orchestrator_kind: OrchestratorKind | None = WhichOrchestratorOption,
    nomad_addr: str | None = nomad_cli.NomadAddrOption,
    nomad_token: str | None = nomad_cli.NomadTokenOption,
    nomad_namespace: str | None = nomad_cli.NomadNamespaceOption,
    nomad_region: str | None = nomad_cli.NomadRegionOption,
) -> None:
    """Print a run's logs: one task's, or all tasks' prefixed with [task] (on Nomad: each
    allocation's stderr then stdout, through the API)."""
    if _on_nomad(orchestrator_kind, state_dir, run_id, nomad_addr):
        on_nomad = nomad_cli.orchestrator_for(
            nomad_addr, nomad_token, nomad_namespace, nomad_region
        )
        nomad_cli.logs(on_nomad, run_id, task, follow_logs)
        return
    orchestrator = local_orchestrator(state_dir)
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
    purge: bool = typer.Option(
        False, "--purge", help="nomad: also remove the job from Nomad (nothing left to inspect)."
    ),
    orchestrator_kind: OrchestratorKind | None = WhichOrchestratorOption,
    nomad_addr: str | None = nomad_cli.NomadAddrOption,
    nomad_token: str | None = nomad_cli.NomadTokenOption,
    nomad_namespace: str | None = nomad_cli.NomadNamespaceOption,
    nomad_region: str | None = nomad_cli.NomadRegionOption,
) -> None:
    """Stop a run: SIGTERM every task, SIGKILL what is left after the grace period."""
    if _on_nomad(orchestrator_kind, state_dir, run_id, nomad_addr):
        on_nomad = nomad_cli.orchestrator_for(
            nomad_addr, nomad_token, nomad_namespace, nomad_region
        )
        on_nomad.require_job(run_id)  # stopping nothing is a wrong run id, not success
        on_nomad.stop(run_id, purge=purge)
        on_nomad.wait_ended(run_id, 60.0)
        gone = " and purged" if purge else ""
        typer.echo(f"run {run_id}: Nomad job {nomad_job_id(run_id)} stopped{gone}")
        return
    orchestrator = local_orchestrator(state_dir)
    orchestrator.stop(run_id)
    states = ", ".join(f"{s.name} {s.state}" for s in orchestrator.status(run_id))
    typer.echo(f"run {run_id}: {orchestrator.record(run_id).state} ({states})")


class _LocalWithTelemetry:
    """The local orchestrator, its tasks' events read from the run's telemetry topic (as
    for a run on Nomad) rather than from its log files."""

    def __init__(self, local: LocalOrchestrator, kafka: KafkaSettings) -> None:
        self.local, self.kafka = local, kafka

    def task_lines(self, run_id: str) -> TelemetryLines:
        from coach_stream.transport.settings import RunTopics

        return TelemetryLines(TelemetryReader(self.kafka, RunTopics.for_run(run_id)))

    def submit(self, spec: RunSpec) -> None:
        self.local.submit(spec)

    def status(self, run_id: str) -> list[TaskStatus]:
        return self.local.status(run_id)

    def logs(self, run_id: str, task: str | None = None) -> Iterator[str]:
        return self.local.logs(run_id, task)

    def stop(self, run_id: str) -> None:
        self.local.stop(run_id)

    def record(self, run_id: str) -> RunRecord:
        return self.local.record(run_id)

    def wait(self, run_id: str, timeout: float) -> RunState:
        return self.local.wait(run_id, timeout)


def _local_progress(orchestrator: LocalOrchestrator, run_id: str, kafka: str | None) -> RunProgress:
    """A local run's figures from its telemetry topic; from its log files when the broker
    cannot be read (a stopped stack: the files are still here)."""
    kafka = kafka or LocalStack(default_cache_dir()).kafka_bootstrap()
    if kafka:
        on_kafka = nomad_cli.read_telemetry(kafka_settings(kafka), run_id)
        if isinstance(on_kafka, RunProgress):
            return on_kafka
    return read_progress(orchestrator.run_dir(run_id).logs_dir)


def _status_from_kafka(
    run_id: str,
    kafka: str | None,
    watch: bool,
    interval: float,
    tensorboard: Path | None,
    ended: str | None = None,
) -> bool:
    """Show the run from its telemetry topic; False when no broker has that topic.
    ``ended``: the orchestrator says the run's tasks no longer run (``show_status``)."""
    address = kafka or LocalStack(default_cache_dir()).kafka_bootstrap()
    if not address:
        return False
    settings = kafka_settings(address)
    if not status_cli.telemetry_exists(settings, run_id):
        return False
    try:
        status_cli.show_status(
            settings, run_id, watch=watch, interval_s=interval, tensorboard=tensorboard,
            ended=ended,
        )  # fmt: skip
    except KeyboardInterrupt:
        raise typer.Exit(130) from None
    return True


def _print_local_failure(state_dir: Path, run_id: str) -> None:
    """A local run's failure (a task kept crashing), which only its run.json records."""
    orchestrator = local_orchestrator(state_dir)
    if orchestrator.run_dir(run_id).exists():
        failure = orchestrator.record(run_id).failure
        if failure:
            Console(highlight=False).print(f"failure: {failure}")


def _on_nomad(
    kind: OrchestratorKind | None, state_dir: Path, run_id: str, nomad_addr: str | None
) -> bool:
    """Explicit ``--orchestrator``, else local when this state dir has the run, else nomad
    when a Nomad address is configured."""
    if kind is not None:
        return kind is OrchestratorKind.nomad
    if local_orchestrator(state_dir).run_dir(run_id).exists():
        return False
    return nomad_cli.nomad_configured(nomad_addr)


def register(app: typer.Typer) -> None:
    app.command("launch")(launch)
    app.command("status")(status)
    app.command("logs")(logs)
    app.command("stop")(stop)
