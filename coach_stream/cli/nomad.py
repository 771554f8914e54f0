"""The Nomad side of ``launch | status | logs | stop`` and the ``scale`` command.

Only this module (the CLI edge) reads ``NOMAD_ADDR``, ``NOMAD_TOKEN``, ``NOMAD_NAMESPACE``,
``NOMAD_REGION``, ``NOMAD_CACERT``, ``NOMAD_CLIENT_CERT`` and ``NOMAD_CLIENT_KEY`` (flags
win), as the ``nomad`` CLI does; ``NomadOrchestrator`` receives an explicit connection.
Kafka's security settings reach a job's tasks through ``cli.kafka_env.nomad_task_env``:
the non-secret ones in the job's environment, credentials only via ``--secrets-var``.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import os
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import typer
from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from coach_stream.cli.kafka_env import kafka_settings, nomad_task_env
from coach_stream.cli.live import render
from coach_stream.cli.option_groups import Command, with_option_group
from coach_stream.errors import CoachStreamError, ConfigError, OrchestratorError
from coach_stream.observability.fold import RunTelemetry
from coach_stream.orchestrators import build_run_spec
from coach_stream.orchestrators.launcher import discard_launch
from coach_stream.orchestrators.nomad import NomadOrchestrator
from coach_stream.orchestrators.nomad_connection import NomadConnection
from coach_stream.orchestrators.nomad_job import (
    GroupResources,
    NomadJobSettings,
    job_env,
    job_hcl,
    job_id,
)
from coach_stream.orchestrators.plan import LaunchPlan
from coach_stream.transport.settings import KafkaSecurity


class JobFormat(enum.StrEnum):
    json = "json"
    hcl = "hcl"


class Driver(enum.StrEnum):
    raw_exec = "raw_exec"
    exec = "exec"
    docker = "docker"


DryRunOption = typer.Option(False, "--dry-run", help="nomad: print the job and register nothing.")
FormatOption = typer.Option(
    JobFormat.json, "--format", help="nomad --dry-run: json (the API's form) or hcl."
)
DriverOption = typer.Option(
    Driver.raw_exec, "--driver", help="nomad: raw_exec, exec or docker (with --image)."
)
ImageOption = typer.Option(None, "--image", help="nomad --driver docker: the worker image.")
PythonOption = typer.Option(
    None,
    "--python",
    help="nomad: the interpreter with coach_stream, on the nodes or in the image "
    "(default: this one; with --driver docker, the image's `python`).",
)
DatacenterOption = typer.Option(
    [], "--datacenter", help="nomad: a datacenter to place the run in (repeatable; default all)."
)
SecretsVarOption = typer.Option(
    None,
    "--secrets-var",
    help="nomad: a Nomad Variable path whose items become the tasks' environment "
    "(credentials; never written into the job).",
)
TrainerGpusOption = typer.Option(
    0, "--trainer-gpus", min=0, help="nomad: nvidia/gpu devices for the trainer."
)
StartTimeoutOption = typer.Option(
    300.0, "--start-timeout", min=1.0, help="nomad: how long allocations may take to run."
)


@dataclass(frozen=True)
class NomadAccess:
    """Where a command reaches Nomad: its four ``--nomad-*`` options, each falling back to
    the ``nomad`` CLI's variable (``NOMAD_ADDR``, ``NOMAD_TOKEN``, …) when not given."""

    addr: str | None = None
    token: str | None = None
    namespace: str | None = None
    region: str | None = None

    @property
    def configured(self) -> bool:
        return bool(self.addr or os.environ.get("NOMAD_ADDR"))

    def connection(self) -> NomadConnection:
        return NomadConnection.from_env(
            os.environ,
            address=self.addr,
            token=self.token,
            namespace=self.namespace,
            region=self.region,
        )

    def orchestrator(self, kafka: str | None = None) -> NomadOrchestrator:
        """``kafka``: the broker whose telemetry topic ``status`` folds."""
        telemetry = kafka_settings(kafka) if kafka else None
        return NomadOrchestrator(self.connection(), telemetry=telemetry)


_ACCESS_OPTIONS = {
    "nomad_addr": typer.Option(
        None, "--nomad-addr", help="Nomad's HTTP API (default: NOMAD_ADDR, else 127.0.0.1:4646)."
    ),
    "nomad_token": typer.Option(None, "--nomad-token", help="ACL token (default: NOMAD_TOKEN)."),
    "nomad_namespace": typer.Option(
        None, "--nomad-namespace", help="Namespace (default: NOMAD_NAMESPACE)."
    ),
    "nomad_region": typer.Option(None, "--nomad-region", help="Region (default: NOMAD_REGION)."),
}


def _access(values: Mapping[str, Any]) -> NomadAccess:
    return NomadAccess(*(values[name] for name in _ACCESS_OPTIONS))


def with_nomad_access(command: Command) -> Command:
    """Give a command the four ``--nomad-*`` options, handed to it as one ``nomad:
    NomadAccess`` argument."""
    options = {name: (str | None, option) for name, option in _ACCESS_OPTIONS.items()}
    return with_option_group(command, "nomad", options, _access)


