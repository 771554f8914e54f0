"""The chunk ledger: duplicates and gaps per worker env, kept across trainer restarts."""

from __future__ import annotations

import dataclasses

import torch
from test_loop_resume import CountingLearner, Events, chunk, make_trainer

from coach_stream.core import ExperienceChunk
from coach_stream.testing.memory_control import MemoryControlLog
from coach_stream.testing.memory_log import MemoryLog
from coach_stream.testing.memory_store import MemoryCheckpointStore
from coach_stream.trainer.ledger import ChunkLedger
from coach_stream.trainer.state import TrainerState, state_from_bytes, state_to_bytes


def keyed(seq: int, worker: int = 0, env: int = 0) -> ExperienceChunk:
    return dataclasses.replace(chunk(seq), worker_id=worker, env_index=env)


def test_in_order_chunks_of_several_keys_are_neither_duplicates_nor_gaps() -> None:
    ledger = ChunkLedger()
    ledger.record([keyed(0), keyed(0, env=1), keyed(1), keyed(1, env=1), keyed(0, worker=3)])
    assert ledger.counters() == {"duplicate_chunks": 0, "chunk_gaps": 0}
    assert ledger.last_seqs == {"0/0": 1, "0/1": 1, "3/0": 0}


def test_a_repeated_or_older_chunk_is_a_duplicate_and_a_skip_counts_the_missing() -> None:
    ledger = ChunkLedger()
    ledger.record([keyed(0), keyed(1), keyed(1), keyed(0), keyed(5)])
    assert ledger.duplicates == 2
    assert ledger.gaps == 3  # 2, 3 and 4 never came
    assert ledger.last_seqs == {"0/0": 5}


def test_a_key_first_seen_mid_sequence_is_its_baseline() -> None:
    ledger = ChunkLedger()
    ledger.record([keyed(41), keyed(42)])
    assert ledger.counters() == {"duplicate_chunks": 0, "chunk_gaps": 0}


def test_the_ledger_survives_the_trainer_state_round_trip_and_old_states_load() -> None:
    state = TrainerState(
        version=3, positions={0: 7}, env_steps=70, counters={"duplicate_chunks": 1},
        learner={}, torch_rng=torch.get_rng_state(), generator_rng=torch.get_rng_state(),
        eval_returns=[], last_chunk_seqs={"0/0": 6},
    )  # fmt: skip
    assert state_from_bytes(state_to_bytes(state)).last_chunk_seqs == {"0/0": 6}
    older = dataclasses.replace(state, last_chunk_seqs={})
    assert state_from_bytes(state_to_bytes(older)).last_chunk_seqs == {}


def test_a_resumed_trainer_continues_the_ledger_and_counts_a_re_read_chunk() -> None:
    log, control, store = MemoryLog(), MemoryControlLog(), MemoryCheckpointStore()
    log.chunks.extend(keyed(seq) for seq in range(4))
    first = make_trainer(CountingLearner(publish=True), log, control, store)
    first.start()
    first.iterate()  # reads the 4 chunks, learns, publishes version 1 with its state
    assert first.ledger.last_seqs == {"0/0": 3}

    log.chunks.extend([keyed(3), keyed(4)])  # a chunk read twice, then the next one
    events = Events()
    resumed = make_trainer(CountingLearner(publish=True), log, control, store, events)
    resumed.start()
    resumed.iterate()
    assert resumed.ledger.last_seqs == {"0/0": 4}
    assert resumed.ledger.counters() == {"duplicate_chunks": 1, "chunk_gaps": 0}
    resumed._log_progress()
    [progress] = events.of("progress")[-1:]
    assert progress["rollout/duplicate_chunks"] == 1
    assert progress["rollout/chunk_gaps"] == 0
