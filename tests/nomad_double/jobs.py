"""Job admission as Nomad does it: validation errors (400) and canonicalisation (defaults).

Defaults follow Nomad 1.6-1.9's ``api.Job.Canonicalize`` / ``structs`` defaults: region
``global``, namespace ``default``, ``Name`` = ``ID``, ``Type`` ``service``, ``Priority`` 50,
``Datacenters`` ``["*"]``, restart policy per job type (batch: 3 attempts in 24 h, 15 s
delay, mode fail; service: 2 attempts in 30 min, 15 s delay, mode fail), ``KillTimeout`` 5 s,
``LogConfig`` 10 files x 10 MB, ``Resources`` 100 MHz / 300 MB, ``EphemeralDisk`` 300 MB.
"""

from __future__ import annotations

import copy
from typing import Any

SECOND = 1_000_000_000
MINUTE = 60 * SECOND
HOUR = 60 * MINUTE

# Drivers a Nomad client can have. Only raw_exec runs here; the others are accepted and
# their allocations fail with a clear event (see executor.py).
KNOWN_DRIVERS = {"raw_exec", "exec", "docker", "podman", "java", "qemu", "exec2"}
JOB_TYPES = {"service", "batch", "system", "sysbatch"}


def restart_defaults(job_type: str) -> dict[str, Any]:
    if job_type == "batch" or job_type == "sysbatch":
        return {"Attempts": 3, "Interval": 24 * HOUR, "Delay": 15 * SECOND, "Mode": "fail"}
    return {"Attempts": 2, "Interval": 30 * MINUTE, "Delay": 15 * SECOND, "Mode": "fail"}


def reschedule_defaults(job_type: str) -> dict[str, Any] | None:
    if job_type == "batch":
        return {
            "Attempts": 1,
            "Interval": 24 * HOUR,
            "Delay": 5 * SECOND,
            "DelayFunction": "constant",
            "MaxDelay": 0,
            "Unlimited": False,
        }
    if job_type == "service":
        return {
            "Attempts": 0,
            "Interval": 0,
            "Delay": 30 * SECOND,
            "DelayFunction": "exponential",
            "MaxDelay": HOUR,
            "Unlimited": True,
        }
    return None


def validate_job(job: Any) -> list[str]:
    """Nomad's ``Job.Validate`` subset: the errors a register request answers 400 with."""
    if not isinstance(job, dict):
        return ["Job must be specified"]
    errors: list[str] = []
    job_id = job.get("ID")
    if not job_id:
        errors.append("Missing job ID")
    elif " " in job_id:
        errors.append("Job ID contains a space")
    elif "\x00" in job_id:
        errors.append("Job ID contains a null character")
    job_type = job.get("Type") or "service"
    if job_type not in JOB_TYPES:
        errors.append(f'Invalid job type: "{job_type}"')
    priority = job.get("Priority")
    if priority is not None and not 1 <= priority <= 100:
        errors.append("Job priority must be between [1, 100]")
    if "Datacenters" in job and not job["Datacenters"]:
        errors.append("Missing job datacenters")
    groups = job.get("TaskGroups") or []
    if not groups:
        errors.append("Missing job task groups")
    seen: set[str] = set()
    for index, group in enumerate(groups):
        name = group.get("Name") or ""
        label = f"Task group {name}" if name else f"Task group {index + 1}"
        group_errors: list[str] = []
        if not name:
            group_errors.append("Missing task group name")
        elif name in seen:
            errors.append(f"Job task group {index + 1} redefines '{name}' from group {index}")
        seen.add(name)
        if (group.get("Count") or 0) < 0:
            group_errors.append("Task group count can't be negative")
        group_errors.extend(_restart_errors(group.get("RestartPolicy")))
        tasks = group.get("Tasks") or []
        if not tasks:
            group_errors.append("Missing tasks for task group")
        task_names: set[str] = set()
        for t_index, task in enumerate(tasks):
            t_name = task.get("Name") or ""
            t_errors: list[str] = []
            if not t_name:
                t_errors.append("Missing task name")
            elif t_name in task_names:
                group_errors.append(f"Task {t_index + 1} redefines '{t_name}' from task {t_index}")
            task_names.add(t_name)
            driver = task.get("Driver") or ""
            if not driver:
                t_errors.append("Missing task driver")
            elif driver not in KNOWN_DRIVERS:
                t_errors.append(f'Unknown task driver "{driver}"')
            elif driver == "raw_exec" and not (task.get("Config") or {}).get("command"):
                t_errors.append('Missing required field "command" in the raw_exec config')
            if (task.get("KillTimeout") or 0) < 0:
                t_errors.append("KillTimeout must be a positive value")
            t_errors.extend(_restart_errors(task.get("RestartPolicy")))
            for tmpl in task.get("Templates") or []:
                if not tmpl.get("EmbeddedTmpl") and not tmpl.get("SourcePath"):
                    t_errors.append("Must specify a source path or have an embedded template")
                if not tmpl.get("DestPath"):
                    t_errors.append("Must specify a destination for the template")
                mode = tmpl.get("ChangeMode") or "restart"
                if mode not in ("noop", "restart", "signal", "script"):
                    t_errors.append(f'Invalid change mode "{mode}"')
                if mode == "signal" and not tmpl.get("ChangeSignal"):
                    t_errors.append("Must specify signal value when change mode is signal")
            group_errors.extend(
                f"Task {t_name or t_index + 1} validation failed: {e}" for e in t_errors
            )
        errors.extend(f"{label} validation failed: {e}" for e in group_errors)
    return errors


