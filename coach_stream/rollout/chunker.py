"""Cuts vector-env steps into per-environment ``ExperienceChunk``s.

Each env accumulates up to T steps in preallocated columns. A chunk is emitted when it
holds T steps, when its episode ends (SAME_STEP autoreset: the final observation comes
from ``info["final_obs"]`` and becomes the chunk's bootstrap row; a step info without it is
an error, never a silent fallback to the reset observation), or when the policy
version changes (``flush``: one chunk, one behaviour version). Per-env ``chunk_seq`` is
monotonic, across restarts too (``start`` takes where each env left off in the log), and
``first_step`` is the step's index within its episode, so the trainer can tell contiguous
chunks apart from gaps. Each step writes every env's row at once, through flat indices
into the columns (``_at``: env i's next row), so the per-step cost does not grow with the
number of envs; a plain 1-D index writes 4x faster than an (env, column) pair. A step makes
as few numpy calls as it can (each costs ~1 us, on one env as on 32): one index for every
column, and whether a chunk is full comes from a countdown in Python, not from comparing
every env's fill each step: on HalfCheetah's one env a step with its share of a chunk's
emit cost 14.2 us of CPU (11 % of the MuJoCo step), now 9.9; on 8 CartPole envs 14.6, now
11.5. Where numba loads, a step's writes are one compiled call (``rollout.compiled``: the
same rows, observations and actions as bytes): 1.05-1.07x a CartPole worker's env steps
per CPU-second (two workers in one process, ``docs/performance.md``).

A rollout worker takes its chunks already encoded (``add_encoded``/``flush_encoded``): the
records are written straight from the columns, with no ``ExperienceChunk`` between
(``codec.compiled``; ``close_chunks`` opens each env's next chunk where the last ended).
Where rows are small, each env's columns hold several chunks (``_spans``), and finished
chunks wait there until the share ends (``drain_encoded``) or an env's rows run out: then
all are written in one call and the open chunks move back to their envs' first rows (one
call per finished chunk cost ~95 us of CPU each on 8 CartPole envs). There, too, the
steps themselves are kept and written up to 128 at a time (``rollout.kept_steps``). The
same bytes as ``encode_chunk`` of ``add``'s chunks, in the same order; where numba does
not load, that is how they are made.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from coach_stream.codec import encode_chunk
from coach_stream.core import Action, EncodedChunk, ExperienceChunk
from coach_stream.errors import EncodeError
from coach_stream.rollout.kept_steps import KeptSteps, bootstrap_rows, final_observations

if TYPE_CHECKING:
    from coach_stream.codec.compiled import RecordWriter

_log = logging.getLogger(__name__)


@functools.cache
def close_chunks_kernel() -> Callable[..., tuple[Any, ...]] | None:
    """``rollout.compiled.close_chunks`` where numba loads and the codec writes v1 records
    (the layout ``codec.compiled`` writes); None: chunks are emitted, then encoded."""
    try:
        from coach_stream.codec import chunk_schema
        from coach_stream.codec.fastpath import V1_FINGERPRINT
        from coach_stream.rollout.compiled import close_chunks
    except Exception:  # record_step_kernel has said why, once
        return None
    return close_chunks if chunk_schema().fingerprint == V1_FINGERPRINT else None


@functools.cache
def record_steps_kernel() -> Callable[..., tuple[Any, ...]] | None:
    """``rollout.compiled.record_steps`` where records are compiled (``close_chunks_kernel``)."""
    if close_chunks_kernel() is None:
        return None
    from coach_stream.rollout.compiled import record_steps

    return record_steps


@functools.cache
def record_step_kernel() -> Callable[..., tuple[bool, int]] | None:
    """``rollout.compiled.record_step``, or None where numba cannot load (numpy writes)."""
    try:
        from coach_stream.rollout.compiled import record_step
    except Exception as error:  # numba missing or unusable here: the numpy writes serve
        _log.warning("chunking in numpy, not compiled: numba did not load (%s)", error)
        return None
    return record_step


class Chunker:
    """Accumulates one vector env's steps and hands back finished chunks."""

    def __init__(
        self,
        run_id: str,
        worker_id: int,
        num_envs: int,
        chunk_steps: int,
        obs_shape: tuple[int, ...],
        obs_dtype: np.dtype[Any],
        behaviour: bool,
        action_shape: tuple[int, ...] = (),
        action_dtype: type[np.generic] = np.int64,
        compiled: bool = True,
    ) -> None:
        """``action_shape``/``action_dtype``: () int64 for discrete actions, the Box's
        shape and float32 for continuous ones. ``compiled``: write each step in one numba
        call where numba loads (the same rows as the numpy writes)."""
        self.run_id, self.worker_id = run_id, worker_id
        self.num_envs, self.chunk_steps, self.behaviour = num_envs, chunk_steps, behaviour
        n, t = num_envs, chunk_steps
        # room for several chunks per env where rows are small: closed chunks wait there to
        # be encoded together (``_spans``); c: each env's rows
        spans = _spans(n, t, _row_bytes(obs_shape, obs_dtype, action_shape, action_dtype))
        c = t * (spans if compiled else 1)
        self._obs = np.zeros((n, c, *obs_shape), dtype=obs_dtype)  # the bootstrap row apart
        self._actions = np.zeros((n, c, *action_shape), dtype=action_dtype)
        self._rewards = np.zeros((n, c), dtype=np.float32)
        self._terminated = np.zeros((n, c), dtype=np.bool_)
        self._truncated = np.zeros((n, c), dtype=np.bool_)
        self._log_probs = np.zeros((n, c), dtype=np.float32)
        self._episode_return = np.zeros(n, dtype=np.float64)
        self._chunk_seq = np.zeros(n, dtype=np.int64)
        self._chunk_start = np.zeros(n, dtype=np.int64)  # episode step of the open chunk's first
        self._last_obs: npt.NDArray[Any] | None = None
        # flat views of the columns, and env i's next row in them: i * c + its rows so far
        self._flat = [
            a.reshape(n * c, *a.shape[2:])
            for a in (self._obs, self._actions, self._rewards, self._terminated,
                      self._truncated, self._log_probs)
        ]  # fmt: skip
        self._row0 = np.arange(n) * c
        self._buffer_end = self._row0 + c
        self._open = self._row0.copy()  # env i's open chunk's first row (records: it moves)
        self._row_end = self._row0 + t  # where the open chunk is full, or the env's rows end
        self._at = self._row0.copy()
        self._steps_to_full = t  # steps until the fullest open chunk holds T
        self.version = -1
        self.episodes = 0  # episodes ended so far
        # the compiled step (rollout.compiled) writes observations and actions as bytes
        self._record = record_step_kernel() if compiled else None
        self._byte_rows = tuple(
            a.view(np.uint8).reshape(n * c, -1) if i < 2 else a for i, a in enumerate(self._flat)
        )
        self._done, self._no_done = np.zeros(n, dtype=np.bool_), np.zeros(n, dtype=np.bool_)
        self._no_behaviour = np.zeros(n, dtype=np.float32)
        self._keys = [f"{worker_id}/{i}" for i in range(n)]
        self._records = self._record_writer() if compiled else None
        self._defer = self._records is not None and spans > 1
        self._pending: list[_Closed] = []  # closed, not yet encoded: in the order they closed
        # deferring, add_encoded keeps the steps to write _KEPT_STEPS at a time (or sooner)
        self._keep_limit = _KEPT_STEPS if self._defer else 0
        self._kept = KeptSteps()

    def _record_writer(self) -> RecordWriter | None:
        """The compiled records' writer for these columns, or None (emit, then encode)."""
        if self._record is None or close_chunks_kernel() is None:
            return None
        from coach_stream.codec.compiled import RecordWriter

        try:
            return RecordWriter(self.run_id, tuple(self._flat))
        except EncodeError:  # a dtype the wire does not carry: encode_chunk says so, later
            return None

    @property
    def last_obs(self) -> npt.NDArray[Any]:
        """The observations the next step will be taken in."""
        return self._started()

    def _started(self) -> npt.NDArray[Any]:
        if self._last_obs is None:
            raise RuntimeError("Chunker used before start(): call start(obs, version) first")
        return self._last_obs

    def start(
        self, obs: npt.NDArray[Any], version: int, next_seqs: Sequence[int] | None = None
    ) -> None:
        """The observations after ``reset``; every env starts a new episode.

        ``next_seqs``: the ``chunk_seq`` each env continues at (a restarted worker's, one
        past its last in the log: ``ExperienceWriter.next_chunk_seqs``); None keeps counting.
        """
        if next_seqs is not None:
            if len(next_seqs) != self.num_envs or min(next_seqs, default=0) < 0:
                raise ValueError(
                    f"next_seqs must hold {self.num_envs} non-negative chunk_seqs, got "
                    f"{list(next_seqs)}"
                )
            self._chunk_seq[:] = next_seqs
        self._last_obs, self.version = np.asarray(obs), version
        self._chunk_start[:] = 0
        self._episode_return[:] = 0.0
        self._at[:] = self._row0
        self._open[:] = self._row0
        self._row_end[:] = self._row0 + self.chunk_steps
        self._pending.clear()
        self._kept = KeptSteps()
        self._steps_to_full = self.chunk_steps

    def add(
        self,
        action: Action,
        rewards: npt.NDArray[Any],
        terminated: npt.NDArray[Any],
        truncated: npt.NDArray[Any],
        next_obs: npt.NDArray[Any],
        infos: dict[str, Any],
    ) -> list[ExperienceChunk]:
        """Record one vector step (taken in the last observations); return finished chunks."""
        if self._record is not None:
            step = self._step_compiled(action, rewards, terminated, truncated, next_obs)
            return [] if step is None else self._emit_ready(*step, self._started(), infos)
        last_obs, at = self._started(), self._at
        obs, actions, rewards_col, terminated_col, truncated_col, log_probs = self._flat
        obs[at] = last_obs
        actions[at] = action.actions
        rewards_col[at] = rewards
        terminated_col[at] = terminated
        truncated_col[at] = truncated
        if action.log_probs is not None:
            log_probs[at] = action.log_probs
        at += 1
        self._episode_return += rewards
        self._last_obs = next_obs = np.asarray(next_obs)
        done = np.logical_or(terminated, truncated)
        any_done = bool(done.any())
        self._steps_to_full -= 1
        if self._steps_to_full > 0:
            if not any_done:
                return []
            ready = done
        else:
            ready = done | (at >= self._row_end)
        return self._emit_ready(ready, done, any_done, next_obs, infos)

    def _step_compiled(
        self, action: Action, rewards: Any, terminated: Any, truncated: Any, next_obs: Any
    ) -> tuple[npt.NDArray[np.bool_], npt.NDArray[np.bool_], bool] | None:
        """The step's rows written (compiled) and ``next_obs`` taken; (the envs whose chunk
        is ready, the envs whose episode ended, whether any did), or None if no chunk is."""
        done, any_done, full = self._record_compiled(action, rewards, terminated, truncated)
        self._last_obs = np.asarray(next_obs)
        if not any_done and not full:
            return None
        return (done | (self._at >= self._row_end) if full else done), done, any_done

    def _record_compiled(
        self, action: Action, rewards: Any, terminated: Any, truncated: Any
    ) -> tuple[npt.NDArray[np.bool_], bool, bool]:
        """The step's rows in one compiled call: (done, any done, some chunk now full)."""
        assert self._record is not None
        n, last_obs = self.num_envs, self._started()
        as_bytes = [  # in the columns' dtypes first, as the numpy writes convert
            np.ascontiguousarray(a, dtype=column.dtype).view(np.uint8).reshape(n, -1)
            for a, column in ((last_obs, self._obs), (action.actions, self._actions))
        ]
        behaviour = action.log_probs is not None
        step = (*as_bytes, np.asarray(rewards, dtype=np.float64),
                np.asarray(terminated, dtype=np.bool_), np.asarray(truncated, dtype=np.bool_),
                action.log_probs if behaviour else self._no_behaviour)  # fmt: skip
        done = self._done
        any_done, room = self._record(
            self._at, self._row_end, self._byte_rows, step, behaviour, self._episode_return, done
        )
        return done, bool(any_done), room == 0

    def _emit_ready(
        self,
        ready: npt.NDArray[np.bool_],
        done: npt.NDArray[np.bool_],
        any_done: bool,
        next_obs: npt.NDArray[Any],
        infos: dict[str, Any],
    ) -> list[ExperienceChunk]:
        final_obs = final_observations(done, infos) if any_done else None
        chunks: list[ExperienceChunk] = []
        for i in np.flatnonzero(ready):
            # an ended episode's bootstrap row is its final observation; next_obs[i]
            # is already the reset observation of the next episode
            ended = bool(done[i])
            bootstrap = final_obs[i] if final_obs is not None and ended else next_obs[i]
            chunks.append(self._emit(int(i), np.asarray(bootstrap), ended=ended))
        self._steps_to_full = int((self._row_end - self._at).min())
        return chunks

    def flush(self) -> list[ExperienceChunk]:
        """Emit every open chunk (before acting with a new policy version)."""
        last_obs = self._started()
        chunks = [
            self._emit(int(i), last_obs[i], ended=False)
            for i in np.flatnonzero(self._at > self._row0)
        ]
        self._steps_to_full = self.chunk_steps
        return chunks

    def add_encoded(
        self,
        action: Action,
        rewards: npt.NDArray[Any],
        terminated: npt.NDArray[Any],
        truncated: npt.NDArray[Any],
        next_obs: npt.NDArray[Any],
        infos: dict[str, Any],
    ) -> list[EncodedChunk]:
        """``add``, the finished chunks handed back encoded (``codec.encode_chunk``'s bytes):
        where numba loads, written straight from the columns (``codec.compiled``).

        Where an env's rows hold several chunks, a finished chunk's record is written later,
        with the others that finished meanwhile: it comes back from a later ``add_encoded``,
        ``drain_encoded`` or ``flush_encoded``, in the order the chunks finished. A caller
        writes a share's records at its end, so it drains there."""
        if self._records is None:
            return [_encoded(chunk) for chunk in self.add(
                action, rewards, terminated, truncated, next_obs, infos)]  # fmt: skip
        if self._keep_limit:
            self._kept.keep(
                self._started(), action, rewards, terminated, truncated, next_obs, infos
            )
            self._last_obs = np.asarray(next_obs)
            return self._write_kept() if len(self._kept) >= self._keep_limit else []
        done, any_done, full = self._record_compiled(action, rewards, terminated, truncated)
        self._last_obs = next_obs = np.asarray(next_obs)
        if not any_done and not full:
            return []
        ready = done | (self._at - self._open >= self.chunk_steps) if full else done
        if any_done or ready.any():  # full, yet none ready: an env's rows have run out
            final_obs = final_observations(done, infos) if any_done else None
            self._close(ready, done, next_obs, final_obs)
        if self._defer and not (full and bool((self._at >= self._buffer_end).any())):
            return []
        return self._drain()

    def drain_encoded(self) -> list[EncodedChunk]:
        """The records of the chunks finished since the last drain (``add_encoded``), in the
        order they finished; the open chunks stay open."""
        return self._write_kept() + self._drain() if self._records is not None else []

    def flush_encoded(self) -> list[EncodedChunk]:
        """``flush``, the chunks handed back encoded (as ``add_encoded``), after those that
        finished before."""
        if self._records is None:
            return [_encoded(chunk) for chunk in self.flush()]
        records = self._write_kept()
        ready = self._at > self._open
        if ready.any():
            self._close(ready, self._no_done, self._started(), None)
        return records + self._drain()

    def _write_kept(self) -> list[EncodedChunk]:
        """The kept steps written into the columns, each env's chunks closed after the
        steps ``add_encoded`` would have closed them at, in one compiled call (``record_steps``;
        more where an env's rows run out: the records drained there come back)."""
        kept, self._kept = self._kept, KeptSteps()
        if not len(kept):
            return []
        taken, steps = kept.columns(self._obs.dtype, self._actions.dtype, self.num_envs)
        records: list[EncodedChunk] = []
        s = 0
        while s < len(kept):
            s, ran_out, closed, at_step = record_steps_kernel()(  # type: ignore[misc]
                self._at, self._open, self._buffer_end, self._byte_rows, steps, s,
                self.chunk_steps, self._episode_return, self._chunk_seq, self._chunk_start,
                self.worker_id, self.version,
            )  # fmt: skip
            if len(at_step):
                bootstrap = bootstrap_rows(closed, at_step, taken, kept.infos, self._obs.dtype)
                self._pending.append((*closed, bootstrap))
                self.episodes += int(np.count_nonzero(closed[4]))
            if ran_out:
                records += self._drain()
        np.minimum(self._open + self.chunk_steps, self._buffer_end, out=self._row_end)
        return records

    def _close(
        self,
        ready: npt.NDArray[np.bool_],
        done: npt.NDArray[np.bool_],
        next_obs: npt.NDArray[Any],
        final_obs: npt.NDArray[Any] | None,
    ) -> None:
        """Close the ready envs' chunks (compiled: their metadata, and each env's next chunk
        opened where this one ended); their rows wait in the columns to be encoded."""
        closed = close_chunks_kernel()(  # type: ignore[misc]
            ready, done, self._at, self._open, self._chunk_seq, self._chunk_start,
            self._episode_return, self.worker_id, self.version,
        )  # fmt: skip
        envs, ended = closed[0], closed[4]
        # the bootstrap rows: an ended episode's final observation, else the next one's
        bootstrap = np.asarray(next_obs, dtype=self._obs.dtype)[envs]
        if final_obs is not None:
            for c in np.flatnonzero(ended):
                bootstrap[c] = final_obs[envs[c]]
        self._pending.append((*closed, bootstrap))
        self.episodes += int(np.count_nonzero(ended))
        np.minimum(self._open + self.chunk_steps, self._buffer_end, out=self._row_end)

    def _drain(self) -> list[EncodedChunk]:
        """The pending chunks' records, in one compiled write; then every open chunk is moved
        to its env's first rows, so that each env has room for ``spans`` chunks again."""
        records = self._encode(self._pending) if self._pending else []
        self._pending = []
        for i in np.flatnonzero(self._open != self._row0).tolist():
            first, to, n = int(self._open[i]), int(self._row0[i]), int(self._at[i] - self._open[i])
            if n:  # the open chunk's rows so far (the slices may overlap: numpy copies safely)
                for column in self._flat:
                    column[to : to + n] = column[first : first + n]
            self._open[i], self._at[i] = to, to + n
        np.minimum(self._open + self.chunk_steps, self._buffer_end, out=self._row_end)
        return records

    def _encode(self, pending: list[_Closed]) -> list[EncodedChunk]:
        assert self._records is not None
        fields = (
            pending[0] if len(pending) == 1
            else [np.concatenate(f) for f in zip(*pending, strict=True)]
        )  # fmt: skip
        envs, meta, starts, rows, ended, returns, bootstrap = fields
        values = self._records.write(
            meta, starts, rows, bootstrap, self.behaviour, ended, returns, int(time.time() * 1000)
        )
        keys = self._keys
        return [
            EncodedChunk(keys[i], seq, value, ret if end else None)
            for i, seq, value, ret, end in zip(
                envs.tolist(),
                meta[:, 2].tolist(),
                values,
                returns.tolist(),
                ended.tolist(),
                strict=True,
            )
        ]

    def _emit(self, i: int, bootstrap: npt.NDArray[Any], ended: bool) -> ExperienceChunk:
        n = int(self._at[i] - self._row0[i])
        observations = np.empty((n + 1, *self._obs.shape[2:]), dtype=self._obs.dtype)
        observations[:n] = self._obs[i, :n]
        observations[n] = bootstrap
        first_step = int(self._chunk_start[i])
        length = first_step + n  # steps of the episode up to the end of this chunk
        chunk = ExperienceChunk(
            run_id=self.run_id,
            worker_id=self.worker_id,
            env_index=i,
            chunk_seq=int(self._chunk_seq[i]),
            policy_version=self.version,
            first_step=first_step,
            observations=observations,
            actions=self._actions[i, :n].copy(),
            rewards=self._rewards[i, :n].copy(),
            terminated=self._terminated[i, :n].copy(),
            truncated=self._truncated[i, :n].copy(),
            log_probs=self._log_probs[i, :n].copy() if self.behaviour else None,
            episode_return=float(self._episode_return[i]) if ended else None,
            episode_length=length if ended else None,
            created_at_ms=int(time.time() * 1000),
        )
        self.episodes += int(ended)
        self._chunk_seq[i] += 1
        self._at[i] = self._row0[i]
        # the next chunk opens a new episode, or goes on with this one
        self._chunk_start[i] = 0 if ended else length
        if ended:
            self._episode_return[i] = 0.0
        return chunk


