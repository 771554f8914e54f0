"""Job bodies and small helpers the double's own tests share (python ``-c`` tasks)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import nomad

from .double import NomadDouble

SECOND = 1_000_000_000


FAST_RESTART = {"Attempts": 1, "Interval": 10 * SECOND, "Delay": 50_000_000, "Mode": "fail"}
# A task that prints what it was given, then waits to be stopped.


SHOW_ENV = (
    "import os, sys, time\n"
    "print('index', os.environ['NOMAD_ALLOC_INDEX'], 'group', os.environ['NOMAD_GROUP_NAME'],"
    " 'run', os.environ.get('NOMAD_META_run_id'), 'arg', sys.argv[1:], flush=True)\n"
    "print('secret', os.environ.get('KAFKA_PASSWORD'), file=sys.stderr, flush=True)\n"
    "time.sleep(60)\n"
)


def client(double: NomadDouble, token: str | None = "same") -> nomad.Nomad:
    return nomad.Nomad(
        address=double.address, token=double.token if token == "same" else token, timeout=5
    )


def auth(double: NomadDouble) -> dict[str, str]:
    assert double.token is not None
    return {"X-Nomad-Token": double.token}


def task(name: str, code: str, *args: str, **extra: Any) -> dict[str, Any]:
    return {
        "Name": name,
        "Driver": "raw_exec",
        "Config": {"command": sys.executable, "args": ["-c", code, *args]},
        "KillTimeout": SECOND,
        **extra,
    }


def group(name: str, count: int, *tasks: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {
        "Name": name,
        "Count": count,
        "RestartPolicy": dict(FAST_RESTART),
        "Tasks": list(tasks),
        **extra,
    }


def job(
    job_id: str, *groups: dict[str, Any], job_type: str = "batch", **extra: Any
) -> dict[str, Any]:
    return {
        "Job": {
            "ID": job_id,
            "Type": job_type,
            "Datacenters": ["dc1"],
            "TaskGroups": list(groups),
            **extra,
        }
    }


def running(double: NomadDouble, job_id: str, count: int) -> bool:
    live = [a for a in double.job_allocations(job_id) if a.desired_status == "run"]
    return len(live) == count and all(a.client_status()[0] == "running" for a in live)


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


def two_group_job(job_id: str = "coach-stream-r1") -> dict[str, Any]:
    template = {
        "EmbeddedTmpl": '{{ with nomadVar "nomad/jobs/'
        + job_id
        + '" }}KAFKA_PASSWORD={{ .kafka_password }}{{ end }}\n',
        "DestPath": "secrets/kafka.env",
        "Envvars": True,
    }
    trainer = task(
        "trainer", SHOW_ENV, "${NOMAD_META_run_id}", "${node.datacenter}", Templates=[template]
    )
    rollout = task("rollout", SHOW_ENV, "worker-${NOMAD_ALLOC_INDEX}", Templates=[template])
    return job(
        job_id, group("trainer", 1, trainer), group("rollout", 2, rollout), Meta={"run_id": "r1"}
    )
