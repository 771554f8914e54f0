"""``NomadDouble``: the object tests hold; starts the HTTP server, owns the processes."""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import subprocess
import tempfile
import threading
import time
import weakref
from collections.abc import Callable, Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any

from .cluster import Allocation, Cluster, JobRecord, VariableRecord
from .contract import Contract, load_contract
from .drivers import CONTAINER_LABEL, docker_binary
from .executor import HOST_ENV_KEYS
from .jobs import validate_job
from .server import Fault, RecordedRequest, Violation, serve

REPO_ROOT = Path(__file__).resolve().parents[2]
# Doubles not yet stopped: an interpreter exit (Ctrl-C past the fixtures, a test session
# ending abnormally) still kills their process groups. A SIGKILLed pytest cannot; the task
# processes then run on until they end by themselves.
_LIVE: weakref.WeakSet[NomadDouble] = weakref.WeakSet()


@atexit.register
def _stop_live_doubles() -> None:
    for double in list(_LIVE):
        double.stop()


@lru_cache(maxsize=1)
def shared_contract() -> Contract:
    """This process's contract, loaded once (building the checker the first time)."""
    return load_contract()


class NomadDouble:
    """A Nomad agent (server + one client node) on 127.0.0.1, for python-nomad to talk to.

    ``address`` is ``http://127.0.0.1:PORT``; ``token`` the ACL token (``None``: ACLs off).
    ``unknown_keys``: ``"reject"`` (default) answers 400 to a request carrying a key Nomad
    would silently ignore; ``"record"`` only records it in ``violations`` (as Nomad, accepting).
    ``host_env``: the host variables tasks inherit (default: PATH, HOME, locale, TMPDIR).
    ``node_devices``: the node's devices by ID and count, e.g. ``{"nvidia/gpu/H100": 1}``
    (default none: a job asking for a GPU stays unplaced, as on a cluster without one).
    ``docker_host``: a Docker engine (``unix://...``) for the node's ``docker`` driver (default
    none: the node has raw_exec only, and a docker task is not placed, as on a node without it).
    ``invalid_job_status``: the status of a register whose job fails Nomad's validation; real
    Nomad answers 500 (an uncoded RPC error), 400 is there for a test that wants it.
    """

    def __init__(
        self,
        *,
        token: str | None = None,
        contract: Contract | None = None,
        root: Path | None = None,
        region: str = "global",
        datacenter: str = "dc1",
        namespaces: tuple[str, ...] = ("default",),
        node_meta: Mapping[str, str] | None = None,
        node_devices: Mapping[str, int] | None = None,
        host_env: Mapping[str, str] | None = None,
        unknown_keys: str = "reject",
        invalid_job_status: int = 500,
        docker_host: str | None = None,
    ) -> None:
        if unknown_keys not in ("reject", "record"):
            raise ValueError("unknown_keys must be 'reject' or 'record'")
        self.token = token
        self.contract = contract or shared_contract()
        self.unknown_keys = unknown_keys
        self.invalid_job_status = invalid_job_status
        self.namespaces = set(namespaces)
        self.region = region
        self._own_root = root is None
        self.root = Path(tempfile.mkdtemp(prefix="nomad-double-")) if root is None else root
        if host_env is None:
            host_env = {k: os.environ[k] for k in HOST_ENV_KEYS if k in os.environ}
        self.cluster = Cluster(
            self.root,
            region=region,
            datacenter=datacenter,
            node_meta=node_meta or {},
            node_devices=node_devices or {},
            host_env=host_env,
            acl_enabled=token is not None,
            docker_host=docker_host,
        )
        self.faults: list[Fault] = []
        self.violations: list[Violation] = []
        self.requests: list[RecordedRequest] = []
        self._lock = threading.Lock()
        self._server, self._thread = serve(self)
        host, port = self._server.server_address[:2]
        self.host = str(host)
        self.port = int(port)
        self.address = f"http://{self.host}:{self.port}"
        self._stopped = False
        _LIVE.add(self)

    # -- what tests read ----------------------------------------------------------------------

    def record(self, violation: Violation) -> None:
        with self._lock:
            self.violations.append(violation)

    def violations_of(self, *kinds: str) -> list[Violation]:
        return [v for v in self.violations if v.kind in kinds]

    @property
    def response_violations(self) -> list[Violation]:
        """The double's own answers that broke the description: always a bug in the double."""
        return self.violations_of("response")

    def assert_no_violations(self) -> None:
        """No request ever failed validation, no unknown key, nothing unimplemented was called."""
        if self.violations:
            raise AssertionError(
                "the Nomad double saw requests that do not conform to Nomad's API:\n"
                + "\n".join(f"  {v}" for v in self.violations)
            )

    @property
    def jobs(self) -> dict[str, JobRecord]:
        """Registered (not purged) jobs by ID (all namespaces)."""
        with self.cluster.lock:
            return {job_id: record for (_, job_id), record in self.cluster.jobs.items()}

    @property
    def allocations(self) -> list[Allocation]:
        with self.cluster.lock:
            return sorted(self.cluster.allocations.values(), key=lambda a: a.create_index)

    def job_allocations(self, job_id: str, namespace: str = "default") -> list[Allocation]:
        return self.cluster.job_allocations(namespace, job_id)

    def allocation(self, job_id: str, group: str, index: int) -> Allocation:
        """The live (desired run) allocation ``job.group[index]``."""
        for alloc in self.job_allocations(job_id):
            if alloc.group == group and alloc.index == index and alloc.desired_status == "run":
                return alloc
        raise KeyError(f"no live allocation {job_id}.{group}[{index}]")

    def containers(self) -> list[str]:
        """Names of the containers the node's docker driver has on its engine (any state)."""
        if self.cluster.docker_host is None:
            return []
        answer = subprocess.run(
            [docker_binary(), "ps", "-a", "--format", "{{.Names}}",
             "--filter", f"label={CONTAINER_LABEL}=nomad-double"],
            env={**os.environ, "DOCKER_HOST": self.cluster.docker_host},
            capture_output=True, text=True, timeout=60, check=True,
        )  # fmt: skip
        return answer.stdout.split()

    def pids(self) -> list[int]:
        """Main pids of every task process still running."""
        return [
            r.process.pid
            for a in self.allocations
            for r in a.tasks.values()
            if r.process is not None and r.process.poll() is None
        ]

    def logs(self, alloc_id: str, task: str, kind: str = "stdout") -> str:
        runner = self.cluster.allocations[alloc_id].tasks[task]
        path = runner.log_path(kind)
        return path.read_text() if path.exists() else ""

    def secrets_in_jobs(self, *secrets: str) -> list[str]:
        """Where any of ``secrets`` appears in a job: every job body ever sent (register,
        validate) and every stored job. ``[]`` = credentials stayed in Variables, out of
        ``nomad job inspect``."""
        found: list[str] = []
        sent = [
            (f"{r.method} {r.path}", r.body)
            for r in list(self.requests)
            if r.path.startswith(("/v1/job", "/v1/validate/job")) and r.body is not None
        ]
        stored = [(f"stored job {job_id}", record.job) for job_id, record in self.jobs.items()]
        for where, body in sent + stored:
            text = json.dumps(body)
            found.extend(f"{where} contains {secret!r}" for secret in secrets if secret in text)
        return found

    # -- what tests do ------------------------------------------------------------------------

    def set_variable(self, path: str, items: Mapping[str, str], namespace: str = "default") -> None:
        """Write a Nomad Variable directly (as an operator would with ``nomad var put``)."""
        with self.cluster.lock:
            index = self.cluster.bump()
            self.cluster.variables_version += 1
            now = time.time_ns()
            old = self.cluster.variables.get((namespace, path))
            self.cluster.variables[(namespace, path)] = VariableRecord(
                namespace,
                path,
                dict(items),
                old.create_index if old else index,
                index,
                old.create_time if old else now,
                now,
            )

    def variable(self, path: str, namespace: str = "default") -> dict[str, str] | None:
        with self.cluster.lock:
            record = self.cluster.variables.get((namespace, path))
            return None if record is None else dict(record.items)

    def inject_fault(
        self,
        *,
        method: str | None = None,
        path: str = "/v1/",
        status: int = 500,
        text: str = "rpc error: nomad double: injected fault",
        times: int | None = 1,
        drop: bool = False,
    ) -> Fault:
        """Answer the next ``times`` requests (``None``: all) for ``method`` and a path starting
        with ``path`` with ``status``/``text``, or close the connection unanswered (``drop``).
        The request is not executed: nothing changes in the double."""
        fault = Fault(method, path, status, text, times, drop)
        with self._lock:
            self.faults.append(fault)
        return fault

    def take_fault(self, method: str, path: str) -> Fault | None:
        with self._lock:
            for fault in self.faults:
                if fault.matches(method, path):
                    fault.hits += 1
                    return fault
        return None

    def kill_task(self, alloc_id: str, task: str) -> int:
        """SIGKILL the task's main process (``kill -9``); returns the pid killed."""
        return self.cluster.allocations[alloc_id].tasks[task].sigkill()

    def wait_until(
        self, predicate: Callable[[], Any], timeout: float = 10.0, what: str = ""
    ) -> Any:
        """Wait on the double's change notifications (never a blind sleep) until ``predicate``.

        The predicate runs without the double's lock, so it may call the double over HTTP
        (python-nomad) as well as read its state. Log output is not a state change: a
        predicate on ``logs()`` is re-checked at least every 0.2 s.
        """
        deadline = time.monotonic() + timeout
        while True:
            with self.cluster.lock:
                seen = self.cluster.index
            value = predicate()
            if value:
                return value
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(
                    f"nomad double: timed out after {timeout} s waiting for {what or predicate}"
                )
            with self.cluster.lock:
                if self.cluster.index == seen:
                    self.cluster.changed.wait(min(left, 0.2))

    def stop(self) -> list[int]:
        """Kill every process the double started and stop the server.

        Returns the pids that were still alive after their kill timeout (force-killed).
        """
        if self._stopped:
            return []
        self._stopped = True
        leftover = self.cluster.stop_everything()
        self._server.shutdown()
        self._server.server_close()
        if self._own_root:
            self.cluster.remove_files()
            with contextlib.suppress(OSError):
                self.root.rmdir()
        return leftover

    def __enter__(self) -> NomadDouble:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def check_job(job: Mapping[str, Any], contract: Contract | None = None) -> list[str]:
    """Everything the double would say about a job (the ``Job`` object, not the request):
    type errors against Nomad's API ``Job``, keys Nomad would silently ignore (each says so),
    and Nomad's validation errors.

    ``[]`` means a real Nomad accepts the job as written, every key with its meaning. For a
    ``--dry-run`` test: ``assert check_job(json.loads(output)["Job"]) == []``.
    """
    problems = (contract or shared_contract()).check("Job", dict(job))
    found = problems.errors + problems.unknown
    if not problems.errors:
        found += validate_job(dict(job))
    return found
