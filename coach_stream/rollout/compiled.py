"""The chunker's per-step writes in one numba call (``Chunker.add``'s hot half).

A vector step writes every env's row into six columns and folds the step into the
episodes' returns and done flags: about a dozen numpy calls, each ~1-2 us, and run cold
between env steps. Here they are one call: 1.05-1.07x a CartPole worker's env steps per
CPU-second (docs/performance.md, "The compiled act"). Observations and actions travel as
bytes (each row's ``.view(np.uint8)``), so one compiled signature serves every env's dtype
and shape. What follows a step (finding the chunks that are ready, emitting them) stays in
``Chunker``.

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
    envs, meta = np.empty(k, np.int64), np.empty((k, 5), np.int64)
    starts, rows = np.empty(k, np.int64), np.empty(k, np.int64)
    ended, returns = np.empty(k, np.bool_), np.empty(k, np.float64)
    c = 0
    for i in range(ready.shape[0]):
        if not ready[i]:
            continue
        n = at[i] - first_row[i]
        envs[c], starts[c], rows[c], ended[c] = i, first_row[i], n, done[i]
        meta[c, 0], meta[c, 1], meta[c, 2] = worker_id, i, chunk_seq[i]
        meta[c, 3], meta[c, 4] = version, chunk_start[i]
        returns[c] = episode_return[i]
        chunk_seq[i] += 1
        first_row[i] = at[i]
        if done[i]:
            chunk_start[i] = 0
            episode_return[i] = 0.0
        else:
            chunk_start[i] += n
        c += 1
    return envs, meta, starts, rows, ended, returns


def warm_up() -> None:
    """Compile (or load) ``record_step``'s and ``close_chunks``'s one signature each, the
    compiled records' (``codec.compiled``) and the compiled act's."""
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
    records.warm_up()
    act.warm_up()


if __name__ == "__main__":
    warm_up()
