"""``NomadOrchestrator``: a run as one Nomad job, through Nomad's HTTP API (python-nomad).

::

    connection = NomadConnection.from_env(os.environ)          # only the CLI reads the env
    orchestrator = NomadOrchestrator(connection, NomadJobSettings(env={...}))
    orchestrator.submit(build_run_spec(settings))  # registered; returns when all allocs run
    orchestrator.status(run_id)                   # per task, from the allocations
    orchestrator.scale(run_id, 3)                 # the rollout group's count
    orchestrator.stop(run_id, purge=True)

Every wait is a Nomad blocking query (``?index=N&wait=...``), never a sleep. Every answer
Nomad can give that is not what was asked, 400, 403, 404, 5xx or no answer at all, becomes
one ``OrchestratorError`` / ``ServiceUnavailableError`` sentence naming the cause and the fix.
A job whose start fails is deregistered and purged again, so no half-started job stays.
"""

from __future__ import annotations

import contextlib
import functools
import re
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypeVar

import requests
from nomad.api import exceptions as nomad_errors

import nomad
from coach_stream.errors import OrchestratorError, ServiceUnavailableError
from coach_stream.orchestrators.nomad_connection import NomadConnection
from coach_stream.orchestrators.nomad_job import NomadJobSettings, build_job, job_id
from coach_stream.orchestrators.plan import RunSpec, TaskSpec, TaskState, TaskStatus
from coach_stream.orchestrators.state import RunRecord, RunState, TaskRecord
from coach_stream.transport.settings import KafkaSettings, RunTopics
from coach_stream.transport.telemetry import TelemetryLines, TelemetryReader

T = TypeVar("T")
_ALLOC_NAME = re.compile(r"^.*\.(?P<group>[A-Za-z0-9_-]+)\[(?P<index>\d+)\]$")
_WAIT = "5s"


def task_name(group: str, index: int) -> str:
    """``rollout[1]`` is the task the local orchestrator calls ``rollout-1``; ``trainer[0]``
    is ``trainer`` (rank 0) and ``trainer[1]`` is ``trainer-1``."""
    if group == "rollout" or (group == "trainer" and index > 0):
        return f"{group}-{index}"
    return group


def _first_line(text: str) -> str:
    lines = [line.strip(" \t*") for line in text.strip().splitlines() if line.strip(" \t*")]
    if len(lines) > 1 and lines[0].endswith(("error occurred:", "errors occurred:")):
        lines = lines[1:]  # Nomad's multierror header says nothing by itself
    return "; ".join(lines[:2])[:300] or "no message"


