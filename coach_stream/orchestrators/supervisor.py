"""The supervisor: one process per local run that starts, watches and restarts its tasks.

It runs detached (``python -m coach_stream.orchestrators.supervisor``) so a run outlives
the terminal that launched it, and it is the only writer of ``run.json`` once started.
A crashed task with ``restart=True`` comes back after an exponential backoff (bounded
in delay and in count); a task that exits 0 is complete. The run ends with its primary
task (the trainer): once that is done the others get ``linger_s`` to notice
``RunFinished`` and exit, then are stopped. SIGTERM or SIGINT stops the whole run.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import signal
import sys
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import BinaryIO, Protocol

from coach_stream.errors import OrchestratorError
from coach_stream.orchestrators.plan import TaskState
from coach_stream.orchestrators.state import (
    TERMINAL_TASK_STATES,
    RunDirectory,
    RunRecord,
    RunState,
    TaskRecord,
)
from coach_stream.orchestrators.zygote import fork_module, forkable_module
from coach_stream.processes import ProcessRecord, popen_detached, terminate_groups


class _Child(Protocol):
    pid: int

    def poll(self) -> int | None: ...


@dataclass
class _Live:
    """What the supervisor knows about a task beyond run.json: its process and timers."""

    record: TaskRecord
    process: _Child | None = None
    started_at: float = 0.0
    consecutive_failures: int = 0
    restart_at: float | None = None


class Supervisor:
    """Drives one run's tasks; ``run()`` blocks until the run is over or stop is asked."""

    def __init__(self, run_dir: RunDirectory) -> None:
        self._dir = run_dir
        self._record: RunRecord | None = None
        self._tasks: list[_Live] = []
        self._linger_until: float | None = None
        self._preloaded: list[str] = []

    @property
    def record(self) -> RunRecord:
        if self._record is None:
            raise OrchestratorError("The supervisor was not started; call start() first.")
        return self._record

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        """Start every task and record this supervisor's own pid (the submit handshake)."""
        record = self._dir.read()
        if record.state is not RunState.STARTING:
            raise OrchestratorError(
                f"Run {record.run_id!r} was already started ({record.state}); "
                f"launch a new run id instead."
            )
        me = os.getpid()
        record.supervisor = ProcessRecord.of(me)
        self._record = record
        for module in record.config.preload:
            try:
                importlib.import_module(module)
            except Exception as error:  # a cold start still works: spawn instead of fork
                print(f"preload of {module} failed ({error!r}); tasks start cold", flush=True)
            else:
                self._preloaded.append(module)
        self._tasks = [_Live(task) for task in record.tasks]
        for live in self._tasks:
            self._spawn(live)
        record.state = RunState.RUNNING
        self._save()

    def run(self, stop: threading.Event) -> RunState:
        """Poll until the run ends; a set ``stop`` event ends it as STOPPED."""
        interval = self.record.config.poll_interval_s
        while not self.record.state.terminal:
            if stop.wait(interval):
                self.stop_all(RunState.STOPPED)
                break
            self.poll_once()
        return self.record.state

    def poll_once(self) -> None:
        """Reap exits, restart what is due, end the run when its primary is done."""
        changed = False
        now = time.monotonic()
        for live in self._tasks:
            changed |= self._check_exit(live, now)
            if self._restart_due(live, now):
                live.record.restarts += 1
                self._spawn(live)
                changed = True
        changed |= self._check_run_end(now)
        if changed:
            self._save()

    def _restart_due(self, live: _Live, now: float) -> bool:
        return (
            live.record.state is TaskState.RESTARTING
            and live.restart_at is not None
            and now >= live.restart_at
            and self._linger_until is None
        )

    def stop_all(self, final: RunState) -> None:
        """End every task still alive (SIGTERM, then SIGKILL after the grace) and save."""
        config = self.record.config
        alive = [live for live in self._tasks if live.record.state not in TERMINAL_TASK_STATES]
        leaders = [live.record.process for live in alive if live.record.process is not None]
        terminate_groups(leaders, config.stop_grace_s, reap=self._reap)
        for live in alive:
            live.record.state = TaskState.STOPPED
            if live.process is not None:
                live.record.exit_code = live.process.poll()
        if not self.record.state.terminal:
            self.record.state = final
            self.record.ended_at_ms = int(time.time() * 1000)
        self._save()

    # ------------------------------------------------------------------ internals

    def _spawn(self, live: _Live) -> None:
        spec = live.record.spec
        log_path = self._dir.log_path(spec.name)
        log_path.parent.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "PYTHONUNBUFFERED": "1", **spec.env}
        stamp = datetime.now(UTC).isoformat(timespec="seconds")
        with log_path.open("ab") as log:
            log.write(
                f"# coach-stream {stamp}: start {spec.name} (restarts: "
                f"{live.record.restarts})\n".encode()
            )
            log.flush()
            try:
                process = self._start(spec.argv, env, log, log_path)
            except OSError as error:
                log.write(f"# coach-stream: cannot start {spec.argv[0]!r}: {error}\n".encode())
                live.record.state, live.process = TaskState.FAILED, None
                return
        live.process = process
        live.started_at = time.monotonic()
        live.restart_at = None
        live.record.process = ProcessRecord.of(process.pid)
        live.record.state = TaskState.RUNNING
        live.record.exit_code = None

    def _start(
        self, argv: tuple[str, ...], env: dict[str, str], log: BinaryIO, log_path: Path
    ) -> _Child:
        """Fork a warm ``python -m <preloaded>`` task, or spawn any other command."""
        module = forkable_module(argv, self._preloaded)
        if module is not None:
            return fork_module(module, argv[3:], env, log_path)
        return popen_detached(argv, log, env)

    def _check_exit(self, live: _Live, now: float) -> bool:
        if live.process is None or live.record.state is not TaskState.RUNNING:
            return False
        code = live.process.poll()
        if code is None:
            return False
        # Leftovers of a crashed task (its forked helpers) must not outlive it.
        if live.record.process is not None:
            terminate_groups([live.record.process], self.record.config.stop_grace_s, self._reap)
        live.record.exit_code = code
        config = self.record.config
        if code == 0:
            live.record.state = TaskState.COMPLETE
        elif code in config.final_exit_codes:
            # The task refused its input (bad preset, missing env or bucket): every restart
            # would fail the same way, so it fails now and takes the run with it.
            live.record.state = TaskState.FAILED
            if self.record.failure is None and not self._primary_complete():
                line = last_error_line(self._dir.log_path(live.record.spec.name))
                self.record.failure = f"{live.record.spec.name} exited with code {code}: {line}"
        elif live.record.spec.restart and live.record.restarts < config.max_restarts:
            ran_for = now - live.started_at
            healthy = ran_for >= config.healthy_after_s
            live.consecutive_failures = 1 if healthy else live.consecutive_failures + 1
            live.record.state = TaskState.RESTARTING
            live.restart_at = now + config.backoff(live.consecutive_failures)
        else:
            live.record.state = TaskState.FAILED
        self._note(live, code)
        return True

    def _note(self, live: _Live, code: int) -> None:
        stamp = datetime.now(UTC).isoformat(timespec="seconds")
        with self._dir.log_path(live.record.spec.name).open("ab") as log:
            log.write(
                f"# coach-stream {stamp}: {live.record.spec.name} exited with code "
                f"{code} -> {live.record.state}\n".encode()
            )

    def _check_run_end(self, now: float) -> bool:
        """End the run when its primary task (the trainer) is done, or when it cannot go on."""
        if self._primary_complete():
            return self._wind_down(now)
        if self.record.failure is not None or self._primary_failed():
            self.stop_all(RunState.FAILED)
            return True
        if not self._primary():
            return self._all_ended()
        return False

    def _primary(self) -> list[_Live]:
        group = self.record.config.primary_group
        return [live for live in self._tasks if live.record.spec.group == group]

    def _primary_complete(self) -> bool:
        primary = self._primary()
        return bool(primary) and all(live.record.state is TaskState.COMPLETE for live in primary)

    def _primary_failed(self) -> bool:
        return any(live.record.state is TaskState.FAILED for live in self._primary())

    def _wind_down(self, now: float) -> bool:
        """The trainer is done: no more restarts; the others get ``linger_s`` to exit."""
        for live in self._tasks:
            if live.record.state is TaskState.RESTARTING:
                live.record.state = TaskState.STOPPED
        if all(live.record.state in TERMINAL_TASK_STATES for live in self._tasks):
            return self._finish(RunState.COMPLETE)
        if self._linger_until is None:
            self._linger_until = now + self.record.config.linger_s
        elif now >= self._linger_until:
            self.stop_all(RunState.COMPLETE)
            return True
        return False

    def _all_ended(self) -> bool:
        """A run without a primary task ends when all its tasks have."""
        states = [live.record.state for live in self._tasks]
        if not all(state in TERMINAL_TASK_STATES for state in states):
            return False
        ok = all(state is TaskState.COMPLETE for state in states)
        return self._finish(RunState.COMPLETE if ok else RunState.FAILED)

    def _finish(self, final: RunState) -> bool:
        self.record.state = final
        self.record.ended_at_ms = int(time.time() * 1000)
        return True

    def _reap(self) -> None:
        for live in self._tasks:
            if live.process is not None:
                live.process.poll()

    def _save(self) -> None:
        self._dir.write(self.record)


