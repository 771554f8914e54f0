"""The JSON shapes Nomad answers with, built from the double's state (PascalCase, indexes)."""

from __future__ import annotations

import copy
from typing import Any

from .cluster import Allocation, Cluster, JobRecord, VariableRecord


def job_view(cluster: Cluster, record: JobRecord) -> dict[str, Any]:
    job = copy.deepcopy(record.job)
    job.update(
        {
            "Status": cluster.job_status(record),
            "StatusDescription": "",
            "Stop": record.stopped,
            "Stable": False,
            "Version": record.version,
            "CreateIndex": record.create_index,
            "ModifyIndex": record.modify_index,
            "JobModifyIndex": record.job_modify_index,
            "SubmitTime": record.submit_time,
        }
    )
    return job


def summary_view(cluster: Cluster, record: JobRecord) -> dict[str, Any]:
    job = record.job
    summary: dict[str, dict[str, int]] = {}
    for group in job["TaskGroups"]:
        summary[group["Name"]] = {
            "Queued": 0,
            "Complete": 0,
            "Failed": 0,
            "Running": 0,
            "Starting": 0,
            "Lost": 0,
            "Unknown": 0,
        }
    for name, queued in record.queued.items():
        if name in summary:
            summary[name]["Queued"] = queued
    for alloc in cluster.job_allocations(job["Namespace"], job["ID"]):
        counts = summary.setdefault(alloc.group, dict.fromkeys(next(iter(summary.values()), {}), 0))
        status, _ = alloc.client_status()
        key = {
            "pending": "Starting",
            "running": "Running",
            "complete": "Complete",
            "failed": "Failed",
        }[status]
        counts[key] = counts.get(key, 0) + 1
    return {
        "JobID": job["ID"],
        "Namespace": job["Namespace"],
        "Summary": summary,
        "Children": {"Pending": 0, "Running": 0, "Dead": 0},
        "CreateIndex": record.create_index,
        "ModifyIndex": record.modify_index,
    }


def job_stub(cluster: Cluster, record: JobRecord) -> dict[str, Any]:
    job = record.job
    return {
        "ID": job["ID"],
        "ParentID": job.get("ParentID", ""),
        "Name": job["Name"],
        "Namespace": job["Namespace"],
        "Datacenters": job["Datacenters"],
        "Type": job["Type"],
        "Priority": job["Priority"],
        "Periodic": False,
        "ParameterizedJob": False,
        "Stop": record.stopped,
        "Status": cluster.job_status(record),
        "StatusDescription": "",
        "JobSummary": summary_view(cluster, record),
        "CreateIndex": record.create_index,
        "ModifyIndex": record.modify_index,
        "JobModifyIndex": record.job_modify_index,
        "SubmitTime": record.submit_time,
    }


def _task_states(alloc: Allocation) -> dict[str, Any]:
    return {name: copy.deepcopy(runner.state) for name, runner in alloc.tasks.items()}


def alloc_stub(cluster: Cluster, alloc: Allocation) -> dict[str, Any]:
    status, description = alloc.client_status()
    stub: dict[str, Any] = {
        "ID": alloc.id,
        "EvalID": alloc.eval_id,
        "Name": alloc.name,
        "Namespace": alloc.namespace,
        "NodeID": cluster.node_id,
        "NodeName": cluster.node_name,
        "JobID": alloc.job_id,
        "JobType": alloc.job["Type"],
        "JobVersion": alloc.job.get("Version", 0),
        "TaskGroup": alloc.group,
        "DesiredStatus": alloc.desired_status,
        "DesiredDescription": alloc.desired_description,
        "ClientStatus": status,
        "ClientDescription": description,
        "TaskStates": _task_states(alloc),
        "FollowupEvalID": alloc.followup_eval_id,
        "CreateIndex": alloc.create_index,
        "ModifyIndex": alloc.modify_index,
        "CreateTime": alloc.create_time,
        "ModifyTime": alloc.modify_time,
    }
    if alloc.reschedule_events:
        # The description's RescheduleEvent has no Delay (Nomad's has): leave it out.
        stub["RescheduleTracker"] = {
            "Events": [
                {k: e[k] for k in ("PrevAllocID", "PrevNodeID", "RescheduleTime")}
                for e in alloc.reschedule_events
            ]
        }
    return stub


def alloc_view(cluster: Cluster, alloc: Allocation) -> dict[str, Any]:
    view = alloc_stub(cluster, alloc)
    del view["JobType"], view["JobVersion"]
    view.update(
        {
            "Job": copy.deepcopy(alloc.job),
            "AllocModifyIndex": alloc.create_index,
            "PreviousAllocation": alloc.previous_allocation,
            "NextAllocation": alloc.next_allocation,
            "DeploymentID": "",
        }
    )
    return view


def scale_status(cluster: Cluster, record: JobRecord) -> dict[str, Any]:
    job = record.job
    groups: dict[str, Any] = {}
    allocs = cluster.job_allocations(job["Namespace"], job["ID"])
    for group in job["TaskGroups"]:
        mine = [a for a in allocs if a.group == group["Name"] and a.desired_status == "run"]
        running = sum(1 for a in mine if a.client_status()[0] == "running")
        groups[group["Name"]] = {
            "Desired": 0 if record.stopped else group["Count"],
            "Placed": len(mine),
            "Running": running,
            "Healthy": running,
            "Unhealthy": 0,
            "Events": [],
        }
    return {
        "JobID": job["ID"],
        "Namespace": job["Namespace"],
        "JobCreateIndex": record.create_index,
        "JobModifyIndex": record.job_modify_index,
        "JobStopped": record.stopped,
        "TaskGroups": groups,
    }


def variable_view(record: VariableRecord, *, items: bool = True) -> dict[str, Any]:
    view: dict[str, Any] = {
        "Namespace": record.namespace,
        "Path": record.path,
        "CreateIndex": record.create_index,
        "ModifyIndex": record.modify_index,
        "CreateTime": record.create_time,
        "ModifyTime": record.modify_time,
    }
    if items:
        view["Items"] = dict(record.items)
    return view
