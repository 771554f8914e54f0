"""The rollout worker: act in a vector env with the latest policy, write chunks, swap policies.

The loop receives its parts (``RolloutWorker(envs, actor, writer, policy_source, ...)``)
and never knows that Kafka or GCS exist. Synchronization follows the run's mode:

- SYNC (on-policy): act ``share_steps`` steps per env with version v, cut the open chunks,
  then wait for v+1. If v+1 does not come in time (another worker died and the trainer's
  quota is short), act another share with v instead of waiting forever: the run never
  blocks on one worker, and the trainer drops whatever arrives too late. "In time" is a
  few times the usual wait (learned as the run goes), never more than ``sync_wait_s``.
- ASYNC (off-policy): between shares (``chunk_steps`` steps per env), take a newer version
  if the policy source has one. Two optional brakes: the rate limit (``max_unread_steps``,
  ``rollout/pacing.py``: wait, for as long as it takes, while the trainer has more than
  that many env steps of experience unread, so its consumer lag stays bounded), and
  freshness pacing (``max_lead_steps``: a worker that has acted that many steps with one
  version waits up to ``sync_wait_s`` for the next, then goes on anyway).

The worker exits cleanly when the policy source has read ``RunFinished``.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import VectorEnv

from coach_stream.core import (
    Actor,
    EncodedChunk,
    EventSink,
    ExperienceBacklog,
    ExperienceWriter,
    LoadedPolicy,
    Mode,
    PolicySource,
    RunFinished,
)
from coach_stream.errors import (
    ConfigError,
    IntegrityError,
    RunEndedError,
    ServiceUnavailableError,
)
from coach_stream.rollout.chunker import Chunker
from coach_stream.rollout.pacing import UnreadLimit, unread_records


@dataclass(frozen=True)
class WorkerSettings:
    run_id: str
    worker_id: int
    mode: Mode
    chunk_steps: int
    share_steps: int
    """Steps per env acted with one version before syncing (SYNC) or polling (ASYNC)."""
    behaviour: bool = False
    """Write the actor's log-probs into each chunk (on-policy learners need them)."""
    sync_wait_s: float = 2.0
    policy_wait_s: float = 120.0
    log_every_s: float = 1.0
    max_lead_steps: int | None = None
    """ASYNC: steps with one version after which the worker waits (bounded) for a newer one."""
    max_unread_steps: int | None = None
    """ASYNC: wait while the trainer has more than this many env steps unread (needs an
    ``ExperienceBacklog``; without one, as in in-process tests, the worker does not limit)."""
    limit_recheck_s: float = 0.25
    """How often the rate limit asks the log for the trainer's backlog (a broker round trip)."""


def _action_layout(space: Any) -> dict[str, Any]:
    """How the chunker stores actions: int64 scalars, or float32 vectors for a Box."""
    if isinstance(space, gym.spaces.Box):
        return {"action_shape": tuple(space.shape), "action_dtype": np.float32}
    return {}


def first_policy(source: PolicySource, wait_s: float) -> LoadedPolicy:
    """The newest announced policy, waiting (bounded) for the trainer's first one."""
    policy = source.latest(timeout=min(wait_s, 5.0))
    if policy is not None:
        return policy
    try:
        return source.wait_for(0, timeout=wait_s)
    except TimeoutError as error:
        raise ServiceUnavailableError(
            f"No policy version was announced within {wait_s:.0f} s; start the trainer for "
            "this run (or check the run id and the Kafka address)."
        ) from error


