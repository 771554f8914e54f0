"""``--from`` / ``--to``: where a replay starts and stops in a topic, parsed once at the edge.

A bound is one of: ``earliest`` / ``latest``; an offset applied to every partition
(``1200``); per-partition offsets (``0:1200,1:900``); or a time, ISO 8601 with a zone
(``2026-12-02T18:00:00Z``) or epoch milliseconds (``@1764698400000``). A time selects, in
each partition, the first record whose timestamp is at or after it (Kafka's
``offsets_for_times``). The start is inclusive, the end exclusive.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime

from coach_stream.errors import ConfigError

_FORMATS = (
    "earliest, latest, an offset (1200), per-partition offsets (0:1200,1:900), an ISO 8601 "
    "time with a zone (2026-12-02T18:00:00Z) or epoch milliseconds (@1764698400000)"
)


@dataclass(frozen=True)
class Bound:
    """One end of a range: exactly one of its fields says where (none: earliest/latest)."""

    offset: int | None = None
    offsets: dict[int, int] = field(default_factory=dict)
    timestamp_ms: int | None = None
    text: str = ""


EARLIEST = Bound(text="earliest")
LATEST = Bound(text="latest")


def parse_bound(text: str | None, option: str = "--from") -> Bound:
    """The bound ``text`` names; ``ConfigError`` naming the accepted forms otherwise."""
    if text is None:
        return EARLIEST if option == "--from" else LATEST
    value = text.strip()
    if value in ("earliest", "beginning") and option == "--from":
        return EARLIEST
    if value in ("latest", "end") and option == "--to":
        return LATEST
    if re.fullmatch(r"\d+", value):
        return Bound(offset=int(value), text=value)
    if re.fullmatch(r"\d+:\d+(,\d+:\d+)*", value):
        pairs = (item.split(":") for item in value.split(","))
        return Bound(offsets={int(p): int(o) for p, o in pairs}, text=value)
    if re.fullmatch(r"@\d+", value):
        return Bound(timestamp_ms=int(value[1:]), text=value)
    try:
        when = datetime.fromisoformat(value)
    except ValueError:
        when = None
    if when is not None:
        if when.tzinfo is None:
            raise ConfigError(
                f"{option} {text!r} has no time zone; add one (e.g. {value}Z or {value}+00:00)."
            )
        return Bound(timestamp_ms=int(when.timestamp() * 1000), text=value)
    raise ConfigError(f"{option} {text!r} is not a position; use {_FORMATS}.")
