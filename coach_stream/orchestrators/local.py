"""``LocalOrchestrator``: a run's tasks as supervised processes on this machine.

``submit`` writes the run's directory and starts a detached supervisor process
(``coach_stream.orchestrators.supervisor``) that owns the tasks from then on, so a run
survives the launcher (``launch --detach``) and `status`, `logs` and `stop` work from any
other process that points at the same state directory::

    orchestrator = LocalOrchestrator(Path(".coach-stream"))
    orchestrator.submit(spec)            # returns once every task has been started
    orchestrator.status(spec.run_id)     # from run.json, checked against the live pids
    orchestrator.stop(spec.run_id)       # SIGTERM, SIGKILL after the grace; nothing left
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from coach_stream.errors import OrchestratorError
from coach_stream.orchestrators.plan import RunSpec, TaskState, TaskStatus
from coach_stream.orchestrators.progress import LogFollower
from coach_stream.orchestrators.state import (
    TERMINAL_TASK_STATES,
    RunDirectory,
    RunRecord,
    RunState,
    SupervisorConfig,
    TaskRecord,
    list_runs,
)
from coach_stream.orchestrators.zygote_client import SUPERVISOR, ZygoteClient
from coach_stream.processes import ProcessRecord, popen_detached, tail, terminate_groups

if TYPE_CHECKING:
    from coach_stream.transport.settings import KafkaSettings
    from coach_stream.transport.telemetry import TelemetryLines


class _Supervisor(Protocol):
    """The ``subprocess.Popen`` subset used on a run's supervisor, spawned or adopted."""

    pid: int

    def poll(self) -> int | None: ...

    def terminate(self) -> None: ...

    def kill(self) -> None: ...

    def wait(self, timeout: float | None = None) -> int: ...


class AdoptedProcess:
    """A supervisor forked by the zygote: not our child, so known by pid and start time
    (its exit code is the zygote's to collect; -1 here once it is gone)."""

    def __init__(self, record: ProcessRecord) -> None:
        self.record, self.pid = record, record.pid

    def poll(self) -> int | None:
        return None if self.record.is_alive() else -1

    def terminate(self) -> None:
        self._signal(signal.SIGTERM)

    def kill(self) -> None:
        self._signal(signal.SIGKILL)

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(f"supervisor {self.pid}", timeout or 0.0)
            time.sleep(0.05)  # not our child: there is no exit to wait on, only /proc
        return -1

    def _signal(self, sig: signal.Signals) -> None:
        if self.record.is_alive():
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)


def _end_supervisor(process: _Supervisor, grace_s: float) -> None:
    """SIGTERM a starting supervisor (it stops every task it started), SIGKILL if it hangs."""
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


