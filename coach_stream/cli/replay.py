"""``coach-stream replay``: inspect, export and train offline from a stored experience topic.

Every subcommand reads through ``coach_stream.replay.reader.ReplayReader``: one bounded
range (``--from``/``--to``), streamed, in a deterministic order. Progress bars go to
stderr; results (the inspection, the export's address) to stdout.
"""

from __future__ import annotations

import enum
import json
import signal
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.console import Console
from rich.table import Table

from coach_stream.cli.kafka_env import kafka_settings
from coach_stream.cli.options import (
    CheckpointsOption,
    GcsEmulatorOption,
    KafkaOption,
    checkpoint_url,
)
from coach_stream.codec import SchemaRegistry, default_schema_dir
from coach_stream.errors import ConfigError
from coach_stream.replay.progress import records_progress
from coach_stream.replay.range import parse_bound
from coach_stream.replay.reader import ReplayReader, resolve_topic
from coach_stream.transport.settings import KafkaSettings, RunTopics

if TYPE_CHECKING:
    from coach_stream.replay.offline.train import Dataset

app = typer.Typer(
    name="replay",
    help="Inspect, export and train offline from a run's stored experience topic.",
    no_args_is_help=True,
)

SourceArgument = typer.Argument(..., help="A run id, or an experience topic's full name.")
FromOption = typer.Option(
    None,
    "--from",
    help="Start (inclusive): earliest, an offset, P:O,P:O, an ISO time with zone or @epoch-ms.",
)
ToOption = typer.Option(None, "--to", help="End (exclusive): latest, an offset, P:O, a time.")
SchemasOption = typer.Option(
    [], "--schemas", help="Extra directory of *.avsc schema versions (repeatable)."
)
BatchOption = typer.Option(65_536, "--batch", min=1, help="Transitions per batch (memory bound).")
ProgressOption = typer.Option(True, "--progress/--no-progress", help="Progress bar on stderr.")


class Format(enum.StrEnum):
    avro = "avro"
    parquet = "parquet"
    minari = "minari"


FormatOption = typer.Option(..., "--format", help="avro, parquet or minari.")


def _terminate_like_ctrl_c() -> None:
    """SIGTERM (a CI timeout, `kill`) unwinds like Ctrl-C, so cleanups run (exit 130)."""

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupt)


def _settings(kafka: str | None) -> KafkaSettings:
    return kafka_settings(kafka)  # the address, and COACH_STREAM_KAFKA_* security


def _registry(schemas: list[Path]) -> SchemaRegistry:
    for folder in schemas:
        if not folder.is_dir():
            raise ConfigError(f"--schemas {folder} is not a directory; give a folder of .avsc.")
    return SchemaRegistry.load(default_schema_dir(), *schemas)


def _reader(
    source: str,
    kafka: str | None,
    start: str | None,
    end: str | None,
    schemas: list[Path],
    batch: int,
) -> ReplayReader:
    settings = _settings(kafka)
    return ReplayReader(
        settings,
        resolve_topic(source),
        start=parse_bound(start, "--from"),
        end=parse_bound(end, "--to"),
        registry=_registry(schemas),
        batch_transitions=batch,
    )


def _dead_letter_topic(topic: str) -> str | None:
    if topic.endswith(".experience"):
        return topic.removesuffix(".experience") + ".dead-letter"
    return None


def _nonempty(reader: ReplayReader) -> None:
    if reader.total_records == 0:
        spans = ", ".join(f"{s.partition}:[{s.start},{s.end})" for s in reader.spans)
        raise ConfigError(
            f"The range of {reader.topic} is empty ({spans}); check --from/--to, or the topic "
            "holds no records yet (or retention deleted them)."
        )


