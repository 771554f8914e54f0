"""A local run on disk: ``<state_dir>/runs/<run_id>/`` with ``run.json`` and ``logs/``.

The supervisor is a separate (often detached) process, so everything `status`, `logs`
and `stop` need lives in files: the task specs, each task's pid and kernel start time
(a pid alone could be recycled), its state, restarts and exit code. Only the supervisor
writes ``run.json`` once it runs, always by atomic rename, so a reader never sees half
a file.
"""

from __future__ import annotations

import enum
import json
import os
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from coach_stream.errors import OrchestratorError, RunExistsError
from coach_stream.orchestrators.plan import TaskSpec, TaskState, TaskStatus
from coach_stream.processes import ProcessRecord
from coach_stream.runids import check_run_id

TERMINAL_TASK_STATES = frozenset({TaskState.COMPLETE, TaskState.FAILED, TaskState.STOPPED})


class RunState(enum.StrEnum):
    STARTING = "starting"  # run.json written, supervisor not yet up
    RUNNING = "running"
    COMPLETE = "complete"  # the primary task (trainer) exited 0
    FAILED = "failed"
    STOPPED = "stopped"  # `stop` (or Ctrl-C) ended it

    @property
    def terminal(self) -> bool:
        return self not in (RunState.STARTING, RunState.RUNNING)


@dataclass(frozen=True)
class SupervisorConfig:
    """How the supervisor restarts and ends tasks; stored in run.json for the detached one."""

    initial_backoff_s: float = 1.0
    """Delay before the first restart of a crashed task; doubles with each quick crash."""
    max_backoff_s: float = 30.0
    max_restarts: int = 10
    """A task that crashed this many times is FAILED (a crash loop is a bug, not bad luck)."""
    final_exit_codes: tuple[int, ...] = (2,)
    """Exit codes that mean "a restart cannot help" (``coach-stream`` exits 2 for a bad
    preset, a missing environment or bucket): such a task is FAILED at once and ends the
    run. Any other non-zero exit (3: a service was unreachable; 1: a crash) restarts."""
    healthy_after_s: float = 60.0
    """A task that ran this long before crashing restarts after the initial backoff again."""
    poll_interval_s: float = 0.2
    stop_grace_s: float = 10.0
    """SIGTERM first; SIGKILL whatever is still alive after this long."""
    primary_group: str | None = "trainer"
    """The run ends with this group's task: a run is done when its trainer is."""
    linger_s: float = 15.0
    """After the primary completes, how long the others get to exit on their own."""
    preload: tuple[str, ...] = ()
    """Modules the supervisor imports once; ``<python> -m <one of them>`` tasks are then
    forked from it, warm, instead of each importing torch & co. (see ``zygote``)."""

    def backoff(self, consecutive_failures: int) -> float:
        exponent = max(0, consecutive_failures - 1)
        return float(min(self.max_backoff_s, self.initial_backoff_s * 2.0**exponent))


@dataclass
class TaskRecord:
    spec: TaskSpec
    state: TaskState = TaskState.PENDING
    process: ProcessRecord | None = None
    restarts: int = 0
    exit_code: int | None = None

    def status(self) -> TaskStatus:
        pid = self.process.pid if self.process is not None else None
        return TaskStatus(self.spec.name, self.state, pid, self.restarts, self.exit_code)


