"""In-memory implementations of the core protocols, for unit tests (no processes, no network)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    # mypy holds each fake to its protocol, every signature included (`make check`); an
    # isinstance of a runtime_checkable protocol would only compare method names.
    from coach_stream import core
    from coach_stream.testing.memory_control import (
        MemoryControlPublisher,
        MemoryControlSubscriber,
    )
    from coach_stream.testing.memory_log import (
        MemoryBacklog,
        MemoryExperienceReader,
        MemoryExperienceWriter,
    )
    from coach_stream.testing.memory_store import MemoryCheckpointStore

    _writer: type[core.ExperienceWriter] = MemoryExperienceWriter
    _reader: type[core.ExperienceReader] = MemoryExperienceReader
    _backlog: type[core.ExperienceBacklog] = MemoryBacklog
    _store: type[core.CheckpointStore] = MemoryCheckpointStore
    _publisher: type[core.ControlPublisher] = MemoryControlPublisher
    _subscriber: type[core.ControlSubscriber] = MemoryControlSubscriber
