"""The trainer's side of normalisation: keep the statistics, learn through them, ship them.

``NormalizingLearner`` wraps any on-policy ``Learner``. For every chunk it reads it

1. hands the learner the chunk as the acting worker saw it: observations (all T+1 rows)
   through the published snapshot, rewards scaled by the snapshot's return variance;
2. folds the raw chunk into the running statistics: the observations actions were taken
   in (rows 0..T-1; the last row is the next chunk's first), and for rewards the
   discounted return of the chunk's (worker, env) stream, restarted where an episode
   starts, as ``VecNormalize`` keeps one per env.

The snapshot changes only when a version is published (``policy_state_dict``), so the
experience of version v is learned with exactly v's statistics, and a worker acting on v
uses them too (``policies.normalization.NormalizingActor``). The running statistics live
in the trainer state, so a resumed trainer continues them bit for bit.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from coach_stream.config import NormalizeConfig
from coach_stream.core import Collective, ExperienceChunk, Ingested, Learner
from coach_stream.errors import ResumeError
from coach_stream.policies.normalization import RunningMeanStd, Statistics
from coach_stream.trainer.collective import SOLO

_STATE_KEY = "normalize"


class NormalizingLearner:
    """A ``Learner`` that learns from normalised experience and publishes its statistics."""

    def __init__(
        self,
        inner: Learner,
        config: NormalizeConfig,
        gamma: float,
        obs_shape: tuple[int, ...],
        collective: Collective = SOLO,
    ) -> None:
        self.inner, self.config, self.gamma = inner, config, gamma
        self.collective = collective
        # K ranks: raw samples read since the ranks last merged their statistics
        self._unmerged: dict[str, list[np.ndarray]] = {"obs": [], "return": []}
        self.obs_rms = RunningMeanStd(obs_shape) if config.observations else None
        self.return_rms = RunningMeanStd(()) if config.rewards else None
        self.returns: dict[str, float] = {}  # per (worker, env): the running discounted return
        self.published = self.snapshot()

    def snapshot(self) -> Statistics:
        """The running statistics as a policy version will carry them."""
        obs, ret = self.obs_rms, self.return_rms
        return Statistics(
            obs_mean=None if obs is None else obs.mean.copy(),
            obs_var=None if obs is None else obs.var.copy(),
            return_var=None if ret is None else float(ret.var),
            clip_observations=self.config.clip_observations,
            clip_rewards=self.config.clip_rewards,
            epsilon=self.config.epsilon,
        )

    # ------------------------------------------------------------------ experience

    def ingest(self, chunks: Sequence[ExperienceChunk], version: int) -> Ingested:
        normalized = [self._through(self.published, chunk) for chunk in chunks]
        self.observe(chunks)
        return self.inner.ingest(normalized, version)

    def refill(self, chunks: Sequence[ExperienceChunk]) -> None:
        self.inner.refill([self._through(self.published, chunk) for chunk in chunks])

    def observe(self, chunks: Sequence[ExperienceChunk]) -> None:
        """Fold raw chunks into the running statistics (in read order: per key, in order)."""
        shared = self.collective.world > 1  # merged over every rank's samples in learn()
        if self.obs_rms is not None and chunks:
            observations = np.concatenate([c.observations[:-1] for c in chunks])
            if shared:
                self._unmerged["obs"].append(observations)
            else:
                self.obs_rms.update(observations)
        if self.return_rms is not None:
            for chunk in chunks:
                returns = self._discounted_returns(chunk)
                if shared:
                    self._unmerged["return"].append(returns)
                else:
                    self.return_rms.update(returns)

    def _merge_ranks(self) -> None:
        """K ranks: fold every rank's samples since the last merge into the statistics, in
        rank order, so each rank holds the same statistics (those of the union of what
        the ranks read), and the versions rank 0 publishes carry them."""
        moments: dict[str, tuple[np.ndarray, np.ndarray, int] | None] = {}
        for name, rms in (("obs", self.obs_rms), ("return", self.return_rms)):
            pending, self._unmerged[name] = self._unmerged[name], []
            if rms is None or not pending:
                moments[name] = None
                continue
            x = np.concatenate(pending).astype(np.float64)
            moments[name] = (x.mean(axis=0), x.var(axis=0), len(x))
        for part in self.collective.gather_objects(moments):
            for name, rms in (("obs", self.obs_rms), ("return", self.return_rms)):
                if rms is not None and part[name] is not None:
                    rms.merge(*part[name])

    def _discounted_returns(self, chunk: ExperienceChunk) -> np.ndarray:
        ret = 0.0 if chunk.first_step == 0 else self.returns.get(chunk.key, 0.0)
        gamma, out = self.gamma, []
        for reward in chunk.rewards.tolist():
            ret = ret * gamma + reward
            out.append(ret)
        self.returns[chunk.key] = 0.0 if chunk.episode_ended else ret
        return np.asarray(out, np.float64)

    @staticmethod
    def _through(statistics: Statistics, chunk: ExperienceChunk) -> ExperienceChunk:
        return dataclasses.replace(
            chunk,
            observations=statistics.observations(chunk.observations),
            rewards=statistics.rewards(chunk.rewards),
        )

    # ------------------------------------------------------------------ the learner's own

    def wants_data(self) -> bool:
        return self.inner.wants_data()

    def ready(self) -> bool:
        return self.inner.ready()

    def learn(self, env_steps: int) -> tuple[dict[str, float], bool]:
        if self.collective.world > 1:
            self._merge_ranks()
        metrics, publish = self.inner.learn(env_steps)
        if self.obs_rms is not None:
            metrics["normalize_obs_count"] = float(self.obs_rms.count)
        if self.return_rms is not None:
            metrics["normalize_return_std"] = float(np.sqrt(self.return_rms.var))
        return metrics, publish

    @property
    def updates(self) -> int:
        return self.inner.updates

    def policy_state_dict(self) -> Mapping[str, torch.Tensor]:
        """The weights plus the statistics they were trained to act with; from now on the
        experience read is learned with this snapshot (it is the next version's)."""
        self.published = self.snapshot()
        return {**self.inner.policy_state_dict(), **self.published.to_tensors()}

    def state_dict(self) -> dict[str, Any]:
        running: dict[str, Any] = {"returns": dict(self.returns)}
        if self.obs_rms is not None:
            running["obs"] = self.obs_rms.state()
        if self.return_rms is not None:
            running["return"] = self.return_rms.state()
        return {**self.inner.state_dict(), _STATE_KEY: running}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        running = state.get(_STATE_KEY)
        if running is None:
            raise ResumeError(
                "the trainer state has no normalisation statistics: it was saved by a preset "
                "without 'normalize'; resume with that preset or start a new run."
            )
        missing = [
            k
            for k, rms in (("obs", self.obs_rms), ("return", self.return_rms))
            if rms is not None and k not in running
        ]
        if missing:
            raise ResumeError(
                f"the trainer state has no {' or '.join(missing)} statistics: the preset's "
                "normalize section changed since it was saved; resume with the run's preset."
            )
        self.inner.load_state_dict({k: v for k, v in state.items() if k != _STATE_KEY})
        self.returns = {str(k): float(v) for k, v in running["returns"].items()}
        if self.obs_rms is not None:
            self.obs_rms.load(running["obs"])
        if self.return_rms is not None:
            self.return_rms.load(running["return"])
        # A state is saved at a publish, with nothing read in between: the version it
        # belongs to carries exactly these statistics.
        self.published = self.snapshot()
