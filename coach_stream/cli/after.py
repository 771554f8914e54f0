"""After training: ``play`` a policy version, ``export-policy`` it, list the ``versions``.

Each reads the run from its topics alone (its control topic's announcements and
evaluations, its trainer's ``started`` event with the whole preset) and the version's
bytes from the checkpoint store its URI names, verified against the announced sha256.
So they work for a finished or running run from any machine that reaches the broker and
the store, whichever orchestrator ran it.
"""

from __future__ import annotations

import enum
import json
import os
import warnings
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.table import Table

from coach_stream.cli.kafka_env import kafka_settings
from coach_stream.cli.options import GcsEmulatorOption, KafkaOption, SetOption, check_writable_dir
from coach_stream.control.history import (
    RunHistory,
    load_version,
    read_history,
    store_of,
    stored_versions,
)
from coach_stream.core import LoadedPolicy
from coach_stream.errors import ConfigError, IntegrityError
from coach_stream.stack import LocalStack, default_cache_dir
from coach_stream.transport.admin import check_broker
from coach_stream.transport.settings import KafkaSettings, RunTopics

RunArgument = typer.Argument(..., help="The run id.")
VersionOption = typer.Option(
    "latest", "--version", help="The policy version: a number, or latest (the newest)."
)
PresetNameOption = typer.Option(
    None,
    "--preset",
    help="The run's preset, for a run that did not publish its own (trained offline).",
)


VideoOption = typer.Option(None, "--video", help="Record the episodes to PATH.mp4 or PATH.gif.")
ScaleOption = typer.Option(
    1.0, "--scale", min=0.05, max=4.0, help="Video frames resized by this factor."
)
FormatOption = typer.Option(..., "--format", help="onnx or torchscript.")
OutOption = typer.Option(..., "--out", help="The file to write.")


class ExportFormat(enum.StrEnum):
    onnx = "onnx"
    torchscript = "torchscript"


def _open_run(kafka: str | None, run_id: str) -> tuple[KafkaSettings, RunHistory]:
    """The run's history from its topics; one line when the broker or the run is missing."""
    settings = kafka_settings(kafka or LocalStack(default_cache_dir()).kafka_bootstrap())
    topics = RunTopics.for_run(run_id)
    if topics.control not in check_broker(settings, timeout=10.0).topics:  # unreachable: exit 3
        raise ConfigError(
            f"No run {run_id!r} on the broker at {settings.bootstrap_servers} (no "
            f"{topics.control}); check the run id (`coach-stream status` lists local runs) "
            "and --kafka."
        )
    return settings, read_history(settings, run_id)


def _version_number(text: str) -> int | None:
    if text == "latest":
        return None
    try:
        number = int(text)
    except ValueError:
        raise ConfigError(f"--version {text!r} is not a number; give one, or latest.") from None
    if number < 0:
        raise ConfigError(f"--version {number} is negative; versions count from 0.")
    return number


def _policy(history: RunHistory, version: str, gcs_emulator: str | None) -> LoadedPolicy:
    """The chosen version, loaded and verified (a damaged object is one line, exit 2)."""
    record = history.version(_version_number(version))
    store = store_of(record, gcs_emulator)
    try:
        return load_version(history, record, store)
    except IntegrityError as error:
        raise ConfigError(
            f"Version {record.version} of run {history.run_id!r} failed verification ({error}); "
            "pick another --version."
        ) from None


def _greedy_actor(history: RunHistory, policy: LoadedPolicy, preset_name: str | None,
                  overrides: list[str]) -> tuple[Any, Any, Any]:  # fmt: skip
    from coach_stream.algorithms import builder_for
    from coach_stream.envs import probe_shape

    preset = history.preset(preset_name, tuple(overrides))
    shape = probe_shape(preset.env_id, preset.env_wrappers)
    actor = builder_for(preset).make_actor(shape, greedy=True, seed=0)
    try:
        actor.load(policy)
    except IntegrityError as error:
        raise ConfigError(f"{error} (is --preset the run's?)") from None
    return preset, shape, actor


def play(
    run_id: str = RunArgument,
    version: str = VersionOption,
    episodes: int = typer.Option(5, "--episodes", min=1, help="Greedy episodes to play."),
    video: Path | None = VideoOption,
    scale: float = ScaleOption,
    seed: int = typer.Option(0, "--seed", min=0, help="Episode i resets with seed S + i."),
    preset: str | None = PresetNameOption,
    overrides: list[str] = SetOption,
    kafka: str | None = KafkaOption,
    gcs_emulator: str | None = GcsEmulatorOption,
) -> None:
    """Play greedy episodes of a policy version and print each return and the mean.

    The actor and the env are the run's evaluator's: the preset's wrappers, the version's
    normalisation statistics. With --video the frames are recorded as MP4 or GIF; the file
    appears only when the recording is complete.
    """
    from coach_stream.replay.progress import records_progress
    from coach_stream.rollout.play import play as play_episodes
    from coach_stream.rollout.play import recording, render_fps, video_format

    if video is not None:
        video_format(video)
        check_writable_dir(video.parent, "--video")
        if video.is_dir():
            raise ConfigError(f"--video {video} is a directory; give the file's path.")
        video.parent.mkdir(parents=True, exist_ok=True)
        if not os.environ.get("DISPLAY"):
            # MuJoCo renders through GLFW by default, which needs an X display; EGL
            # renders headless (a server, CI). An explicit MUJOCO_GL is kept.
            os.environ.setdefault("MUJOCO_GL", "egl")
    _, history = _open_run(kafka, run_id)
    policy = _policy(history, version, gcs_emulator)
    config, _, actor = _greedy_actor(history, policy, preset, overrides)
    typer.echo(f"run {run_id}, version {policy.version.version}, {config.env_id}")
    wrappers = tuple(config.env_wrappers)
    with records_progress("play", episodes, unit="episodes") as advance:

        def report(index: int, total: float, steps: int) -> None:
            typer.echo(f"episode {index + 1}: return {total:.2f} ({steps} steps)")
            advance(1)

        if video is None:
            returns = play_episodes(actor, config.env_id, wrappers, episodes, seed, None, report)
        else:
            with recording(video, render_fps(config.env_id, wrappers), scale) as frames:
                returns = play_episodes(
                    actor, config.env_id, wrappers, episodes, seed, frames, report
                )
    typer.echo(f"mean return {sum(returns) / len(returns):.2f} over {len(returns)} episodes")
    if video is not None:
        typer.echo(f"video: {video}")


