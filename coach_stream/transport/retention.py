"""How long a run's experience topic keeps its data: parsed from the preset or the CLI.

A setting of the topics (``admin.ensure_run_topics`` applies it), so it lives with the
transport settings; ``replay`` and ``config`` read it from here.

``experience_retention`` is ``forever`` (the default: replay needs the data), a time
(``7d``, ``12h``, ``90m``, ``3600s``, ``500ms``), a size per partition (``50GiB``, ``200MB``),
or both joined by ``,`` (``30d,100GiB``: whichever is reached first). Kafka applies it when
the topic is created: it deletes whole old log segments once they are older than the time
or the partition is larger than the size, so the oldest records go first and a replay
(or a resuming DQN's refill) finds the partition's first offset moved forward.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from confluent_kafka import KafkaException
from confluent_kafka.admin._config import ConfigResource

from coach_stream.errors import ConfigError
from coach_stream.transport.settings import KafkaSettings

_TIME = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000, "w": 604_800_000}
_SIZE = {
    "b": 1,
    "kb": 1000,
    "mb": 1000**2,
    "gb": 1000**3,
    "tb": 1000**4,
    "kib": 1024,
    "mib": 1024**2,
    "gib": 1024**3,
    "tib": 1024**4,
}
_SIZE_NAMES = [
    (name, 1024 ** (k + 1) if name.endswith("iB") else 1000 ** (k + 1))
    for k, names in reversed(
        list(enumerate([("KiB", "kB"), ("MiB", "MB"), ("GiB", "GB"), ("TiB", "TB")]))
    )
    for name in names
] + [("B", 1)]
_FORMS = (
    "forever, a time (7d, 12h, 90m, 3600s), a size per partition (50GiB, 200MB) "
    "or both (30d,100GiB)"
)


@dataclass(frozen=True)
class Retention:
    """Kafka's ``retention.ms`` and ``retention.bytes`` (-1: unlimited)."""

    ms: int = -1
    bytes: int = -1

    @property
    def forever(self) -> bool:
        return self.ms < 0 and self.bytes < 0

    def __str__(self) -> str:
        return describe(self.ms, self.bytes)


FOREVER = Retention()


def parse_retention(text: str) -> Retention:
    """The retention ``text`` names; ``ConfigError`` naming the accepted forms otherwise."""
    value = str(text).strip().lower().replace(" ", "")
    if value in ("forever", "infinite", "-1", ""):
        return FOREVER
    ms = size = -1
    for part in value.split(","):
        match = re.fullmatch(r"(\d+(?:\.\d+)?)([a-z]+)", part)
        unit = match[2] if match else ""
        if match and unit in _TIME and ms < 0:
            ms = int(float(match[1]) * _TIME[unit])
        elif match and unit in _SIZE and size < 0:
            size = int(float(match[1]) * _SIZE[unit])
        else:
            raise ConfigError(f"Experience retention {text!r} is not understood; use {_FORMS}.")
    if ms == 0 or size == 0:
        raise ConfigError(
            f"Experience retention {text!r} would delete every record at once; use a "
            "positive time or size, or forever."
        )
    return Retention(ms, size)


def describe(ms: int, size: int) -> str:
    """``30d, 100GiB per partition`` / ``forever``, for humans."""
    parts = []
    if ms >= 0:
        for unit in ("w", "d", "h", "m", "s", "ms"):
            if ms % _TIME[unit] == 0:
                parts.append(f"{ms // _TIME[unit]}{unit}")
                break
    if size >= 0:
        for name, factor in _SIZE_NAMES:
            if size % factor == 0:
                parts.append(f"{size // factor}{name} per partition")
                break
    return ", ".join(parts) if parts else "forever"


def describe_retention(settings: KafkaSettings, topic: str, timeout: float) -> str:
    """The topic's retention as the broker reports it (``describe_configs``)."""
    from coach_stream.transport import clients
    from coach_stream.transport.admin import unreachable

    with clients.admin(settings) as admin:
        try:
            futures = admin.describe_configs([ConfigResource("topic", topic)])
            configs = next(iter(futures.values())).result(timeout=timeout)
        except KafkaException as exc:
            raise unreachable(settings, timeout, exc.args[0]) from exc
    ms = int(configs["retention.ms"].value) if "retention.ms" in configs else -1
    size = int(configs["retention.bytes"].value) if "retention.bytes" in configs else -1
    return describe(ms, size)