def inspect(
    source: str = SourceArgument,
    kafka: str | None = KafkaOption,
    start: str | None = FromOption,
    end: str | None = ToOption,
    schemas: list[Path] = SchemasOption,
    batch: int = BatchOption,
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
    progress: bool = ProgressOption,
) -> None:
    """Partitions, time span, chunks, versions, episodes, schemas, gaps, dead letters."""
    from coach_stream.replay.inspect import inspect as run_inspect

    with (
        _reader(source, kafka, start, end, schemas, batch) as reader,
        records_progress("inspect", reader.total_records, progress) as advance,
    ):
        reader.on_records = advance
        report = run_inspect(reader, _dead_letter_topic(reader.topic)).to_json()
    if as_json:
        typer.echo(json.dumps(report))
        return
    _print_report(report)


def _print_report(r: dict[str, Any]) -> None:
    out = Console(highlight=False)
    out.print(
        f"[bold]{r['topic']}[/]  retention: {r['retention']}  runs: {', '.join(r['run_ids'])}"
    )
    table = Table("partition", "low", "high", "range start", "range end")
    for p in r["partitions"]:
        table.add_row(*(str(p[k]) for k in ("partition", "low", "high", "start", "end")))
    out.print(table)
    versions, episodes = r["policy_versions"], r["episodes"]
    lines = [
        f"time span: {r['first_timestamp']} .. {r['last_timestamp']}",
        f"records: {r['records']}  chunks: {r['chunks']}  transitions: {r['transitions']}  "
        f"bytes: {r['bytes']}  undecodable: {r['undecodable']}",
        *(
            f"  undecodable at {bad['partition']}:{bad['offset']}: {bad['reason']}"
            for bad in r["undecodable_first"]
        ),
        f"policy versions: {versions['count']} ({versions['min']}..{versions['max']})",
        f"episodes: {episodes['count']}",
    ]
    if episodes["return"]:
        ret, length = episodes["return"], episodes["length"]
        lines.append(
            f"  return mean {ret['mean']:.2f} min {ret['min']:.2f} max {ret['max']:.2f}; "
            f"length mean {length['mean']:.1f} min {length['min']:.0f} max {length['max']:.0f}"
        )
    lines.append("schemas: " + ", ".join(f"{k}: {v}" for k, v in r["schemas"].items()))
    lines.append(
        f"chunk_seq: {len(r['sequences'])} (worker, env) keys, {r['gaps']} missing, "
        f"{r['duplicates']} duplicated"
    )
    for key, s in r["sequences"].items():
        if s["gaps"] or s["duplicates"]:
            lines.append(f"  {key}: {s['gaps']} missing, {s['duplicates']} duplicated")
    lines.append(f"dead letters (whole run): {r['dead_letters']}")
    for line in lines:
        out.print(line)


def export(
    source: str = SourceArgument,
    fmt: Format = FormatOption,
    out: str = typer.Option(
        ...,
        "--out",
        help="File (avro, parquet) or datasets directory (minari); gs://BUCKET/PREFIX uploads.",
    ),
    kafka: str | None = KafkaOption,
    gcs_emulator: str | None = GcsEmulatorOption,
    start: str | None = FromOption,
    end: str | None = ToOption,
    schemas: list[Path] = SchemasOption,
    batch: int = BatchOption,
    env: str | None = typer.Option(None, "--env", help="Environment id (minari needs it)."),
    dataset_id: str | None = typer.Option(
        None, "--dataset-id", help="Minari dataset id (default coach-stream/<run>-v0)."
    ),
    progress: bool = ProgressOption,
) -> None:
    """Export a range to Avro container files, Parquet or a Minari dataset."""
    _terminate_like_ctrl_c()  # an interrupted export leaves no partial file
    from coach_stream.replay.export.run import run_export

    with _reader(source, kafka, start, end, schemas, batch) as reader:
        _nonempty(reader)
        with records_progress(f"export {fmt}", reader.total_records, progress) as advance:
            reader.on_records = advance
            where, counts = run_export(
                reader, fmt.value, out, gcs_emulator, env=env, dataset_id=dataset_id
            )
    typer.echo(json.dumps({"out": where, "format": fmt.value, **counts}))


