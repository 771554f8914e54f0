"""An in-memory experience log: a writer and readers sharing one list, positions = indexes.

For unit tests of rollout and trainer loops (no processes, no network). Set
``through_codec=True`` to push every chunk through the real wire codec, so a test also
catches chunks the Kafka path would refuse.
"""

from __future__ import annotations

from collections.abc import Mapping

from coach_stream.codec import decode_chunk, encode_chunk
from coach_stream.core import ClosingContext, ExperienceChunk, Positions


class MemoryLog:
    """The shared log: one partition (0); ``chunks[i]`` sits at offset ``i``."""

    def __init__(self, *, through_codec: bool = False) -> None:
        self.chunks: list[ExperienceChunk] = []
        self.through_codec = through_codec
        self.committed: Positions = {}


class _Context(ClosingContext):
    closed = False

    def close(self) -> None:
        self.closed = True


class MemoryExperienceWriter(_Context):
    """Appends to the log; ``flush`` has nothing to wait for."""

    def __init__(self, log: MemoryLog) -> None:
        self.log = log

    def write(self, chunk: ExperienceChunk) -> None:
        if self.closed:
            raise RuntimeError("write() after close()")
        self.log.chunks.append(
            decode_chunk(encode_chunk(chunk)) if self.log.through_codec else chunk
        )

    def flush(self, timeout: float | None = None) -> None:
        return None


class MemoryExperienceReader(_Context):
    """Reads the log from ``positions`` on; never waits (``timeout`` is ignored)."""

    def __init__(self, log: MemoryLog) -> None:
        self.log = log
        self._next = 0

    def read(self, max_chunks: int, timeout: float) -> list[ExperienceChunk]:
        batch = self.log.chunks[self._next : self._next + max_chunks]
        self._next += len(batch)
        return batch

    def positions(self) -> Positions:
        return {0: self._next}

    def seek(self, positions: Mapping[int, int]) -> None:
        self._next = positions.get(0, self._next)

    def commit(self) -> None:
        self.log.committed = self.positions()

    def at_end(self) -> bool:
        return self._next >= len(self.log.chunks)
