"""Experience on Kafka: settings and topic names, topic admin, the writer and the reader.

Only this package (and ``transport.control``) speaks librdkafka; loops receive a
``core.ExperienceWriter``/``core.ExperienceReader`` and never know it is Kafka.
"""

from __future__ import annotations

from coach_stream.transport.admin import check_broker, ensure_run_topics, plan_run_topics
from coach_stream.transport.reader import KafkaExperienceReader, ReaderStats
from coach_stream.transport.settings import KafkaSettings, RunTopics
from coach_stream.transport.writer import KafkaExperienceWriter, KafkaRecordProducer, WriterStats

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
