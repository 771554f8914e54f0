"""The HTTP front of the double: ACL, routing, validation of every request and response.

Each request goes: ACL token check -> route (the OpenAPI description's paths, plus the two
endpoints it lacks: ``/v1/agent/self`` and ``/v1/client/fs/logs/{alloc_id}``) -> query and
body validation (400 with Nomad's plain-text style on a type error; a key Nomad would
silently ignore is also refused with 400 unless ``unknown_keys="record"``) -> handler ->
response validation (a failure is recorded as a ``response`` violation, which fails the
fixture's teardown: the double must never lie about Nomad's shapes).
"""

from __future__ import annotations

import base64
import json
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlsplit

from . import views
from .cluster import RegisterConflictError, VariableRecord
from .jobs import format_errors, validate_job
from .openapi import Operation, Problems, check_scalar, go_parse_bool

if TYPE_CHECKING:
    from .double import NomadDouble


@dataclass(frozen=True)
class Violation:
    """A request (or response) that did not conform to the OpenAPI description."""

    kind: str  # "request" | "unknown-key" | "unknown-query" | "unimplemented" | "response"
    method: str
    path: str
    detail: str

    def __str__(self) -> str:
        return f"{self.kind}: {self.method} {self.path}: {self.detail}"


@dataclass(frozen=True)
class RecordedRequest:
    method: str
    path: str
    query: dict[str, list[str]]
    body: Any
    status: int


class DropConnection(Exception):  # noqa: N818 - a control-flow signal, not an error
    """Close the connection without answering (a fault injected with ``drop=True``)."""


@dataclass
class Fault:
    """An injected failure: requests matching method and path prefix get it ``times`` times."""

    method: str | None
    path: str
    status: int
    text: str
    times: int | None
    drop: bool
    hits: int = 0

    def matches(self, method: str, path: str) -> bool:
        if self.times is not None and self.hits >= self.times:
            return False
        return (self.method is None or self.method == method) and path.startswith(self.path)


class HTTPError(Exception):
    def __init__(self, status: int, text: str, body: Any = None) -> None:
        super().__init__(text)
        self.status = status
        self.text = text
        self.body = body


@dataclass
class Reply:
    body: Any = None
    status: int = 200
    raw: bytes | None = None  # a non-JSON body (plain logs)
    stream: Callable[[Callable[[bytes], None]], None] | None = None


_DURATION = re.compile(r"^(\d+(?:\.\d+)?)(ms|s|m|h)$")
_LOGS = re.compile(r"^/client/fs/logs/(?P<alloc_id>[^/]+)$")


