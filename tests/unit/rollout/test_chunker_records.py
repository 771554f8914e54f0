"""The chunker's records written from its columns (``add_encoded``: ``codec.compiled``) are
the bytes ``encode_chunk`` makes of the chunks ``add`` cuts: for flat and frame
observations, discrete and continuous actions, with and without behaviour columns,
episodes ending and truncated at any step, flushes at a new version, and ``chunk_seq``s
continued from the log."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pytest
from chunker_steps import KINDS, random_steps

from coach_stream.codec import decode_chunk, encode_chunk
from coach_stream.codec.compiled import RecordWriter
from coach_stream.core import EncodedChunk, ExperienceChunk
from coach_stream.errors import EncodeError
from coach_stream.rollout import chunker as chunker_module
from coach_stream.rollout.chunker import Chunker
from coach_stream.testing.memory_log import MemoryExperienceWriter, MemoryLog


def _run(
    kind: str, behaviour: bool, encoded: bool, num_envs: int, chunk_steps: int, seed: int,
    worker_id: int = 2, count: int = 60, early: list[int] | None = None,
) -> list[Any]:  # fmt: skip
    """``count`` random vector steps, a flush at a new version on step 41, and the last
    flush; the next observations in float64, converted to the column's dtype as an env's
    are. ``early``: the steps at which ``add`` handed back records before step 41."""
    obs_shape, obs_dtype, action_shape, action_dtype = KINDS[kind]
    chunker = Chunker("run-r", worker_id, num_envs, chunk_steps, obs_shape,
                      np.dtype(obs_dtype), behaviour, action_shape, action_dtype)  # fmt: skip
    if encoded:  # compiled, unless a test took the compiled records away
        assert (chunker._records is not None) == (chunker_module.close_chunks_kernel() is not None)
    add = chunker.add_encoded if encoded else chunker.add
    flush = chunker.flush_encoded if encoded else chunker.flush
    steps = random_steps(kind, num_envs, behaviour, seed, count, next_dtype=np.float64)
    chunker.start(next(steps), version=5, next_seqs=[3 * i for i in range(num_envs)])
    out: list[Any] = []
    for i, step in enumerate(steps):
        handed = add(*step)
        if handed and i < 41 and early is not None:
            early.append(i)
        out += handed
        if i == 41:
            out += flush()
            chunker.version = 6
    return out + flush()


def _same_record(record: EncodedChunk, chunk: ExperienceChunk) -> None:
    decoded = decode_chunk(record.value)  # the definitive decoder's checks too
    assert (record.key, record.chunk_seq, record.episode_return) == (
        chunk.key, chunk.chunk_seq, chunk.episode_return)  # fmt: skip
    assert abs(decoded.created_at_ms - chunk.created_at_ms) < 60_000
    assert encode_chunk(replace(chunk, created_at_ms=decoded.created_at_ms)) == record.value


@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("behaviour", [True, False])
@pytest.mark.parametrize(("num_envs", "chunk_steps"), [(1, 1), (1, 4), (5, 7), (8, 32)])
def test_records_from_the_columns_are_encode_chunks_bytes(
    kind: str, behaviour: bool, num_envs: int, chunk_steps: int
) -> None:
    records = _run(kind, behaviour, True, num_envs, chunk_steps, seed=7 * num_envs + chunk_steps)
    chunks = _run(kind, behaviour, False, num_envs, chunk_steps, seed=7 * num_envs + chunk_steps)
    assert len(records) == len(chunks) > num_envs
    assert any(c.episode_return is not None for c in chunks)
    assert any(c.episode_return is None and c.num_steps > 0 for c in chunks)
    assert {c.policy_version for c in chunks} == {5, 6}
    for record, chunk in zip(records, chunks, strict=True):
        _same_record(record, chunk)


@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("spans", [1, 2, 8])
@pytest.mark.parametrize("kept", [0, 3, 128])
def test_chunks_kept_to_be_encoded_together_come_back_in_order_as_encode_chunks_bytes(
    kind: str, spans: int, kept: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each env's rows hold ``spans`` chunks: finished chunks wait there and are encoded when
    an env's rows run out (or at a flush), its open chunk moved back to its first rows.
    ``kept``: the steps ``add_encoded`` keeps before writing them (0: it writes each)."""
    monkeypatch.setattr(chunker_module, "_MAX_SPANS", spans)
    monkeypatch.setattr(chunker_module, "_KEPT_STEPS", kept)
    early: list[int] = []
    records = _run(kind, True, True, 3, 5, seed=spans, count=400, early=early)
    chunks = _run(kind, True, False, 3, 5, seed=spans, count=400)
    assert len(records) == len(chunks) > 3 * 400 // 5
    for record, chunk in zip(records, chunks, strict=True):
        _same_record(record, chunk)
    # one chunk per env: handed back as they finish; more: only once an env's rows run out,
    # at a step where the kept steps are written
    if spans == 1:
        assert early and early[0] < 5
    else:
        assert min(early, default=41) >= 5 * spans - 1
        assert all((i + 1) % kept == 0 for i in early) if kept else early


