"""The scheduler decisions the one-node double makes as Nomad's scheduler would.

Feasibility (datacenters and devices), rescheduling of failed allocations (Nomad's
``Allocation.RescheduleEligible`` and ``NextDelay``), and the register-time checks of
``Job.Register`` (``EnforceIndex``, "did the spec change").
"""

from __future__ import annotations

import fnmatch
from collections.abc import Collection, Mapping
from typing import Any


def infeasible(
    job: Mapping[str, Any],
    group: Mapping[str, Any],
    datacenter: str,
    devices: Mapping[str, int],
    drivers: Collection[str] = ("raw_exec",),
) -> dict[str, Any] | None:
    """The AllocationMetric of a failed placement on the node, or None when it fits.

    Nomad's feasibility checks the one node can fail: the job's datacenters, the tasks'
    drivers and the tasks' devices.
    """
    if not any(fnmatch.fnmatchcase(datacenter, dc) for dc in job["Datacenters"]):
        return {"NodesEvaluated": 0, "NodesFiltered": 0, "NodesAvailable": {}}
    if any(task["Driver"] not in drivers for task in group["Tasks"]):
        return {
            "NodesEvaluated": 1,
            "NodesFiltered": 1,
            "NodesAvailable": {datacenter: 1},
            "ConstraintFiltered": {"missing drivers": 1},
        }
    for task in group["Tasks"]:
        for device in (task.get("Resources") or {}).get("Devices") or []:
            if not has_device(devices, device["Name"], int(device.get("Count", 1))):
                return {
                    "NodesEvaluated": 1,
                    "NodesFiltered": 1,
                    "NodesAvailable": {datacenter: 1},
                    "ConstraintFiltered": {"missing devices": 1},
                }
    return None


def has_device(devices: Mapping[str, int], request: str, count: int) -> bool:
    """A device request ("gpu", "nvidia/gpu", "nvidia/gpu/<model>") against the node's."""
    wanted = request.split("/")
    for device_id, available in devices.items():
        vendor, kind, *model = [*device_id.split("/"), ""]
        have = [kind] if len(wanted) == 1 else [vendor, kind, *model[:1]][: len(wanted)]
        if have == wanted and available >= count:
            return True
    return False


def reschedule_eligible(policy: Mapping[str, Any], events: list[dict[str, Any]], now: int) -> bool:
    """Nomad's Allocation.RescheduleEligible: unlimited, or fewer attempts in the interval."""
    if policy.get("Unlimited"):
        return True
    attempts = int(policy.get("Attempts") or 0)
    if attempts <= 0:
        return False
    interval = int(policy.get("Interval") or 0)
    recent = [e for e in events if interval <= 0 or now - e["RescheduleTime"] < interval]
    return len(recent) < attempts


def next_reschedule_delay(policy: Mapping[str, Any], events: list[dict[str, Any]]) -> int:
    """Nomad's Allocation.NextDelay: constant, exponential or fibonacci, capped by MaxDelay."""
    delay = int(policy.get("Delay") or 0)
    if not events:
        return delay
    function = policy.get("DelayFunction") or "constant"
    if function == "exponential":
        delay = events[-1]["Delay"] * 2
    elif function == "fibonacci" and len(events) >= 2:
        delay = events[-1]["Delay"] + events[-2]["Delay"]
    elif function == "fibonacci":
        delay = events[-1]["Delay"]
    max_delay = int(policy.get("MaxDelay") or 0)
    if max_delay > 0:
        delay = min(delay, max_delay)
    return delay


class RegisterConflictError(Exception):
    """``EnforceIndex`` did not match (Nomad's "Enforcing job modify index" errors)."""


def check_index(current: int | None, expected: int) -> None:
    """``EnforceIndex``: 0 = the job must not exist, N = its JobModifyIndex must be N."""
    prefix = "Enforcing job modify index"
    if current is not None and expected == 0:
        raise RegisterConflictError(f"{prefix} 0: job already exists")
    if current is not None and expected != current:
        raise RegisterConflictError(
            f"{prefix} {expected}: job exists with conflicting job modify index: {current}"
        )
    if current is None and expected != 0:
        raise RegisterConflictError(f"{prefix} {expected}: job does not exist")


def comparable(job: Mapping[str, Any]) -> dict[str, Any]:
    """A job without the fields Nomad sets itself, to tell whether a re-register changed it."""
    return {k: v for k, v in job.items() if k not in ("Version", "Stop", "SubmitTime")}
