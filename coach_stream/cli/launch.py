"""``coach-stream launch``: run a preset as supervised processes, locally or on Nomad.

Only the CLI reads the environment (``KAFKA_BOOTSTRAP_SERVERS``, ``STORAGE_EMULATOR_HOST``,
``COACH_STREAM_STATE_DIR``, Kafka's security variables through ``cli.kafka_env``) and,
failing those, the addresses of a running ``coach-stream stack``; everything below
receives explicit settings. ``run`` launches on either orchestrator the same way: checks,
topics, submit (undone on failure), then the detach hints or the followed run's outcome.
``status``, ``logs`` and ``stop`` are in ``cli.run_control``.
"""

from __future__ import annotations

import dataclasses
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

import typer
from rich.console import Console

from coach_stream.cli import nomad as nomad_cli
from coach_stream.cli.kafka_env import kafka_security
from coach_stream.cli.live import (
    exit_code,
    follow_live,
    interrupt,
    print_outcome,
    print_timing,
    scalars_written,
    stopped_on_interrupt,
)
from coach_stream.cli.option_groups import RunFlags, with_run_flags
from coach_stream.cli.options import (
    OrchestratorKind,
    check_writable_dir,
    checkpoint_url,
    load_run_preset,
)
from coach_stream.cli.run_control import local_orchestrator
from coach_stream.cli.spinner import spinner
from coach_stream.errors import ConfigError, RunExistsError
from coach_stream.orchestrators import LaunchSettings, LocalOrchestrator, build_run_spec, new_run_id
from coach_stream.orchestrators.launcher import (
    FollowableOrchestrator,
    claim_run_id,
    discard_launch,
    prepare_topics,
    validate_launch,
)
from coach_stream.orchestrators.plan import LaunchPlan
from coach_stream.stack import LocalStack, default_cache_dir

MetricsPortOption = typer.Option(
    None,
    "--metrics-port",
    min=0,
    max=65535,
    help="Serve Prometheus /metrics: the trainer on this port, rollout worker i on port+1+i; "
    "0: any free port each (status shows them). Sets the preset's metrics_port.",
)


class LaunchTarget(Protocol):
    """What differs between orchestrators at launch: a check, the undo and the words."""

    @property
    def orchestrator(self) -> FollowableOrchestrator: ...

    @property
    def where(self) -> str:
        """How the launch line names the place (" on Nomad"; "" for this machine)."""

    def check(self, plan: LaunchPlan) -> None:
        """Refuse the launch before anything is created (a ``ConfigError``)."""

    def starting(self, run_id: str, tasks: int) -> str:
        """The spinner's text while ``submit`` waits for the tasks."""

    def undo(self, plan: LaunchPlan, error: BaseException) -> None:
        """Leave nothing of a launch whose start failed (a lost race: touch nothing)."""

    def running(self, run_id: str, tasks: int, running_s: float) -> str: ...

    def detach_hints(self, plan: LaunchPlan) -> list[str]: ...

    def logs_hint(self, run_id: str) -> str:
        """Where the run's logs are (the outcome's last line)."""


@dataclasses.dataclass
class LocalTarget:
    """A run as supervised processes on this machine, followed on its telemetry topic."""

    orchestrator: LocalOrchestrator
    where: str = ""

    def check(self, plan: LaunchPlan) -> None:
        run_dir = self.orchestrator.run_dir(plan.settings.run_id)
        if run_dir.exists():
            raise ConfigError(
                f"Run id {plan.settings.run_id!r} already exists in {run_dir.path.parent}; "
                "choose another --run-id."
            )

    def starting(self, run_id: str, tasks: int) -> str:
        return f"run {run_id}: starting {tasks} tasks, waiting until each has started"

    def undo(self, plan: LaunchPlan, error: BaseException) -> None:
        run_id, state_dir = plan.settings.run_id, self.orchestrator.state_dir
        if isinstance(error, RunExistsError):
            discard_launch(plan.settings, None)  # that directory is another run's
            return
        if self.orchestrator.run_dir(run_id).exists():
            self.orchestrator.stop(run_id)  # whatever its supervisor had started
        discard_launch(plan.settings, state_dir)

    def running(self, run_id: str, tasks: int, running_s: float) -> str:
        return f"run {run_id}: {tasks} tasks running after {running_s:.1f} s"

    def detach_hints(self, plan: LaunchPlan) -> list[str]:
        run_id = plan.settings.run_id
        return [
            f"started run {run_id} in the background (checkpoints: {plan.checkpoints})",
            f"  coach-stream status {run_id}   |   coach-stream logs {run_id} -f",
            f"  coach-stream stop {run_id}",
        ]

    def logs_hint(self, run_id: str) -> str:
        return str(self.orchestrator.run_dir(run_id).logs_dir)


