"""The double's state: one node, jobs, allocations, evaluations, variables, a raft-like index.

Every change bumps ``index`` (what Nomad reports as ``X-Nomad-Index`` and ``ModifyIndex``)
and wakes blocking queries. Placement is immediate (one node, no scheduler): a group of
count N has N allocations with indexes 0..N-1; scaling down stops the highest indexes,
scaling up fills the lowest free ones, as Nomad's reconciler does.
"""

from __future__ import annotations

import shutil
import socket
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .executor import TaskContext, TaskRunner, client_status, new_id
from .jobs import canonicalize, group_spec_without_count
from .scheduling import (
    check_index,
    comparable,
    infeasible,
    next_reschedule_delay,
    reschedule_eligible,
)
from .templates import MissingVariableError, TemplateError


def group_ports(group: dict[str, Any]) -> dict[str, int]:
    """The ports a group's ``Networks`` ask for, as Nomad's scheduler assigns them on the
    node: a ``ReservedPorts`` entry keeps its value, a ``DynamicPorts`` one gets a free port."""
    ports: dict[str, int] = {}
    for network in group.get("Networks") or []:
        for port in network.get("ReservedPorts") or []:
            ports[port["Label"]] = int(port["Value"])
        for port in network.get("DynamicPorts") or []:
            with socket.socket() as probe:
                probe.bind(("127.0.0.1", 0))
                ports[port["Label"]] = int(probe.getsockname()[1])
    return ports


@dataclass
class Allocation:
    id: str
    namespace: str
    job_id: str
    group: str
    index: int
    job: dict[str, Any]  # the job version this allocation runs
    eval_id: str
    create_index: int
    create_time: int
    alloc_dir: Path
    modify_index: int = 0
    modify_time: int = 0
    desired_status: str = "run"
    desired_description: str = ""
    tasks: dict[str, TaskRunner] = field(default_factory=dict)
    previous_allocation: str = ""
    next_allocation: str = ""
    followup_eval_id: str = ""
    # Nomad's RescheduleTracker events: PrevAllocID, PrevNodeID, RescheduleTime, Delay (ns).
    reschedule_events: list[dict[str, Any]] = field(default_factory=list)
    reschedule_pending: bool = False
    # The group network's ports: {label: port}, dynamic ones picked free on the node.
    ports: dict[str, int] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return f"{self.job_id}.{self.group}[{self.index}]"

    def client_status(self) -> tuple[str, str]:
        return client_status([runner.state for runner in self.tasks.values()])

    def terminal(self) -> bool:
        status, _ = self.client_status()
        return status in ("complete", "failed", "lost")


@dataclass
class JobRecord:
    job: dict[str, Any]
    create_index: int
    modify_index: int
    job_modify_index: int
    submit_time: int
    version: int = 0
    stopped: bool = False
    # Allocations a group could not place (no feasible node): Nomad's summary "Queued".
    queued: dict[str, int] = field(default_factory=dict)


@dataclass
class VariableRecord:
    namespace: str
    path: str
    items: dict[str, str]
    create_index: int
    modify_index: int
    create_time: int
    modify_time: int