class LocalOrchestrator:
    """Implements ``plan.Orchestrator`` with local processes; state lives in ``state_dir``."""

    def __init__(
        self,
        state_dir: Path,
        *,
        config: SupervisorConfig | None = None,
        python: str = sys.executable,
        start_timeout_s: float = 60.0,
        zygote: ZygoteClient | None = None,
        telemetry: KafkaSettings | None = None,
    ) -> None:
        """``zygote``: fork each run's supervisor from a warm zygote that outlives launches
        (``zygote_server``), so a launch does not wait for its imports; None spawns it.
        ``telemetry``: follow a run's tasks on its telemetry topic (as a run on Nomad),
        not in its log files (``task_lines``)."""
        self.telemetry = telemetry
        self.state_dir = state_dir.resolve()
        self._config = config or SupervisorConfig()
        self._python = python
        self._start_timeout_s = start_timeout_s
        self._zygote = zygote
        self._supervisors: dict[str, _Supervisor] = {}

    def run_dir(self, run_id: str) -> RunDirectory:
        return RunDirectory(self.state_dir, run_id)

    # ------------------------------------------------------------------ Orchestrator

    def submit(self, spec: RunSpec) -> None:
        """Record the run, start its supervisor and wait until every task was started."""
        run_dir = self.run_dir(spec.run_id)
        names = [task.name for task in spec.tasks]
        if len(set(names)) != len(names) or not names:
            raise OrchestratorError(
                f"Run {spec.run_id!r} needs at least one task and unique task names, got "
                f"{names}; fix the run spec."
            )
        record = RunRecord(
            run_id=spec.run_id,
            tasks=[TaskRecord(task) for task in spec.tasks],
            config=self._config,
        )
        run_dir.create(record)  # RunExistsError when the id is taken here
        self._start_supervisor(run_dir)

    def resume(self, run_id: str) -> None:
        """Start a failed or stopped run's tasks again, as recorded in its run.json.

        Nothing is lost by the restart: the trainer resumes from its newest trainer state
        and its stored positions, and each worker continues its envs' ``chunk_seq`` after
        its last chunk in the log. A run still running, or one that completed (its trainer
        published ``RunFinished``), is refused with the reason.
        """
        run_dir = self.run_dir(run_id)
        if not run_dir.exists():
            raise OrchestratorError(
                f"No run {run_id!r} in {run_dir.path.parent}; `coach-stream status` lists "
                "the runs there (or pass the --state-dir the run was launched with)."
            )
        record = self.record(run_id)
        if not record.state.terminal:
            raise OrchestratorError(
                f"Run {run_id!r} is still {record.state.value}; follow it with "
                f"`coach-stream status {run_id}`, or stop it first to start it again."
            )
        if record.state is RunState.COMPLETE:
            raise OrchestratorError(
                f"Run {run_id!r} completed (its trainer ended it); there is nothing to resume: "
                "launch a new run id to train again."
            )
        fresh = RunRecord(
            run_id=run_id,
            tasks=[TaskRecord(task.spec) for task in record.tasks],
            config=record.config,
            created_at_ms=record.created_at_ms,
        )
        run_dir.write(fresh)
        self._start_supervisor(run_dir)

    def _start_supervisor(self, run_dir: RunDirectory) -> None:
        """Start the run's supervisor and wait until it has started every task."""
        run_id = run_dir.run_id
        args = ["--state-dir", str(self.state_dir), "--run-id", run_id]
        process: _Supervisor | None = self._fork_warm(args, run_dir.supervisor_log)
        if process is None:
            with run_dir.supervisor_log.open("ab") as log:
                process = popen_detached([self._python, "-m", SUPERVISOR, *args], log)
        self._supervisors[run_id] = process
        try:
            self._wait_started(run_dir, process)
        except BaseException:
            # Interrupted (Ctrl-C, SIGTERM) or the supervisor hung: its pid is not in
            # run.json yet, so `stop` could not reach it; end it here, or it would go on to
            # start tasks that nobody stops.
            _end_supervisor(process, self._config.stop_grace_s + 15.0)
            raise

    def _fork_warm(self, args: list[str], log_path: Path) -> AdoptedProcess | None:
        """The supervisor forked from the zygote, or None (no zygote configured or to be had)."""
        if self._zygote is None or self._zygote.python != self._python:
            return None
        forked = self._zygote.fork(SUPERVISOR, args, os.environ, Path.cwd(), log_path)
        return None if forked is None else AdoptedProcess(forked)

    def _wait_started(self, run_dir: RunDirectory, process: _Supervisor) -> None:
        deadline = time.monotonic() + self._start_timeout_s
        while run_dir.read().state is RunState.STARTING:
            if process.poll() is not None or time.monotonic() > deadline:
                raise OrchestratorError(
                    f"The supervisor of run {run_dir.run_id!r} did not start its tasks "
                    f"({tail(run_dir.supervisor_log, 5)!r}); see {run_dir.supervisor_log}."
                )
            time.sleep(0.05)

    def status(self, run_id: str) -> list[TaskStatus]:
        return [task.status() for task in self.record(run_id).tasks]

    def logs(self, run_id: str, task: str | None = None) -> Iterator[str]:
        """Every line of one task's log, or of all tasks' logs prefixed with ``[task]``."""
        record = self.run_dir(run_id).read()
        names = [record.task(task).spec.name] if task else [t.spec.name for t in record.tasks]
        for name in names:
            path = self.run_dir(run_id).log_path(name)
            if not path.is_file():
                continue
            with path.open(encoding="utf-8", errors="replace") as handle:
                for line in handle:
                    yield line.rstrip("\n") if task else f"[{name}] {line.rstrip(chr(10))}"

    def stop(self, run_id: str) -> None:
        """End the run and every process it started; safe to call on a finished run."""
        run_dir = self.run_dir(run_id)
        record = run_dir.read()
        grace = record.config.stop_grace_s
        supervisor = record.supervisor
        if supervisor is not None and supervisor.is_alive():
            terminate_groups([supervisor], grace + 15.0, reap=self._reap)
            record = run_dir.read()
        # The supervisor is gone (stopped above, or it died): end what it left behind.
        leaders = [t.process for t in record.tasks if t.process is not None]
        terminate_groups(leaders, grace)
        changed = False
        for task in record.tasks:
            if task.state not in TERMINAL_TASK_STATES:
                task.state, changed = TaskState.STOPPED, True
        if not record.state.terminal:
            record.state, changed = RunState.STOPPED, True
            record.ended_at_ms = int(time.time() * 1000)
        if changed:
            run_dir.write(record)

    # ------------------------------------------------------------------ beyond the protocol

    def task_lines(self, run_id: str) -> LogFollower | TelemetryLines:
        """The tasks' new lines on each ``poll()`` (for ``launcher.follow``): their events
        from the run's telemetry topic with ``telemetry``, else their log files' lines."""
        if self.telemetry is None:
            return LogFollower(self.run_dir(run_id).logs_dir)
        from coach_stream.transport.settings import RunTopics
        from coach_stream.transport.telemetry import TelemetryLines, TelemetryReader

        return TelemetryLines(TelemetryReader(self.telemetry, RunTopics.for_run(run_id)))

    def record(self, run_id: str) -> RunRecord:
        """run.json, corrected for a supervisor that died without writing its last word."""
        self._reap()
        record = self.run_dir(run_id).read()
        if record.state.terminal or record.supervisor is None or record.supervisor.is_alive():
            return record
        tasks = [
            task
            if task.state in TERMINAL_TASK_STATES
            or (task.process is not None and task.process.is_alive())
            else replace(task, state=TaskState.FAILED)
            for task in record.tasks
        ]
        return replace(record, tasks=tasks, state=RunState.FAILED)

    def wait(self, run_id: str, timeout: float) -> RunState:
        """Block until the run has ended and its supervisor has exited; ``TimeoutError`` after
        ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            record = self.record(run_id)
            state = record.state
            if state.terminal and (record.supervisor is None or not record.supervisor.is_alive()):
                return state
            if time.monotonic() > deadline:
                raise TimeoutError(f"run {run_id} still {state} after {timeout:.0f} s")
            time.sleep(0.1)

    def runs(self) -> list[str]:
        """Run ids in the state directory, oldest first."""
        return list_runs(self.state_dir)

    def _reap(self) -> None:
        for process in self._supervisors.values():
            process.poll()
