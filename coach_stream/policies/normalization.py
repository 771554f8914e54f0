"""Observation and reward normalisation that every process of a run applies identically.

SB3's ``VecNormalize`` keeps running statistics inside one process's env wrapper. A
distributed run has many workers: if each kept its own statistics they would act on
different inputs, and the trainer would learn from a mixture of them. Here the trainer
keeps the statistics, from the experience it reads (``trainer.normalize``), and ships a
snapshot of them inside every policy version. A worker acting on version v normalises
with v's statistics, the trainer learns v's chunks with the same snapshot (it changes only
when a version is published), and a policy loaded later from its checkpoint (the
evaluator, a resumed worker, an export) acts exactly as it did in training.

Kafka keeps the raw observations and rewards: replay and export see what the env gave.

In a policy's state_dict the snapshot sits beside the network's weights, under
``normalize.*`` keys (float64 tensors, so ``weights_only`` loading reads them).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import torch

from coach_stream.core import Action, Actor, LoadedPolicy
from coach_stream.errors import IntegrityError
from coach_stream.policies.actors import compiled_kernels

PREFIX = "normalize."
_COMPILED_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))
"""Observations standardised in one compiled call (``policies.compiled.standardize``), where
numba loads: a worker's every act on one observation cost ~8 us in numpy's five calls."""
_KEYS = ("obs_mean", "obs_var", "return_var", "clip_observations", "clip_rewards", "epsilon")


class RunningMeanStd:
    """Running mean and (population) variance, merged batch by batch in float64 with Chan
    et al.'s parallel update, as SB3's ``RunningMeanStd``. Before any data: mean 0, var 1."""

    def __init__(self, shape: tuple[int, ...] = ()) -> None:
        self.mean = np.zeros(shape, np.float64)
        self.var = np.ones(shape, np.float64)
        self.count = 0

    def update(self, batch: npt.NDArray[np.generic]) -> None:
        """Fold in a batch of samples (first axis: the samples)."""
        x = np.asarray(batch, np.float64)
        n = x.shape[0]
        if n == 0:
            return
        self.merge(x.mean(axis=0), x.var(axis=0), n)

    def merge(
        self, batch_mean: npt.NDArray[np.float64], batch_var: npt.NDArray[np.float64], n: int
    ) -> None:
        """Fold in the moments of ``n`` samples (another rank's batch: ``update``'s step)."""
        if n == 0:
            return
        if self.count == 0:
            self.mean, self.var, self.count = np.asarray(batch_mean), np.asarray(batch_var), n
            return
        total = self.count + n
        delta = batch_mean - self.mean
        m2 = self.var * self.count + batch_var * n + delta**2 * (self.count * n / total)
        self.mean = self.mean + delta * (n / total)
        self.var = m2 / total
        self.count = total

    def state(self) -> dict[str, object]:
        return {
            "mean": torch.from_numpy(np.array(self.mean, np.float64)),
            "var": torch.from_numpy(np.array(self.var, np.float64)),
            "count": self.count,
        }

    def load(self, state: Mapping[str, object]) -> None:
        mean, var, count = state["mean"], state["var"], state["count"]
        assert isinstance(mean, torch.Tensor) and isinstance(var, torch.Tensor)
        self.mean = mean.numpy().astype(np.float64)
        self.var = var.numpy().astype(np.float64)
        self.count = int(count)  # type: ignore[call-overload]


@dataclass(frozen=True)
class Statistics:
    """The snapshot one policy version carries: how its actor sees observations and how the
    trainer scales the rewards of the experience that version acted."""

    obs_mean: npt.NDArray[np.float64] | None
    obs_var: npt.NDArray[np.float64] | None
    return_var: float | None
    clip_observations: float
    clip_rewards: float
    epsilon: float

    def observations(self, obs: npt.NDArray[np.generic]) -> npt.NDArray[np.generic]:
        """Standardised and clipped observations (float32); unchanged when not normalised."""
        if self.obs_mean is None or self.obs_std is None:
            return obs
        x = np.asarray(obs)
        kernels = compiled_kernels()
        if (kernels is not None and x.dtype in _COMPILED_DTYPES and x.flags.writeable
                and len(x) and x.shape[1:] == self.obs_mean.shape):  # fmt: skip
            rows = np.ascontiguousarray(x).reshape(len(x), -1)
            out = np.empty(rows.shape, np.float32)
            kernels.standardize(rows, *self._rows, self.clip_observations, out)
            return out.reshape(x.shape)
        # in place, and clipped by the two ufuncs np.clip calls (its Python wrapper costs
        # more than their work on one env's observation, and this runs every env step)
        scaled = np.asarray(obs, np.float64) - self.obs_mean
        scaled /= self.obs_std
        clip = self.clip_observations
        np.maximum(scaled, -clip, out=scaled)
        np.minimum(scaled, clip, out=scaled)
        return scaled.astype(np.float32)

    @functools.cached_property
    def _rows(self) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
        """The mean and the divisor as flat float64 rows: the compiled standardising's."""
        assert self.obs_mean is not None and self.obs_std is not None
        return (np.ascontiguousarray(self.obs_mean, np.float64).reshape(-1),
                np.ascontiguousarray(self.obs_std, np.float64).reshape(-1))  # fmt: skip

    @functools.cached_property
    def obs_std(self) -> npt.NDArray[np.float64] | None:
        """sqrt(obs_var + epsilon), the observations' divisor: once per version."""
        return None if self.obs_var is None else np.sqrt(self.obs_var + self.epsilon)

    def rewards(self, rewards: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
        """Rewards divided by the discounted return's standard deviation, clipped."""
        if self.return_var is None:
            return rewards
        scaled = np.asarray(rewards, np.float64) / np.sqrt(self.return_var + self.epsilon)
        clipped: npt.NDArray[np.float32] = np.clip(
            scaled, -self.clip_rewards, self.clip_rewards
        ).astype(np.float32)
        return clipped

    def to_tensors(self) -> dict[str, torch.Tensor]:
        """The ``normalize.*`` entries of a policy's state_dict (absent parts left out)."""
        values: dict[str, object] = {
            "obs_mean": self.obs_mean,
            "obs_var": self.obs_var,
            "return_var": self.return_var,
            "clip_observations": self.clip_observations,
            "clip_rewards": self.clip_rewards,
            "epsilon": self.epsilon,
        }
        return {
            PREFIX + key: torch.as_tensor(np.asarray(value, np.float64))
            for key, value in values.items()
            if value is not None
        }

    @staticmethod
    def split(
        state_dict: Mapping[str, object],
    ) -> tuple[dict[str, object], Statistics | None]:
        """A policy's state_dict as (the network's weights, its statistics or None)."""
        weights = {k: v for k, v in state_dict.items() if not k.startswith(PREFIX)}
        found = {k.removeprefix(PREFIX): v for k, v in state_dict.items() if k.startswith(PREFIX)}
        if not found:
            return weights, None
        unknown = set(found) - set(_KEYS)
        if unknown or not {"clip_observations", "clip_rewards", "epsilon"} <= set(found):
            raise IntegrityError(
                f"the policy's normalisation entries {sorted(found)} are not the ones "
                f"coach_stream writes ({', '.join(_KEYS)}); it was not written by this trainer."
            )
        arrays = {k: _array(k, v) for k, v in found.items()}
        if ("obs_mean" in arrays) != ("obs_var" in arrays) or (
            "obs_mean" in arrays and arrays["obs_mean"].shape != arrays["obs_var"].shape
        ):
            raise IntegrityError("the policy's observation mean and variance do not match.")
        return weights, Statistics(
            obs_mean=arrays.get("obs_mean"),
            obs_var=arrays.get("obs_var"),
            return_var=float(arrays["return_var"]) if "return_var" in arrays else None,
            clip_observations=float(arrays["clip_observations"]),
            clip_rewards=float(arrays["clip_rewards"]),
            epsilon=float(arrays["epsilon"]),
        )


def _array(key: str, value: object) -> npt.NDArray[np.float64]:
    if not isinstance(value, torch.Tensor):
        raise IntegrityError(f"the policy's normalize.{key} is not a tensor.")
    array = value.detach().cpu().numpy().astype(np.float64)
    if not np.all(np.isfinite(array)) or (key.endswith("var") and np.any(array < 0)):
        raise IntegrityError(f"the policy's normalize.{key} holds a non-finite or negative value.")
    return array


class NormalizingActor:
    """An actor that sees observations through the statistics of the version it holds.

    Built for every actor of a preset that normalises; a version without statistics is
    refused (it was not written for this preset), so nothing acts on raw inputs by mistake.
    """

    def __init__(self, inner: Actor) -> None:
        self.inner = inner
        self.version = inner.version
        self.statistics: Statistics | None = None

    def load(self, policy: LoadedPolicy) -> None:
        weights, statistics = Statistics.split(policy.state_dict)
        if statistics is None:
            raise IntegrityError(
                f"policy version {policy.version.version} carries no normalisation statistics "
                "but the preset normalises; it was trained by a preset without 'normalize'."
            )
        self.inner.load(LoadedPolicy(policy.version, weights))
        self.statistics, self.version = statistics, self.inner.version

    def act(self, obs: npt.NDArray[np.generic]) -> Action:
        if self.statistics is None:
            raise RuntimeError("NormalizingActor.act before any policy version was loaded")
        return self.inner.act(self.statistics.observations(obs))