def _snake(name: str) -> str:
    """GetJobScaleStatus -> get_job_scale_status, jobName -> job_name (handler names)."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower().replace("i_d", "id")


def _go_duration_seconds(text: str) -> float:
    found = _DURATION.match(text)
    if not found:
        raise ValueError(text)
    return float(found.group(1)) * {"ms": 0.001, "s": 1, "m": 60, "h": 3600}[found.group(2)]


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # quiet: pytest shows failures
        return

    def do_GET(self) -> None:
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")

    def do_PUT(self) -> None:
        self._handle("PUT")

    def do_DELETE(self) -> None:
        self._handle("DELETE")

    # -- plumbing -------------------------------------------------------------------------

    def _handle(self, method: str) -> None:
        double = self.server.double
        url = urlsplit(self.path)
        query = parse_qs(url.query, keep_blank_values=True)
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        body: Any = None
        status = 500
        try:
            if raw:
                try:
                    body = json.loads(raw)
                except ValueError as error:
                    raise HTTPError(400, f"Request decode failed: {error}") from error
            fault = double.take_fault(method, url.path)
            if fault is not None:
                if fault.drop:
                    raise DropConnection
                raise HTTPError(fault.status, fault.text)
            reply = Routes(
                double, method, url.path, query, body, dict(self.headers.items())
            ).dispatch()
            status = reply.status
            self._send(reply)
        except HTTPError as error:
            status = error.status
            if error.body is not None:
                self._send(Reply(error.body, error.status))
            else:
                self._send_text(error.status, error.text)
        except DropConnection:
            status = 0
            self.close_connection = True
        except BrokenPipeError:
            pass
        except Exception as error:  # a bug in the double: answer like Nomad's 500, and record it
            double.record(Violation("response", method, url.path, f"double crashed: {error!r}"))
            self._send_text(500, f"nomad double internal error: {error!r}")
        finally:
            double.requests.append(RecordedRequest(method, url.path, query, body, status))

    def _send_text(self, status: int, text: str) -> None:
        data = text.encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _send(self, reply: Reply) -> None:
        index = self.server.double.cluster.index
        if reply.stream is not None:
            self.send_response(reply.status)
            self.send_header("Content-Type", "text/plain; charset=utf-8")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()

            def write(chunk: bytes) -> None:
                if chunk:
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                    self.wfile.flush()

            try:
                reply.stream(write)
                self.wfile.write(b"0\r\n\r\n")
            except (BrokenPipeError, ConnectionResetError):
                self.close_connection = True
            return
        if reply.raw is not None:
            data, kind = reply.raw, "text/plain; charset=utf-8"
        elif reply.body is None:
            data, kind = b"", "application/json"
        else:
            data, kind = json.dumps(reply.body).encode(), "application/json"
        self.send_response(reply.status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("X-Nomad-Index", str(index))
        self.send_header("X-Nomad-KnownLeader", "true")
        self.send_header("X-Nomad-LastContact", "0")
        self.end_headers()
        self.wfile.write(data)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    double: NomadDouble


class Routes:
    """One request: validation around the handler for its operation."""

    def __init__(
        self,
        double: NomadDouble,
        method: str,
        path: str,
        query: dict[str, list[str]],
        body: Any,
        headers: dict[str, str],
    ) -> None:
        self.double = double
        self.cluster = double.cluster
        self.method = method
        self.full_path = path
        self.query = query
        self.body = body
        self.headers = {k.lower(): v for k, v in headers.items()}

    def q(self, name: str, default: str = "") -> str:
        values = self.query.get(name)
        return values[-1] if values else default

    def q_bool(self, name: str) -> bool:
        text = self.q(name)
        return go_parse_bool(text) if text else False

    @property
    def namespace(self) -> str:
        return self.q("namespace") or "default"

    def violation(self, kind: str, detail: str) -> None:
        self.double.record(Violation(kind, self.method, self.full_path, detail))

    def dispatch(self) -> Reply:
        if not self.full_path.startswith("/v1/"):
            raise HTTPError(404, "Invalid URL path")
        path = self.full_path[3:]
        self._check_acl(path)
        if path == "/agent/self" and self.method == "GET":
            return self._agent_self()
        logs = _LOGS.match(path)
        if logs and self.method == "GET":
            return self._logs(logs.group("alloc_id"))
        found = self.double.spec.match(self.method, path)
        if found is None:
            if self.double.spec.path_exists(path):
                raise HTTPError(405, "Invalid method")
            raise HTTPError(404, "Invalid URL path")
        op, params = found
        handler = getattr(self, f"op_{_snake(op.operation_id)}", None)
        if handler is None:
            self.violation(
                "unimplemented", f"{op.operation_id} is not implemented by the Nomad double"
            )
            raise HTTPError(501, f"{op.operation_id} is not implemented by the Nomad double")
        self._validate_request(op)
        reply: Reply = handler(**{_snake(k): v for k, v in params.items()})
        if reply.status == 200 and op.response_schema is not None and reply.raw is None:
            problems = self.double.spec.check(op.response_schema, reply.body)
            for detail in problems.errors + problems.unknown:
                self.violation("response", f"{op.operation_id} response: {detail}")
        return reply

    def _check_acl(self, path: str) -> None:
        token = self.double.token
        if token is None or path.startswith("/status/"):  # Nomad's status endpoints need no token
            return
        # Nomad >= 1.10.1 answers an unknown token like a missing one (before: "ACL token not
        # found"), so a client cannot tell which tokens exist.
        if self.headers.get("x-nomad-token") != token:
            raise HTTPError(403, "Permission denied")

    def _validate_request(self, op: Operation) -> None:
        problems = self.double.spec.check_query(op, self.query)
        if op.body_schema is not None:
            if self.body is None:
                if op.body_required:
                    problems.errors.append("request body is required")
            else:
                body_problems = self.double.spec.check(op.body_schema, self.body)
                problems.errors.extend(body_problems.errors)
                problems.unknown.extend(body_problems.unknown)
        elif self.body is not None:
            problems.unknown.append(f"{op.operation_id} reads no body, got one")
        self._report(problems)

    def _report(self, problems: Problems) -> None:
        for detail in problems.errors:
            self.violation("request", detail)
        for detail in problems.unknown:
            self.violation("unknown-key" if detail.startswith("$") else "unknown-query", detail)
        if problems.errors:
            raise HTTPError(400, format_errors(problems.errors))
        if problems.unknown and self.double.unknown_keys == "reject":
            raise HTTPError(
                400,
                format_errors(
                    [
                        f"Nomad would silently ignore this (fix the request): {d}"
                        for d in problems.unknown
                    ]
                ),
            )

    # -- status, agent ---------------------------------------------------------------------

    def op_get_status_leader(self) -> Reply:
        return Reply("127.0.0.1:4647")

    def _agent_self(self) -> Reply:
        # Not in the OpenAPI description: a minimal subset of Nomad's answer, checked by hand.
        cluster = self.cluster
        return Reply(
            {
                "config": {
                    "Region": cluster.region,
                    "Datacenter": cluster.datacenter,
                    "NodeName": cluster.node_name,
                    "Version": {"Version": "1.9.7", "VersionPrerelease": "", "VersionMetadata": ""},
                    "ACL": {"Enabled": self.double.token is not None},
                },
                "member": {
                    "Name": f"{cluster.node_name}.{cluster.region}",
                    "Addr": "127.0.0.1",
                    "Port": 4648,
                    "Status": "alive",
                    "Tags": {"region": cluster.region, "dc": cluster.datacenter, "role": "nomad"},
                },
                "stats": {},
            }
        )

    def op_get_status_peers(self) -> Reply:
        return Reply(["127.0.0.1:4647"])

    def op_get_regions(self) -> Reply:
        return Reply([self.cluster.region])

    def _namespace_view(self, name: str) -> dict[str, Any]:
        return {"Name": name, "Description": "", "Meta": {}, "CreateIndex": 1, "ModifyIndex": 1}

    def op_get_namespaces(self) -> Reply:
        return Reply([self._namespace_view(n) for n in sorted(self.double.namespaces)])

    def op_get_namespace(self, namespace_name: str) -> Reply:
        if namespace_name not in self.double.namespaces:
            raise HTTPError(404, "Namespace not found")
        return Reply(self._namespace_view(namespace_name))

    # -- jobs --------------------------------------------------------------------------------

    def _blocking(self) -> None:
        """Nomad's blocking query: ?index=N[&wait=5s] waits for a change past N."""
        index = self.q("index")
        if not index or int(index) <= 0:
            return
        wait = self.q("wait", "5m")
        try:
            seconds = _go_duration_seconds(wait)
        except ValueError:
            raise HTTPError(400, f"Invalid wait time: {wait!r}") from None
        self.cluster.wait_for_index(int(index), min(seconds, 600.0))

    def _job(self, job_id: str) -> Any:
        record = self.cluster.jobs.get((self.namespace, job_id))
        if record is None:
            raise HTTPError(404, "job not found")
        return record

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

    # -- variables ---------------------------------------------------------------------------

    def op_get_variable_query(self, path: str) -> Reply:
        self._blocking()
        with self.cluster.lock:
            record = self.cluster.variables.get((self.namespace, path))
            if record is None:
                raise HTTPError(404, "variable not found")
            return Reply(views.variable_view(record))

    def op_get_variables_list_request(self) -> Reply:
        self._blocking()
        prefix = self.q("prefix")
        with self.cluster.lock:
            return Reply(
                [
                    views.variable_view(r, items=False)
                    for (namespace, var_path), r in sorted(self.cluster.variables.items())
                    if var_path.startswith(prefix) and self.namespace in ("*", namespace)
                ]
            )

    def _cas(self, record: VariableRecord | None) -> None:
        cas = self.q("cas")
        if not cas:
            return
        current = 0 if record is None else record.modify_index
        if int(cas) != current:
            body = views.variable_view(record) if record is not None else None
            raise HTTPError(409, "cas conflict", body)

    def _put_variable(self, path: str) -> Reply:
        body = self.body if isinstance(self.body, dict) else {}
        if body.get("Path") and body["Path"] != path:
            raise HTTPError(400, "variable path in body does not match the URL")
        items = body.get("Items")
        if not items:
            raise HTTPError(400, "variable missing required Items object")
        namespace = body.get("Namespace") or self.namespace
        with self.cluster.lock:
            key = (namespace, path)
            record = self.cluster.variables.get(key)
            self._cas(record)
            index = self.cluster.bump()
            now = time.time_ns()
            if record is None:
                record = VariableRecord(namespace, path, dict(items), index, index, now, now)
                self.cluster.variables[key] = record
            else:
                record.items = dict(items)
                record.modify_index = index
                record.modify_time = now
            return Reply(views.variable_view(record))

    def op_put_variable(self, path: str) -> Reply:
        return self._put_variable(path)

    def op_post_variable(self, path: str) -> Reply:
        return self._put_variable(path)

    def op_delete_variable(self, path: str) -> Reply:
        with self.cluster.lock:
            key = (self.namespace, path)
            record = self.cluster.variables.get(key)
            self._cas(record)
            if record is not None:
                del self.cluster.variables[key]
                self.cluster.bump()
        return Reply(None)

    # -- logs (not in the OpenAPI description: validated here by hand) -------------------------

    def _logs(self, alloc_id: str) -> Reply:
        known = {
            "task": "string",
            "type": "string",
            "follow": "boolean",
            "offset": "integer",
            "origin": "string",
            "plain": "boolean",
            "namespace": "string",
            "region": "string",
        }
        problems = Problems()
        for name, values in self.query.items():
            if name not in known:
                problems.unknown.append(
                    f"query parameter {name!r} is not one the logs endpoint reads"
                )
                continue
            for text in values:
                problems.errors.extend(check_scalar(name, known[name], text))
        self._report(problems)
        task = self.q("task")
        if not task:
            raise HTTPError(400, "must provide task name")
        kind = self.q("type")
        if kind not in ("stdout", "stderr"):
            raise HTTPError(400, "must provide log type (stdout/stderr)")
        origin = self.q("origin", "start")
        if origin not in ("start", "end"):
            raise HTTPError(400, "origin must be start or end")
        offset = int(self.q("offset", "0"))
        follow, plain = self.q_bool("follow"), self.q_bool("plain")
        with self.cluster.lock:
            alloc = self.cluster.allocations.get(alloc_id)
            if alloc is None:
                raise HTTPError(404, f'Unknown allocation "{alloc_id}"')
            runner = alloc.tasks.get(task)
            if runner is None:
                raise HTTPError(400, f'task "{task}" not found in allocation')
        log_path = runner.log_path(kind)
        size = log_path.stat().st_size if log_path.exists() else 0
        start = max(0, size - offset) if origin == "end" else min(offset, size)
        file_name = f"alloc/logs/{task}.{kind}.0"

        def frame(data: bytes, position: int) -> bytes:
            if plain:
                return data
            frame_obj = {
                "Data": base64.b64encode(data).decode(),
                "File": file_name,
                "Offset": position,
            }
            return json.dumps(frame_obj).encode()

        def read_from(position: int) -> tuple[bytes, int]:
            if not log_path.exists():
                return b"", position
            with log_path.open("rb") as handle:
                handle.seek(position)
                data = handle.read()
            return data, position + len(data)

        if not follow:
            data, end = read_from(start)
            return Reply(raw=frame(data, end) if data else b"")

        def stream(write: Callable[[bytes], None]) -> None:
            position = start
            while True:
                data, position = read_from(position)
                write(frame(data, position) if data else b"")
                with self.cluster.lock:
                    finished = alloc.terminal() or self.cluster.closed
                if finished:
                    data, position = read_from(position)
                    write(frame(data, position) if data else b"")
                    return
                time.sleep(0.1)  # poll the file like Nomad's client does, between reads

        return Reply(stream=stream)


def serve(double: NomadDouble) -> tuple[_Server, threading.Thread]:
    server = _Server(("127.0.0.1", 0), Handler)
    server.double = double
    # A short poll interval: shutdown() waits for it, and tests stop one double each.
    thread = threading.Thread(
        target=server.serve_forever,
        kwargs={"poll_interval": 0.05},
        name="nomad-double-http",
        daemon=True,
    )
    thread.start()
    return server, thread
