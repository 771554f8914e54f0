"""What a check finds, and query values parsed as Nomad (Go) parses them."""

from __future__ import annotations

from dataclasses import dataclass, field

_GO_TRUE = {"1", "t", "T", "TRUE", "true", "True"}
_GO_FALSE = {"0", "f", "F", "FALSE", "false", "False"}


@dataclass
class Problems:
    """Type errors Nomad refuses, and unknown keys Nomad silently ignores."""

    errors: list[str] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.errors or self.unknown)


def go_parse_bool(text: str) -> bool:
    """Go's strconv.ParseBool, which Nomad uses for boolean query parameters."""
    if text in _GO_TRUE:
        return True
    if text in _GO_FALSE:
        return False
    raise ValueError(f"strconv.ParseBool: parsing {text!r}: invalid syntax")


def check_scalar(name: str, kind: str, text: str) -> list[str]:
    """A query value against its declared scalar type, parsed as Nomad (Go) parses it."""
    try:
        if kind == "boolean":
            go_parse_bool(text)
        elif kind == "integer":
            int(text)
    except ValueError:
        return [f"query parameter {name}={text!r} is not a valid {kind}"]
    return []
