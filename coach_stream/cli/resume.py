"""``coach-stream resume RUN``: start a failed or stopped local run's tasks again.

Recovery by hand after a fault the supervisor gave up on (docs/operations.md): fix the
cause, then resume. The tasks start with the command lines recorded in the run's
``run.json``; the trainer resumes from its newest trainer state and stored positions, the
workers continue their ``chunk_seq`` after their last chunk in the log, so nothing
acknowledged is lost and nothing is trained twice. A Nomad run is resumed by Nomad itself
(its job restarts and reschedules tasks); ``launch`` with the same job file starts a
stopped one.
"""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console

from coach_stream.cli.options import StateDirOption
from coach_stream.cli.run_control import local_orchestrator


def resume(
    run_id: str = typer.Argument(..., help="The run id of a failed or stopped local run."),
    state_dir: Path = StateDirOption,
) -> None:
    """Start a failed or stopped run's tasks again; they resume where the run left off."""
    orchestrator = local_orchestrator(state_dir)
    orchestrator.resume(run_id)
    err = Console(stderr=True, highlight=False, soft_wrap=True)
    tasks = orchestrator.status(run_id)
    err.print(f"resumed run {run_id}: {len(tasks)} tasks running")
    err.print(f"  coach-stream status {run_id}   |   coach-stream logs {run_id} -f")
    err.print(f"  coach-stream stop {run_id}")
    typer.echo(run_id)


def register(app: typer.Typer) -> None:
    app.command("resume")(resume)
