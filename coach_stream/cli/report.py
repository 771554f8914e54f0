"""``coach-stream report RUN [--out PNG]``: did a run learn, and where did its time go.

Reads a run's topics only (docs/observability.md), so it works on a finished run from any
machine that reaches the broker, whichever orchestrator ran it: the telemetry topic (every
task's progress events), the control topic (evaluation rounds, policy versions, the end of
the run), the dead-letter topic's size and, only for a run whose trainer did not count
its chunks per policy lag, the experience topic (``--no-experience`` skips that read).
Writes one PNG (``observability.report_figure``) and prints the summary on stdout.
"""

from __future__ import annotations

from contextlib import nullcontext
from pathlib import Path

import typer
from rich.console import Console

from coach_stream.cli.kafka_env import kafka_settings
from coach_stream.cli.options import KafkaOption, check_writable_dir
from coach_stream.errors import ConfigError
from coach_stream.observability.report import RunReport
from coach_stream.stack import LocalStack, default_cache_dir
from coach_stream.transport.admin import check_broker
from coach_stream.transport.names import consumer_group
from coach_stream.transport.settings import KafkaSettings, RunTopics

OutOption = typer.Option(
    None, "--out", "-o", help="Where to write the PNG (default: RUN-report.png here)."
)
_READ_S = 60.0  # reading a whole telemetry or control topic: a long run has many events
_BROKER_S = 10.0


def _settings(kafka: str | None) -> KafkaSettings:
    return kafka_settings(kafka or LocalStack(default_cache_dir()).kafka_bootstrap())


def _check_run(settings: KafkaSettings, run_id: str) -> RunTopics:
    """The run's topics, once the broker answered that it has them (one line otherwise)."""
    topics = RunTopics.for_run(run_id)
    present = set(check_broker(settings, timeout=_BROKER_S).topics)  # unreachable: exit 3
    if topics.control not in present and topics.telemetry not in present:
        raise ConfigError(
            f"No run {run_id!r} on the broker at {settings.bootstrap_servers} (no "
            f"{topics.control}); check the run id (`coach-stream status` lists local runs) "
            "and --kafka."
        )
    if topics.telemetry not in present:
        raise ConfigError(
            f"Run {run_id!r} has no telemetry topic ({topics.telemetry}): it was started by a "
            "coach-stream without run telemetry, so there is nothing to report; launch it again."
        )
    if topics.control not in present:
        raise ConfigError(
            f"Run {run_id!r} has no control topic ({topics.control}): its evaluations are "
            "gone (deleted with `stop --purge`?), so it cannot be reported."
        )
    return topics


def read_report(
    settings: KafkaSettings, run_id: str, *, experience: bool = True, progress: bool = True
) -> RunReport:
    """The run's report, folded from its topics (``progress``: a spinner and a bar on a
    terminal's stderr while they are read)."""
    from coach_stream.replay.progress import records_progress
    from coach_stream.replay.reader import ReplayReader
    from coach_stream.transport.control import KafkaControlSubscriber
    from coach_stream.transport.lag import BrokerProbe
    from coach_stream.transport.telemetry import TelemetryReader

    topics = _check_run(settings, run_id)
    report = RunReport(run_id)
    err = Console(stderr=True)
    with (
        err.status("reading the telemetry topic") if progress and err.is_terminal else nullcontext()
    ):
        with TelemetryReader(settings, topics) as telemetry:
            events = telemetry.read_to_end(_READ_S)
        if not events:
            raise ConfigError(
                f"Run {run_id!r} has an empty telemetry topic ({topics.telemetry}): its tasks "
                "never started or could not reach the broker; see `coach-stream logs "
                f"{run_id}`."
            )
        for task, event in events:
            report.feed_event(task, event)
        with KafkaControlSubscriber(settings, topics) as control:
            for message in control.read_to_end(_READ_S):
                report.feed_control(message)
        with BrokerProbe(settings, topics, consumer_group("report")) as probe:
            report.dead_letters = probe.figures().dead_letters
    if not experience or not report.needs_chunks:
        return report
    with (
        ReplayReader(settings, topics.experience) as reader,
        records_progress("experience", reader.total_records, progress) as advance,
    ):
        reader.on_records = advance
        for batch in reader.chunk_batches():
            report.feed_chunks(batch.columns.policy_version, batch.columns.created_at_ms)
    return report


def report(
    run_id: str = typer.Argument(..., help="The run id (a finished, stopped or running run)."),
    out: Path | None = OutOption,
    kafka: str | None = KafkaOption,
    experience: bool = typer.Option(
        True,
        "--experience/--no-experience",
        help="For a run whose trainer did not count chunks per policy lag (older runs), read "
        "the experience topic for the histogram; without it the histogram shows the trainer's "
        "mean lag per progress interval.",
    ),
    progress: bool = typer.Option(
        True, "--progress/--no-progress", help="Spinner and progress bar on stderr (a terminal)."
    ),
) -> None:
    """Plot a run from its Kafka topics alone and print whether it learned.

    One PNG: evaluation return against env steps and against wall time, env steps/s per
    rollout worker, the policy-lag histogram, the trainer's consumer lag over time and the
    summary; the summary (solved or not, final return, env steps, wall time, workers, policy
    lag, dead letters) also goes to stdout.
    """
    from coach_stream.observability.report_figure import save_report

    out = out or Path(f"{run_id}-report.png")
    check_writable_dir(out.parent, "--out")  # before reading the run, not after
    if out.is_dir():
        raise ConfigError(f"--out {out} is a directory; give the PNG file's path.")
    settings = _settings(kafka)
    folded = read_report(settings, run_id, experience=experience, progress=progress)
    path = save_report(folded, out)
    for line in folded.summary_lines():
        typer.echo(line)
    typer.echo(f"report: {path}")


def register(app: typer.Typer) -> None:
    app.command("report")(report)
