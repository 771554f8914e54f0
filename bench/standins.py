"""Stand-ins for a rollout worker's transport, so the benches can time its acting loop alone:
a writer that sends nothing, a policy source with one version that never changes, and a
worker built on them."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import torch

from coach_stream.algorithms import builder_for
from coach_stream.config import Preset
from coach_stream.core import (
    EncodedChunk,
    ExperienceChunk,
    LoadedPolicy,
    PolicyVersion,
    RunFinished,
)
from coach_stream.envs import SeedRole, env_seeds, env_shape, make_vector_env, process_seed
from coach_stream.events import EventList
from coach_stream.rollout.worker import RolloutWorker


class DiscardingWriter:
    """The same ``ExperienceWriter`` calls, no transport: the loop's cost without producing."""

    def write(self, chunk: ExperienceChunk) -> None:
        pass

    def write_encoded(self, record: EncodedChunk) -> None:
        pass

    def flush(self, timeout: float | None = None) -> None:
        pass

    def next_chunk_seqs(self, worker_id: int, num_envs: int) -> list[int]:
        return [0] * num_envs

    def acknowledged(self) -> dict[str, int]:
        return {}

    def close(self) -> None:
        pass

    def __enter__(self) -> DiscardingWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        pass


class FixedPolicy:
    """A policy source with one version that never changes and a run that never ends."""

    def __init__(self, policy: LoadedPolicy) -> None:
        self.policy = policy

    def latest(self, timeout: float) -> LoadedPolicy | None:
        return self.policy

    def poll(self) -> LoadedPolicy | None:
        return None

    def wait_for(self, version: int, timeout: float) -> LoadedPolicy:
        return self.policy

    @property
    def finished(self) -> RunFinished | None:
        return None


def bench_worker(preset: Preset, writer: Any) -> RolloutWorker:
    """Worker 0 of ``preset`` (its env, wrappers and vector width) acting an untrained
    version 0 that never changes, writing to ``writer``; not started, no periodic log.

    The version says the trainer has consumed the preset's whole env-step budget, so the
    actor acts as it does for most of a run: SAC past its uniform warm-up (``learning_starts``:
    with 0, a SAC worker drew uniform actions and never ran its network), DQN at its final
    epsilon. PPO and IMPALA do not read it."""
    builder = builder_for(preset)
    envs = make_vector_env(preset.env_id, preset.rollout.num_envs, preset.env_wrappers)
    shape = env_shape(envs)
    learner = builder.make_learner(shape, 1, torch.Generator().manual_seed(1))
    version = PolicyVersion("bench", 0, "mem://0", "", 0, 0, preset.env_step_budget, 0)
    policy = LoadedPolicy(version, dict(learner.policy_state_dict()))
    actor = builder.make_actor(shape, False, process_seed(preset.seed, 0, SeedRole.ROLLOUT))
    settings = replace(builder.make_worker_settings("bench", 0), log_every_s=1e9)
    seeds = env_seeds(preset.seed, 0, preset.rollout.num_envs, SeedRole.ROLLOUT)
    return RolloutWorker(envs, actor, writer, FixedPolicy(policy), settings, seeds, EventList())