_JOB_OPTIONS: dict[str, tuple[Any, Any]] = {
    "dry_run": (bool, DryRunOption),
    "job_format": (JobFormat, FormatOption),
    "driver": (Driver, DriverOption),
    "image": (str | None, ImageOption),
    "python": (str | None, PythonOption),
    "datacenters": (list[str], DatacenterOption),
    "secrets_var": (str | None, SecretsVarOption),
    "trainer_gpus": (int, TrainerGpusOption),
    "start_timeout": (float, StartTimeoutOption),
}


def with_nomad_flags(command: Command) -> Command:
    """Give a command that submits a run (``launch``, ``attach``) the ``--nomad-*`` options
    and the job's flags, handed to it as one ``nomad: NomadFlags`` argument."""
    options = {
        **{name: (str | None, option) for name, option in _ACCESS_OPTIONS.items()},
        **_JOB_OPTIONS,
    }

    def build(values: dict[str, Any]) -> NomadFlags:
        return NomadFlags(
            _access(values), values["driver"], values["image"], values["python"],
            tuple(values["datacenters"] or ()), values["secrets_var"], values["trainer_gpus"],
            values["start_timeout"], values["dry_run"], values["job_format"],
        )  # fmt: skip

    return with_option_group(command, "nomad", options, build)


@dataclass(frozen=True)
class NomadFlags:
    """The Nomad-only flags of ``launch`` (ignored by the local orchestrator)."""

    access: NomadAccess = NomadAccess()
    driver: Driver = Driver.raw_exec
    image: str | None = None
    python: str | None = None
    datacenters: tuple[str, ...] = ()
    secrets_var: str | None = None
    trainer_gpus: int = 0
    start_timeout_s: float = 300.0
    dry_run: bool = False
    job_format: JobFormat = JobFormat.json


def job_settings(
    flags: NomadFlags,
    conn: NomadConnection,
    kafka: str,
    gcs_emulator: str | None,
    security: KafkaSecurity | None = None,
) -> NomadJobSettings:
    """The job's placement and environment; Kafka credentials only via ``--secrets-var``."""
    security_env = nomad_task_env(security or KafkaSecurity(), flags.secrets_var)
    defaults = NomadJobSettings()
    resources = dict(defaults.resources)
    if flags.trainer_gpus:
        base = resources["trainer"]
        resources["trainer"] = GroupResources(base.cpu_mhz, base.memory_mb, flags.trainer_gpus)
    return NomadJobSettings(
        driver=flags.driver.value,
        image=flags.image,
        datacenters=flags.datacenters or defaults.datacenters,
        namespace=conn.namespace,
        region=conn.region,
        env={**job_env(kafka, gcs_emulator), **security_env},
        secrets_var=flags.secrets_var,
        resources=resources,
    )


def print_job(job: dict[str, Any], job_format: JobFormat) -> None:
    """The job on stdout, exactly what would be registered (nothing is)."""
    if job_format is JobFormat.hcl:
        typer.echo(job_hcl(job), nl=False)
    else:
        typer.echo(json.dumps({"Job": job}, indent=2))


@dataclass
class NomadTarget:
    """``launch`` on Nomad: one job, its allocations awaited, followed on the telemetry topic
    (``cli.launch.LaunchTarget``)."""

    orchestrator: NomadOrchestrator
    where: str = " on Nomad"

    def job(self, plan: LaunchPlan) -> dict[str, Any]:
        return self.orchestrator.job(build_run_spec(plan.settings))

    def check(self, plan: LaunchPlan) -> None:
        """Nothing beyond ``validate_launch``: Nomad refuses a job id it has at ``submit``."""

    def starting(self, run_id: str, tasks: int) -> str:
        return (
            f"run {run_id}: registering Nomad job {job_id(run_id)}, waiting until its {tasks} "
            "allocations run"
        )

    def undo(self, plan: LaunchPlan, error: BaseException) -> None:
        discard_launch(plan.settings, plan.state_dir)  # submit removed its job itself

    def running(self, run_id: str, tasks: int, running_s: float) -> str:
        return (
            f"run {run_id}: Nomad job {job_id(run_id)} registered, {tasks} allocations running "
            f"after {running_s:.1f} s"
        )

    def detach_hints(self, plan: LaunchPlan) -> list[str]:
        run_id = plan.settings.run_id
        return [
            f"  coach-stream status {run_id} --orchestrator nomad   |   {self.logs_hint(run_id)}",
            f"  coach-stream scale {run_id} --workers N   |   coach-stream stop {run_id} --purge",
        ]

    def logs_hint(self, run_id: str) -> str:
        return f"coach-stream logs {run_id} --orchestrator nomad --task trainer"


