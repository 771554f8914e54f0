"""An in-memory experience log: a writer and readers sharing one list, positions = indexes.

For unit tests of rollout and trainer loops (no processes, no network). Set
``through_codec=True`` to push every chunk through the real wire codec, so a test also
catches chunks the Kafka path would refuse.
"""

from __future__ import annotations

from collections.abc import Mapping

from coach_stream.codec import ChunkSpec, decode_chunk, encode_chunk
from coach_stream.core import ClosingContext, EncodedChunk, ExperienceChunk, Positions
from coach_stream.errors import InvalidChunkError


class MemoryLog:
    """The shared log: one partition (0); ``chunks[i]`` sits at offset ``i``.

    ``dead_letters`` plays ``<run>.dead-letter``: (offset, reason) of each chunk a reader
    with a ``ChunkSpec`` set aside.
    """

    def __init__(self, *, through_codec: bool = False) -> None:
        self.chunks: list[ExperienceChunk] = []
        self.through_codec = through_codec
        self.committed: Positions = {}
        self.dead_letters: list[tuple[int, str]] = []


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

    def write_encoded(self, record: EncodedChunk) -> None:
        """Decoded again (the definitive decoder's checks): what the log holds is chunks."""
        if self.closed:
            raise RuntimeError("write_encoded() after close()")
        chunk = decode_chunk(record.value)
        if chunk.key != record.key or chunk.chunk_seq != record.chunk_seq:
            raise ValueError(f"record {record.key}#{record.chunk_seq} holds {chunk.key}#"
                             f"{chunk.chunk_seq}")  # fmt: skip
        self.log.chunks.append(chunk)

    def flush(self, timeout: float | None = None) -> None:
        return None

    def acknowledged(self) -> Mapping[str, int]:
        """Everything appended is acknowledged: the last chunk_seq of each key in the log."""
        return {chunk.key: chunk.chunk_seq for chunk in self.log.chunks}

    def next_chunk_seqs(self, worker_id: int, num_envs: int) -> list[int]:
        seqs = [0] * num_envs
        for chunk in self.log.chunks:  # in log order: the last one of each env wins
            if chunk.worker_id == worker_id and chunk.env_index < num_envs:
                seqs[chunk.env_index] = chunk.chunk_seq + 1
        return seqs


class MemoryBacklog:
    """``core.ExperienceBacklog`` of a ``MemoryLog``: chunks past the last committed offset."""

    def __init__(self, log: MemoryLog) -> None:
        self.log = log

    def unread(self) -> int | None:
        if not self.log.committed:
            return None  # like Kafka before the trainer's first commit
        return len(self.log.chunks) - self.log.committed.get(0, 0)


class MemoryExperienceReader(_Context):
    """Reads the log from ``positions`` on; never waits (``timeout`` is ignored).

    With a ``spec`` it checks each chunk like the Kafka reader does: one that does not fit
    the run is recorded in ``log.dead_letters`` with the reason and skipped.
    """

    def __init__(self, log: MemoryLog, spec: ChunkSpec | None = None) -> None:
        self.log = log
        self.spec = spec
        self._next = 0
        self.dead_lettered = 0

    def read(self, max_chunks: int, timeout: float) -> list[ExperienceChunk]:
        start = self._next
        batch = self.log.chunks[start : start + max_chunks]
        self._next += len(batch)
        if self.spec is None:
            return batch
        kept: list[ExperienceChunk] = []
        for offset, chunk in enumerate(batch, start):
            try:
                self.spec.check(chunk)
            except InvalidChunkError as error:
                self.log.dead_letters.append((offset, str(error)))
                self.dead_lettered += 1
            else:
                kept.append(chunk)
        return kept

    def positions(self) -> Positions:
        return {0: self._next}

    def seek(self, positions: Mapping[int, int]) -> None:
        self._next = positions.get(0, self._next)

    def commit(self) -> None:
        self.log.committed = self.positions()

    def at_end(self) -> bool:
        return self._next >= len(self.log.chunks)