@nomad_cli.with_nomad_flags
@with_run_flags("run")
def launch(
    preset: str = typer.Argument(..., help="A built-in preset (cartpole-ppo, ...) or a YAML path."),
    workers: int = typer.Option(2, "--workers", "-n", min=1, max=256, help="Rollout workers."),
    run_id: str | None = typer.Option(None, "--run-id", help="Default: <preset>-<time>-<hex>."),
    experience_retention: str | None = typer.Option(
        None,
        "--experience-retention",
        help="How long the experience topic keeps data: forever, 7d, 50GiB, 30d,100GiB "
        "(default: the preset's experience_retention).",
    ),
    metrics_port: int | None = MetricsPortOption,
    trainers: int | None = typer.Option(
        None,
        "--trainers",
        min=1,
        max=64,
        help="Data-parallel trainer ranks, one share of the experience partitions each, "
        "gradients all-reduced (at most --workers). Default: the preset's trainer.count (1).",
    ),
    *,
    flags: RunFlags,
    nomad: nomad_cli.NomadFlags,
) -> None:
    """Start a trainer, N rollout workers and an evaluator, and follow them to the end.

    Exit code 0 when the target return was reached, 1 when the run ended without it,
    2 for bad input (nothing is started), 130 when interrupted.
    """
    extra = _flag_overrides(experience_retention, metrics_port, trainers)
    submit(flags, nomad, lambda: plan_launch(preset, workers, run_id, flags, extra))


def submit(
    flags: RunFlags, nomad: nomad_cli.NomadFlags, plan_for: Callable[[], LaunchPlan]
) -> None:
    """What ``launch`` and ``attach`` do once their own flags are read: refuse what cannot
    run, make the plan (``plan_for``), then print a ``--dry-run``'s job or run the plan."""
    started = time.monotonic()  # launch-to-running and launch-to-solved are measured from here
    if nomad.dry_run and flags.orchestrator is not OrchestratorKind.nomad:
        raise ConfigError("--dry-run prints a Nomad job; add --orchestrator nomad.")
    # A launcher killed with SIGTERM (a CI timeout, `kill`) stops its run like Ctrl-C does,
    # from the start: while the run starts, it is undone (`_start`), so nothing is orphaned.
    signal.signal(signal.SIGTERM, interrupt)
    if flags.tensorboard is not None:
        check_writable_dir(flags.tensorboard, "--tensorboard")
    chosen = target_for(flags.orchestrator, plan_for(), nomad)
    if chosen is not None:  # None: --dry-run printed the job
        run(*chosen, detach=flags.detach, timeout=flags.timeout, started=started,
            tensorboard=flags.tensorboard)  # fmt: skip


def target_for(
    kind: OrchestratorKind, plan: LaunchPlan, flags: nomad_cli.NomadFlags
) -> tuple[LaunchTarget, LaunchPlan] | None:
    """Where the plan runs, and the plan as it runs there; None after a ``--dry-run``."""
    if kind is OrchestratorKind.local:
        orchestrator = local_orchestrator(plan.state_dir, plan.settings.kafka_settings())
        return LocalTarget(orchestrator), plan
    plan, target = nomad_cli.launch_target(plan, flags)
    if flags.dry_run:
        nomad_cli.print_job(target.job(plan), flags.job_format)
        return None
    return target, plan


def _flag_overrides(
    experience_retention: str | None, metrics_port: int | None, trainers: int | None = None
) -> list[str]:
    """``--experience-retention``, ``--metrics-port`` and ``--trainers`` as the preset
    overrides they are (so every task sees them too)."""
    flags = {
        "experience_retention": experience_retention,
        "metrics_port": metrics_port,
        "trainer.count": trainers,
    }
    return [f"{key}={value}" for key, value in flags.items() if value is not None]


