"""Every schema version ever released, found by name or by the fingerprint on the wire.

Schema files are named ``<Name>.v<N>.avsc`` (``ExperienceChunk.v1.avsc``) and may refer to
other named types by full name (``"io.coachstream.Tensor"``); the registry inlines the
latest version of each referenced type at its first use, so every entry is a complete,
standard Avro schema whose CRC-64-AVRO fingerprint identifies it on the wire. Released
fingerprints are pinned by a unit test: changing a shared type in place would silently
change an old message's fingerprint, so a new type version needs new message versions.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import fastavro
import fastavro.schema

from coach_stream.errors import ConfigError

_FILE_NAME = re.compile(r"^(?P<name>[A-Za-z_][A-Za-z0-9_]*)\.v(?P<version>[1-9][0-9]*)\.avsc$")
_NAMED_TYPES = {"record", "enum", "fixed", "error"}
_PRIMITIVES = {"null", "boolean", "int", "long", "float", "double", "bytes", "string"}


def default_schema_dir() -> Path:
    """The ``schemas/`` directory shipped inside the package."""
    import coach_stream

    return Path(coach_stream.__file__).parent / "schemas"


@dataclass(frozen=True, eq=False)
class SchemaVersion:
    """One released schema: the full JSON, fastavro's parsed form and its wire fingerprint."""

    full_name: str
    version: int
    schema: dict[str, Any]  # self-contained JSON (references inlined)
    parsed: Any  # fastavro.parse_schema(schema)
    canonical_form: str
    fingerprint: bytes  # 8 bytes, little-endian CRC-64-AVRO of the canonical form
    source: str

    def __repr__(self) -> str:
        return f"SchemaVersion({self.full_name} v{self.version}, {self.fingerprint.hex()})"


def _full_name(name: str, namespace: str | None) -> str:
    return name if "." in name or not namespace else f"{namespace}.{name}"


def _expand(
    node: Any, namespace: str | None, library: dict[str, dict[str, Any]], defined: set[str]
) -> Any:
    """Inline referenced named types at their first occurrence (Avro forbids redefinition)."""
    if isinstance(node, str):
        if node in _PRIMITIVES:
            return node
        full = _full_name(node, namespace)
        if full in defined:
            return full
        if full not in library:
            raise ConfigError(
                f"Schema type {full!r} is not defined in any schema file; add "
                f"{full.rsplit('.', 1)[-1]}.v1.avsc to the schema directory."
            )
        return _expand(library[full], namespace, library, defined)
    if isinstance(node, list):
        return [_expand(branch, namespace, library, defined) for branch in node]
    if isinstance(node, dict):
        kind = node.get("type")
        if kind in _NAMED_TYPES:
            ns = node.get("namespace", namespace)
            full = _full_name(str(node["name"]), ns)
            defined.add(full)
            ns = full.rsplit(".", 1)[0] if "." in full else ns
            out = dict(node)
            if kind in ("record", "error"):
                fields = node.get("fields")
                if not isinstance(fields, list) or not all(
                    isinstance(f, dict) and "type" in f for f in fields
                ):
                    raise ConfigError(
                        f"Schema record {full!r} needs 'fields' as a list of objects with a "
                        "'type' each; fix the schema file."
                    )
                out["fields"] = [
                    {**field, "type": _expand(field["type"], ns, library, defined)}
                    for field in node["fields"]
                ]
            return out
        if kind == "array":
            return {**node, "items": _expand(node["items"], namespace, library, defined)}
        if kind == "map":
            return {**node, "values": _expand(node["values"], namespace, library, defined)}
        return {**node, "type": _expand(kind, namespace, library, defined)}
    raise ConfigError(f"Schema node {node!r} is not valid Avro; fix the schema file.")


@dataclass(frozen=True)
class _RawSchema:
    full_name: str
    version: int
    json: dict[str, Any]
    source: str


def _read_file(path: Path) -> _RawSchema:
    match = _FILE_NAME.match(path.name)
    if match is None:
        raise ConfigError(
            f"Schema file {path} is not named <Name>.v<N>.avsc; rename it so its version is known."
        )
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"Schema file {path} cannot be read as JSON ({exc}); fix it.") from exc
    if not isinstance(data, dict) or data.get("type") not in _NAMED_TYPES:
        raise ConfigError(f"Schema file {path} must hold one named type (a record); fix it.")
    full = _full_name(str(data["name"]), data.get("namespace"))
    if full.rsplit(".", 1)[-1] != match["name"]:
        raise ConfigError(f"Schema file {path} defines {full}; name the file after the type.")
    return _RawSchema(full, int(match["version"]), data, str(path))


class SchemaRegistry:
    """Fingerprint -> writer schema, and name -> every version (the newest is the reader)."""

    def __init__(self, raw: Iterable[_RawSchema]) -> None:
        raws = sorted(raw, key=lambda r: (r.full_name, r.version))
        library = {r.full_name: r.json for r in raws}  # sorted: the latest version wins
        self._by_fingerprint: dict[bytes, SchemaVersion] = {}
        self._by_name: dict[str, dict[int, SchemaVersion]] = {}
        for r in raws:
            schema = _expand(r.json, None, library, set())
            try:
                parsed = fastavro.parse_schema(schema, _write_hint=False)
            except Exception as exc:  # fastavro raises several types for a bad schema
                raise ConfigError(f"Schema {r.source} is not valid Avro ({exc}); fix it.") from exc
            canonical = fastavro.schema.to_parsing_canonical_form(parsed)
            fingerprint = bytes.fromhex(fastavro.schema.fingerprint(canonical, "CRC-64-AVRO"))
            entry = SchemaVersion(
                r.full_name, r.version, schema, parsed, canonical, fingerprint, r.source
            )
            versions = self._by_name.setdefault(r.full_name, {})
            if r.version in versions:
                raise ConfigError(
                    f"Schema {r.full_name} v{r.version} is defined twice ({r.source} and "
                    f"{versions[r.version].source}); remove one."
                )
            versions[r.version] = entry
            self._by_fingerprint.setdefault(fingerprint, entry)

    @classmethod
    def load(cls, *directories: Path) -> SchemaRegistry:
        """Every ``*.avsc`` in ``directories`` (default: the packaged ``schemas/``)."""
        dirs = directories or (default_schema_dir(),)
        raws = [_read_file(p) for d in dirs for p in sorted(Path(d).glob("*.avsc"))]
        if not raws:
            raise ConfigError(f"No *.avsc schema files in {', '.join(map(str, dirs))}.")
        return cls(raws)

    def by_fingerprint(self, fingerprint: bytes) -> SchemaVersion | None:
        return self._by_fingerprint.get(bytes(fingerprint))

    def latest(self, full_name: str) -> SchemaVersion:
        versions = self._by_name.get(full_name)
        if not versions:
            raise ConfigError(f"No schema named {full_name} is registered; add its .avsc file.")
        return versions[max(versions)]

    def get(self, full_name: str, version: int) -> SchemaVersion:
        try:
            return self._by_name[full_name][version]
        except KeyError:
            raise ConfigError(
                f"Schema {full_name} v{version} is not registered; add its .avsc file."
            ) from None

    def __iter__(self) -> Iterator[SchemaVersion]:
        for versions in self._by_name.values():
            yield from versions.values()