def test_a_drain_hands_back_the_finished_chunks_and_keeps_the_open_ones() -> None:
    kind = "flat float32, discrete"
    chunker = Chunker("run-r", 0, 2, 4, (4,), np.dtype(np.float32), True)
    steps = random_steps(kind, 2, True, seed=3, count=30)
    chunker.start(next(steps), version=1)
    finished = [r for step in steps for r in chunker.add_encoded(*step)]
    assert not finished  # 30 steps of 2 envs fit in their rows (8 chunks each): all kept
    drained = chunker.drain_encoded()
    assert len(drained) >= 2 * 30 // 4
    assert chunker.drain_encoded() == []
    rest = chunker.flush_encoded()  # the open chunks, continuing each env's chunk_seqs
    assert rest and {r.key for r in rest} <= {"0/0", "0/1"}
    for key in {r.key for r in rest}:
        seqs = [r.chunk_seq for r in drained + rest if r.key == key]
        assert seqs == list(range(len(seqs)))


def test_without_the_compiled_records_the_chunks_are_encoded_one_by_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(chunker_module, "close_chunks_kernel", lambda: None)
    kind = "flat float32, discrete"
    assert Chunker("r", 0, 2, 4, (4,), np.dtype(np.float32), behaviour=False)._records is None
    records = _run(kind, True, True, 3, 5, seed=1)
    chunks = _run(kind, True, False, 3, 5, seed=1)
    assert len(records) == len(chunks) > 3
    for record, chunk in zip(records, chunks, strict=True):
        _same_record(record, chunk)


def test_a_field_beyond_its_wire_limit_is_an_encode_error() -> None:
    with pytest.raises(EncodeError, match=r"worker_id is 2147483648, outside 0\.\.2147483647"):
        _run("flat float32, discrete", False, True, 2, 3, seed=0, worker_id=2**31)


def test_the_memory_log_holds_the_records_chunks_and_refuses_a_mislabelled_one() -> None:
    records = _run("flat float32, discrete", True, True, 2, 3, seed=4)
    log = MemoryLog()
    writer = MemoryExperienceWriter(log)
    for record in records:
        writer.write_encoded(record)
    assert [c.key for c in log.chunks] == [r.key for r in records]
    with pytest.raises(ValueError, match="holds"):
        writer.write_encoded(replace(records[0], chunk_seq=records[0].chunk_seq + 1))


def test_the_record_writer_refuses_columns_it_cannot_read_where_they_lie() -> None:
    column = np.zeros((4, 2), np.float32)
    with pytest.raises(ValueError, match="C-contiguous"):
        RecordWriter("r", (column[:, :1], *(column,) * 5))  # a strided view
    with pytest.raises(EncodeError, match="does not carry"):
        RecordWriter("r", (column.astype(">f4"), *(column,) * 5))  # big-endian
