"""Groups of CLI options handed to a command as one frozen object.

Commands that share a set of flags (``launch`` and ``attach`` both submit a run; every
Nomad-aware command takes the ``--nomad-*`` access flags) declare one parameter of the
group's type instead of repeating a dozen ``typer.Option`` lines: the decorator adds the
options to the command's signature (typer reads the signature) and builds the object from
their values.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar, cast

import typer

from coach_stream.cli.options import (
    CheckpointsOption,
    GcsEmulatorOption,
    KafkaOption,
    OrchestratorKind,
    SeedOption,
    SetOption,
    StateDirOption,
    TensorBoardOption,
)

Command = TypeVar("Command", bound=Callable[..., None])


def with_option_group(
    command: Command,
    argument: str,
    options: Mapping[str, tuple[Any, Any]],
    build: Callable[[dict[str, Any]], object],
) -> Command:
    """``command`` with ``options`` (name -> (annotation, typer option)) added to its
    signature as keyword-only parameters, their values handed to it as the one keyword
    ``argument`` that ``build`` makes of them."""
    signature = inspect.signature(command, eval_str=True)
    kept = [p for p in signature.parameters.values() if p.name != argument]
    added = [
        inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=option,
                          annotation=annotation)
        for name, (annotation, option) in options.items()
    ]  # fmt: skip

    @functools.wraps(command)
    def with_group(*args: Any, **kwargs: Any) -> None:
        values = {name: kwargs.pop(name, None) for name in options}
        command(*args, **{argument: build(values)}, **kwargs)

    parameters = [*kept, *added]
    with_group.__signature__ = signature.replace(parameters=parameters)  # type: ignore[attr-defined]
    with_group.__annotations__ = {p.name: p.annotation for p in parameters} | {"return": None}
    return cast(Command, with_group)


@dataclass(frozen=True)
class RunFlags:
    """The flags of a command that submits a run (``launch``, ``attach``)."""

    orchestrator: OrchestratorKind = OrchestratorKind.local
    detach: bool = False
    checkpoints: str | None = None
    kafka: str | None = None
    gcs_emulator: str | None = None
    seed: int | None = None
    overrides: tuple[str, ...] = ()
    timeout: float | None = None
    state_dir: Path = Path(".coach-stream")
    tensorboard: Path | None = None


def with_run_flags(noun: str) -> Callable[[Command], Command]:
    """Give a command the flags of ``RunFlags`` as one ``flags: RunFlags`` argument; ``noun``
    names what it starts in their help ("run", "shadow")."""
    options: dict[str, tuple[Any, Any]] = {
        "orchestrator_kind": (OrchestratorKind, typer.Option(
            OrchestratorKind.local, "--orchestrator",
            help="Who runs the processes: local subprocesses or a Nomad job (NOMAD_ADDR, ...).",
        )),
        "detach": (bool, typer.Option(
            False, "--detach", help=f"Start the {noun} and return at once."
        )),
        "checkpoints": (str | None, CheckpointsOption),
        "kafka": (str | None, KafkaOption),
        "gcs_emulator": (str | None, GcsEmulatorOption),
        "seed": (int | None, SeedOption),
        "overrides": (list[str], SetOption),
        "timeout": (float | None, typer.Option(
            None, "--timeout", min=0.0, help=f"Stop the {noun} after this many seconds."
        )),
        "state_dir": (Path, StateDirOption),
        "tensorboard": (Path | None, TensorBoardOption),
    }  # fmt: skip

    def build(values: dict[str, Any]) -> RunFlags:
        return RunFlags(
            values["orchestrator_kind"], values["detach"], values["checkpoints"],
            values["kafka"], values["gcs_emulator"], values["seed"],
            tuple(values["overrides"] or ()), values["timeout"], values["state_dir"],
            values["tensorboard"],
        )  # fmt: skip

    def decorate(command: Command) -> Command:
        return with_option_group(command, "flags", options, build)

    return decorate
