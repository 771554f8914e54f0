"""Machine-readable progress: one JSON object per line on stdout.

Every process of a run (trainer, rollout workers, evaluator) reports through an
``EventSink`` (``coach_stream.core``) it is given, so loops stay testable (a list collects
events in tests) and the launcher can follow a run by parsing stdout. Human-readable
logging goes to stderr. This module sits beside ``core`` rather than in a loop's package,
so the trainer and the rollout side both import it without importing each other.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Mapping
from typing import TextIO


def _clean(value: object) -> object:
    if isinstance(value, float) and not math.isfinite(value):
        return None  # JSON has no NaN/inf; "unknown yet" reads better as null
    return value


class JsonLines:
    """Writes ``{"event": ..., "task": ..., "time": ..., **fields}`` lines and flushes each."""

    def __init__(self, stream: TextIO, task: str) -> None:
        self._stream, self._task = stream, task

    def __call__(self, event: str, fields: Mapping[str, object]) -> None:
        record: dict[str, object] = {"event": event, "task": self._task, "time": time.time()}
        record.update({key: _clean(value) for key, value in fields.items()})
        self._stream.write(json.dumps(record) + "\n")
        self._stream.flush()


class EventList:
    """Collects events in memory (tests, and in-process runs that inspect progress)."""

    def __init__(self) -> None:
        self.events: list[tuple[str, dict[str, object]]] = []

    def __call__(self, event: str, fields: Mapping[str, object]) -> None:
        self.events.append((event, dict(fields)))

    def of(self, event: str) -> list[dict[str, object]]:
        return [fields for name, fields in self.events if name == event]
