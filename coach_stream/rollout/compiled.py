"""The chunker's per-step writes in one numba call (``Chunker.add``'s hot half).

A vector step writes every env's row into six columns and folds the step into the
episodes' returns and done flags: about a dozen numpy calls, each ~1-2 us, and run cold
between env steps. Here they are one call: 1.05-1.07x a CartPole worker's env steps per
CPU-second (docs/performance.md, "The compiled act"). Observations and actions travel as
bytes (each row's ``.view(np.uint8)``), so one compiled signature serves every env's dtype
and shape. What follows a step (finding the chunks that are ready, emitting them) stays in
``Chunker``, except where it keeps its steps (``rollout.kept_steps``): ``record_steps``
writes up to 128 of them in one call and closes their chunks as ``close_chunks`` does.

``python -m coach_stream.rollout.compiled`` fills numba's cache for this and the compiled
act (``policies.compiled``); ``make setup`` and the runtime image build run it.
"""

from __future__ import annotations

from typing import Any

import numba
import numpy as np

from coach_stream.codec import compiled as records


@numba.njit(inline="always", cache=True)
def _copy_row(target: Any, origin: Any) -> None:
    """One row's bytes: a loop numba vectorises into a memcpy (a slice assignment ran at
    ~1.4 GB/s, 160 us of a Pong step's 8 frames)."""
    for j in range(target.shape[0]):
        target[j] = origin[j]


@numba.njit(cache=True)
def record_step(
    at: Any, row_end: Any, rows: Any, step: Any, behaviour: bool, episode_return: Any,
    done: Any,
) -> tuple[bool, int]:  # fmt: skip
    """Write env i's step at row ``at[i]`` of every column, advance ``at``, add the rewards
    to ``episode_return`` and set ``done``; returns (any episode ended, the fewest steps
    any open chunk still has room for).

    ``rows``: the columns (observation bytes, action bytes, rewards, terminated, truncated,
    log-probs); ``step``: this step's entries for each, one row per env.
    """
    obs_col, act_col, reward_col, term_col, trunc_col, lp_col = rows
    obs, actions, rewards, terminated, truncated, log_probs = step
    any_done, room = False, row_end[0] - at[0]
    for i in range(at.shape[0]):
        r = at[i]
        if r >= row_end[i]:  # unchecked writes would run into the next env's rows
            raise IndexError("a chunk was not emitted when it was full")
        _copy_row(obs_col[r], obs[i])
        _copy_row(act_col[r], actions[i])
        reward_col[r] = rewards[i]
        term_col[r] = terminated[i]
        trunc_col[r] = truncated[i]
        if behaviour:
            lp_col[r] = log_probs[i]
        at[i] = r + 1
        episode_return[i] += rewards[i]
        ended = terminated[i] or truncated[i]
        done[i] = ended
        any_done = any_done or ended
        room = min(room, row_end[i] - r - 1)
    return any_done, room


@numba.njit(inline="always", cache=True)
def _close(
    i: int, c: int, ended: bool, at: Any, first_row: Any, chunk_seq: Any, chunk_start: Any,
    episode_return: Any, worker_id: int, version: int, closed: Any,
) -> None:  # fmt: skip
    """Close env i's open chunk as the c-th of ``closed`` (envs, metadata, first rows, row
    counts, ended, returns) and open its next one where it ended."""
    envs, meta, starts, rows, ended_out, returns = closed
    n = at[i] - first_row[i]
    envs[c], starts[c], rows[c], ended_out[c] = i, first_row[i], n, ended
    meta[c, 0], meta[c, 1], meta[c, 2] = worker_id, i, chunk_seq[i]
    meta[c, 3], meta[c, 4] = version, chunk_start[i]
    returns[c] = episode_return[i]
    chunk_seq[i] += 1
    first_row[i] = at[i]
    if ended:
        chunk_start[i] = 0
        episode_return[i] = 0.0
    else:
        chunk_start[i] += n


@numba.njit(inline="always", cache=True)
def _closed(k: int) -> tuple[Any, Any, Any, Any, Any, Any]:
    """Room for ``k`` closes: (envs, metadata, first rows, row counts, ended, returns)."""
    return (np.empty(k, np.int64), np.empty((k, 5), np.int64), np.empty(k, np.int64),
            np.empty(k, np.int64), np.empty(k, np.bool_), np.empty(k, np.float64))  # fmt: skip


@numba.njit(cache=True)
def close_chunks(
    ready: Any, done: Any, at: Any, first_row: Any, chunk_seq: Any, chunk_start: Any,
    episode_return: Any, worker_id: int, version: int,
) -> tuple[Any, Any, Any, Any, Any, Any]:  # fmt: skip
    """Close the open chunk of each env where ``ready`` (its rows: ``first_row`` up to
    ``at``): (envs, their wire metadata (worker, env, chunk_seq, version, first step),
    first rows, row counts, ended, returns), and open each env's next chunk where the
    closed one ended: ``first_row`` = ``at``, ``chunk_seq`` + 1, the next chunk's first step
    (0 after an ended episode, whose return is reset). The closed rows stay where they are
    until their records are written (``Chunker``)."""
    k = 0
    for i in range(ready.shape[0]):
        k += ready[i]
    closed, c = _closed(k), 0
    for i in range(ready.shape[0]):
        if ready[i]:
            _close(i, c, done[i], at, first_row, chunk_seq, chunk_start, episode_return,
                   worker_id, version, closed)  # fmt: skip
            c += 1
    return closed