def launch_target(plan: LaunchPlan, flags: NomadFlags) -> tuple[LaunchPlan, NomadTarget]:
    """The plan as its tasks run on Nomad (``--python``) and the orchestrator for it."""
    settings = plan.settings
    in_container = flags.driver is Driver.docker
    if in_container and settings.checkpoints.startswith("file://"):
        raise ConfigError(
            f"--driver docker runs every task in a container, which cannot see "
            f"{settings.checkpoints}; pass --checkpoints gs://bucket/prefix."
        )
    python = flags.python or ("python" if in_container else None)
    if python:
        plan = dataclasses.replace(plan, settings=dataclasses.replace(settings, python=python))
    conn = flags.access.connection()
    job = job_settings(
        flags, conn, settings.kafka_bootstrap, settings.gcs_emulator, settings.kafka_security
    )
    orchestrator = NomadOrchestrator(
        conn, job, start_timeout_s=flags.start_timeout_s, telemetry=settings.kafka_settings()
    )
    if not flags.dry_run and settings.checkpoints.startswith("file://"):
        Console(stderr=True, highlight=False, soft_wrap=True).print(
            f"note: checkpoints in {settings.checkpoints} work on Nomad only when every node "
            "shares that directory; pass --checkpoints gs://bucket/prefix for a cluster."
        )
    return plan, NomadTarget(orchestrator)


def status(orchestrator: NomadOrchestrator, run_id: str, as_json: bool) -> None:
    """``coach-stream status RUN`` for a run on Nomad: allocations + telemetry figures."""
    from coach_stream.cli.status import fold_run_topic

    record = orchestrator.record(run_id)
    telemetry, error = RunTelemetry(run_id), None
    if orchestrator.telemetry is None:
        error = "no Kafka address (pass --kafka or set KAFKA_BOOTSTRAP_SERVERS)"
    else:
        try:
            telemetry = fold_run_topic(orchestrator.telemetry, run_id)
        except CoachStreamError as unreadable:
            error = str(unreadable)
    if as_json:
        typer.echo(json.dumps({
            "run_id": run_id,
            "orchestrator": "nomad",
            "state": record.state.value,
            "tasks": [
                {"name": t.spec.name, "state": t.state.value, "restarts": t.restarts,
                 "exit_code": t.exit_code}
                for t in record.tasks
            ],
            "progress": telemetry.trainer_progress,
            "mean_eval_return": telemetry.mean_eval_return,
            "finished": telemetry.finished,
            "telemetry_error": error,
        }))  # fmt: skip
        return
    tasks = Table(title=f"run {run_id} on Nomad — {record.state}")
    for column in ("task", "state", "restarts", "exit code"):
        tasks.add_column(column, no_wrap=True)
    for t in record.tasks:
        code = "-" if t.exit_code is None else str(t.exit_code)
        tasks.add_row(t.spec.name, str(t.state), str(t.restarts), code)
    table = render(None, telemetry, record, time.time() - record.created_at_ms / 1000)
    table.title = None
    parts: list[Table | Text] = [tasks, table]
    if error is not None:
        parts.append(Text(f"progress unavailable: {error}"))
    if telemetry.finished:
        parts.append(Text(f"finished: {json.dumps(telemetry.finished)}"))
    Console(highlight=False).print(Group(*parts))


def ended_state(orchestrator: NomadOrchestrator, run_id: str) -> str | None:
    """What the run's telemetry cannot know: Nomad has no job of it any more (purged) or
    stopped it. None while the job is there and wanted, or when Nomad does not answer."""
    try:
        job = orchestrator.find_job(run_id)
    except CoachStreamError:
        return None  # the telemetry view stands on its own
    the_id = job_id(run_id)
    if job is None:
        return f"gone: Nomad has no job {the_id} (purged, or never submitted there)"
    if job.get("Stop"):
        return f"stopped: Nomad job {the_id} was stopped"
    return None


def logs(orchestrator: NomadOrchestrator, run_id: str, task: str | None, follow: bool) -> None:
    if not follow:
        for line in orchestrator.logs(run_id, task):
            typer.echo(line)
        return
    if task is None:
        raise ConfigError("--follow on Nomad follows one task; add --task (e.g. --task trainer).")
    try:
        for line in orchestrator.follow_logs(run_id, task):
            typer.echo(line)
            sys.stdout.flush()
    except KeyboardInterrupt:
        raise typer.Exit(130) from None


@with_nomad_access
def scale(
    run_id: str = typer.Argument(..., help="The run id."),
    workers: int = typer.Option(..., "--workers", "-n", min=1, max=256, help="Rollout workers."),
    wait: bool = typer.Option(
        True, "--wait/--no-wait", help="Return once every rollout allocation runs."
    ),
    *,
    nomad: NomadAccess,
) -> None:
    """Set a Nomad run's rollout worker count (the job's rollout group, Nomad's scale API)."""
    if not nomad.configured:
        raise OrchestratorError(
            "scale works on runs on Nomad; set NOMAD_ADDR or pass --nomad-addr (a local run's "
            "worker count is fixed at launch)."
        )
    orchestrator = nomad.orchestrator()
    orchestrator.scale(run_id, workers)
    if wait:
        orchestrator.wait_running(run_id, orchestrator.start_timeout_s)
    running = [s.name for s in orchestrator.status(run_id) if s.name.startswith("rollout-")]
    typer.echo(f"run {run_id}: rollout group scaled to {workers} ({', '.join(running)})")


def register(app: typer.Typer) -> None:
    app.command("scale")(scale)
