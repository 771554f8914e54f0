"""The optional extra layer: HashiCorp's OpenAPI 3.0 description of Nomad's v1 API.

Used only where ``NOMAD_OPENAPI_SPEC`` names the file (``contract.load_contract``); the
double's own contract is Nomad's Go API types (``apicheck``). The description declares no
``additionalProperties: false``, so every body is validated twice: once as published (a
failure is a type error Nomad would refuse), and once against a *strict* copy in which every
object schema with ``properties`` and no ``additionalProperties`` forbids other keys (a
failure there is a key Nomad would ignore). Its errata are listed in ``routes_table``.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from jsonschema.exceptions import ValidationError
from openapi_schema_validator import OAS30Validator, oas30_format_checker

from .problems import Problems


@dataclass(frozen=True)
class Operation:
    """One (method, path template) of the description."""

    method: str
    template: str
    operation_id: str
    regex: re.Pattern[str]
    parameters: tuple[dict[str, Any], ...]
    body_schema: dict[str, Any] | None
    body_required: bool
    response_schema: dict[str, Any] | None


def _path(error: ValidationError) -> str:
    parts = ["$"]
    for part in error.absolute_path:
        parts.append(f"[{part}]" if isinstance(part, int) else f".{part}")
    return "".join(parts)


def _strict(node: Any) -> Any:
    """A copy where objects with declared properties forbid undeclared ones."""
    if isinstance(node, dict):
        out = {key: _strict(value) for key, value in node.items()}
        if "properties" in out and "additionalProperties" not in out:
            out["additionalProperties"] = False
        return out
    if isinstance(node, list):
        return [_strict(item) for item in node]
    return node


class OpenAPISpec:
    """Nomad's description, loaded once: routing, parameter and body/response validation."""

    def __init__(self, path: Path) -> None:
        self.path = path
        loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # 10x faster on 250 kB
        document = yaml.load(path.read_text(), Loader=loader)
        self._components = document["components"]
        self._strict_components = _strict(copy.deepcopy(document["components"]))
        self.operations: list[Operation] = []
        for template, item in document["paths"].items():
            for method, op in item.items():
                self.operations.append(self._operation(method.upper(), template, op))
        # Longest literal templates first so /job/{id}/scale wins over /var/{path}-like greed.
        self.operations.sort(key=lambda op: -len(op.template))

    def _resolve(self, node: dict[str, Any]) -> dict[str, Any]:
        while "$ref" in node:
            _, _, section, name = node["$ref"].split("/")
            node = self._components[section][name]
        return node

    def _operation(self, method: str, template: str, op: dict[str, Any]) -> Operation:
        # {path} of /var/{path} holds slashes (nomad/jobs/x); every other parameter is one segment.
        pattern = re.sub(
            r"\{(\w+)\}",
            lambda m: (
                f"(?P<{m.group(1)}>.+)" if m.group(1) == "path" else f"(?P<{m.group(1)}>[^/]+)"
            ),
            template,
        )
        parameters = tuple(self._resolve(p) for p in op.get("parameters", []))
        body_schema = None
        body_required = False
        if "requestBody" in op:
            body = self._resolve(op["requestBody"])
            body_schema = body["content"]["application/json"]["schema"]
            # Erratum: Nomad's DELETE /var/{path} reads no body.
            body_required = bool(body.get("required")) and method != "DELETE"
        response_schema = None
        ok = op.get("responses", {}).get("200")
        if ok is not None:
            content = self._resolve(ok).get("content", {})
            if "application/json" in content:
                response_schema = content["application/json"]["schema"]
        return Operation(
            method=method,
            template=template,
            operation_id=op.get("operationId", ""),
            regex=re.compile(f"^{pattern}$"),
            parameters=parameters,
            body_schema=body_schema,
            body_required=body_required,
            response_schema=response_schema,
        )

    def match(self, method: str, path: str) -> tuple[Operation, dict[str, str]] | None:
        """The operation for ``path`` (without the ``/v1`` prefix) and its path parameters."""
        for op in self.operations:
            if op.method != method:
                continue
            found = op.regex.match(path)
            if found:
                return op, found.groupdict()
        return None

    def path_exists(self, path: str) -> bool:
        return any(op.regex.match(path) for op in self.operations)

    # -- validation ---------------------------------------------------------------------

    def _validate(
        self, schema: dict[str, Any], value: Any, *, strict: bool
    ) -> list[ValidationError]:
        components = self._strict_components if strict else self._components
        root = {**schema, "components": components}
        validator = OAS30Validator(root, format_checker=oas30_format_checker)
        return sorted(validator.iter_errors(value), key=lambda e: list(e.absolute_path))

    def check(self, schema: dict[str, Any], value: Any) -> Problems:
        """Type errors against the published schema, then unknown keys against the strict one."""
        problems = Problems()
        for error in self._validate(schema, value, strict=False):
            problems.errors.append(f"{_path(error)}: {error.message}")
        if problems.errors:
            return problems
        for error in self._validate(schema, value, strict=True):
            if error.validator == "additionalProperties":
                problems.unknown.append(f"{_path(error)}: {error.message}")
            else:  # pragma: no cover - the strict copy only adds additionalProperties
                problems.errors.append(f"{_path(error)}: {error.message}")
        return problems

    def check_schema_ref(self, name: str, value: Any) -> Problems:
        """Validate against ``#/components/schemas/<name>``."""
        return self.check({"$ref": f"#/components/schemas/{name}"}, value)
