"""``coach-stream stack up|down|status|env``: the single-machine stack of real services."""

from __future__ import annotations

import shlex
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from coach_stream.cli.spinner import spinner
from coach_stream.errors import ConfigError
from coach_stream.stack import LocalStack, default_cache_dir

stack_app = typer.Typer(
    help="Run Kafka and a GCS emulator as local processes on 127.0.0.1.",
    no_args_is_help=True,
)

CacheOption = typer.Option(
    None,
    "--cache-dir",
    envvar="COACH_STREAM_CACHE",
    help="Where jars, binaries, data and logs live (default ~/.cache/coach-stream).",
)


def _stack(cache_dir: Path | None) -> LocalStack:
    return LocalStack(cache_dir or default_cache_dir())


@stack_app.command("up")
def up(
    cache_dir: Path | None = CacheOption,
    kafka: bool = typer.Option(True, "--kafka/--no-kafka", help="Start the Kafka broker."),
    gcs: bool = typer.Option(True, "--gcs/--no-gcs", help="Start fake-gcs-server."),
) -> None:
    """Provision (first time only) and start the services; a no-op for healthy ones."""
    stack = _stack(cache_dir)
    with spinner("starting the stack") as steps:  # what it does, on a terminal only
        stack.up(kafka_enabled=kafka, gcs_enabled=gcs, steps=steps)
    _print_status(stack)


@stack_app.command("down")
def down(
    cache_dir: Path | None = CacheOption,
    purge: bool = typer.Option(
        False, "--purge", help="Also delete Kafka's data, the emulator's objects and the ports."
    ),
) -> None:
    """Stop the processes the stack started (and nothing else)."""
    stopped = _stack(cache_dir).down(purge=purge)
    typer.echo("stopped: " + (", ".join(stopped) if stopped else "nothing was running"))


@stack_app.command("status")
def status(cache_dir: Path | None = CacheOption) -> None:
    """Show each service, its pid, address and health; exit 1 if any is unhealthy."""
    if not _print_status(_stack(cache_dir)):
        raise typer.Exit(1)


@stack_app.command("env")
def env(cache_dir: Path | None = CacheOption) -> None:
    """Print `export` lines for the clients: eval "$(coach-stream stack env)"."""
    variables = _stack(cache_dir).env()
    if not variables:
        raise ConfigError(
            "The stack has never been started here; run `coach-stream stack up` first."
        )
    typer.echo("export " + " ".join(f"{k}={shlex.quote(v)}" for k, v in variables.items()))


def _print_status(stack: LocalStack) -> bool:
    table = Table(title="coach-stream stack")
    for column in ("service", "pid", "address", "health"):
        table.add_column(column, no_wrap=True)
    all_healthy = True
    services = stack.status()
    for service in services:
        health = (
            "[green]healthy[/]"
            if service.healthy
            else ("[yellow]running, not answering[/]" if service.running else "[red]stopped[/]")
        )
        all_healthy &= service.healthy
        table.add_row(service.name, str(service.pid or "-"), service.address, health)
    console = Console()
    console.print(table)
    for service in services:
        console.print(f"{service.name} log: {service.detail}", highlight=False, soft_wrap=True)
    return all_healthy


def register(app: typer.Typer) -> None:
    app.add_typer(stack_app, name="stack")