class Cluster:
    """Thread-safe state of the double; HTTP handlers and task runners both go through it."""

    def __init__(
        self,
        root: Path,
        *,
        region: str,
        datacenter: str,
        node_meta: Mapping[str, str],
        node_devices: Mapping[str, int],
        host_env: Mapping[str, str],
        acl_enabled: bool,
        docker_host: str | None = None,
    ) -> None:
        self.root = root
        self.region = region
        self.datacenter = datacenter
        self.acl_enabled = acl_enabled
        self.node_devices = dict(node_devices)
        self.host_env = dict(host_env)
        self.docker_host = docker_host
        # The node's drivers: raw_exec always; docker when it has an engine to run it on.
        self.drivers = {"raw_exec"} | ({"docker"} if docker_host else set())
        self.node_id = new_id()
        self.node_name = "nomad-double"
        self.node: dict[str, str] = {
            "node.unique.id": self.node_id,
            "node.unique.name": self.node_name,
            "node.datacenter": datacenter,
            "node.region": region,
            "node.class": "",
            "node.pool": "default",
            "attr.kernel.name": "linux",
            "attr.unique.hostname": self.node_name,
            **{f"attr.driver.{name}": "1" for name in sorted(self.drivers)},
            **{f"meta.{k}": v for k, v in node_meta.items()},
            **{f"node.meta.{k}": v for k, v in node_meta.items()},
        }
        self.lock = threading.RLock()
        self.changed = threading.Condition(self.lock)
        self.index = 10
        self.jobs: dict[tuple[str, str], JobRecord] = {}
        self.allocations: dict[str, Allocation] = {}
        self.evaluations: dict[str, dict[str, Any]] = {}
        self.variables: dict[tuple[str, str], VariableRecord] = {}
        self.closed = False
        # Bumped on every variable write or delete: running templates re-render on a change.
        self.variables_version = 0
        self._timers: list[threading.Timer] = []

    # -- index and waiting ------------------------------------------------------------

    def bump(self) -> int:
        with self.lock:
            self.index += 1
            self.changed.notify_all()
            return self.index

    def wait_for_index(self, after: int, timeout: float) -> None:
        """A blocking query: return once the index passes ``after`` or ``timeout`` elapses."""
        deadline = time.monotonic() + timeout
        with self.lock:
            while self.index <= after and not self.closed:
                left = deadline - time.monotonic()
                if left <= 0:
                    return
                self.changed.wait(left)

    def _wait_for_change(self, timeout: float) -> None:
        with self.lock:
            self.changed.wait(timeout)

    # -- evaluations --------------------------------------------------------------------

    def _evaluation(self, job: dict[str, Any], triggered_by: str) -> str:
        index = self.bump()
        eval_id = new_id()
        now = time.time_ns()
        self.evaluations[eval_id] = {
            "ID": eval_id,
            "Namespace": job["Namespace"],
            "Priority": job["Priority"],
            "Type": job["Type"],
            "TriggeredBy": triggered_by,
            "JobID": job["ID"],
            "JobModifyIndex": index,
            "Status": "complete",
            "CreateIndex": index,
            "ModifyIndex": index,
            "CreateTime": now,
            "ModifyTime": now,
        }
        return eval_id

    # -- jobs ---------------------------------------------------------------------------

    def register(
        self,
        raw_job: dict[str, Any],
        namespace: str,
        *,
        preserve_counts: bool = False,
        enforce_index: int | None = None,
    ) -> tuple[JobRecord, str]:
        """Nomad's Job.Register: a new version only when the spec changed; an evaluation always.

        ``enforce_index`` is ``nomad job run -check-index``: 0 = the job must not exist,
        N = its JobModifyIndex must be N (else :class:`RegisterConflictError`).
        """
        with self.lock:
            job = canonicalize(raw_job, namespace=namespace, region=self.region)
            key = (job["Namespace"], job["ID"])
            old = self.jobs.get(key)
            if enforce_index is not None:
                check_index(old.job_modify_index if old else None, enforce_index)
            if old is not None and preserve_counts:
                counts = {g["Name"]: g["Count"] for g in old.job["TaskGroups"]}
                for group in job["TaskGroups"]:
                    group["Count"] = counts.get(group["Name"], group["Count"])
            if old is None:
                index = self.bump()
                record = JobRecord(job, index, index, index, time.time_ns())
                self.jobs[key] = record
            else:
                record = old
                unchanged = comparable(old.job) == comparable(job) and not old.stopped
                if not unchanged:
                    index = self.bump()
                    record.version += 1
                    record.job = job
                    record.modify_index = record.job_modify_index = index
                    record.submit_time = time.time_ns()
                    record.stopped = bool(job.get("Stop"))
            record.job["Version"] = record.version
            eval_id = self._evaluation(record.job, "job-register")
            self._reconcile(
                record, eval_id, old_groups=None if old is None else self._group_specs(key)
            )
            return record, eval_id

    def _group_specs(self, key: tuple[str, str]) -> dict[str, dict[str, Any]]:
        """The group specs the live allocations of a job were started from."""
        specs: dict[str, dict[str, Any]] = {}
        for alloc in self.allocations.values():
            if (alloc.namespace, alloc.job_id) == key and alloc.desired_status == "run":
                for group in alloc.job["TaskGroups"]:
                    if group["Name"] == alloc.group:
                        specs[alloc.group] = group_spec_without_count(group)
        return specs

    def _reconcile(
        self, record: JobRecord, eval_id: str, old_groups: dict[str, dict[str, Any]] | None
    ) -> None:
        """Make the live allocations match the job: Nomad's reconciler, for one node."""
        job = record.job
        key = (job["Namespace"], job["ID"])
        live = [
            a
            for a in self.allocations.values()
            if (a.namespace, a.job_id) == key
            and a.desired_status == "run"
            and not a.next_allocation
        ]
        groups = {} if record.stopped else {g["Name"]: g for g in job["TaskGroups"]}
        for alloc in live:
            group = groups.get(alloc.group)
            changed = (
                group is not None
                and old_groups is not None
                and old_groups.get(alloc.group) != group_spec_without_count(group)
            )
            if group is None or changed:
                self._stop_alloc(alloc, "alloc not needed due to job update")
            elif alloc.terminal() and job["Type"] != "batch":
                continue  # a failed service alloc would be rescheduled; the double does not
        for name, group in groups.items():
            mine = [a for a in live if a.group == name and a.desired_status == "run"]
            count = int(group["Count"])
            for alloc in sorted(mine, key=lambda a: -a.index)[: max(0, len(mine) - count)]:
                self._stop_alloc(alloc, "alloc not needed due to job update")
            used = {a.index for a in mine if a.desired_status == "run"}
            missing = max(0, count - len(used))
            record.queued.pop(name, None)
            failure = (
                infeasible(job, group, self.datacenter, self.node_devices, self.drivers)
                if missing
                else None
            )
            if failure is not None:
                self._placement_failed(record, eval_id, name, missing, failure)
                continue
            free = (i for i in range(count * 2 + len(used) + 1) if i not in used)
            for _ in range(missing):
                self._place(job, group, next(free), eval_id)

    def _placement_failed(
        self, record: JobRecord, eval_id: str, group: str, missing: int, metric: dict[str, Any]
    ) -> None:
        """As Nomad: the evaluation completes with FailedTGAllocs and a blocked follow-up."""
        record.queued[group] = missing
        evaluation = self.evaluations[eval_id]
        evaluation.setdefault("FailedTGAllocs", {})[group] = metric
        if not evaluation.get("BlockedEval"):
            blocked = self._evaluation(record.job, evaluation["TriggeredBy"])
            self.evaluations[blocked]["Status"] = "blocked"
            self.evaluations[blocked]["PreviousEval"] = eval_id
            evaluation["BlockedEval"] = blocked

    def _place(
        self,
        job: dict[str, Any],
        group: dict[str, Any],
        index: int,
        eval_id: str,
        previous: Allocation | None = None,
        reschedule_events: list[dict[str, Any]] | None = None,
    ) -> Allocation:
        alloc_id = new_id()
        created = self.bump()
        alloc = Allocation(
            id=alloc_id,
            namespace=job["Namespace"],
            job_id=job["ID"],
            group=group["Name"],
            index=index,
            job=job,
            eval_id=eval_id,
            create_index=created,
            create_time=time.time_ns(),
            alloc_dir=self.root / "allocs" / alloc_id,
            modify_index=created,
            modify_time=time.time_ns(),
            previous_allocation=previous.id if previous else "",
            reschedule_events=reschedule_events or [],
            ports=group_ports(group),
        )
        self.allocations[alloc_id] = alloc
        for task in group["Tasks"]:
            alloc.tasks[task["Name"]] = TaskRunner(self._task_context(alloc, job, group, task))
        for runner in alloc.tasks.values():
            runner.start()
        return alloc

    def _task_context(
        self, alloc: Allocation, job: dict[str, Any], group: dict[str, Any], task: dict[str, Any]
    ) -> TaskContext:
        def changed() -> None:
            with self.lock:
                alloc.modify_index = self.bump()
                alloc.modify_time = time.time_ns()
                self._maybe_reschedule(alloc)

        def sibling_failed(failed_task: str) -> None:
            for name, runner in alloc.tasks.items():
                if name != failed_task:
                    runner.kill("Sibling Task Failed", f"Task's sibling failed: {failed_task}")

        def lookup(path: str) -> Mapping[str, str]:
            return self._task_variable(job, group["Name"], task["Name"], path)

        return TaskContext(
            job=job,
            group=group,
            task=task,
            alloc_id=alloc.id,
            alloc_index=alloc.index,
            alloc_dir=alloc.alloc_dir,
            node=self.node,
            host_env=self.host_env,
            lookup_var=lookup,
            variables_version=lambda: self.variables_version,
            wait_for_change=self._wait_for_change,
            changed=changed,
            sibling_failed=sibling_failed,
            docker_host=self.docker_host,
            ports=alloc.ports,
        )

    def _task_variable(
        self, job: dict[str, Any], group: str, task: str, path: str
    ) -> Mapping[str, str]:
        """What ``nomadVar`` reads: a task's workload identity sees only its job's paths."""
        allowed = {
            "nomad/jobs",
            f"nomad/jobs/{job['ID']}",
            f"nomad/jobs/{job['ID']}/{group}",
            f"nomad/jobs/{job['ID']}/{group}/{task}",
        }
        if self.acl_enabled and path not in allowed:
            raise TemplateError(
                f'nomadVar "{path}": Permission denied (a workload identity reads only'
                f" nomad/jobs/{job['ID']}[/<group>[/<task>]] without an extra ACL policy)"
            )
        with self.lock:
            record = self.variables.get((job["Namespace"], path))
            if record is None:
                raise MissingVariableError(path)
            return dict(record.items)

    def _stop_alloc(self, alloc: Allocation, why: str) -> None:
        alloc.desired_status = "stop"
        alloc.desired_description = why
        alloc.modify_index = self.bump()
        for runner in alloc.tasks.values():
            runner.kill()

    # -- rescheduling (Nomad's scheduler, for failed allocations) -------------------------------

    def _maybe_reschedule(self, alloc: Allocation) -> None:
        """A failed, still wanted allocation is replaced per its group's ReschedulePolicy."""
        if alloc.reschedule_pending or alloc.next_allocation or alloc.desired_status != "run":
            return
        if self.closed or alloc.client_status()[0] != "failed":
            return
        group = next(g for g in alloc.job["TaskGroups"] if g["Name"] == alloc.group)
        policy = group.get("ReschedulePolicy")
        now = time.time_ns()
        if not policy or not reschedule_eligible(policy, alloc.reschedule_events, now):
            return
        delay = next_reschedule_delay(policy, alloc.reschedule_events)
        alloc.reschedule_pending = True
        alloc.followup_eval_id = self._evaluation(alloc.job, "alloc-failure")
        timer = threading.Timer(delay / 1e9, self._reschedule, args=(alloc, now, delay))
        timer.daemon = True
        self._timers.append(timer)
        timer.start()

    def _reschedule(self, alloc: Allocation, failed_at: int, delay: int) -> None:
        with self.lock:
            record = self.jobs.get((alloc.namespace, alloc.job_id))
            if self.closed or record is None or record.stopped or alloc.desired_status != "run":
                return
            group = next((g for g in record.job["TaskGroups"] if g["Name"] == alloc.group), None)
            if group is None:
                return
            events = [
                *alloc.reschedule_events,
                {
                    "PrevAllocID": alloc.id,
                    "PrevNodeID": self.node_id,
                    "RescheduleTime": failed_at + delay,
                    "Delay": delay,
                },
            ]
            replacement = self._place(
                record.job, group, alloc.index, alloc.followup_eval_id, alloc, events
            )
            alloc.next_allocation = replacement.id
            alloc.modify_index = self.bump()

    def stop_allocation(self, alloc: Allocation) -> str:
        """POST /v1/allocation/{id}/stop: stop it; the scheduler places a replacement."""
        with self.lock:
            record = self.jobs.get((alloc.namespace, alloc.job_id))
            self._stop_alloc(alloc, "alloc is being migrated")
            if record is None:
                return ""
            eval_id = self._evaluation(record.job, "alloc-stop")
            group = next((g for g in record.job["TaskGroups"] if g["Name"] == alloc.group), None)
            if group is not None and not record.stopped:
                replacement = self._place(record.job, group, alloc.index, eval_id, alloc)
                alloc.next_allocation = replacement.id
            return eval_id

    def scale(self, key: tuple[str, str], group_name: str, count: int) -> str:
        with self.lock:
            record = self.jobs[key]
            group = next(g for g in record.job["TaskGroups"] if g["Name"] == group_name)
            group["Count"] = count
            index = self.bump()
            record.version += 1
            record.job["Version"] = record.version
            record.modify_index = record.job_modify_index = index
            eval_id = self._evaluation(record.job, "job-scaling")
            self._reconcile(record, eval_id, old_groups=None)
            return eval_id

    def deregister(self, key: tuple[str, str], purge: bool) -> str:
        with self.lock:
            record = self.jobs[key]
            record.stopped = True
            record.job["Stop"] = True
            record.modify_index = record.job_modify_index = self.bump()
            eval_id = self._evaluation(record.job, "job-deregister")
            self._reconcile(record, eval_id, old_groups=None)
            if purge:
                del self.jobs[key]
            return eval_id

    def job_status(self, record: JobRecord) -> str:
        """Nomad's rule: running while an allocation is live; dead when stopped or batch done."""
        allocs = self.job_allocations(record.job["Namespace"], record.job["ID"])
        if any(not a.terminal() for a in allocs):
            return "running"
        if record.stopped:
            return "dead"
        if allocs and record.job["Type"] == "batch":
            return "dead"
        return "pending"

    def job_allocations(self, namespace: str, job_id: str) -> list[Allocation]:
        with self.lock:
            return sorted(
                (
                    a
                    for a in self.allocations.values()
                    if a.namespace == namespace and a.job_id == job_id
                ),
                key=lambda a: a.create_index,
            )

    # -- shutdown -------------------------------------------------------------------------

    def stop_everything(self, timeout: float = 900.0) -> list[int]:
        """Kill every process the double started; returns pids that were still alive."""
        with self.lock:
            self.closed = True
            self.changed.notify_all()
            for timer in self._timers:
                timer.cancel()
            runners = [r for a in self.allocations.values() for r in a.tasks.values()]
        for runner in runners:
            runner.ctx.task["KillTimeout"] = min(runner.ctx.task["KillTimeout"], 1_000_000_000)
            runner.kill()
        deadline = time.monotonic() + timeout
        for runner in runners:
            if runner.thread is not None:
                runner.thread.join(max(0.0, deadline - time.monotonic()))
        alive = [r for r in runners if r.process is not None and r.process.poll() is None]
        for runner in alive:
            assert runner.process is not None
            runner.driver.cleanup(runner.process)
        return [r.process.pid for r in alive if r.process is not None]

    def remove_files(self) -> None:
        shutil.rmtree(self.root / "allocs", ignore_errors=True)