def _encoded(chunk: ExperienceChunk) -> EncodedChunk:
    return EncodedChunk(chunk.key, chunk.chunk_seq, encode_chunk(chunk), chunk.episode_return)


_Closed = tuple[npt.NDArray[Any], ...]
"""``close_chunks``' six arrays (envs, meta, first rows, row counts, ended, returns) and the
chunks' bootstrap rows."""


_KEPT_STEPS = 128  # deferring: the steps add_encoded keeps before writing them (0: each step)
_PENDING_BYTES = 4 << 20  # the columns' size up to which an env's rows hold several chunks
_MAX_SPANS = 8


def _row_bytes(
    obs_shape: tuple[int, ...], obs_dtype: np.dtype[Any], action_shape: tuple[int, ...],
    action_dtype: type[np.generic],
) -> int:  # fmt: skip
    """One step's bytes in the six columns."""
    obs = np.dtype(obs_dtype).itemsize * int(np.prod(obs_shape, dtype=np.int64))
    act = np.dtype(action_dtype).itemsize * int(np.prod(action_shape, dtype=np.int64))
    return obs + act + 4 + 1 + 1 + 4


def _spans(num_envs: int, chunk_steps: int, row_bytes: int) -> int:
    """How many chunks' rows each env keeps: up to 8 while the columns stay within 4 MB.

    Encoding a step's finished chunks as they finish cost ~95 us of CPU a close on 8
    CartPole envs (two compiled calls and their Python, run cold between env steps), a third
    of a worker's CPU beyond the env and the act; kept until the share ends, they are
    encoded in one write. Frames (Pong: 28 KB a row) keep one chunk per env: their records
    are written as they finish, while their rows are still in the cache."""
    return max(1, min(_MAX_SPANS, _PENDING_BYTES // max(1, num_envs * chunk_steps * row_bytes)))