NormalizeOption = typer.Option(
    False,
    "--normalize",
    help="Standardise observations by the data's mean and variance; the policies carry them.",
)
MaxTransitionsOption = typer.Option(
    20_000_000, "--max-transitions", min=1, help="Refuse a larger range (held in memory)."
)


def train(
    source: str = SourceArgument,
    algo: str = typer.Option("bc", "--algo", help="bc (behaviour cloning) or cql (discrete CQL)."),
    env: str = typer.Option(..., "--env", help="The environment the data came from."),
    run_id: str = typer.Option(..., "--run-id", help="New run id for the trained policies."),
    checkpoints: str | None = CheckpointsOption,
    kafka: str | None = KafkaOption,
    gcs_emulator: str | None = GcsEmulatorOption,
    start: str | None = FromOption,
    end: str | None = ToOption,
    schemas: list[Path] = SchemasOption,
    steps: int = typer.Option(3_000, "--steps", min=1, help="Gradient steps."),
    batch_size: int = typer.Option(256, "--batch-size", min=1, help="Transitions per step."),
    learning_rate: float = typer.Option(1e-3, "--learning-rate", min=0.0),
    gamma: float = typer.Option(0.99, "--gamma", min=0.0, max=1.0),
    cql_alpha: float = typer.Option(1.0, "--cql-alpha", min=0.0),
    seed: int = typer.Option(0, "--seed", min=0),
    normalize: bool = NormalizeOption,
    publish_every: int = typer.Option(1_000, "--publish-every", min=1, help="Steps per version."),
    eval_episodes: int = typer.Option(10, "--eval-episodes", min=1),
    max_transitions: int = MaxTransitionsOption,
    progress: bool = ProgressOption,
) -> None:
    """Train a policy offline (bc or cql) from a stored topic; announce it; evaluate it."""
    _terminate_like_ctrl_c()  # an interrupted train deletes its run id's topics and policies
    from coach_stream.replay.offline import ALGORITHMS, OfflineConfig
    from coach_stream.replay.offline.claim import claimed_run
    from coach_stream.replay.offline.session import run_offline

    if algo not in ALGORITHMS:
        raise ConfigError(f"Unknown --algo {algo!r}; use one of {', '.join(sorted(ALGORITHMS))}.")
    url = checkpoint_url(checkpoints)
    # Taken before anything is read: a run id in use is refused at once, and from here a
    # failure (or Ctrl-C) deletes what this command made of the run id.
    with claimed_run(_settings(kafka), run_id, url, gcs_emulator):
        reader = _reader(source, kafka, start, end, schemas, 65_536)
        data = _read_dataset(reader, max_transitions, progress)
        config = OfflineConfig(
            steps=steps,
            batch_size=batch_size,
            learning_rate=learning_rate,
            gamma=gamma,
            cql_alpha=cql_alpha,
            normalize_observations=normalize,
        )
        with records_progress(f"train {algo}", steps, progress, unit="steps") as advance:
            result = run_offline(
                data,
                settings=reader.settings,
                run_id=run_id,
                checkpoints=url,
                gcs_emulator=gcs_emulator,
                env_id=env,
                algo=algo,
                config=config,
                seed=seed,
                publish_every=publish_every,
                eval_episodes=eval_episodes,
                on_step=advance,
            )
    typer.echo(json.dumps(result))


def _read_dataset(reader: ReplayReader, max_transitions: int, progress: bool) -> Dataset:
    """The whole range in memory (at most ``max_transitions``), with a progress bar."""
    from coach_stream.replay.offline.train import load_dataset

    with reader:
        _nonempty(reader)
        with records_progress("read", reader.total_records, progress) as advance:
            reader.on_records = advance
            return load_dataset(reader, max_transitions)


def register(root: typer.Typer) -> None:
    app.command("inspect")(inspect)
    app.command("export")(export)
    app.command("train")(train)
    root.add_typer(app, name="replay")


__all__ = ["RunTopics", "register"]
