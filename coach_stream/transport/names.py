"""Every name coach_stream gives Kafka: a run's topics and the consumer groups.

All of them start with ``TOPIC_PREFIX``. The prefix is fixed (docs/decisions.md, issue 22):
no flag, variable or preset ever set it, and half the call sites ignored it, so a run
launched under another prefix would not have been found by its own tasks.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, replace

from coach_stream.errors import ConfigError
from coach_stream.runids import check_run_id

TOPIC_PREFIX = "coach-stream"
_MAX_TOPIC = 249
_KINDS = ("experience", "control", "dead-letter", "telemetry")  # RunTopics' field order


@dataclass(frozen=True)
class RunTopics:
    """The topics of one run: ``coach-stream.<run_id>.experience|control|dead-letter|telemetry``."""

    experience: str
    control: str
    dead_letter: str
    telemetry: str
    """Every task's progress events (``transport/telemetry.py``)."""

    @classmethod
    def for_run(cls, run_id: str) -> RunTopics:
        """``run_id``'s topics; ``ConfigError`` if the id is invalid or makes names too long."""
        check_run_id(run_id)
        base = f"{TOPIC_PREFIX}.{run_id}"
        if len(base) + len(".dead-letter") > _MAX_TOPIC:
            raise ConfigError(
                f"Run id {run_id!r} makes topic names longer than Kafka's {_MAX_TOPIC} "
                "characters; choose a shorter run id."
            )
        return cls(
            *(f"{base}.{kind}" for kind in ("experience", "control", "dead-letter", "telemetry"))
        )

    def reading_experience_of(self, source_run_id: str) -> RunTopics:
        """These topics, but with ``source_run_id``'s experience topic: a shadow learner's
        (``coach-stream attach``), which learns from another run's rollouts and announces,
        dead-letters and reports on its own topics."""
        return replace(self, experience=RunTopics.for_run(source_run_id).experience)


def is_run_topic(name: str) -> bool:
    """Whether ``name`` is a full topic name (``coach-stream.<run>.<kind>``), not a run id."""
    return name.startswith(f"{TOPIC_PREFIX}.") and name.count(".") >= 2


def consumer_group(role: str, run_id: str | None = None, *, private: bool = False) -> str:
    """``coach-stream[.<run_id>].<role>[.<random>]``: the one place group ids are made.

    ``private``: a fresh group for a reader that commits nothing (the id only satisfies
    librdkafka) and must not share a group's state.
    """
    parts = [TOPIC_PREFIX, *([run_id] if run_id else []), role]
    if private:
        parts.append(uuid.uuid4().hex)
    return ".".join(parts)


def trainer_group(run_id: str) -> str:
    """The group the trainer commits its read positions in (lag and backlog read it)."""
    return consumer_group("trainer", run_id)
