"""Where a trainer resumes from: its state, the newest one that loads, and the replay refill.

After ``kill -9`` the newest ``runs/<run_id>/trainer/<v>.pt`` restores model, optimizer,
counters and RNG; the reader seeks to its stored positions; an off-policy learner first
re-reads the log up to those positions into its replay buffer (the log is the replay). With
K data-parallel ranks, a state holds every rank's part: its positions, its ledger of chunk
sequence numbers and its counters, gathered by rank 0 when it publishes.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import torch

from coach_stream.checkpoints.keys import trainer_key, trainer_prefix
from coach_stream.checkpoints.retention import stored_trainer_versions
from coach_stream.core import (
    CheckpointStore,
    ExperienceChunk,
    ExperienceReader,
    Learner,
    PolicyVersion,
)
from coach_stream.errors import (
    CheckpointError,
    CheckpointNotFoundError,
    IntegrityError,
    ResumeError,
)
from coach_stream.trainer.ledger import ChunkLedger
from coach_stream.trainer.state import TrainerState, state_from_bytes

log = logging.getLogger(__name__)

_REFILL_READ_S = 0.5  # one refill read's wait: short, so the idle limit is checked often


def state_part(
    reader: ExperienceReader, ledger: ChunkLedger, counters: Mapping[str, int]
) -> dict[str, Any]:
    """One rank's share of a trainer state: where it read to and what it counted."""
    return {
        "positions": dict(reader.positions()),
        "counters": {**counters, **ledger.counters()},
        "last_seqs": dict(ledger.last_seqs),
    }


def merged_state(
    parts: Iterable[Mapping[str, Any]],
    *,
    version: int,
    env_steps: int,
    learner: Learner,
    generator: torch.Generator,
    eval_returns: list[float],
) -> TrainerState:
    """The resume point: every rank's positions, and counters summed."""
    positions: dict[int, int] = {}
    counters: Counter[str] = Counter()
    last_seqs: dict[str, int] = {}
    for part in parts:
        positions.update(part["positions"])
        counters.update(part["counters"])
        for key, seq in part["last_seqs"].items():
            # every rank holds the whole ledger it resumed with, so a rank's copy of
            # another rank's key is stale: the newest (highest) chunk_seq is the truth
            last_seqs[key] = max(seq, last_seqs.get(key, seq))
    return TrainerState(
        version=version,
        positions=positions,
        env_steps=env_steps,
        counters=dict(counters),
        learner=learner.state_dict(),
        torch_rng=torch.get_rng_state(),
        generator_rng=generator.get_state(),
        eval_returns=eval_returns,
        last_chunk_seqs=last_seqs,
    )


def newest_state(store: CheckpointStore, run_id: str) -> TrainerState | None:
    """The newest stored trainer state that loads; None when there is none at all.

    An unloadable (damaged) or vanished state is skipped for the next older one: that
    is what keeping ``keep_trainer_states`` of them is for. A store outage is raised.
    """
    versions = stored_trainer_versions(store, run_id)
    first_error: CheckpointError | None = None
    for version in reversed(versions):
        uri = store.uri(trainer_key(run_id, version))
        try:
            return state_from_bytes(store.get(uri))
        except (IntegrityError, CheckpointNotFoundError) as error:
            log.warning("skipping trainer state %s: %s", uri, error)
            first_error = first_error or error
    if first_error is not None:
        where = store.uri(trainer_prefix(run_id).rstrip("/"))
        raise ResumeError(
            f"none of the {len(versions)} trainer states in {where} can be loaded (the "
            f"newest: {first_error}); restore them or start a new run id."
        )
    return None


def lost_state_message(store: CheckpointStore, run_id: str, newest: PolicyVersion) -> str:
    """Versions were announced but no state is stored: say why starting over is refused."""
    where = store.uri(trainer_prefix(run_id).rstrip("/"))
    return (
        f"run {run_id} announced policy versions up to {newest.version} "
        f"but {where} holds no trainer state, so the checkpoint store was emptied or "
        "is not the one the run used; point the trainer at the run's store (e.g. "
        "--checkpoints, STORAGE_EMULATOR_HOST) or start a new run id instead of "
        "silently training from scratch."
    )


def refill(
    reader: ExperienceReader,
    learner: Learner,
    target: dict[int, int],
    idle_s: float,
    clock: Callable[[], float],
) -> tuple[int, dict[int, int], list[ExperienceChunk]]:
    """Re-read the log up to ``target`` into the replay buffer.

    One record per read, so each chunk is attributed to the partition whose position
    moved: chunks before ``target`` only refill the buffer; chunks past it are new
    experience, returned for the trainer to consume (count) normally once it runs. A refill
    that reads nothing for ``idle_s`` stops short (topic recreated, broker unreachable).
    Returns (chunks refilled, the positions reached, the chunks past ``target``).
    """
    reader.seek(dict.fromkeys(target, 0))
    positions, refilled, idle_since = reader.positions(), 0, clock()
    after: list[ExperienceChunk] = []
    while any(positions.get(p, 0) < offset for p, offset in target.items()):
        chunks, moved, positions = _read_one_record(reader, positions)
        if moved is not None:
            idle_since = clock()
        elif clock() - idle_since > idle_s:
            log.warning(
                "replay refill read nothing for %.0f s and stopped at %s short of %s "
                "(topic recreated, or the broker unreachable)",
                idle_s,
                positions,
                target,
            )
            break
        if chunks and moved is not None and positions[moved] <= target.get(moved, 0):
            learner.refill(chunks)
            refilled += len(chunks)
        else:
            after.extend(chunks)
    return refilled, dict(positions), after


def _read_one_record(
    reader: ExperienceReader, before: dict[int, int]
) -> tuple[list[ExperienceChunk], int | None, dict[int, int]]:
    """Read at most one record: (its chunks, the partition it came from or None, positions).

    The partition is found by comparing positions, since a chunk does not say where it
    was read; a record the reader dead-letters moves a position but yields no chunk.
    """
    chunks = list(reader.read(1, _REFILL_READ_S))
    after = dict(reader.positions())
    moved = next((p for p in after if after[p] != before.get(p)), None)
    return chunks, moved, after