def _restart_errors(policy: Any) -> list[str]:
    if not policy:
        return []
    errors = []
    mode = policy.get("Mode")
    if mode is not None and mode not in ("delay", "fail"):
        errors.append(f"Unsupported restart mode: {mode!r}")
    if (policy.get("Attempts") or 0) < 0:
        errors.append("Restart attempts can't be negative")
    if (policy.get("Delay") or 0) < 0:
        errors.append("Restart delay can't be negative")
    attempts, delay, interval = policy.get("Attempts"), policy.get("Delay"), policy.get("Interval")
    if attempts == 0 and mode not in (None, "fail"):
        errors.append(f'Restart policy "{mode}" with {attempts} attempts is ambiguous')
    if interval is not None and interval < 5 * SECOND:
        errors.append(f"Interval can not be less than 5s (got {go_duration(interval)})")
    if attempts and delay is not None and interval is not None and attempts * delay > interval:
        errors.append(
            f"Nomad can't restart the TaskGroup {attempts} times in an interval of"
            f" {go_duration(interval)} with a delay of {go_duration(delay)}"
        )
    return errors


def go_duration(ns: int) -> str:
    """Go's time.Duration.String() for whole-millisecond values: 30m0s, 24h0m0s, 1.5s, 100ms."""
    if ns == 0:
        return "0s"
    sign = "-" if ns < 0 else ""
    ns = abs(ns)
    if ns < SECOND:
        ms, rest = divmod(ns, 1_000_000)
        return f"{sign}{ms}ms" if rest == 0 else f"{sign}{ns / 1_000_000:g}ms"
    hours, ns = divmod(ns, HOUR)
    minutes, ns = divmod(ns, MINUTE)
    seconds = f"{ns / SECOND:.9f}".rstrip("0").rstrip(".")
    if hours:
        return f"{sign}{hours}h{minutes}m{seconds}s"
    if minutes:
        return f"{sign}{minutes}m{seconds}s"
    return f"{sign}{seconds}s"


def format_errors(errors: list[str]) -> str:
    """Nomad's multierror text: '2 errors occurred:\\n\\t* a\\n\\t* b\\n\\n'."""
    head = "1 error occurred:" if len(errors) == 1 else f"{len(errors)} errors occurred:"
    return head + "\n" + "".join(f"\t* {e}\n" for e in errors) + "\n"


def canonicalize(job: dict[str, Any], *, namespace: str, region: str) -> dict[str, Any]:
    """The job with Nomad's defaults filled in (what GET /v1/job/{id} answers)."""
    job = copy.deepcopy(job)
    job_type = job.get("Type") or "service"
    job["Type"] = job_type
    job.setdefault("Name", job["ID"])
    job["Namespace"] = job.get("Namespace") or namespace
    job["Region"] = job.get("Region") or region
    job.setdefault("Priority", 50)
    job.setdefault("AllAtOnce", False)
    job["Datacenters"] = job.get("Datacenters") or ["*"]
    for group in job["TaskGroups"]:
        group.setdefault("Count", 1)
        group["RestartPolicy"] = {
            **restart_defaults(job_type),
            **(group.get("RestartPolicy") or {}),
        }
        resched = reschedule_defaults(job_type)
        if resched is not None:
            group["ReschedulePolicy"] = {
                **resched,
                **(job.get("Reschedule") or {}),
                **(group.get("ReschedulePolicy") or {}),
            }
        group.setdefault("EphemeralDisk", {"SizeMB": 300, "Migrate": False, "Sticky": False})
        for task in group["Tasks"]:
            task.setdefault("KillTimeout", 5 * SECOND)
            task.setdefault("LogConfig", {"MaxFiles": 10, "MaxFileSizeMB": 10})
            task["Resources"] = {"CPU": 100, "MemoryMB": 300, **(task.get("Resources") or {})}
            if task.get("RestartPolicy"):
                task["RestartPolicy"] = {**group["RestartPolicy"], **task["RestartPolicy"]}
            for tmpl in task.get("Templates") or []:
                tmpl.setdefault("ChangeMode", "restart")
                tmpl.setdefault("Envvars", False)
                tmpl.setdefault("LeftDelim", "{{")
                tmpl.setdefault("RightDelim", "}}")
                tmpl.setdefault("Perms", "0644")
    return job


def group_spec_without_count(group: dict[str, Any]) -> dict[str, Any]:
    """What decides a destructive update: everything but Count (and scaling bookkeeping)."""
    return {k: v for k, v in group.items() if k != "Count"}
