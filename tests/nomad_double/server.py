"""The HTTP front of the double: ACL, routing, validation of every request and response.

Each request goes: ACL token check -> route (``routes_table``: Nomad's v1 operations, plus
``/v1/agent/self`` and ``/v1/client/fs/logs/{alloc_id}``, handled by hand) -> query and body
validation against Nomad's Go API types (400 with Nomad's plain-text style on a type error;
a key Nomad would silently ignore is also refused with 400 unless ``unknown_keys="record"``)
-> handler -> response validation (a failure is recorded as a ``response`` violation, which
fails the fixture's teardown: the double must never lie about Nomad's shapes).
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlsplit

from .protocol import (
    _LOGS,
    DropConnection,
    Fault,
    HTTPError,
    RecordedRequest,
    Reply,
    Violation,
    _snake,
)
from .routes_jobs import JobRoutes
from .routes_misc import MiscRoutes

__all__ = ["Fault", "RecordedRequest", "Routes", "Violation", "serve"]

if TYPE_CHECKING:
    from .double import NomadDouble
    from .routes_table import Route


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


class Routes(JobRoutes, MiscRoutes):
    """One request: ACL, routing and validation around the handler for its operation."""

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
        contract = self.double.contract
        found = contract.match(self.method, path)
        if found is None:
            if contract.path_exists(path):
                raise HTTPError(405, "Invalid method")
            raise HTTPError(404, "Invalid URL path")
        route, params = found
        handler = getattr(self, f"op_{_snake(route.operation_id)}", None)
        if handler is None:
            self.violation(
                "unimplemented", f"{route.operation_id} is not implemented by the Nomad double"
            )
            raise HTTPError(501, f"{route.operation_id} is not implemented by the Nomad double")
        self._validate_request(route, path)
        reply: Reply = handler(**{_snake(k): v for k, v in params.items()})
        if reply.status == 200 and route.response is not None and reply.raw is None:
            problems = contract.check_response(route, path, reply.body)
            for detail in problems.errors + problems.unknown:
                self.violation("response", f"{route.operation_id} response: {detail}")
        return reply

    def _check_acl(self, path: str) -> None:
        token = self.double.token
        if token is None or path.startswith("/status/"):  # Nomad's status endpoints need no token
            return
        # Nomad >= 1.10.1 answers an unknown token like a missing one (before: "ACL token not
        # found"), so a client cannot tell which tokens exist.
        if self.headers.get("x-nomad-token") != token:
            raise HTTPError(403, "Permission denied")

    def _validate_request(self, route: Route, path: str) -> None:
        problems = self.double.contract.check_query(route, self.query)
        if route.request is not None:
            if self.body is None:
                problems.errors.append("request body is required")
            else:
                body_problems = self.double.contract.check_request(route, path, self.body)
                problems.errors.extend(body_problems.errors)
                problems.unknown.extend(body_problems.unknown)
        elif self.body is not None:
            problems.unknown.append(f"{route.operation_id} reads no body, got one")
        self._report(problems)


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
