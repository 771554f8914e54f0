"""Data-parallel trainer ranks (``launch --trainers K``): K ranks given some chunks take the
step one learner given all of them takes, and the ranks end with identical weights.

The cases run in real ranks that all-reduce over gloo on 127.0.0.1 (no sleeps: the ranks
meet in ``init_process_group`` and every collective is a barrier), all in one group of
spawned ranks per test process (``in_ranks``); the module is one xdist group, so that group
is spawned once.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from coach_stream.algorithms import builder_for
from coach_stream.config import NormalizeConfig, load_preset
from coach_stream.core import Collective, ExperienceChunk, Learner
from coach_stream.envs import probe_shape
from coach_stream.policies.networks import ActorCritic
from coach_stream.testing.chunks import make_chunk
from coach_stream.testing.data_parallel import Job, LearnerFactory, learn, learn_in_ranks
from coach_stream.trainer.impala import IMPALA, IMPALAConfig
from coach_stream.trainer.normalize import NormalizingLearner
from coach_stream.trainer.ppo import PPO, PPOConfig
from coach_stream.transport.reader import own_partitions

pytestmark = pytest.mark.xdist_group("data-parallel-ranks")

VERSION = 11  # make_chunk's policy_version
CHUNKS, STEPS = 6, 8
TOTAL = CHUNKS * STEPS


def _chunks() -> list[ExperienceChunk]:
    """Six CartPole-shaped chunks from different envs, actions in {0, 1}."""
    chunks = []
    for i in range(CHUNKS):
        chunk = make_chunk(STEPS, seed=i, ended=i % 2 == 0)
        chunk.actions[:] = np.clip(chunk.actions, 0, 1)
        assert chunk.log_probs is not None
        chunk.log_probs[:] = -np.abs(chunk.log_probs)
        chunks.append(dataclasses.replace(chunk, worker_id=i, env_index=0))
    return chunks


def _net() -> ActorCritic:
    torch.manual_seed(7)
    return ActorCritic(probe_shape("CartPole-v1"), load_preset("cartpole-ppo").network)


def ppo(collective: Collective) -> Learner:
    # one minibatch per epoch: the union's minibatch is then the same set of rows however
    # the ranks' permutations order them (the comparison is of sets, not of orders)
    config = PPOConfig(minibatch_size=TOTAL, update_epochs=3, ent_coef=0.01, target_kl=10.0)
    return PPO(
        _net(), config, TOTAL, TOTAL, torch.Generator().manual_seed(0), collective=collective
    )


def ppo_normalized(collective: Collective) -> Learner:
    """PPO through observation and reward normalisation: the statistics the ranks merge."""
    normalize = NormalizeConfig(observations=True, rewards=True)
    return NormalizingLearner(ppo(collective), normalize, 0.99, (4,), collective)


def impala(collective: Collective) -> Learner:
    config = IMPALAConfig(batch_steps=TOTAL, norm_adv=True)
    return IMPALA(_net(), config, torch.Generator().manual_seed(0), collective=collective)


def _job(factory: LearnerFactory, split: int) -> tuple[Job, list[ExperienceChunk]]:
    """Rank 0 holds the first ``split`` envs' chunks, rank 1 the rest (as partitions would)."""
    chunks, rounds = _chunks(), 1
    if factory is impala:  # IMPALA takes batch_steps per update: two batches' worth
        chunks += [dataclasses.replace(c, chunk_seq=c.chunk_seq + 1) for c in chunks]
    if factory is ppo_normalized:  # the second version learns through merged statistics
        rounds = 2
    shares = [
        [c for c in chunks if c.worker_id < split],
        [c for c in chunks if c.worker_id >= split],
    ]
    return Job(factory, shares, VERSION, rounds), chunks


CASES = [(ppo, 3), (ppo, 1), (impala, 3), (impala, 1), (ppo_normalized, 1)]  # uneven: split 1