@dataclass
class RunRecord:
    run_id: str
    tasks: list[TaskRecord]
    config: SupervisorConfig = field(default_factory=SupervisorConfig)
    state: RunState = RunState.STARTING
    supervisor: ProcessRecord | None = None
    created_at_ms: int = field(default_factory=lambda: int(time.time() * 1000))
    ended_at_ms: int | None = None
    failure: str | None = None
    """Why the run failed at once: ``<task> exited with code 2: <its last log line>``."""

    def task(self, name: str) -> TaskRecord:
        for task in self.tasks:
            if task.spec.name == name:
                return task
        known = ", ".join(t.spec.name for t in self.tasks)
        raise OrchestratorError(f"Run {self.run_id!r} has no task {name!r}; use one of {known}.")

    def to_json(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "state": self.state.value,
            "created_at_ms": self.created_at_ms,
            "ended_at_ms": self.ended_at_ms,
            "failure": self.failure,
            "supervisor": self.supervisor.to_json() if self.supervisor else None,
            "config": asdict(self.config),
            "tasks": [
                {
                    "name": t.spec.name,
                    "group": t.spec.group,
                    "argv": list(t.spec.argv),
                    "env": dict(t.spec.env),
                    "restart": t.spec.restart,
                    "state": t.state.value,
                    "process": t.process.to_json() if t.process else None,
                    "restarts": t.restarts,
                    "exit_code": t.exit_code,
                }
                for t in self.tasks
            ],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RunRecord:
        tasks = [
            TaskRecord(
                spec=TaskSpec(
                    name=t["name"],
                    group=t["group"],
                    argv=tuple(t["argv"]),
                    env=dict(t["env"]),
                    restart=bool(t["restart"]),
                ),
                state=TaskState(t["state"]),
                process=ProcessRecord.from_json(t["process"]) if t["process"] else None,
                restarts=int(t["restarts"]),
                exit_code=t["exit_code"],
            )
            for t in data["tasks"]
        ]
        supervisor = data.get("supervisor")
        return cls(
            run_id=data["run_id"],
            tasks=tasks,
            config=SupervisorConfig(
                **{
                    **data["config"],
                    "preload": tuple(data["config"].get("preload", ())),
                    "final_exit_codes": tuple(data["config"].get("final_exit_codes", (2,))),
                }
            ),
            state=RunState(data["state"]),
            supervisor=ProcessRecord.from_json(supervisor) if supervisor else None,
            created_at_ms=int(data["created_at_ms"]),
            ended_at_ms=data.get("ended_at_ms"),
            failure=data.get("failure"),
        )


class RunDirectory:
    """The files of one run; no I/O until a method is called."""

    def __init__(self, state_dir: Path, run_id: str) -> None:
        self.run_id = check_run_id(run_id)
        self.path = state_dir / "runs" / run_id
        self.run_json = self.path / "run.json"
        self.logs_dir = self.path / "logs"
        self.supervisor_log = self.path / "supervisor.log"

    def log_path(self, task: str) -> Path:
        return self.logs_dir / f"{task}.log"

    def exists(self) -> bool:
        return self.run_json.is_file()

    def read(self) -> RunRecord:
        try:
            data = json.loads(self.run_json.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise OrchestratorError(
                f"No run {self.run_id!r} under {self.path.parent}; check the run id "
                f"(`coach-stream status` lists runs) and --state-dir."
            ) from None
        except (OSError, ValueError) as error:
            raise OrchestratorError(
                f"{self.run_json} is unreadable ({error}); delete the run directory."
            ) from error
        return RunRecord.from_json(data)

    def create(self, record: RunRecord) -> None:
        """Write a new run's first record; ``RunExistsError`` if the directory exists (an
        exclusive mkdir: of two creators of one run id, exactly one succeeds)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self.path.mkdir()
        except FileExistsError:
            raise RunExistsError(
                f"Run {self.run_id!r} already exists in {self.path.parent}; choose another "
                "--run-id (or remove that directory to reuse the name)."
            ) from None
        self.write(record)

    def write(self, record: RunRecord) -> None:
        self.logs_dir.mkdir(parents=True, exist_ok=True)
        fd, temp = tempfile.mkstemp(prefix=".run.", suffix=".json", dir=self.path)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                json.dump(record.to_json(), handle, indent=1)
            os.replace(temp, self.run_json)
        except BaseException:
            Path(temp).unlink(missing_ok=True)
            raise


def list_runs(state_dir: Path) -> list[str]:
    """Run ids with a run.json under ``state_dir``, oldest first."""
    runs = state_dir / "runs"
    if not runs.is_dir():
        return []
    created: dict[str, int] = {}
    for path in runs.iterdir():
        try:
            data = json.loads((path / "run.json").read_text(encoding="utf-8"))
            created[path.name] = int(data["created_at_ms"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return sorted(created, key=lambda run_id: (created[run_id], run_id))