def export_policy(
    run_id: str = RunArgument,
    version: str = VersionOption,
    fmt: ExportFormat = FormatOption,
    out: Path = OutOption,
    preset: str | None = PresetNameOption,
    overrides: list[str] = SetOption,
    kafka: str | None = KafkaOption,
    gcs_emulator: str | None = GcsEmulatorOption,
) -> None:
    """Write a policy version's greedy action function as one ONNX or TorchScript file.

    The file maps a batch of observations (the env's dtype) to a batch of greedy actions,
    with the version's observation normalisation inside, so it acts alone: onnxruntime
    and numpy, or torch.jit.load, next to the env.
    """
    import numpy as np

    from coach_stream.policies.export import export, greedy_policy

    check_writable_dir(out.parent, "--out")
    if out.is_dir():
        raise ConfigError(f"--out {out} is a directory; give the file's path.")
    out.parent.mkdir(parents=True, exist_ok=True)
    _, history = _open_run(kafka, run_id)
    policy = _policy(history, version, gcs_emulator)
    _, shape, actor = _greedy_actor(history, policy, preset, overrides)
    example = np.zeros((2, *shape.obs_shape), dtype=np.dtype(shape.obs_dtype))
    partial = out.with_name(f".{out.stem}.partial{out.suffix}")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch's exporters warn about their own futures
            export(greedy_policy(actor, shape), example, partial, fmt.value)
        partial.replace(out)
    except OSError as error:
        raise ConfigError(
            f"--out {out}: cannot write there ({error.strerror}); choose another path."
        ) from None
    finally:
        partial.unlink(missing_ok=True)
    typer.echo(
        f"wrote {out} ({fmt.value}): version {policy.version.version} of run {run_id}, "
        f"observations {tuple(shape.obs_shape)} {shape.obs_dtype} -> greedy actions"
    )


def versions(
    run_id: str = RunArgument,
    as_json: bool = typer.Option(False, "--json", help="One JSON object per line."),
    kafka: str | None = KafkaOption,
    gcs_emulator: str | None = GcsEmulatorOption,
) -> None:
    """List a run's announced policy versions: time, env steps, evaluation, URI, sha256,
    and whether the checkpoint store still holds each (retention deletes old ones)."""
    _, history = _open_run(kafka, run_id)
    if not history.versions:
        raise ConfigError(f"Run {run_id!r} has announced no policy version yet.")
    stored = stored_versions(history, store_of(history.versions[-1], gcs_emulator))
    rows = []
    for v in history.versions:
        evaluation = history.evaluations.get(v.version)
        rows.append(
            {
                "version": v.version,
                "time": datetime.fromtimestamp(v.created_at_ms / 1000, UTC).isoformat(),
                "env_steps": v.env_steps,
                "eval_mean_return": None if evaluation is None else evaluation.mean_return,
                "uri": v.uri,
                "sha256": v.sha256,
                "stored": v.version in stored,
            }
        )
    if as_json:
        for row in rows:
            typer.echo(json.dumps(row))
        return
    _print_versions(run_id, rows)


def _print_versions(run_id: str, rows: list[dict[str, Any]]) -> None:
    """A table that fits a terminal: the objects' common directory goes in the caption."""
    directory = rows[-1]["uri"].rsplit("/", 1)[0]
    table = Table(title=f"run {run_id}: {len(rows)} policy versions", caption=f"in {directory}/")
    for column in ("version", "time (UTC)", "env steps", "eval return", "stored", "sha256"):
        table.add_column(column, no_wrap=True)
    table.add_column("object", overflow="fold")
    for row in rows:
        mean = row["eval_mean_return"]
        table.add_row(
            str(row["version"]),
            row["time"][:19].replace("T", " "),
            f"{row['env_steps']:,}",
            "-" if mean is None else f"{mean:.1f}",
            "yes" if row["stored"] else "no (retention)",
            row["sha256"][:12],
            row["uri"].removeprefix(directory + "/"),
        )
    console = Console()
    # piped output has no terminal width to fit: rich's 80 columns would fold the rows
    (console if console.is_terminal else Console(width=160)).print(table)


def register(app: typer.Typer) -> None:
    app.command("play")(play)
    app.command("export-policy")(export_policy)
    app.command("versions")(versions)
