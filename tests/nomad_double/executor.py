"""Allocations and their tasks as real local processes, with Nomad's client-side semantics.

One thread per task (Nomad's task runner): render templates, start the ``raw_exec``
command in its own process group, wait, and apply the restart policy to the exit
(:class:`RestartTracker` is a port of Nomad's ``client/allocrunner/taskrunner/restarts``).
Task states and events carry Nomad's names (``Received``, ``Task Setup``, ``Started``,
``Terminated``, ``Restarting``, ``Not Restarting``, ``Killing``, ``Killed``, ``Driver Failure``,
``Sibling Task Failed``, ``Template``); the allocation's client status is derived from its
task states exactly as Nomad's alloc runner does.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from .drivers import Docker, DriverFailure, RawExec, TaskDriver
from .jobs import go_duration
from .templates import (
    MissingVariableError,
    TemplateError,
    interpolate,
    parse_env_file,
    render,
)

ZERO_TIME = "0001-01-01T00:00:00Z"
_TEMPLATE_RESTART = -1_000  # _wait's exit code for "a template asked for a restart"
# Nomad's default client env.denylist is about secrets; the double goes further and passes
# only these host variables, so a task that works here does not depend on the test
# process's KAFKA_*/STORAGE_* settings, which a real node would not have.
HOST_ENV_KEYS = ("PATH", "HOME", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR", "USER", "LOGNAME")


def now_rfc3339() -> str:
    """Go's time.Time JSON form (RFC 3339 with nanoseconds, UTC)."""
    ns = time.time_ns()
    stamp = datetime.fromtimestamp(ns // 1_000_000_000, UTC).strftime("%Y-%m-%dT%H:%M:%S")
    return f"{stamp}.{ns % 1_000_000_000:09d}Z"


class RestartTracker:
    """Nomad's restart tracker: attempts within an interval, then mode fail or delay."""

    RESTARTING, NOT_RESTARTING, TERMINATED = "Restarting", "Not Restarting", "Terminated"

    def __init__(self, policy: Mapping[str, Any], job_type: str) -> None:
        self.attempts = int(policy["Attempts"])
        self.interval = int(policy["Interval"])
        self.delay = int(policy["Delay"])
        self.mode = policy["Mode"]
        # Nomad restarts a service task even after exit 0; a batch task that exits 0 is done.
        self.on_success = job_type not in ("batch", "sysbatch")
        self.count = 0
        self.start = time.monotonic_ns()

    def next(self, successful: bool) -> tuple[str, int, str]:
        """(decision, delay in ns, reason) after the task exited."""
        if successful and not self.on_success:
            return self.TERMINATED, 0, "Restart unnecessary as task terminated successfully"
        if self.attempts == 0:
            return self.NOT_RESTARTING, 0, "Policy allows no restarts"
        now = time.monotonic_ns()
        if now > self.start + self.interval:
            self.count = 0
            self.start = now
        self.count += 1
        if self.count > self.attempts:
            if self.mode == "fail":
                return (
                    self.NOT_RESTARTING,
                    0,
                    f"Exceeded allowed attempts {self.attempts} in interval"
                    f' {go_duration(self.interval)} and mode is "fail"',
                )
            return (
                self.RESTARTING,
                self.start + self.interval - now,
                "Exceeded allowed attempts, applying a delay",
            )
        jitter = int(random.random() * self.delay * 0.25) if self.delay else 0
        return self.RESTARTING, self.delay + jitter, "Restart within policy"


@dataclass
class TaskContext:
    """What a task runner needs from the rest of the double."""

    job: dict[str, Any]
    group: dict[str, Any]
    task: dict[str, Any]
    alloc_id: str
    alloc_index: int
    alloc_dir: Path
    node: Mapping[str, str]
    host_env: Mapping[str, str]
    lookup_var: Callable[[str], Mapping[str, str]]
    variables_version: Callable[[], int]
    wait_for_change: Callable[[float], None]
    changed: Callable[[], None]
    sibling_failed: Callable[[str], None]
    docker_host: str | None = None
    ports: Mapping[str, int] = field(default_factory=dict)


@dataclass
class TaskRunner:
    ctx: TaskContext
    state: dict[str, Any] = field(default_factory=dict)
    process: subprocess.Popen[bytes] | None = None
    _stop: threading.Event = field(default_factory=threading.Event)
    _kill_event: tuple[str, str] | None = None
    thread: threading.Thread | None = None
    # What each template rendered at the last start, with the env it was rendered in.
    _rendered: list[tuple[dict[str, Any], str, dict[str, str]]] = field(default_factory=list)
    _variables_seen: int = -1
    driver: TaskDriver = field(default_factory=RawExec)

    @property
    def name(self) -> str:
        return str(self.ctx.task["Name"])

    def __post_init__(self) -> None:
        self.state = {
            "State": "pending",
            "Failed": False,
            "Restarts": 0,
            "StartedAt": ZERO_TIME,
            "FinishedAt": ZERO_TIME,
            "LastRestart": ZERO_TIME,
            "Events": [],
        }

    # -- bookkeeping -------------------------------------------------------------------

    def event(self, kind: str, message: str, **extra: Any) -> None:
        event: dict[str, Any] = {
            "Type": kind,
            "Time": time.time_ns(),
            "DisplayMessage": message,
            "Message": message,
            "Details": {},
            **extra,
        }
        self.state["Events"].append(event)
        self.ctx.changed()

    def set_state(self, state: str, *, failed: bool = False) -> None:
        if state == "running" and self.state["State"] != "running":
            self.state["StartedAt"] = now_rfc3339()
        if state == "dead":
            self.state["FinishedAt"] = now_rfc3339()
            self.state["Failed"] = failed
        self.state["State"] = state
        self.ctx.changed()

    @property
    def log_dir(self) -> Path:
        return self.ctx.alloc_dir / "alloc" / "logs"

    def log_path(self, kind: str) -> Path:
        return self.log_dir / f"{self.name}.{kind}.0"

    # -- control -----------------------------------------------------------------------

    def start(self) -> None:
        self.thread = threading.Thread(
            target=self._run, name=f"nomad-double-{self.name}", daemon=True
        )
        self.thread.start()

    def kill(self, kind: str = "Killing", message: str = "") -> None:
        """Ask the runner to stop the task (desired status stop, deregister, sibling failure)."""
        if self._kill_event is None:
            self._kill_event = (kind, message)
        self._stop.set()

    def sigkill(self) -> int:
        """``kill -9`` of the task's main process, as an operator (or the OOM killer) would."""
        pid = self.main_pid()
        os.kill(pid, signal.SIGKILL)
        return pid

    def main_pid(self) -> int:
        """The host pid of the task's main process (in a container: the container's init)."""
        process = self.process
        if process is None or process.poll() is not None:
            raise RuntimeError(f"task {self.name} has no running process")
        return self.driver.main_pid(process)

    # -- the runner ----------------------------------------------------------------------

    def _run(self) -> None:
        # A runner that raised would leave its task "running" forever with no process: the
        # double reports it as Nomad reports a driver that failed, and the task fails.
        try:
            self._run_task()
        except Exception as error:
            message = f"nomad double: task runner failed: {type(error).__name__}: {error}"
            self.event("Driver Failure", message, DriverError=message, FailsTask=True)
            self._fail()

    def _run_task(self) -> None:
        task, job = self.ctx.task, self.ctx.job
        self.event("Received", "Task received by client")
        task_dir = self.ctx.alloc_dir / self.name
        for sub in ("local", "secrets", "tmp"):
            (task_dir / sub).mkdir(parents=True, exist_ok=True)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        for kind in ("stdout", "stderr"):
            self.log_path(kind).touch()
        self.event("Task Setup", "Building Task Directory")
        driver = task["Driver"]
        if driver == "docker" and self.ctx.docker_host:
            self.driver = Docker(self.ctx.docker_host, task, self.ctx.alloc_id)
        elif driver != "raw_exec":  # the scheduler places no task on a node without its driver
            message = f'driver "{driver}" is not available on this node'
            self.event("Driver Failure", message, DriverError=message, FailsTask=True)
            self._fail()
            return
        policy = task.get("RestartPolicy") or self.ctx.group["RestartPolicy"]
        tracker = RestartTracker(policy, job["Type"])
        while True:
            if self._stop.is_set():
                self._finish_killed()
                return
            try:
                env = self._environment(task_dir)
            except TemplateError as error:
                message = f"Template failed: {error}"
                self.event("Killing", message, KillReason=message, FailsTask=True)
                self._fail()
                return
            if env is None:  # stopped while a template waited for a variable
                self._finish_killed()
                return
            try:
                self._launch(task_dir, env)
            except DriverFailure as error:
                self.event("Driver Failure", str(error), DriverError=str(error), FailsTask=True)
                self._fail()
                return
            self.set_state("running")
            self.event("Started", "Task started by client")
            code, sig, oom = self._wait()
            if code is None:
                self._finish_killed()
                return
            if code == _TEMPLATE_RESTART:
                # Nomad: a restart the task asked for is not a failure; it is immediate and
                # does not count against the restart policy.
                self.state["Restarts"] += 1
                self.state["LastRestart"] = now_rfc3339()
                self.event("Restarting", "Task restarting in 0s", StartDelay=0)
                self.set_state("pending")
                continue
            # Nomad's TaskTerminated display: an OOM kill is the exit's message.
            self.event(
                "Terminated",
                f"Exit Code: {code}"
                + (f", Signal: {sig}" if sig else "")
                + (', Exit Message: "OOM Killed"' if oom else ""),
                ExitCode=code,
                Signal=sig,
                **({"Message": "OOM Killed", "Details": {"oom_killed": "true"}} if oom else {}),
            )
            decision, delay, reason = tracker.next(code == 0 and sig == 0)
            if decision == RestartTracker.TERMINATED:
                self.set_state("dead")
                return
            if decision == RestartTracker.NOT_RESTARTING:
                self.event("Not Restarting", reason, RestartReason=reason, FailsTask=True)
                self._fail()
                return
            self.state["Restarts"] += 1
            self.state["LastRestart"] = now_rfc3339()
            self.event(
                "Restarting",
                f"Task restarting in {go_duration(delay)}",
                RestartReason=reason,
                StartDelay=delay,
            )
            self.set_state("pending")
            if self._stop.wait(delay / 1e9):
                self._finish_killed()
                return

    def _fail(self) -> None:
        self.set_state("dead", failed=True)
        self.ctx.sibling_failed(self.name)

    def _finish_killed(self) -> None:
        kind, message = self._kill_event or ("Killing", "")
        if kind == "Sibling Task Failed":
            self.event(kind, message, FailedSibling=message.rsplit(" ", 1)[-1])
        self.event("Killed", "Task successfully killed")
        self.set_state("dead")

    def _environment(self, task_dir: Path) -> dict[str, str] | None:
        job, group, task = self.ctx.job, self.ctx.group, self.ctx.task
        alloc_id = self.ctx.alloc_id
        env = self.driver.base_env(self.ctx.host_env)
        meta = {**(job.get("Meta") or {}), **(group.get("Meta") or {}), **(task.get("Meta") or {})}
        for key, value in meta.items():
            env[f"NOMAD_META_{key}"] = value
            env[f"NOMAD_META_{key.upper()}"] = value
        env.update(
            {
                "NOMAD_ALLOC_ID": alloc_id,
                "NOMAD_SHORT_ALLOC_ID": alloc_id[:8],
                "NOMAD_ALLOC_INDEX": str(self.ctx.alloc_index),
                "NOMAD_ALLOC_NAME": f"{job['ID']}.{group['Name']}[{self.ctx.alloc_index}]",
                "NOMAD_JOB_ID": job["ID"],
                "NOMAD_JOB_NAME": job["Name"],
                "NOMAD_JOB_PARENT_ID": job.get("ParentID") or "",
                "NOMAD_GROUP_NAME": group["Name"],
                "NOMAD_TASK_NAME": task["Name"],
                **self.driver.task_paths(task_dir, self.ctx.alloc_dir),
                "NOMAD_NAMESPACE": job["Namespace"],
                "NOMAD_REGION": job["Region"],
                "NOMAD_DC": self.ctx.node["node.datacenter"],
                "NOMAD_CPU_LIMIT": str(task["Resources"].get("CPU", 100)),
                "NOMAD_MEMORY_LIMIT": str(task["Resources"].get("MemoryMB", 300)),
            }
        )
        for label, port in self.ctx.ports.items():  # the group network's, host networking
            env[f"NOMAD_PORT_{label}"] = env[f"NOMAD_HOST_PORT_{label}"] = str(port)
            env[f"NOMAD_IP_{label}"] = "127.0.0.1"
            env[f"NOMAD_ADDR_{label}"] = f"127.0.0.1:{port}"
        for key, value in (task.get("Env") or {}).items():
            env[key] = interpolate(value, env, self.ctx.node)
        self._rendered = []
        self._variables_seen = self.ctx.variables_version()
        for tmpl in task.get("Templates") or []:
            before = dict(env)
            text = self._render_template(tmpl, env)
            if text is None:
                return None
            self._rendered.append((tmpl, text, before))
            dest = task_dir / interpolate(tmpl["DestPath"], env, self.ctx.node)
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_text(text)
            os.chmod(dest, int(tmpl.get("Perms") or "0644", 8))
            if tmpl.get("Envvars"):
                env.update(parse_env_file(text))
        return env

    def _render_template(self, tmpl: Mapping[str, Any], env: Mapping[str, str]) -> str | None:
        if tmpl.get("SourcePath"):
            raise TemplateError("SourcePath templates are not supported by the double")
        if (tmpl.get("LeftDelim") or "{{") != "{{" or (tmpl.get("RightDelim") or "}}") != "}}":
            raise TemplateError("custom template delimiters are not supported by the double")
        announced: set[str] = set()
        while True:
            try:
                return render(tmpl["EmbeddedTmpl"], self.ctx.lookup_var, env)
            except MissingVariableError as missing:
                # Nomad blocks the task, reporting what it waits for, until the variable exists.
                if missing.path not in announced:
                    announced.add(missing.path)
                    job = self.ctx.job
                    self.event(
                        "Template",
                        f"Missing: nomad.var.block({missing.path}"
                        f"@{job['Namespace']}.{job['Region']})",
                    )
                if self._stop.is_set():
                    return None
                self.ctx.wait_for_change(0.2)

    def _launch(self, task_dir: Path, env: Mapping[str, str]) -> None:
        config = self.ctx.task.get("Config") or {}
        argv = [
            interpolate(str(arg), env, self.ctx.node)
            for arg in [config["command"], *(config.get("args") or [])]
        ]
        stdout = self.log_path("stdout").open("ab")
        stderr = self.log_path("stderr").open("ab")
        try:
            self.process = self.driver.launch(argv, task_dir, env, stdout, stderr)
        finally:
            stdout.close()
            stderr.close()

    def _wait(self) -> tuple[int | None, int, bool]:
        """(exit code, signal, OOM killed) of the task; (None, 0, False) when it was killed on
        request."""
        process = self.process
        assert process is not None
        while True:
            try:
                code = process.wait(timeout=0.05)
                break
            except subprocess.TimeoutExpired:
                if self._stop.is_set():
                    self._shutdown(process)
                    return None, 0, False
                if self._rendered and self._rerender(process):
                    return _TEMPLATE_RESTART, 0, False
        return self.driver.finished(process, code)

    def _rerender(self, process: subprocess.Popen[bytes]) -> bool:
        """A variable changed: re-render the templates and apply their ``ChangeMode``
        (``restart``: True, the caller restarts the task; ``signal``: ``ChangeSignal`` to it;
        ``noop``: the file only). Returns whether the task must restart."""
        version = self.ctx.variables_version()
        if version == self._variables_seen:
            return False
        self._variables_seen = version
        task_dir = self.ctx.alloc_dir / self.name
        modes: list[dict[str, Any]] = []
        for position, (tmpl, old, env) in enumerate(self._rendered):
            try:
                new = render(tmpl["EmbeddedTmpl"], self.ctx.lookup_var, env)
            except (MissingVariableError, TemplateError):
                continue  # as consul-template: keep the last good render
            if new == old:
                continue
            self._rendered[position] = (tmpl, new, env)
            (task_dir / interpolate(tmpl["DestPath"], env, self.ctx.node)).write_text(new)
            modes.append(tmpl)
        if any(t.get("ChangeMode", "restart") == "restart" for t in modes):
            reason = "Template with change_mode restart re-rendered"
            self.event("Restart Signaled", reason, RestartReason=reason)
            self._shutdown(process, announce=False)
            return True
        for tmpl in modes:
            if tmpl.get("ChangeMode") == "signal":
                name = tmpl["ChangeSignal"]  # required with mode signal (jobs.validate_job)
                self.event("Signaling", "Template re-rendered", TaskSignal=name)
                self.driver.send_signal(process, getattr(signal, name, signal.SIGHUP))
        return False

    def _shutdown(self, process: subprocess.Popen[bytes], *, announce: bool = True) -> None:
        """Nomad's kill: KillSignal (default SIGINT) to the task, SIGKILL after KillTimeout."""
        task = self.ctx.task
        timeout = task["KillTimeout"] / 1e9
        name = task.get("KillSignal") or "SIGINT"
        sig = getattr(signal, name, signal.SIGINT)
        kind, message = self._kill_event or ("Killing", "")
        if kind == "Killing" and announce:
            self.event(
                "Killing",
                message
                or f"Sent interrupt. Waiting {go_duration(task['KillTimeout'])}"
                " before force killing",
                KillTimeout=task["KillTimeout"],
            )
        self.driver.stop(process, sig, timeout)


def client_status(states: list[Mapping[str, Any]]) -> tuple[str, str]:
    """Nomad's alloc runner rule: failed > running > pending > complete."""
    kinds = {s["State"] for s in states}
    if any(s["State"] == "dead" and s["Failed"] for s in states):
        return "failed", "Failed tasks"
    if "running" in kinds:
        return "running", "Tasks are running"
    if "pending" in kinds:
        return "pending", "No tasks have started"
    return "complete", "All tasks have completed"


def new_id() -> str:
    return str(uuid.uuid4())