class NomadOrchestrator:
    """Implements ``plan.Orchestrator`` (plus ``scale`` and ``record``) against Nomad."""

    def __init__(
        self,
        connection: NomadConnection,
        job_settings: NomadJobSettings | None = None,
        *,
        start_timeout_s: float = 300.0,
        telemetry: KafkaSettings | None = None,
    ) -> None:
        self.connection = connection
        self.telemetry = telemetry
        self.job_settings = job_settings or NomadJobSettings(
            namespace=connection.namespace, region=connection.region
        )
        self.start_timeout_s = start_timeout_s
        self._api: nomad.Nomad | None = None

    @property
    def api(self) -> nomad.Nomad:
        if self._api is None:  # no I/O until the first call
            self._api = self.connection.client()
        return self._api

    # ------------------------------------------------------------------ errors

    def _call(self, what: str, call: Callable[[], T]) -> T:
        """``call()``, with anything Nomad answers other than success as one clear error."""
        where = f"Nomad at {self.connection.address}"
        try:
            return call()
        except nomad_errors.URLNotAuthorizedNomadException as error:
            raise OrchestratorError(
                f"{where} refused to {what} (403 {_first_line(_text(error))}); set NOMAD_TOKEN "
                "(or --nomad-token) to an ACL token allowed to submit and read jobs in namespace "
                f"{self.connection.namespace or 'default'}."
            ) from None
        except nomad_errors.BadRequestNomadException as error:
            raise OrchestratorError(
                f"{where} rejected the request to {what} (400 {_first_line(_text(error))}); "
                "check the job settings (--driver, --image, --datacenter) and the Nomad version."
            ) from None
        except nomad_errors.URLNotFoundNomadException as error:
            raise OrchestratorError(
                f"{where} has no such object to {what} (404 {_first_line(_text(error))}); check "
                "the run id (`coach-stream status --orchestrator nomad`) and NOMAD_NAMESPACE."
            ) from None
        except nomad_errors.BaseNomadException as error:
            response = error.nomad_resp
            if isinstance(response, requests.Response):
                raise ServiceUnavailableError(
                    f"{where} failed to {what} ({response.status_code} "
                    f"{_first_line(response.text)}); check the Nomad servers' logs and retry."
                ) from None
            raise ServiceUnavailableError(
                f"{where} did not answer while trying to {what} ({_reason(response)}); check "
                "NOMAD_ADDR (or --nomad-addr) and that the Nomad agent is up."
            ) from None
        except requests.RequestException as error:
            raise ServiceUnavailableError(
                f"{where} did not answer while trying to {what} ({_reason(error)}); check "
                "NOMAD_ADDR (or --nomad-addr) and that the Nomad agent is up."
            ) from None

    # ------------------------------------------------------------------ Orchestrator

    def job(self, spec: RunSpec) -> dict[str, Any]:
        """The job ``submit`` registers (``--dry-run`` prints it)."""
        return build_job(spec, self.job_settings)

    def submit(self, spec: RunSpec) -> None:
        """Register the run's job and wait until every allocation runs (blocking queries)."""
        job = self.job(spec)
        the_id = job["ID"]
        if self._find_job(the_id) is not None:
            raise OrchestratorError(
                f"Nomad already has a job {the_id}; choose another --run-id "
                f"(or `coach-stream stop {spec.run_id} --orchestrator nomad --purge`)."
            )
        self._call(
            f"register job {the_id}", lambda: self.api.job.register_job(the_id, {"Job": job})
        )
        try:
            self.wait_running(spec.run_id, self.start_timeout_s)
        except BaseException:
            # Nothing half-started stays behind: the launch failed, so the job goes.
            with contextlib.suppress(Exception):
                self.stop(spec.run_id, purge=True)
            raise

    def status(self, run_id: str) -> list[TaskStatus]:
        return [task.status() for task in self.record(run_id).tasks]

    def logs(self, run_id: str, task: str | None = None) -> Iterator[str]:
        """Every line of one task's stdout and stderr, or of all tasks' prefixed ``[task]``."""
        self.require_job(run_id)  # no job is an error, not an empty log
        allocations = self._live_allocations(run_id)
        names = [task] if task else sorted(allocations)
        if task and task not in allocations:
            known = ", ".join(sorted(allocations)) or "none yet"
            raise OrchestratorError(
                f"Run {run_id!r} has no task {task!r} on Nomad; use one of {known}."
            )
        for name in names:
            alloc = allocations[name]
            for kind in ("stderr", "stdout"):
                text: str = self._call(
                    f"read the {kind} of {name}", functools.partial(self._log_text, alloc, kind)
                )
                for line in text.splitlines():
                    yield line if task else f"[{name}] {line}"

    def _log_text(self, alloc: Mapping[str, Any], kind: str) -> str:
        text: str = self.api.client.stream_logs.stream(
            alloc["ID"], alloc["TaskGroup"], kind, plain=True
        )
        return text

    def follow_logs(self, run_id: str, task: str) -> Iterator[str]:
        """One task's stdout lines as they are written, until its allocation ends."""
        self.require_job(run_id)
        alloc = self._live_allocations(run_id).get(task)
        if alloc is None:
            raise OrchestratorError(f"Run {run_id!r} has no task {task!r} on Nomad.")
        response = self._call(
            f"follow the logs of {task}",
            lambda: self.api.client.stream_logs.request(
                alloc["ID"],
                params={"task": alloc["TaskGroup"], "type": "stdout", "follow": "true",
                        "plain": "true", "origin": "start", "offset": 0},
                method="get",
                stream=True,
                timeout=None,
            ),
        )  # fmt: skip
        with contextlib.closing(response):
            yield from (line for line in response.iter_lines(decode_unicode=True))

    def stop(self, run_id: str, *, purge: bool = False) -> None:
        """Deregister the job (its tasks get SIGTERM, then SIGKILL); ``purge`` forgets it."""
        the_id = job_id(run_id)
        if self._find_job(the_id) is None:
            return
        self._call(
            f"stop job {the_id}", lambda: self.api.job.deregister_job(the_id, purge=purge or None)
        )

    # ------------------------------------------------------------------ beyond the protocol

    def scale(self, run_id: str, workers: int) -> None:
        """Set the rollout group's count through Nomad's scale endpoint."""
        the_id = job_id(run_id)
        job = self._find_job(the_id)
        if job is None:
            raise OrchestratorError(f"Nomad has no job {the_id}; check the run id.")
        if not any(group.get("Name") == "rollout" for group in job.get("TaskGroups") or ()):
            raise OrchestratorError(
                f"Run {run_id} has no rollout workers to scale: it is a shadow learner "
                "(coach-stream attach); scale the run whose experience it reads."
            )
        body = {
            "Count": workers,
            "Target": {"Group": "rollout"},
            "Message": f"coach-stream scale {run_id} --workers {workers}",
        }
        self._call(
            f"scale {the_id} to {workers} workers",
            lambda: self.api.job.request(the_id, "scale", json=body, method="post"),
        )

    def record(self, run_id: str) -> RunRecord:
        """The run as the local orchestrator's ``RunRecord`` (the live view renders it)."""
        job = self.require_job(run_id)
        allocations = self._live_allocations(run_id)
        tasks = [_task_record(name, alloc) for name, alloc in sorted(allocations.items())]
        state = _run_state(job, tasks)
        submitted_ms = int(job.get("SubmitTime") or time.time_ns()) // 1_000_000
        return RunRecord(run_id=run_id, tasks=tasks, state=state, created_at_ms=submitted_ms)

    def find_job(self, run_id: str) -> dict[str, Any] | None:
        """The run's job as Nomad has it (stopped ones included); None when it has none."""
        return self._find_job(job_id(run_id))

    def require_job(self, run_id: str) -> dict[str, Any]:
        """The run's job, or an ``OrchestratorError`` saying Nomad has none (exit 2)."""
        job = self.find_job(run_id)
        if job is None:
            namespace = self.connection.namespace or "default"
            raise OrchestratorError(
                f"Nomad at {self.connection.address} has no job {job_id(run_id)} in namespace "
                f"{namespace} (never submitted there, or purged); check the run id, "
                "NOMAD_ADDR and NOMAD_NAMESPACE."
            )
        return job

    def wait_running(self, run_id: str, timeout_s: float, count: int | None = None) -> None:
        """Until every wanted allocation runs: blocking queries on the job's allocations."""
        the_id = job_id(run_id)
        deadline = time.monotonic() + timeout_s
        index = 0
        while True:
            wanted = count if count is not None else self._wanted(the_id)
            stubs, index = self._allocations(the_id, index)
            live = _latest(stubs)
            failed = [a for a in live.values() if a["ClientStatus"] in ("failed", "lost")]
            if failed:
                alloc = failed[0]
                why = _why(alloc)
                hint = (
                    "check --image and that the nodes can pull it (docs/nomad.md, Containers)"
                    if "Failed to pull" in why
                    else f"read `coach-stream logs {run_id} --orchestrator nomad "
                    f"--task {_name_of(alloc)}`"
                )
                raise OrchestratorError(
                    f"task {_name_of(alloc)} of job {the_id} failed to start on Nomad "
                    f"({why}); {hint}."
                )
            # A task may already have finished (complete) by the time it is seen: started.
            running = [a for a in live.values() if a["ClientStatus"] in ("running", "complete")]
            if len(live) >= wanted and len(running) >= wanted:
                return
            if len(live) < wanted:
                self._raise_if_unplaceable(the_id)
            if time.monotonic() > deadline:
                pending = sorted(n for n, a in live.items() if a["ClientStatus"] != "running")
                raise OrchestratorError(
                    f"job {the_id}: {len(running)} of {wanted} allocations running after "
                    f"{timeout_s:.0f} s (waiting: {', '.join(pending) or 'placement'}); check "
                    f"`nomad job status {the_id}` (resources, drivers, constraints)."
                )

    def _raise_if_unplaceable(self, the_id: str) -> None:
        """A group that no node of the cluster can run (every node filtered out by a
        constraint: a driver or device it lacks) will not be placed by waiting."""
        evaluations: list[dict[str, Any]] = self._call(
            f"read the evaluations of {the_id}", lambda: self.api.job.get_evaluations(the_id)
        )
        # The newest evaluation that failed to place (the blocked one it spawned has no metrics).
        failed = [e for e in evaluations if e.get("FailedTGAllocs")]
        latest = max(failed, key=lambda e: int(e.get("CreateIndex") or 0), default={})
        for group, metric in sorted((latest.get("FailedTGAllocs") or {}).items()):
            filtered = metric.get("ConstraintFiltered") or {}
            evaluated = int(metric.get("NodesEvaluated") or 0)
            if filtered and evaluated and int(metric.get("NodesFiltered") or 0) >= evaluated:
                why = ", ".join(f"{reason} on {n}" for reason, n in sorted(filtered.items()))
                raise OrchestratorError(
                    f"Nomad cannot place group {group} of job {the_id}: every node was filtered "
                    f"out ({why}); give the cluster a node with the task's driver and devices "
                    "(`nomad node status -verbose`) or choose another --driver."
                )

    def wait_ended(self, run_id: str, timeout_s: float) -> bool:
        """Until no allocation of the run is running (blocking queries); False on timeout."""
        the_id = job_id(run_id)
        deadline = time.monotonic() + timeout_s
        index = 0
        while time.monotonic() < deadline:
            stubs, index = self._allocations(the_id, index)
            if all(a["ClientStatus"] not in ("pending", "running") for a in stubs):
                return True
        return False

    def task_lines(self, run_id: str) -> TelemetryLines:
        """The tasks' events from the run's telemetry topic, as the JSON lines they printed
        (``launcher.follow`` reads a Nomad run exactly as a local one)."""
        if self.telemetry is None:
            raise OrchestratorError(
                "following a Nomad run needs the Kafka address; pass --kafka or set "
                "KAFKA_BOOTSTRAP_SERVERS."
            )
        return TelemetryLines(TelemetryReader(self.telemetry, RunTopics.for_run(run_id)))

    def wait(self, run_id: str, timeout: float) -> RunState:
        """Until no allocation runs any more; ``TimeoutError`` after ``timeout`` seconds."""
        if not self.wait_ended(run_id, timeout):
            raise TimeoutError(f"run {run_id} still running on Nomad after {timeout:.0f} s")
        return self.record(run_id).state

    # ------------------------------------------------------------------ helpers

    def _find_job(self, the_id: str) -> dict[str, Any] | None:
        def get() -> dict[str, Any] | None:
            try:
                job: dict[str, Any] = self.api.job.get_job(the_id)
            except nomad_errors.URLNotFoundNomadException:
                return None
            return job

        return self._call(f"read job {the_id}", get)

    def _wanted(self, the_id: str) -> int:
        job = self._find_job(the_id)
        if job is None:
            raise OrchestratorError(f"Nomad job {the_id} disappeared while starting.")
        return sum(int(group.get("Count") or 0) for group in job.get("TaskGroups") or [])

    def _allocations(self, the_id: str, index: int) -> tuple[list[dict[str, Any]], int]:
        """The job's allocations; with ``index`` > 0, answered once something changed."""
        params: dict[str, Any] = {}
        if index:
            params = {"index": index, "wait": _WAIT}
        response = self._call(
            f"list the allocations of {the_id}",
            lambda: self.api.job.request(
                the_id, "allocations", params=params, method="get",
                timeout=self.connection.timeout_s + 10,
            ),
        )  # fmt: skip
        new_index = int(response.headers.get("X-Nomad-Index") or 0)
        stubs: list[dict[str, Any]] = response.json()
        return stubs, max(new_index, 1)

    def _live_allocations(self, run_id: str) -> dict[str, dict[str, Any]]:
        stubs, _ = self._allocations(job_id(run_id), 0)
        return {
            _name_of(alloc): alloc
            for alloc in _latest(stubs).values()
            if alloc.get("DesiredStatus") == "run" or alloc["ClientStatus"] != "pending"
        }


