"""Experience on Kafka: settings and topic names, topic admin, the writer and the reader.

Every librdkafka client of coach_stream is built in this package (``transport.clients``
gives each one its logger and error callback): the experience writer and reader, the
control topic's publisher and subscriber (``transport.control``), the topic admin, and the
broker health probe the local stack uses (``admin.broker_answers``). Loops receive a
``core.ExperienceWriter``/``core.ExperienceReader`` and never know it is Kafka.

Names are imported on first use, so ``coach_stream.stack`` can probe a broker through
``transport.admin`` without loading the codec (numpy, fastavro).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from coach_stream.transport.admin import check_broker, ensure_run_topics, plan_run_topics
    from coach_stream.transport.names import RunTopics
    from coach_stream.transport.reader import KafkaExperienceReader, ReaderStats
    from coach_stream.transport.settings import KafkaSettings
    from coach_stream.transport.writer import (
        KafkaExperienceWriter,
        KafkaRecordProducer,
        WriterStats,
    )

_EXPORTS = {
    "KafkaExperienceReader": "reader",
    "KafkaExperienceWriter": "writer",
    "KafkaRecordProducer": "writer",
    "KafkaSettings": "settings",
    "ReaderStats": "reader",
    "RunTopics": "names",
    "WriterStats": "writer",
    "check_broker": "admin",
    "ensure_run_topics": "admin",
    "plan_run_topics": "admin",
}

__all__ = [
    "KafkaExperienceReader",
    "KafkaExperienceWriter",
    "KafkaRecordProducer",
    "KafkaSettings",
    "ReaderStats",
    "RunTopics",
    "WriterStats",
    "check_broker",
    "ensure_run_topics",
    "plan_run_topics",
]


def __getattr__(name: str) -> object:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
