"""What the double's HTTP layer passes around: violations, recorded requests, faults,
replies, and the per-request context that every route handler works in."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .jobs import format_errors
from .problems import Problems, go_parse_bool

if TYPE_CHECKING:
    from collections.abc import Callable

    from .cluster import JobRecord
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


class RequestContext:
    """One request as the route handlers see it: query helpers, violations, refusals."""

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

    def _job(self, job_id: str) -> JobRecord:
        record = self.cluster.jobs.get((self.namespace, job_id))
        if record is None:
            raise HTTPError(404, "job not found")
        return record