def _text(error: nomad_errors.BaseNomadException) -> str:
    response = error.nomad_resp
    return response.text if isinstance(response, requests.Response) else str(response)


def _reason(error: object) -> str:
    text = str(error)
    for marker in ("Connection refused", "Connection aborted", "timed out", "Name or service"):
        if marker in text:
            return marker.lower()
    return text.splitlines()[0][:200] if text else type(error).__name__


def _name_of(alloc: Mapping[str, Any]) -> str:
    match = _ALLOC_NAME.match(str(alloc.get("Name", "")))
    if match is None:
        return str(alloc.get("TaskGroup", "?"))
    return task_name(match["group"], int(match["index"]))


def _latest(stubs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per task, its newest allocation (a restarted or rescheduled one replaces the old)."""
    latest: dict[str, dict[str, Any]] = {}
    for alloc in sorted(stubs, key=lambda a: int(a.get("CreateIndex") or 0)):
        if alloc.get("DesiredStatus") == "run" or _name_of(alloc) not in latest:
            latest[_name_of(alloc)] = alloc
    return latest


def _why(alloc: Mapping[str, Any]) -> str:
    for state in (alloc.get("TaskStates") or {}).values():
        for event in reversed(state.get("Events") or []):
            message = event.get("DisplayMessage") or event.get("DriverError") or ""
            if message:
                return f"{event.get('Type')}: {message}"
    return str(alloc.get("ClientDescription") or alloc["ClientStatus"])


_STATES = {
    "pending": TaskState.PENDING,
    "running": TaskState.RUNNING,
    "complete": TaskState.COMPLETE,
    "failed": TaskState.FAILED,
    "lost": TaskState.FAILED,
}


def _task_record(name: str, alloc: Mapping[str, Any]) -> TaskRecord:
    state = _STATES.get(str(alloc["ClientStatus"]), TaskState.PENDING)
    task_state: dict[str, Any] = next(iter((alloc.get("TaskStates") or {}).values()), {})
    restarts = int(task_state.get("Restarts") or 0)
    if state is TaskState.RUNNING and task_state.get("State") == "pending" and restarts:
        state = TaskState.RESTARTING
    if state is TaskState.COMPLETE and alloc.get("DesiredStatus") == "stop":
        state = TaskState.STOPPED
    exit_code = None
    for event in reversed(task_state.get("Events") or []):
        if event.get("Type") == "Terminated":
            exit_code = int(event.get("ExitCode") or 0)
            break
    spec = TaskSpec(name=name, group=str(alloc.get("TaskGroup")), argv=())
    return TaskRecord(spec, state=state, restarts=restarts, exit_code=exit_code)


def _run_state(job: Mapping[str, Any], tasks: list[TaskRecord]) -> RunState:
    if job.get("Stop"):
        return RunState.STOPPED
    if job.get("Status") != "dead":
        return RunState.RUNNING if tasks else RunState.STARTING
    trainer = next((t for t in tasks if t.spec.name == "trainer"), None)
    if trainer is not None and trainer.state is TaskState.COMPLETE:
        return RunState.COMPLETE
    return RunState.FAILED