@numba.njit(cache=True)
def record_steps(
    at: Any, first_row: Any, buffer_end: Any, rows: Any, steps: Any, s: int, chunk_steps: int,
    episode_return: Any, chunk_seq: Any, chunk_start: Any, worker_id: int, version: int,
) -> tuple[int, bool, Any, Any]:  # fmt: skip
    """Steps ``s``, ``s`` + 1, ... of ``steps`` (each entry: one row per step, then env) written
    as ``record_step`` writes one, each env's chunk closed after a step as
    ``close_chunks`` closes it where its episode ended or it holds ``chunk_steps`` rows.
    Stops after the step at which an env's rows run out (``buffer_end``): its closed rows
    must be written out before its open chunk moves back to its first rows.

    Returns (the next step, whether an env's rows ran out, ``close_chunks``' arrays of
    the closes, in order, and the step each close followed).
    """
    obs_col, act_col, reward_col, term_col, trunc_col, lp_col = rows
    obs, actions, rewards, terminated, truncated, log_probs = steps
    count, n = rewards.shape
    closed, at_step = _closed((count - s) * n), np.empty((count - s) * n, np.int64)
    c, ran_out = 0, False
    while s < count and not ran_out:
        for i in range(n):
            r = at[i]
            if r >= buffer_end[i]:  # unchecked writes would run into the next env's rows
                raise IndexError("an env's rows ran out and were not written out")
            _copy_row(obs_col[r], obs[s, i])
            _copy_row(act_col[r], actions[s, i])
            reward_col[r] = rewards[s, i]
            term_col[r] = terminated[s, i]
            trunc_col[r] = truncated[s, i]
            lp_col[r] = log_probs[s, i]
            at[i] = r + 1
            episode_return[i] += rewards[s, i]
        for i in range(n):
            ended = terminated[s, i] or truncated[s, i]
            if ended or at[i] - first_row[i] >= chunk_steps:
                _close(i, c, ended, at, first_row, chunk_seq, chunk_start, episode_return,
                       worker_id, version, closed)  # fmt: skip
                at_step[c] = s
                c += 1
            ran_out = ran_out or at[i] >= buffer_end[i]
        s += 1
    envs, meta, starts, counts, ended_out, returns = closed
    kept = (envs[:c], meta[:c], starts[:c], counts[:c], ended_out[:c], returns[:c])
    return s, ran_out, kept, at_step[:c]


def warm_up() -> None:
    """Compile (or load) ``record_step``'s, ``close_chunks``' and ``record_steps``' one
    signature each, the compiled records' (``codec.compiled``) and the compiled act's."""
    from coach_stream.policies import compiled as act

    n = 2
    at, row_end = np.zeros(n, np.int64), np.full(n, 4, np.int64)
    rows = (np.zeros((8, 3), np.uint8), np.zeros((8, 8), np.uint8), np.zeros(8, np.float32),
            np.zeros(8, np.bool_), np.zeros(8, np.bool_), np.zeros(8, np.float32))  # fmt: skip
    step = (np.zeros((n, 3), np.uint8), np.zeros((n, 8), np.uint8), np.zeros(n, np.float64),
            np.zeros(n, np.bool_), np.zeros(n, np.bool_), np.zeros(n, np.float32))  # fmt: skip
    record_step(at, row_end, rows, step, True, np.zeros(n, np.float64), np.zeros(n, np.bool_))
    at[:] = 2
    close_chunks(
        np.ones(n, np.bool_),
        np.zeros(n, np.bool_),
        at,
        np.zeros(n, np.int64),
        np.zeros(n, np.int64),
        np.zeros(n, np.int64),
        np.zeros(n, np.float64),
        0,
        0,
    )
    steps = (np.zeros((3, n, 3), np.uint8), np.zeros((3, n, 8), np.uint8),
             np.zeros((3, n), np.float64), np.zeros((3, n), np.bool_), np.zeros((3, n), np.bool_),
             np.zeros((3, n), np.float32))  # fmt: skip
    counters = (np.zeros(n, np.float64), np.zeros(n, np.int64), np.zeros(n, np.int64))
    record_steps(np.zeros(n, np.int64), np.zeros(n, np.int64), np.full(n, 4, np.int64), rows,
                 steps, 0, 4, *counters, 0, 0)  # fmt: skip
    records.warm_up()
    act.warm_up()


if __name__ == "__main__":
    warm_up()