def test_two_ranks_learn_what_one_learner_learns_from_their_union(
    in_ranks: list[list[dict[str, torch.Tensor]]],
) -> None:
    jobs = [_job(factory, split) for factory, split in CASES]
    initial = _net().state_dict()
    for (job, union_chunks), ranks, (factory, split) in zip(
        jobs, in_ranks[: len(CASES)], CASES, strict=True
    ):
        case = f"{factory.__name__} split {split}"
        union = learn(factory, union_chunks, VERSION, job.rounds)
        assert union.keys() == ranks[0].keys() == ranks[1].keys()
        for name, weights in union.items():
            moved = name not in initial or not torch.equal(weights, initial[name])
            assert moved, f"{case} {name}: nothing learned"
            assert torch.equal(ranks[0][name], ranks[1][name]), f"{case} {name}: diverged"
            torch.testing.assert_close(
                ranks[0][name], weights, rtol=1e-4, atol=1e-5, msg=f"{case} {name}"
            )


def test_each_partition_belongs_to_exactly_one_rank() -> None:
    partitions = list(range(7))
    shares = [own_partitions(partitions, rank, 3) for rank in range(3)]
    assert shares == [[0, 3, 6], [1, 4], [2, 5]]
    assert sorted(p for share in shares for p in share) == partitions


def dqn(collective: Collective) -> Learner:
    preset = load_preset(
        "cartpole-dqn", ["dqn.learning_starts=16", "dqn.batch_size=8", "dqn.samples_per_insert=8"]
    )
    return builder_for(preset).make_learner(
        probe_shape("CartPole-v1"), 2, torch.Generator().manual_seed(0), collective
    )


def sac(collective: Collective) -> Learner:
    preset = load_preset(
        "pendulum-sac", ["sac.learning_starts=16", "sac.batch_size=8", "sac.samples_per_insert=8"]
    )
    return builder_for(preset).make_learner(
        probe_shape("Pendulum-v1"), 2, torch.Generator().manual_seed(0), collective
    )


def _replay_chunks(obs: int, continuous: bool) -> list[ExperienceChunk]:
    chunks = []
    for i in range(CHUNKS):
        chunk = make_chunk(STEPS, (obs,), seed=i, ended=i % 2 == 0, behaviour=False)
        if continuous:
            actions = np.clip(np.random.default_rng(i).normal(size=(STEPS, 1)), -2, 2)
            chunk = dataclasses.replace(chunk, actions=actions.astype(np.float32))
        else:
            chunk.actions[:] = np.clip(chunk.actions, 0, 1)
        chunks.append(dataclasses.replace(chunk, worker_id=i, env_index=0))
    return chunks


def _replay_jobs() -> list[Job]:
    discrete, continuous = _replay_chunks(4, continuous=False), _replay_chunks(3, continuous=True)
    return [
        Job(dqn, [discrete[:3], discrete[3:]], 0, 1),
        Job(sac, [continuous[:3], continuous[3:]], 0, 1),
    ]


@pytest.fixture(scope="module")
def in_ranks() -> list[list[dict[str, torch.Tensor]]]:
    """Every case of this module learned in one group of two spawned ranks: each rank
    process imports torch and the learners once (about 4 s), not once per test."""
    return learn_in_ranks(
        [*(job for job, _ in (_job(f, split) for f, split in CASES)), *_replay_jobs()]
    )


def test_replay_learner_ranks_sample_their_own_buffers_and_keep_identical_weights(
    in_ranks: list[list[dict[str, torch.Tensor]]],
) -> None:
    """DQN and SAC ranks (each buffer its partitions' share) take the same number of
    gradient steps on averaged gradients, so they hold the same weights afterwards."""
    jobs = _replay_jobs()
    for job, ranks in zip(jobs, in_ranks[len(CASES) :], strict=True):
        alone = learn(job.factory, job.shares[0], 0, 1)
        for name, weights in ranks[0].items():
            assert torch.equal(weights, ranks[1][name]), f"{job.factory.__name__} {name}"
        # rank 0 learned from more than its own share: not what it learns alone
        assert any(not torch.equal(ranks[0][k], alone[k]) for k in alone)