def last_error_line(log_path: Path, max_bytes: int = 16_384) -> str:
    """The last line a task printed (its error, when it failed), without supervisor notes."""
    try:
        with log_path.open("rb") as log:
            log.seek(max(0, log_path.stat().st_size - max_bytes))
            text = log.read().decode("utf-8", errors="replace")
    except OSError:
        return "(no log)"
    lines = [line.strip() for line in text.splitlines()]
    lines = [line for line in lines if line and not line.startswith("# coach-stream")]
    return lines[-1] if lines else "(it printed nothing)"


def main(argv: list[str] | None = None) -> int:
    """Entry of the detached supervisor process: ``--state-dir DIR --run-id RUN``."""
    parser = argparse.ArgumentParser(prog="coach-stream-supervisor")
    parser.add_argument("--state-dir", type=Path, required=True)
    parser.add_argument("--run-id", required=True)
    args = parser.parse_args(argv)
    stop = threading.Event()

    def _on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    supervisor = Supervisor(RunDirectory(args.state_dir, args.run_id))
    try:
        supervisor.start()
        final = supervisor.run(stop)
    except BaseException:
        with contextlib.suppress(Exception):
            supervisor.stop_all(RunState.FAILED)
        raise
    print(f"run {args.run_id} ended: {final}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
