"""What an orchestrator is given and reports: a run's tasks, their states, the protocol.

A ``LaunchPlan`` is a checked launch (the preset, the tasks' settings);
``orchestrators.spec`` builds its ``RunSpec``; an ``Orchestrator``
(``LocalOrchestrator``: supervised local processes, ``NomadOrchestrator``: one Nomad job)
starts it and reports each task as a ``TaskStatus``. ``core`` holds the vocabulary the
loops speak; these records are the orchestration layer's own.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from coach_stream.config import Preset
    from coach_stream.orchestrators.spec import LaunchSettings


class TaskState(enum.StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    RESTARTING = "restarting"
    COMPLETE = "complete"
    FAILED = "failed"
    STOPPED = "stopped"


@dataclass(frozen=True)
class TaskSpec:
    """One process of a run: a trainer, a rollout worker or an evaluator."""

    name: str  # "trainer", "rollout-0", "evaluator"
    group: str  # "trainer" | "rollout" | "evaluator"
    argv: tuple[str, ...]
    env: Mapping[str, str] = dataclasses.field(default_factory=dict)
    restart: bool = True  # restart with backoff when it crashes


@dataclass(frozen=True)
class RunSpec:
    run_id: str
    tasks: tuple[TaskSpec, ...]


@dataclass(frozen=True)
class TaskStatus:
    name: str
    state: TaskState
    pid: int | None
    restarts: int
    exit_code: int | None


class Orchestrator(Protocol):
    """Starts and supervises a run's processes (``LocalOrchestrator``: local
    subprocesses; ``NomadOrchestrator``: a Nomad job)."""

    def submit(self, spec: RunSpec) -> None: ...

    def status(self, run_id: str) -> list[TaskStatus]: ...

    def logs(self, run_id: str, task: str | None = None) -> Iterator[str]: ...

    def stop(self, run_id: str) -> None: ...


@dataclass(frozen=True)
class LaunchPlan:
    """A validated launch: the preset as the tasks will load it, and their settings."""

    preset: Preset
    settings: LaunchSettings
    state_dir: Path
    """Where a local run keeps run.json and its logs (a failed launch removes its own)."""

    @property
    def checkpoints(self) -> str:
        return self.settings.checkpoints
