"""Offline training: a topic range -> a dataset -> gradient steps -> announced policies.

No rollout worker runs. The range is read once through ``ReplayReader`` into a columnar
dataset (offline RL samples uniformly from all of it, like a full replay buffer, so it is
held in memory, capped by ``max_transitions``); minibatches are drawn with a seeded
``torch.Generator``. Policies are written to the checkpoint store and announced on the new
run's control topic by the trainer's ``Announcer``, then evaluated greedily by the
``Evaluator`` with the same env and actor code a run's evaluator uses, and the report is
published there too.

Deterministic: reading is partition-ordered, sampling and initialisation are seeded,
torch runs single-threaded with deterministic algorithms; the same range, seed and
settings give bit-identical batches (``batches_sha256``) and weights (``weights_sha256``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
import torch

from coach_stream.envs import EnvShape
from coach_stream.errors import ConfigError
from coach_stream.policies.normalization import RunningMeanStd, Statistics
from coach_stream.replay.offline import OfflineAlgorithm, OfflineConfig, make_algorithm
from coach_stream.replay.reader import ReplayReader


@dataclass(frozen=True)
class Dataset:
    obs: npt.NDArray[Any]
    next_obs: npt.NDArray[Any]
    actions: npt.NDArray[np.int64]
    rewards: npt.NDArray[np.float32]
    terminated: npt.NDArray[np.bool_]

    def __len__(self) -> int:
        return int(self.rewards.shape[0])


def load_dataset(reader: ReplayReader, max_transitions: int) -> Dataset:
    """The reader's range as one dataset (``ConfigError`` past ``max_transitions``)."""
    parts: dict[str, list[Any]] = {
        k: [] for k in ("obs", "next_obs", "actions", "rewards", "terminated")
    }
    total = 0
    for batch in reader.batches():
        total += len(batch)
        if total > max_transitions:
            raise ConfigError(
                f"The range of {reader.topic} holds more than {max_transitions} transitions; "
                "narrow it with --from/--to or raise --max-transitions."
            )
        parts["obs"].append(batch.observations)
        parts["next_obs"].append(batch.next_observations)
        parts["actions"].append(batch.actions)
        parts["rewards"].append(batch.rewards)
        parts["terminated"].append(batch.terminated)
    if total == 0:
        raise ConfigError(f"The range of {reader.topic} holds no transitions to train on.")
    try:
        return Dataset(**{k: np.concatenate(v) for k, v in parts.items()})
    except ValueError as error:
        raise ConfigError(
            f"The range of {reader.topic} mixes observation or action shapes ({error}); "
            "train on a range written by one environment."
        ) from error


@dataclass
class OfflineResult:
    steps: int
    transitions: int
    batches_sha256: str
    weights_sha256: str
    metrics: dict[str, float] = field(default_factory=dict)


def weights_digest(state: dict[str, torch.Tensor]) -> str:
    digest = hashlib.sha256()
    for name in sorted(state):
        digest.update(name.encode())
        digest.update(state[name].detach().contiguous().numpy().tobytes())
    return digest.hexdigest()


def dataset_statistics(data: Dataset) -> Statistics:
    """The dataset's observation mean and variance, as a policy version carries them."""
    rms = RunningMeanStd(tuple(data.obs.shape[1:]))
    rms.update(data.obs)
    return Statistics(rms.mean, rms.var, None, 10.0, 10.0, 1e-8)


def train_offline(
    data: Dataset,
    algo: str,
    shape: EnvShape,
    config: OfflineConfig,
    seed: int,
    publish_every: int,
    publish: Callable[[int, dict[str, torch.Tensor]], None],
    on_step: Callable[[int], None] | None = None,
) -> tuple[OfflineAlgorithm, OfflineResult]:
    """``config.steps`` gradient steps; ``publish(step, policy_state_dict)`` every
    ``publish_every``; ``on_step(1)`` after each step (a progress bar). With
    ``config.normalize_observations`` the policy learns on standardised observations and
    its state_dict carries the statistics (``policies.normalization``)."""
    if data.obs.shape[1:] != shape.obs_shape:
        raise ConfigError(
            f"The data's observations have shape {data.obs.shape[1:]}, the environment's "
            f"{shape.obs_shape}; pass the --env the run used."
        )
    if int(data.actions.max()) >= shape.num_actions or int(data.actions.min()) < 0:
        raise ConfigError(
            f"The data's actions span {data.actions.min()}..{data.actions.max()}, outside the "
            f"environment's 0..{shape.num_actions - 1}; pass the --env the run used."
        )
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    torch.manual_seed(seed)
    algorithm = make_algorithm(algo, shape, config)
    generator = torch.Generator().manual_seed(seed)
    statistics = dataset_statistics(data) if config.normalize_observations else None
    extra = statistics.to_tensors() if statistics is not None else {}
    see = statistics.observations if statistics is not None else (lambda obs: obs)
    tensors = {
        "obs": torch.as_tensor(see(data.obs), dtype=torch.float32),
        "next_obs": torch.as_tensor(see(data.next_obs), dtype=torch.float32),
        "actions": torch.as_tensor(data.actions, dtype=torch.int64),
        "rewards": torch.as_tensor(data.rewards, dtype=torch.float32),
        "terminated": torch.as_tensor(data.terminated, dtype=torch.float32),
    }
    batches = hashlib.sha256()
    metrics: dict[str, float] = {}
    for step in range(1, config.steps + 1):
        index = torch.randint(len(data), (config.batch_size,), generator=generator)
        batch = {k: v[index] for k, v in tensors.items()}
        for name in ("obs", "actions", "rewards"):
            batches.update(batch[name].numpy().tobytes())
        metrics = algorithm.update(batch)
        if step % publish_every == 0 or step == config.steps:
            publish(step, {**algorithm.policy_state(), **extra})
        if on_step is not None:
            on_step(1)
    result = OfflineResult(
        steps=config.steps,
        transitions=len(data),
        batches_sha256=batches.hexdigest(),
        weights_sha256=weights_digest(algorithm.policy_state()),
        metrics=metrics,
    )
    return algorithm, result
