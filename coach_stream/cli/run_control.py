"""``coach-stream status | logs | stop``: a launched run, local or on Nomad, by its id.

``status`` shows a run from its telemetry topic (``cli.status``) for either orchestrator;
when no broker has the topic it falls back to the orchestrator's own view: run.json and
log files for a local run, the Nomad API for a run on Nomad (``cli.nomad``). ``logs`` and
``stop`` ask the run's orchestrator. Which one holds a run: ``--orchestrator``, else local
when the state directory has it, else Nomad when an address is configured.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import typer
from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from coach_stream.cli import nomad as nomad_cli
from coach_stream.cli.kafka_env import kafka_settings
from coach_stream.cli.options import (
    KafkaOption,
    OrchestratorKind,
    StateDirOption,
    TensorBoardOption,
    WhichOrchestratorOption,
    check_writable_dir,
)
from coach_stream.errors import CoachStreamError, ConfigError
from coach_stream.observability.fold import RunTelemetry
from coach_stream.orchestrators import LocalOrchestrator, warm_supervisor, warm_zygote
from coach_stream.orchestrators.nomad import NomadOrchestrator
from coach_stream.orchestrators.nomad_job import job_id as nomad_job_id
from coach_stream.orchestrators.progress import LogFollower, fold_run_logs
from coach_stream.stack import LocalStack, default_cache_dir
from coach_stream.transport.settings import KafkaSettings


def local_orchestrator(
    state_dir: Path, telemetry: KafkaSettings | None = None
) -> LocalOrchestrator:
    """Supervisors forked from a warm zygote that outlives launches (docs/running.md);
    ``COACH_STREAM_ZYGOTE=off`` starts each as a fresh process instead. ``telemetry``: the
    broker whose topic a followed run's events are read from (else its log files)."""
    off = os.environ.get("COACH_STREAM_ZYGOTE", "").lower() in ("off", "0", "false", "no")
    zygote = None if off else warm_zygote()
    return LocalOrchestrator(
        state_dir, config=warm_supervisor(), zygote=zygote, telemetry=telemetry
    )


@nomad_cli.with_nomad_access
def status(
    run_id: str | None = typer.Argument(None, help="A run id; without it, list the runs."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object instead."),
    state_dir: Path = StateDirOption,
    orchestrator_kind: OrchestratorKind | None = WhichOrchestratorOption,
    kafka: str | None = KafkaOption,
    watch: bool = typer.Option(
        False, "--watch", "-w", help="Refresh in place until the run finishes (Ctrl-C: exit)."
    ),
    interval: float = typer.Option(2.0, "--interval", min=0.2, help="--watch: seconds."),
    tensorboard: Path | None = TensorBoardOption,
    *,
    nomad: nomad_cli.NomadAccess,
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
    on_nomad = run_id is not None and _on_nomad(orchestrator_kind, state_dir, run_id, nomad)
    if run_id is not None and not as_json:
        ended = None
        if on_nomad:
            ended = nomad_cli.ended_state(nomad.orchestrator(), run_id)
        if _status_from_kafka(run_id, kafka, watch, interval, tensorboard, ended):
            _print_local_failure(state_dir, run_id)
            return
        if watch or tensorboard is not None:
            raise ConfigError(
                f"status --watch/--tensorboard read the run's telemetry on Kafka, and no broker "
                f"at {kafka or 'the local stack'} has run {run_id!r}; pass --kafka or check "
                "the run id."
            )
    if run_id is None:
        _list_runs(local_orchestrator(state_dir), as_json)
    elif on_nomad:
        kafka = kafka or LocalStack(default_cache_dir()).kafka_bootstrap()
        nomad_cli.status(nomad.orchestrator(kafka), run_id, as_json)
    else:
        _local_status(local_orchestrator(state_dir), run_id, kafka, as_json)


def _list_runs(orchestrator: LocalOrchestrator, as_json: bool) -> None:
    runs = [orchestrator.record(r) for r in orchestrator.runs()]
    if as_json:
        typer.echo(json.dumps([{"run_id": r.run_id, "state": r.state.value} for r in runs]))
        return
    out = Console(highlight=False)
    if not runs:
        out.print(f"no runs under {orchestrator.state_dir}")
    for record in runs:
        stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(record.created_at_ms / 1000))
        out.print(f"{record.run_id}  {record.state}  {stamp}  {len(record.tasks)} tasks")


def _local_status(
    orchestrator: LocalOrchestrator, run_id: str, kafka: str | None, as_json: bool
) -> None:
    """A local run as its orchestrator has it: run.json, the figures from its telemetry
    topic or, when the broker cannot be read, from its log files."""
    from coach_stream.cli.live import render

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
            "progress": progress.trainer_progress,
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
    Console(highlight=False).print(Group(*parts))


def _local_progress(
    orchestrator: LocalOrchestrator, run_id: str, kafka: str | None
) -> RunTelemetry:
    """A local run's events from its telemetry topic; from its log files when the broker
    cannot be read (a stopped stack: the files are still here) or lacks the topic."""
    from coach_stream.cli.status import fold_run_topic, telemetry_exists

    kafka = kafka or LocalStack(default_cache_dir()).kafka_bootstrap()
    # Asking first answers in milliseconds where reading a stopped broker's topic waits out
    # the reader's 5 s timeout.
    if kafka and telemetry_exists(settings := kafka_settings(kafka), run_id):
        try:
            return fold_run_topic(settings, run_id)
        except CoachStreamError:
            pass
    return fold_run_logs(orchestrator.run_dir(run_id).logs_dir, run_id)


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
    from coach_stream.cli import status as status_cli

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


@nomad_cli.with_nomad_access
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
    *,
    nomad: nomad_cli.NomadAccess,
) -> None:
    """Print a run's logs: one task's, or all tasks' prefixed with [task] (on Nomad: each
    allocation's stderr then stdout, through the API)."""
    if on_nomad := _nomad_holding(orchestrator_kind, state_dir, run_id, nomad):
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


@nomad_cli.with_nomad_access
def stop(
    run_id: str = typer.Argument(..., help="The run id."),
    state_dir: Path = StateDirOption,
    purge: bool = typer.Option(
        False, "--purge", help="nomad: also remove the job from Nomad (nothing left to inspect)."
    ),
    orchestrator_kind: OrchestratorKind | None = WhichOrchestratorOption,
    *,
    nomad: nomad_cli.NomadAccess,
) -> None:
    """Stop a run: SIGTERM every task, SIGKILL what is left after the grace period."""
    if on_nomad := _nomad_holding(orchestrator_kind, state_dir, run_id, nomad):
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


def _on_nomad(
    kind: OrchestratorKind | None, state_dir: Path, run_id: str, nomad: nomad_cli.NomadAccess
) -> bool:
    """Explicit ``--orchestrator``, else local when this state dir has the run, else nomad
    when a Nomad address is configured."""
    if kind is not None:
        return kind is OrchestratorKind.nomad
    if local_orchestrator(state_dir).run_dir(run_id).exists():
        return False
    return nomad.configured


def _nomad_holding(
    kind: OrchestratorKind | None,
    state_dir: Path,
    run_id: str,
    nomad: nomad_cli.NomadAccess,
) -> NomadOrchestrator | None:
    """The Nomad orchestrator when the run is on Nomad (``_on_nomad``), else None."""
    if not _on_nomad(kind, state_dir, run_id, nomad):
        return None
    return nomad.orchestrator()


def register(app: typer.Typer) -> None:
    app.command("status")(status)
    app.command("logs")(logs)
    app.command("stop")(stop)
