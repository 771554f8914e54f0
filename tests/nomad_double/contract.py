"""What the double holds every request and response to: Nomad's routes (``routes_table``)
and Nomad's own Go API types (``apicheck``), plus, where ``NOMAD_OPENAPI_SPEC`` names a file,
HashiCorp's OpenAPI description as an extra layer.

A problem is either an *error* (Nomad refuses the body: a wrong JSON type, a number out of
range) or *unknown* (a key no field of the API type takes: Nomad's decoder drops it silently,
so the request "works" with that setting lost).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .apicheck import ApiChecker, shared_checker
from .openapi import OpenAPISpec
from .problems import Problems, check_scalar
from .routes_table import EXTRA_QUERY, ROUTES, Route

__all__ = ["Contract", "Problems", "load_contract", "openapi_path"]

_UNKNOWN = "unknown field:"
# Nomad's server writes its structs' query and write metadata into some bodies (the alloc
# stop's "Index"); its Go API takes the same facts from the X-Nomad-* headers instead, so its
# types lack these keys. At the top level of a response they are Nomad's own, not a lie.
_WIRE_META = ("Index", "LastContact", "KnownLeader", "NextToken")
_WIRE_META_PROBLEMS = tuple(f"$.{key}: {_UNKNOWN}" for key in _WIRE_META)


@dataclass(frozen=True)
class _Compiled:
    route: Route
    regex: re.Pattern[str]


def _compile(route: Route) -> _Compiled:
    # {path} of /var/{path} holds slashes (nomad/jobs/x); every other parameter is one segment.
    pattern = re.sub(
        r"\{(\w+)\}",
        lambda m: f"(?P<{m.group(1)}>.+)" if m.group(1) == "path" else f"(?P<{m.group(1)}>[^/]+)",
        route.template,
    )
    return _Compiled(route, re.compile(f"^{pattern}$"))


# Longest templates first, so /job/{jobName}/scale wins over greedier ones.
_COMPILED = tuple(sorted((_compile(r) for r in ROUTES), key=lambda c: -len(c.route.template)))


class Contract:
    """Routing and validation for the double; ``openapi`` is the optional extra layer."""

    def __init__(self, checker: ApiChecker, openapi: OpenAPISpec | None = None) -> None:
        self.checker = checker
        self.openapi = openapi
        self.routes = ROUTES

    def match(self, method: str, path: str) -> tuple[Route, dict[str, str]] | None:
        """The route for ``path`` (without ``/v1``) and its path parameters."""
        for compiled in _COMPILED:
            if compiled.route.method == method and (found := compiled.regex.match(path)):
                return compiled.route, found.groupdict()
        return None

    def path_exists(self, path: str) -> bool:
        return any(c.regex.match(path) for c in _COMPILED)

    def check(self, type_name: str, value: Any) -> Problems:
        """``value`` as Nomad's API type ``type_name`` (``[]T``: a list of T)."""
        problems = Problems()
        for problem in self.checker.check(type_name, value):
            (problems.unknown if _UNKNOWN in problem else problems.errors).append(problem)
        return problems

    def check_query(self, route: Route, query: dict[str, list[str]]) -> Problems:
        """Each query parameter: one the operation reads, of its type as Go parses it."""
        problems = Problems()
        for name, values in query.items():
            kind = route.query.get(name) or EXTRA_QUERY.get(name)
            if kind is None:
                problems.unknown.append(
                    f"query parameter {name!r} is not one {route.operation_id} reads"
                )
                continue
            for text in values:
                problems.errors.extend(check_scalar(name, kind, text))
        return problems

    def check_request(self, route: Route, path: str, body: Any) -> Problems:
        assert route.request is not None
        problems = self.check(route.request, body)
        return self._also_openapi(problems, route, path, body, request=True)

    def check_response(self, route: Route, path: str, body: Any) -> Problems:
        assert route.response is not None
        problems = self.check(route.response, body)
        problems.unknown = [u for u in problems.unknown if not u.startswith(_WIRE_META_PROBLEMS)]
        return self._also_openapi(problems, route, path, body, request=False)

    def _also_openapi(
        self, problems: Problems, route: Route, path: str, body: Any, *, request: bool
    ) -> Problems:
        if self.openapi is None or (found := self.openapi.match(route.method, path)) is None:
            return problems
        operation = found[0]
        schema = operation.body_schema if request else operation.response_schema
        if schema is not None:
            extra = self.openapi.check(schema, body)
            problems.errors.extend(f"{e} (OpenAPI)" for e in extra.errors)
            problems.unknown.extend(f"{u} (OpenAPI)" for u in extra.unknown)
        return problems


def openapi_path() -> Path | None:
    """``NOMAD_OPENAPI_SPEC`` when set: the optional OpenAPI layer's description."""
    named = os.environ.get("NOMAD_OPENAPI_SPEC")
    return Path(named).expanduser().resolve() if named else None


def load_contract() -> Contract:
    """The checker (built first when needed) and, when ``NOMAD_OPENAPI_SPEC`` is set, the
    OpenAPI layer; a named description that is missing is an error, not a silent skip."""
    path = openapi_path()
    openapi = None
    if path is not None:
        if not path.is_file():
            raise FileNotFoundError(f"NOMAD_OPENAPI_SPEC names {path}, which is not a file")
        openapi = OpenAPISpec(path)
    return Contract(shared_checker(), openapi)
