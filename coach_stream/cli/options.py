"""Options and helpers several commands share (``launch``, ``status``, ``train``, ...).

A task started by ``launch`` gets the same ``--checkpoints`` / ``--set`` / ``--seed`` it was
launched with, so every command must read them the same way: one definition each here.
This module imports no torch, so ``launch`` stays quick to start.
"""

from __future__ import annotations

import enum
from pathlib import Path
from urllib.parse import urlparse

import typer

from coach_stream.config import Preset, load_preset
from coach_stream.errors import ConfigError

DEFAULT_STATE_DIR = Path(".coach-stream")

PresetOption = typer.Option(..., "--preset", help="Built-in preset name or a YAML path.")
RunIdOption = typer.Option(..., "--run-id", help="The run's id (names its topics and keys).")
KafkaOption = typer.Option(
    None,
    "--kafka",
    envvar="KAFKA_BOOTSTRAP_SERVERS",
    help="Kafka bootstrap servers (default: the local stack's).",
)
CheckpointsOption = typer.Option(
    None,
    "--checkpoints",
    help="gs://bucket/prefix, file:///dir or a directory (default <state-dir>/checkpoints).",
)
GcsEmulatorOption = typer.Option(
    None,
    "--gcs-emulator",
    envvar="STORAGE_EMULATOR_HOST",
    help="fake-gcs-server URL for gs:// checkpoints.",
)
# numpy's SeedSequence refuses negative entropy, so a negative seed is a usage error.
SeedOption = typer.Option(None, "--seed", min=0, help="Run seed (default: the preset's).")
SetOption = typer.Option([], "--set", help="Preset override key=value (repeatable).")
StateDirOption = typer.Option(
    DEFAULT_STATE_DIR,
    "--state-dir",
    envvar="COACH_STREAM_STATE_DIR",
    help="Where runs keep run.json and their logs (status/logs/stop look here).",
)
TensorBoardOption = typer.Option(
    None,
    "--tensorboard",
    help="Write the run's TensorBoard scalars and metrics.csv under DIR/<run_id>/, from its "
    "telemetry (docs/observability.md).",
)


class OrchestratorKind(enum.StrEnum):
    local = "local"
    nomad = "nomad"


WhichOrchestratorOption = typer.Option(
    None,
    "--orchestrator",
    help="Where the run is (default: local if this state dir has it, else nomad when "
    "NOMAD_ADDR or --nomad-addr is set).",
)


def checkpoint_url(checkpoints: str | None, state_dir: Path = DEFAULT_STATE_DIR) -> str:
    """The store address of ``--checkpoints``: ``gs://bucket[/prefix]`` or ``file:///abs/dir``.

    No flag means ``<state_dir>/checkpoints``; a plain path becomes a ``file://`` URL. Any
    other scheme (``s3://``, ``http://``) is refused rather than read as a directory name.
    """
    if not checkpoints:
        return (state_dir / "checkpoints").resolve().as_uri()
    parsed = urlparse(checkpoints)
    if parsed.scheme == "gs":
        if not parsed.netloc:
            raise ConfigError(
                f"--checkpoints {checkpoints!r} names no bucket; write gs://BUCKET or "
                "gs://BUCKET/PREFIX."
            )
        return checkpoints
    if parsed.scheme == "file":
        if parsed.netloc not in ("", "localhost") or not parsed.path.startswith("/"):
            raise ConfigError(
                f"--checkpoints {checkpoints!r} is not a local file URL; write "
                "file:///ABSOLUTE/DIR (three slashes) or a plain directory path."
            )
        return checkpoints
    if parsed.scheme or "://" in checkpoints:
        raise ConfigError(
            f"--checkpoints {checkpoints!r} uses the unsupported scheme {parsed.scheme!r}; "
            "use gs://BUCKET/PREFIX, file:///DIR or a directory path."
        )
    return Path(checkpoints).resolve().as_uri()  # a plain directory


def load_run_preset(preset: str, seed: int | None, overrides: list[str]) -> Preset:
    """The preset with ``--set`` overrides and ``--seed`` applied, validated once."""
    extra = [f"seed={seed}"] if seed is not None else []
    return load_preset(preset, [*overrides, *extra])


def check_writable_dir(directory: Path, flag: str) -> None:
    """``directory`` is one, or can be created, and this user may write there: else a
    ``ConfigError`` naming ``flag``, before a command starts work it could not save."""
    from coach_stream.orchestrators.launcher import unwritable_ancestor

    existing = unwritable_ancestor(directory)
    if existing is not None:
        raise ConfigError(
            f"{flag} {directory}: {existing} is not a writable directory; choose another path."
        )
    # Permission bits do not tell everything (root passes os.access, yet /proc and a
    # read-only mount refuse): create it now, before anything is started.
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise ConfigError(
            f"{flag} {directory}: cannot create it ({error.strerror}); choose another path."
        ) from None