def run(
    target: LaunchTarget,
    plan: LaunchPlan,
    *,
    detach: bool = False,
    timeout: float | None = None,
    started: float | None = None,
    tensorboard: Path | None = None,
) -> None:
    """Start ``plan`` on ``target``'s orchestrator, then return (``detach``) or follow it to
    its end and exit with its code (``typer.Exit``); ``started``: the launch's monotonic
    start, from which the timing line counts."""
    started = time.monotonic() if started is None else started
    err = Console(stderr=True, highlight=False, soft_wrap=True)
    settings, orchestrator = plan.settings, target.orchestrator
    run_id = settings.run_id
    # Checking the services and starting N processes takes seconds: say which step it is.
    with spinner(f"run {run_id}: checking Kafka and the checkpoint store") as step:
        target.check(plan)
        validate_launch(settings, plan.preset)  # before the try: a refusal undoes nothing
        tasks = _start(target, plan, step)
    # From here until follow() takes over, Ctrl-C or SIGTERM must still stop the run.
    with stopped_on_interrupt(orchestrator, run_id):
        running_s = time.monotonic() - started
        err.print(target.running(run_id, tasks, running_s))
        if detach:
            for line in target.detach_hints(plan):
                err.print(line)
            if tensorboard is not None:
                err.print(
                    f"  nothing follows a detached run: write its scalars with "
                    f"`coach-stream status {run_id} --watch --tensorboard {tensorboard}`"
                )
            typer.echo(run_id)
            return
        loaded = plan.preset
        fleet = f"{settings.workers} workers"
        if settings.experience_from is not None:
            fleet = f"learning from run {settings.experience_from}'s experience"
        err.print(
            f"run {run_id}: {loaded.env_id} {loaded.algorithm} ({loaded.mode}), "
            f"{fleet}{target.where}, checkpoints {plan.checkpoints}"
        )
        following = time.monotonic()
        with scalars_written(settings.kafka_settings(), run_id, tensorboard, err) as poll:
            outcome = follow_live(orchestrator, run_id, loaded, err, timeout, poll)
        print_outcome(outcome, target.logs_hint(run_id))
        print_timing(outcome, running_s, following - started, err)
    raise typer.Exit(exit_code(outcome, err))


def _start(target: LaunchTarget, plan: LaunchPlan, step: Callable[[str], None]) -> int:
    """Take the run id, create its topics and submit its tasks (their number); a failure
    leaves nothing behind, and a launch that lost the id to another touches nothing of it."""
    run_id = plan.settings.run_id
    step(f"run {run_id}: creating its topics")
    claim_run_id(plan.settings)  # outside the try: a lost race undoes nothing
    try:
        prepare_topics(plan.settings, experience_retention=plan.preset.experience_retention)
        spec = build_run_spec(plan.settings)
        step(target.starting(run_id, len(spec.tasks)))
        target.orchestrator.submit(spec)
    except BaseException as error:
        target.undo(plan, error)
        if isinstance(error, KeyboardInterrupt):
            Console(stderr=True).print(f"stopped run {run_id} before it started")
        raise
    return len(spec.tasks)


def plan_launch(
    preset: str,
    workers: int,
    run_id: str | None,
    flags: RunFlags,
    extra_overrides: list[str] | None = None,
    experience_from: str | None = None,
) -> LaunchPlan:
    """Everything the flags and the preset decide, checked without touching any service
    (``extra_overrides``: flags that set preset keys, after ``--set``'s; ``experience_from``:
    a shadow learner's source run, ``coach-stream attach``)."""
    overrides = [*flags.overrides, *(extra_overrides or [])]
    seed, state_dir, gcs_emulator = flags.seed, flags.state_dir, flags.gcs_emulator
    # Loaded exactly as every task will load it (with --seed), so a value a task would
    # refuse is refused here, once, instead of by N crash-looping processes.
    loaded = load_run_preset(preset, seed, overrides)
    url = checkpoint_url(flags.checkpoints, state_dir)
    stack = LocalStack(default_cache_dir())
    kafka = flags.kafka or stack.kafka_bootstrap()
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
        experience_from=experience_from,
        trainers=loaded.trainer.count,
    )
    return LaunchPlan(loaded, settings, state_dir)


def register(app: typer.Typer) -> None:
    app.command("launch")(launch)
