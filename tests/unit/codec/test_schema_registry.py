"""The schema registry on hand-made schema directories: inlining, names, and clear errors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import avro.schema
import pytest

from coach_stream.codec import SchemaRegistry
from coach_stream.errors import ConfigError

POINT = {
    "type": "record",
    "name": "Point",
    "namespace": "geo",
    "fields": [{"name": "x", "type": "double"}],
}
KIND = {"type": "enum", "name": "Kind", "namespace": "geo", "symbols": ["A", "B"]}
BAD_FIXED = {"type": "fixed", "name": "Thing", "namespace": "geo"}  # no size
SHAPE = {
    "type": "record",
    "name": "Shape",
    "namespace": "geo",
    "fields": [
        {"name": "first", "type": "Point"},  # a short name, resolved in the namespace geo
        {"name": "rest", "type": {"type": "array", "items": "geo.Point"}},  # defined above
        {"name": "kinds", "type": {"type": "map", "values": "Kind"}},
        {"name": "maybe", "type": ["null", "geo.Kind"]},
        {"name": "count", "type": {"type": "long"}},
        {
            "name": "inner",
            "type": {
                "type": "record",
                "name": "Oops",
                "namespace": "other",
                "fields": [{"name": "at", "type": {"type": "map", "values": "geo.Point"}}],
            },
        },
    ],
}
# What Shape becomes: each named type spelled out at its first use, by name after that.
EXPANDED_SHAPE = {
    **SHAPE,
    "fields": [
        {"name": "first", "type": POINT},
        {"name": "rest", "type": {"type": "array", "items": "geo.Point"}},
        {"name": "kinds", "type": {"type": "map", "values": KIND}},
        {"name": "maybe", "type": ["null", "geo.Kind"]},
        {"name": "count", "type": {"type": "long"}},
        {
            "name": "inner",
            "type": {
                "type": "record",
                "name": "Oops",
                "namespace": "other",
                "fields": [{"name": "at", "type": {"type": "map", "values": "geo.Point"}}],
            },
        },
    ],
}


def write(directory: Path, name: str, schema: Any) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text(json.dumps(schema), encoding="utf-8")
    return path


@pytest.fixture
def geo(tmp_path: Path) -> Path:
    write(tmp_path, "Point.v1.avsc", POINT)
    write(tmp_path, "Kind.v1.avsc", KIND)
    write(tmp_path, "Shape.v1.avsc", SHAPE)
    return tmp_path


def test_references_are_inlined_once_with_their_namespaces(geo: Path) -> None:
    registry = SchemaRegistry.load(geo)
    shape = registry.latest("geo.Shape")
    assert shape.schema == EXPANDED_SHAPE
    assert (shape.full_name, shape.version, shape.source) == (
        "geo.Shape",
        1,
        str(geo / "Shape.v1.avsc"),
    )
    # A standard Avro schema: the Apache implementation parses it to the same fingerprint.
    assert (
        avro.schema.parse(json.dumps(shape.schema)).fingerprint("CRC-64-AVRO") == shape.fingerprint
    )
    assert registry.by_fingerprint(shape.fingerprint) is shape
    assert {entry.full_name for entry in registry} == {"geo.Point", "geo.Kind", "geo.Shape"}


def test_the_newest_version_is_the_reader_and_each_stays_reachable(geo: Path) -> None:
    write(
        geo,
        "Point.v2.avsc",
        {**POINT, "fields": [*POINT["fields"], {"name": "y", "type": "double", "default": 0.0}]},
    )
    registry = SchemaRegistry.load(geo)
    assert registry.latest("geo.Point").version == 2
    assert registry.get("geo.Point", 1).schema == POINT
    assert registry.get("geo.Point", 1).fingerprint != registry.get("geo.Point", 2).fingerprint


def test_unknown_names_and_versions_name_the_missing_file(geo: Path) -> None:
    registry = SchemaRegistry.load(geo)
    with pytest.raises(
        ConfigError, match=r"No schema named geo\.Line is registered; add its \.avsc"
    ):
        registry.latest("geo.Line")
    with pytest.raises(
        ConfigError, match=r"Schema geo\.Point v7 is not registered; add its \.avsc"
    ):
        registry.get("geo.Point", 7)
    assert registry.by_fingerprint(b"\x00" * 8) is None


def test_a_reference_to_an_undefined_type_names_the_file_to_add(tmp_path: Path) -> None:
    write(tmp_path, "Shape.v1.avsc", {**SHAPE, "fields": [{"name": "p", "type": "geo.sub.Line"}]})
    with pytest.raises(ConfigError, match=r"'geo\.sub\.Line' is not defined .* add Line\.v1\.avsc"):
        SchemaRegistry.load(tmp_path)


@pytest.mark.parametrize(
    ("name", "content", "match"),
    [
        ("Thing.v1.avsc", "{not json", r"Thing\.v1\.avsc cannot be read as JSON"),
        ("Thing.v1.avsc", "[]", r"Thing\.v1\.avsc must hold one named type"),
        ("Thing.v1.avsc", '{"type": "array", "items": "int"}', "must hold one named type"),
        (
            "Thing.v1.avsc",
            json.dumps({**POINT, "name": "Other"}),
            r"defines geo\.Other; name the file",
        ),
        ("Thing.v1.avsc", json.dumps(BAD_FIXED), "is not valid Avro"),
        ("Point.v1.avsc", json.dumps({**POINT, "fields": "x"}), r"'geo\.Point' needs 'fields'"),
        ("Point.v1.avsc", json.dumps({**POINT, "fields": ["x"]}), "a 'type' each"),
    ],
)
def test_a_bad_schema_file_is_one_config_error_naming_it(
    tmp_path: Path, name: str, content: str, match: str
) -> None:
    (tmp_path / name).write_text(content, encoding="utf-8")
    with pytest.raises(ConfigError, match=match):
        SchemaRegistry.load(tmp_path)


def test_one_version_defined_twice_names_both_files(tmp_path: Path) -> None:
    first = write(tmp_path / "a", "Point.v1.avsc", POINT)
    second = write(tmp_path / "b", "Point.v1.avsc", POINT)
    with pytest.raises(ConfigError, match="defined twice") as error:
        SchemaRegistry.load(tmp_path / "a", tmp_path / "b")
    assert str(first) in str(error.value) and str(second) in str(error.value)
    assert "remove one" in str(error.value)


def test_a_directory_without_schemas_is_named(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=f"No \\*\\.avsc schema files in {tmp_path}"):
        SchemaRegistry.load(tmp_path)