class RolloutWorker:
    """One process's acting loop: ``run()``, or ``start()`` + ``act_share()`` + ``sync()``."""

    def __init__(
        self,
        envs: VectorEnv,
        actor: Actor,
        writer: ExperienceWriter,
        policy_source: PolicySource,
        settings: WorkerSettings,
        seeds: Sequence[int],
        events: EventSink,
        clock: Callable[[], float] = time.monotonic,
        backlog: ExperienceBacklog | None = None,
    ) -> None:
        """``backlog``: where the rate limit reads the trainer's backlog (ASYNC with
        ``settings.max_unread_steps``; the entry point wires the Kafka one)."""
        self.envs, self.actor, self.writer, self.source = envs, actor, writer, policy_source
        self.settings, self.seeds, self.events, self.clock = settings, list(seeds), events, clock
        obs_space = envs.single_observation_space
        if obs_space.shape is None or obs_space.dtype is None:
            raise ConfigError(
                f"Observation space {obs_space} has no fixed shape and dtype; rollout workers "
                "need a Box observation space."
            )
        self.chunker = Chunker(
            settings.run_id,
            settings.worker_id,
            envs.num_envs,
            settings.chunk_steps,
            tuple(obs_space.shape),
            np.dtype(obs_space.dtype),
            behaviour=settings.behaviour,
            **_action_layout(envs.single_action_space),
        )
        self.env_steps = 0
        self.chunks_written = 0
        self.extra_shares = 0  # SYNC shares acted again with v because v+1 was late
        self.rejected_versions = 0
        self.paced_waits = 0  # ASYNC: times the worker waited because it was too far ahead
        self.limit: UnreadLimit | None = None
        if backlog is not None and settings.max_unread_steps and settings.mode is Mode.ASYNC:
            self.limit = UnreadLimit(
                backlog,
                unread_records(settings.max_unread_steps, settings.chunk_steps),
                recheck_s=settings.limit_recheck_s,
                clock=clock,
            )
        self.limit_waits = 0  # times the rate limit held the worker
        self.limit_wait_s = 0.0  # seconds it held it, in all
        self._held_since: float | None = None  # when the wait in progress began
        self._steps_at_version = 0
        self._typical_wait: float | None = None  # SYNC: smoothed seconds from share end to v+1
        self._after_extra_share = False  # SYNC: the last wait for v+1 timed out
        self._recent_returns: deque[float] = deque(maxlen=100)
        self._last_log = (clock(), 0)

    # ------------------------------------------------------------------ the loop

    def run(self) -> RunFinished:
        """Act until the run is finished; returns the ``RunFinished`` that ended it."""
        self.start()
        while (finished := self.source.finished) is None:
            self.act_share()
            self.sync(self.settings.sync_wait_s)
            self.pace()
            self._maybe_log()
        self.writer.flush(timeout=30.0)
        self._log()
        return finished

    def start(self) -> None:
        """Load the first policy, reset every env with its own seed, and continue each env's
        ``chunk_seq`` after its last one in the log (a restarted worker does not repeat them).
        """
        # The log is read back before waiting for the first policy: in a new run nobody has
        # written yet, so every partition is found empty at once, while after version 0 it
        # would read back the other workers' first chunks (0.05-0.3 s of a 2-worker start).
        next_seqs = self.writer.next_chunk_seqs(self.settings.worker_id, self.envs.num_envs)
        self.actor.load(first_policy(self.source, self.settings.policy_wait_s))
        obs, _ = self.envs.reset(seed=self.seeds)  # type: ignore[arg-type]  # a seed per env
        self.chunker.start(obs, self.actor.version, next_seqs)

    def act_share(self) -> int:
        """Step every env ``share_steps`` times with the current version; write the chunks.

        The share's chunks are written together at its end. A record produced alone, between
        env steps, cost 30-50 us of CPU (librdkafka's queue and the codec cold again each
        time) against a few in a burst: CartPole on 32 envs moved 0.556 of the bare env's
        steps per CPU-second producing as it went. Nothing waits for them sooner: a SYNC
        trainer needs the whole share, and an ASYNC share is one chunk's worth of steps.
        The chunker hands them over encoded (``Chunker.add_encoded``), so the writer only
        produces them.
        """
        envs, actor, chunker = self.envs, self.actor, self.chunker
        obs = chunker.last_obs
        chunks: list[EncodedChunk] = []
        for _ in range(self.settings.share_steps):
            action = actor.act(obs)
            obs, rewards, terminated, truncated, infos = envs.step(action.actions)
            chunks += chunker.add_encoded(action, rewards, terminated, truncated, obs, infos)
        if self.settings.mode is Mode.SYNC:
            chunks += chunker.flush_encoded()  # the share of version v ends here
        else:
            chunks += chunker.drain_encoded()  # the chunks that finished in this share
        self._write(chunks)
        steps = self.settings.share_steps * envs.num_envs
        self.env_steps += steps
        return steps

    def sync(self, timeout: float) -> bool:
        """Take a newer policy: SYNC waits up to ``timeout`` for v+1, ASYNC only polls."""
        try:
            if self.settings.mode is Mode.SYNC:
                # v+1 needs this share: send it now instead of after linger.ms (a flush sends
                # at once). The worker would spend the round trip waiting for v+1 anyway.
                self.writer.flush(timeout=30.0)
                started = self.clock()
                try:
                    newer: LoadedPolicy | None = self.source.wait_for(
                        self.actor.version + 1, timeout=min(timeout, self._sync_timeout())
                    )
                except TimeoutError:
                    self.extra_shares += 1
                    self._after_extra_share = True
                    return False
                waited = self.clock() - started
                # After an extra share v+1 has usually come meanwhile and the wait is ~0 s:
                # that says nothing of the trainer. Learned from, such waits shrank the next
                # timeout, which made more extra shares: a Pong run ended up dropping 3 env
                # steps as stale for each one it learned from.
                if not self._after_extra_share:
                    ema = self._typical_wait
                    self._typical_wait = waited if ema is None else 0.8 * ema + 0.2 * waited
                self._after_extra_share = False
            else:
                newer = self.source.poll()
                lead = self.env_steps - self._steps_at_version
                limit = self.settings.max_lead_steps
                if newer is None and limit is not None and lead >= limit:
                    self.paced_waits += 1
                    try:
                        newer = self.source.wait_for(self.actor.version + 1, timeout=timeout)
                    except TimeoutError:
                        self._steps_at_version = self.env_steps  # go on: never deadlock
                        return False
        except RunEndedError:
            return False
        return self._take(newer)

    def pace(self) -> float:
        """ASYNC rate limit: wait while the trainer has more than the bound unread; the
        seconds waited. No timeout: a trainer that is down or restarting is waited for (the
        supervisor restarts it); the worker returns as soon as the run is finished.

        The wait is on the control topic: a new version is taken at once (the trainer
        records its read position right after announcing one), and the backlog is asked
        again at least every ``limit_recheck_s``.
        """
        limit = self.limit
        if limit is None or limit.admits():
            return 0.0
        self.limit_waits += 1
        self.writer.flush(timeout=30.0)  # nothing else to do: what lingers is sent for reading
        started, wanted = self.clock(), self.actor.version + 1
        self._held_since = started
        while self.source.finished is None:
            try:
                newer = self.source.wait_for(wanted, timeout=limit.recheck_s)
            except TimeoutError:
                pass
            except RunEndedError:
                break
            else:  # the next wait is for a later one, even if the actor refuses this one
                wanted = newer.version.version + 1
                self._take(newer)
            self._maybe_log()
            if limit.admits(measure=True):
                break
        waited = self.clock() - started
        self.limit_wait_s += waited
        self._held_since = None
        return waited

    # ------------------------------------------------------------------ helpers

    def _take(self, newer: LoadedPolicy | None) -> bool:
        """Swap in ``newer`` if it is newer and verifies; True if the worker now acts with it."""
        if newer is None or newer.version.version <= self.actor.version:
            return False
        self._write(self.chunker.flush_encoded())  # one chunk, one behaviour version
        try:
            self.actor.load(newer)
        except IntegrityError:
            self.rejected_versions += 1  # keep acting with the old policy
            return False
        self.chunker.version = self.actor.version
        self._steps_at_version = self.env_steps
        return True

    def _sync_timeout(self) -> float:
        """How long to wait for v+1: a few times the usual wait, at most ``sync_wait_s``.

        With every worker alive v+1 follows the end of a share after about one trainer
        update; when it takes several times longer, a worker is missing from the quota, and
        acting another share now beats idling for the full ``sync_wait_s`` every version.
        """
        if self._typical_wait is None:
            return self.settings.sync_wait_s
        return min(self.settings.sync_wait_s, max(0.05, 4.0 * self._typical_wait))

    def _write(self, chunks: list[EncodedChunk]) -> None:
        for chunk in chunks:
            self.writer.write_encoded(chunk)
            if chunk.episode_return is not None:
                self._recent_returns.append(chunk.episode_return)
        self.chunks_written += len(chunks)
        if self.limit is not None:
            self.limit.wrote(len(chunks))

    def _maybe_log(self) -> None:
        if self.clock() - self._last_log[0] >= self.settings.log_every_s:
            self._log()

    def _log(self) -> None:
        now, steps_then = self.clock(), self._last_log[1]
        elapsed = max(now - self._last_log[0], 1e-9)
        returns = list(self._recent_returns)
        held = 0.0 if self._held_since is None else now - self._held_since
        fields: dict[str, Any] = {
            "worker_id": self.settings.worker_id,
            "env_steps": self.env_steps,
            "env_steps_per_s": (self.env_steps - steps_then) / elapsed,
            "chunks": self.chunks_written,
            "policy_version": self.actor.version,
            "episodes": self.chunker.episodes,
            "mean_return": float(np.mean(returns)) if returns else None,
            "extra_shares": self.extra_shares,
            "rejected_versions": self.rejected_versions,
            "paced_waits": self.paced_waits,
            "limit_waits": self.limit_waits,
            "limit_wait_s": round(self.limit_wait_s + held, 3),  # the wait in progress too
            "unread": self.limit.estimate() if self.limit is not None else None,
            "acked_chunk_seqs": dict(self.writer.acknowledged()),
            "log_every_s": self.settings.log_every_s,  # status: SILENT after 3x this (>= 10 s)
        }
        self.events("progress", fields)
        self._last_log = (now, self.env_steps)
