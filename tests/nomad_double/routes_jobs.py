"""Route handlers for jobs, scaling, allocations and evaluations (Nomad's job endpoints)."""

from __future__ import annotations

from typing import Any

from . import views
from .jobs import format_errors, validate_job
from .protocol import HTTPError, Reply, RequestContext
from .scheduling import RegisterConflictError


class JobRoutes(RequestContext):
    def _register(self, job_id: str | None) -> Reply:
        job = self.body.get("Job") if isinstance(self.body, dict) else None
        if not job:
            raise HTTPError(400, "Job must be specified")
        if job_id is not None and job.get("ID") != job_id:
            raise HTTPError(400, "Job ID does not match name")
        errors = validate_job(job)
        if errors:
            # Nomad's Job.Validate errors are uncoded RPC errors, which its HTTP layer answers
            # with 500 (decode and type errors above are 400): see README.md.
            self.violation("request", "invalid job: " + "; ".join(errors))
            raise HTTPError(self.double.invalid_job_status, format_errors(errors))
        namespace = job.get("Namespace") or self.q("namespace") or "default"
        if self.q("namespace") and job.get("Namespace") and job["Namespace"] != self.q("namespace"):
            raise HTTPError(400, "mismatched request namespace")
        if namespace not in self.double.namespaces:
            raise HTTPError(400, f'nonexistent namespace "{namespace}"')
        enforce = self.body.get("JobModifyIndex", 0) if self.body.get("EnforceIndex") else None
        try:
            record, eval_id = self.cluster.register(
                job,
                namespace,
                preserve_counts=bool(self.body.get("PreserveCounts")),
                enforce_index=enforce,
            )
        except RegisterConflictError as error:  # an uncoded RPC error in Nomad: 500
            raise HTTPError(500, str(error)) from None
        return Reply(
            {
                "EvalID": eval_id,
                "EvalCreateIndex": self.cluster.evaluations[eval_id]["CreateIndex"],
                "JobModifyIndex": record.job_modify_index,
                "Warnings": "",
                "KnownLeader": False,
                "LastContact": 0,
                "LastIndex": 0,
                "RequestTime": 0,
            }
        )

    def op_register_job(self) -> Reply:
        return self._register(None)

    def op_post_job(self, job_name: str) -> Reply:
        return self._register(job_name)

    def op_post_job_validate_request(self) -> Reply:
        job = self.body.get("Job") if isinstance(self.body, dict) else None
        errors = validate_job(job)
        return Reply(
            {
                "DriverConfigValidated": not errors,
                "ValidationErrors": errors,
                "Error": format_errors(errors) if errors else "",
                "Warnings": "",
            }
        )

    def op_get_jobs(self) -> Reply:
        self._blocking()
        prefix = self.q("prefix")
        with self.cluster.lock:
            stubs = [
                views.job_stub(self.cluster, record)
                for (namespace, job_id), record in sorted(self.cluster.jobs.items())
                if job_id.startswith(prefix) and (self.namespace in ("*", namespace))
            ]
        return Reply(stubs)

    def op_get_job(self, job_name: str) -> Reply:
        self._blocking()
        with self.cluster.lock:
            return Reply(views.job_view(self.cluster, self._job(job_name)))

    def op_get_job_summary(self, job_name: str) -> Reply:
        self._blocking()
        with self.cluster.lock:
            return Reply(views.summary_view(self.cluster, self._job(job_name)))

    def op_get_job_allocations(self, job_name: str) -> Reply:
        # Nomad lists allocations by job ID without checking the job exists: [] when unknown.
        self._blocking()
        with self.cluster.lock:
            allocs = self.cluster.job_allocations(self.namespace, job_name)
            return Reply([views.alloc_stub(self.cluster, a) for a in allocs])

    def op_delete_job(self, job_name: str) -> Reply:
        purge = self.q_bool("purge")
        with self.cluster.lock:
            self._job(job_name)
            eval_id = self.cluster.deregister((self.namespace, job_name), purge)
            evaluation = self.cluster.evaluations[eval_id]
        return Reply(
            {
                "EvalID": eval_id,
                "EvalCreateIndex": evaluation["CreateIndex"],
                "JobModifyIndex": evaluation["JobModifyIndex"],
                "KnownLeader": False,
                "LastContact": 0,
                "LastIndex": 0,
                "RequestTime": 0,
            }
        )

    def op_get_job_evaluations(self, job_name: str) -> Reply:
        self._blocking()
        with self.cluster.lock:
            return Reply(
                [
                    dict(e)
                    for e in self.cluster.evaluations.values()
                    if e["JobID"] == job_name and e["Namespace"] == self.namespace
                ]
            )

    def op_get_job_scale_status(self, job_name: str) -> Reply:
        self._blocking()
        with self.cluster.lock:
            return Reply(views.scale_status(self.cluster, self._job(job_name)))

    def op_post_job_scaling_request(self, job_name: str) -> Reply:
        request = self.body if isinstance(self.body, dict) else {}
        target = request.get("Target") or {}
        if target.get("Job") and target["Job"] != job_name:
            raise HTTPError(400, "job ID in payload did not match URL")
        group_name = target.get("Group")
        if not group_name:
            raise HTTPError(400, "missing task group name for scaling action")
        count = request.get("Count")
        if count is not None and count < 0:
            raise HTTPError(400, "scaling action count can't be negative")
        with self.cluster.lock:
            record = self.cluster.jobs.get((self.namespace, job_name))
            if record is None:
                raise HTTPError(404, f'job "{job_name}" not found')
            group = next((g for g in record.job["TaskGroups"] if g["Name"] == group_name), None)
            if group is None:
                raise HTTPError(
                    400, f'task group "{group_name}" specified for scaling does not exist'
                )
            if record.stopped:
                raise HTTPError(400, "job is stopped: it cannot be scaled")
            policy = group.get("Scaling")
            if count is not None and policy:
                if policy.get("Min") is not None and count < policy["Min"]:
                    raise HTTPError(
                        400,
                        "group count was less than scaling policy minimum:"
                        f" {count} < {policy['Min']}",
                    )
                if policy.get("Max") is not None and count > policy["Max"]:
                    raise HTTPError(
                        400,
                        "group count was greater than scaling policy maximum:"
                        f" {count} > {policy['Max']}",
                    )
            if count is None:
                eval_id = ""
                evaluation: dict[str, Any] = {"CreateIndex": 0}
            else:
                eval_id = self.cluster.scale((self.namespace, job_name), group_name, int(count))
                evaluation = self.cluster.evaluations[eval_id]
            return Reply(
                {
                    "EvalID": eval_id,
                    "EvalCreateIndex": evaluation["CreateIndex"],
                    "JobModifyIndex": record.job_modify_index,
                    "Warnings": "",
                    "KnownLeader": False,
                    "LastContact": 0,
                    "LastIndex": 0,
                    "RequestTime": 0,
                }
            )

    # -- allocations, evaluations ---------------------------------------------------------

    def op_get_allocation(self, alloc_id: str) -> Reply:
        self._blocking()
        with self.cluster.lock:
            alloc = self.cluster.allocations.get(alloc_id)
            if alloc is None:
                raise HTTPError(404, "alloc not found")
            return Reply(views.alloc_view(self.cluster, alloc))

    def op_post_allocation_stop(self, alloc_id: str) -> Reply:
        with self.cluster.lock:
            alloc = self.cluster.allocations.get(alloc_id)
            if alloc is None:
                raise HTTPError(404, "alloc not found")
            eval_id = self.cluster.stop_allocation(alloc)
            return Reply({"EvalID": eval_id, "Index": self.cluster.index})

    def op_get_allocations(self) -> Reply:
        self._blocking()
        prefix = self.q("prefix")
        with self.cluster.lock:
            allocs = sorted(self.cluster.allocations.values(), key=lambda a: a.create_index)
            return Reply(
                [
                    views.alloc_stub(self.cluster, a)
                    for a in allocs
                    if a.id.startswith(prefix) and self.namespace in ("*", a.namespace)
                ]
            )

    def op_get_evaluation(self, eval_id: str) -> Reply:
        with self.cluster.lock:
            evaluation = self.cluster.evaluations.get(eval_id)
            if evaluation is None:
                raise HTTPError(404, "eval not found")
            return Reply(dict(evaluation))
