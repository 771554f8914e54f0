"""A shadow learner's topics: its own, but for the experience topic it reads."""

from __future__ import annotations

from coach_stream.transport.names import RunTopics


def test_a_shadow_reads_the_source_experience_and_writes_its_own_topics() -> None:
    own, source = RunTopics.for_run("shadow"), RunTopics.for_run("source")
    shadow = own.reading_experience_of("source")

    assert shadow.experience == source.experience == "coach-stream.source.experience"
    assert (shadow.control, shadow.dead_letter, shadow.telemetry) == (
        own.control, own.dead_letter, own.telemetry,
    )  # fmt: skip
