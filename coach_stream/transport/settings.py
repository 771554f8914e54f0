"""Kafka settings and a run's topic names; librdkafka's dotted keys exist only here.

The rest of the code passes one frozen ``KafkaSettings`` around; the writer, reader and
admin turn it into librdkafka dictionaries at the last moment, with the delivery
guarantees of the design (idempotence, ``acks=all``, no auto-commit) fixed and not
overridable through ``extra``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from coach_stream.errors import ConfigError
from coach_stream.runids import check_run_id

ConfigValue = str | int | float | bool
_GUARANTEES = {
    "enable.idempotence",
    "acks",
    "enable.auto.commit",
    "enable.auto.offset.store",
    "partitioner",  # transport.tail finds a key's partition by recomputing it
}
_MAX_TOPIC = 249
_CONNECTION_KEYS = ("security.", "sasl.", "ssl.", "socket.", "broker.", "client.")


class KafkaSettings(BaseModel):
    """How to reach the broker and how to batch; validated once at the entry point."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    bootstrap_servers: str = Field(min_length=1)
    topic_prefix: str = "coach-stream"
    client_id: str = "coach-stream"
    compression: Literal["lz4", "zstd", "snappy", "gzip", "none"] = "none"
    """Off by default: float observations do not compress (a CartPole chunk's 528 bytes of
    observations deflate to 539), yet lz4 took ~10 % of a rollout loop's CPU and the broker
    decompresses every batch to validate it (zstd: ~40 % of a broker core). Choose lz4 or
    zstd for image observations, where it pays for itself."""
    linger_ms: int = Field(default=20, ge=0, le=60_000)
    """How long the producer waits to fill a batch: throughput for some latency. 20 ms cut
    the broker's CPU for a full-speed CartPole worker from ~25 % to ~8 % of a core vs 5 ms;
    a SYNC worker flushes at the end of each share, so on-policy runs pay no latency."""
    batch_size: int = Field(default=4_000_000, ge=1, le=2_147_483_647)
    """Largest produce batch per partition, in bytes."""
    max_message_bytes: int = Field(default=16 * 1024 * 1024, ge=1024, le=1_000_000_000)
    """Largest record (an Atari-size chunk of 64 steps is ~1.8 MB); also the topic limit."""
    delivery_timeout_ms: int = Field(default=120_000, ge=1_000)
    request_timeout_ms: int = Field(default=30_000, ge=1_000)
    extra: dict[str, str] = Field(default_factory=dict)
    """Additional librdkafka settings; they cannot weaken the delivery guarantees."""

    @field_validator("topic_prefix")
    @classmethod
    def _valid_prefix(cls, value: str) -> str:
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", value):
            raise ValueError("topic_prefix may hold only letters, digits, '.', '_' and '-'")
        return value

    @field_validator("extra")
    @classmethod
    def _no_weakened_guarantees(cls, value: dict[str, str]) -> dict[str, str]:
        fixed = sorted(_GUARANTEES & value.keys())
        if fixed:
            raise ValueError(f"{', '.join(fixed)} are fixed by coach_stream's delivery design")
        return value

    def _common(self) -> dict[str, ConfigValue]:
        return {"bootstrap.servers": self.bootstrap_servers, "client.id": self.client_id}

    def producer_config(self) -> dict[str, ConfigValue]:
        return {
            **self._common(),
            "enable.idempotence": True,
            "acks": "all",
            # librdkafka's default, pinned: a key's partition is CRC-32(key) % partitions,
            # which a restarted worker recomputes to find its last chunk_seqs (tail.py).
            "partitioner": "consistent_random",
            "compression.type": self.compression,
            "linger.ms": self.linger_ms,
            "batch.size": self.batch_size,
            "batch.num.messages": 100_000,
            "message.max.bytes": self.max_message_bytes + 4096,
            "queue.buffering.max.kbytes": 1_048_576,
            "delivery.timeout.ms": self.delivery_timeout_ms,
            "request.timeout.ms": self.request_timeout_ms,
            **self.extra,
        }

    def consumer_config(self, group_id: str) -> dict[str, ConfigValue]:
        return {
            **self._common(),
            "group.id": group_id,
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "auto.offset.reset": "earliest",
            "fetch.max.bytes": max(52_428_800, self.max_message_bytes * 2),
            "max.partition.fetch.bytes": max(8_388_608, self.max_message_bytes),
            "receive.message.max.bytes": max(52_428_800, self.max_message_bytes * 2) + 65_536,
            "fetch.wait.max.ms": 50,
            "queued.max.messages.kbytes": 262_144,
            **self.extra,
        }

    def admin_config(self) -> dict[str, ConfigValue]:
        connection = {k: v for k, v in self.extra.items() if k.startswith(_CONNECTION_KEYS)}
        return {**self._common(), **connection}


@dataclass(frozen=True)
class RunTopics:
    """The topics of one run: ``<prefix>.<run_id>.experience|control|dead-letter|telemetry``."""

    experience: str
    control: str
    dead_letter: str

    @property
    def telemetry(self) -> str:
        """Every task's progress events (derived, so existing constructors stay valid)."""
        return self.experience.removesuffix(".experience") + ".telemetry"

    @classmethod
    def for_run(cls, run_id: str, prefix: str = "coach-stream") -> RunTopics:
        check_run_id(run_id)
        base = f"{prefix}.{run_id}"
        if len(base) + len(".dead-letter") > _MAX_TOPIC:
            raise ConfigError(
                f"Run id {run_id!r} makes topic names longer than Kafka's {_MAX_TOPIC} "
                "characters; choose a shorter run id or topic prefix."
            )
        return cls(f"{base}.experience", f"{base}.control", f"{base}.dead-letter")
