"""A SYNC worker pushes its share out before waiting for v+1; an ASYNC worker never blocks."""

from __future__ import annotations

from typing import Any

from coach_stream.config import load_preset
from coach_stream.core import EncodedChunk, ExperienceChunk


class _CountingWriter:
    """Wraps the worker's writer and counts flushes (the writes still reach the log)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.flushes = 0
        self.written_before_flush: list[int] = []
        self.written = 0

    def write(self, chunk: ExperienceChunk) -> None:
        self.written += 1
        self.inner.write(chunk)

    def write_encoded(self, record: EncodedChunk) -> None:
        self.written += 1
        self.inner.write_encoded(record)

    def flush(self, timeout: float | None = None) -> None:
        self.flushes += 1
        self.written_before_flush.append(self.written)
        self.inner.flush(timeout)

    def acknowledged(self) -> Any:
        return self.inner.acknowledged()


def test_sync_worker_flushes_each_share_before_waiting(in_process_run: Any) -> None:
    run = in_process_run(load_preset("cartpole-ppo"), workers=1, evaluator=False)
    run.start()
    worker = run.rollouts[0]
    worker.writer = writer = _CountingWriter(worker.writer)
    for _ in range(2):
        worker.act_share()
        worker.sync(0.01)  # v+1 will not come: the trainer does not iterate here
    # linger.ms would otherwise hold the share back while the trainer waits for it
    assert writer.flushes == 2
    assert writer.written_before_flush[0] > 0


def test_async_worker_does_not_flush_between_shares(in_process_run: Any) -> None:
    run = in_process_run(load_preset("cartpole-dqn"), workers=1, evaluator=False)
    run.start()
    worker = run.rollouts[0]
    worker.writer = writer = _CountingWriter(worker.writer)
    for _ in range(2):
        worker.act_share()
        worker.sync(0.01)
    assert writer.written > 0 and writer.flushes == 0
