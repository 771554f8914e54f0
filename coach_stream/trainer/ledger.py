"""The trainer's chunk ledger: which ``chunk_seq`` it last took from each worker's env.

Every chunk carries ``chunk_seq``, monotonic per ``(worker_id, env_index)`` across worker
restarts (a restarted worker continues after its last chunk in the log). The trainer keeps
the last one it consumed per key, saved in its trainer state with the reader's positions,
so across trainer restarts too it can tell:

- a **duplicate**: a chunk at or below the last one of its key (the same experience read
  twice: a producer retry that was not idempotent, or a resume that re-read records the
  restored weights already hold);
- a **gap**: a chunk past the next expected one (acknowledged experience that vanished
  from the log, or records dead-lettered in between).

It counts and never drops: a chunk is only a claim made by whoever could write to the
topic, so a forged sequence number must not be able to make the trainer discard the real
chunks after it. The fault drills (``tests/faults/``) assert both counts stay 0; the
counts are in every progress event (``rollout/duplicate_chunks``, ``rollout/chunk_gaps``).
The first chunk of a key that the ledger has not seen is its baseline: a worker added
mid-run starts at 0, and a state saved before the ledger existed starts empty.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from coach_stream.core import ExperienceChunk


class ChunkLedger:
    """Last consumed ``chunk_seq`` per ``"<worker_id>/<env_index>"``, with the anomalies."""

    def __init__(self, last_seqs: Mapping[str, int] | None = None) -> None:
        self.last_seqs: dict[str, int] = dict(last_seqs or {})
        self.duplicates = 0
        self.gaps = 0
        """Chunks missing between consecutive ones of a key (their count, not the events)."""

    def record(self, chunks: Iterable[ExperienceChunk]) -> None:
        last_seqs = self.last_seqs
        for chunk in chunks:
            key = f"{chunk.worker_id}/{chunk.env_index}"
            seq = chunk.chunk_seq
            last = last_seqs.get(key)
            if last is None:
                last_seqs[key] = seq
            elif seq <= last:
                self.duplicates += 1
            else:
                self.gaps += seq - last - 1
                last_seqs[key] = seq

    def counters(self) -> dict[str, int]:
        return {"duplicate_chunks": self.duplicates, "chunk_gaps": self.gaps}

    def restore(self, last_seqs: Mapping[str, int], counters: Mapping[str, int]) -> None:
        self.last_seqs = dict(last_seqs)
        self.duplicates = counters.get("duplicate_chunks", 0)
        self.gaps = counters.get("chunk_gaps", 0)
