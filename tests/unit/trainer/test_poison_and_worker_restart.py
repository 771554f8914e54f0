"""Input the trainer must survive, and a worker restart that must not reuse chunk_seqs.

In-memory runs (``in_process_run``); the Kafka versions of both are in
``tests/integration/test_transport.py``.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from typing import Any

import numpy as np

from coach_stream.codec import ChunkSpec
from coach_stream.config import load_preset
from coach_stream.core import ExperienceChunk
from coach_stream.envs import probe_shape
from coach_stream.testing.memory_log import MemoryExperienceReader


def _poison(good: ExperienceChunk) -> dict[str, ExperienceChunk]:
    """Chunks that decode (or never meet the codec) but cannot be trained on in this run."""
    t = good.num_steps
    obs = good.observations
    actions = good.actions.copy()
    actions[0] = 7  # CartPole has 2 actions
    rewards = good.rewards.copy()
    rewards[0] = np.nan
    return {
        "observations are float32(": dataclasses.replace(
            good,
            observations=np.zeros((t + 1, 5), np.float32),  # another env's shape
        ),
        "observations are float64(": dataclasses.replace(good, observations=obs.astype(np.float64)),
        "run_id is 'another-run'": dataclasses.replace(good, run_id="another-run"),
        "actions span 0..7": dataclasses.replace(good, actions=actions),
        "actions are int32(": dataclasses.replace(good, actions=good.actions.astype(np.int32)),
        "observations must have": dataclasses.replace(good, observations=obs[:-1]),  # T rows
        "rewards hold NaN": dataclasses.replace(good, rewards=rewards),
        "it holds no steps": dataclasses.replace(
            good,
            observations=obs[:1],
            actions=good.actions[:0],
            rewards=good.rewards[:0],
            terminated=good.terminated[:0],
            truncated=good.truncated[:0],
            log_probs=None,
            values=None,
        ),
    }


def test_poison_chunks_are_dead_lettered_with_reasons_and_training_goes_on(
    in_process_run: Any,
) -> None:
    # DQN: before the trainer's door existed, the first chunk of another shape crashed the
    # trainer in its replay buffer (and again after every restart).
    preset = load_preset("cartpole-dqn", ["network.hidden_sizes=[16]", "dqn.learning_starts=64"])
    run = in_process_run(preset, workers=1, evaluator=False)
    shape = probe_shape(preset.env_id)
    spec = ChunkSpec(run.run_id, shape.obs_shape, shape.obs_dtype, shape.num_actions)
    run.trainer.reader = MemoryExperienceReader(run.log, spec)  # as `coach-stream train` does
    run.trainer.settings = dataclasses.replace(run.trainer.settings, log_every_s=0.0)
    run.start()
    worker = run.rollouts[0]
    poisoned: dict[int, str] = {}  # log offset -> expected reason
    for _ in range(3):
        worker.act_share()
        for reason, chunk in _poison(run.log.chunks[-1]).items():
            poisoned[len(run.log.chunks)] = reason
            run.log.chunks.append(chunk)
    good_steps = sum(c.num_steps for i, c in enumerate(run.log.chunks) if i not in poisoned)
    while not run.trainer.reader.at_end() or run.trainer.learner.ready():
        assert run.trainer.iterate() is None
    assert run.trainer.env_steps == good_steps  # every good chunk trained on, no bad one
    assert run.trainer.learner.updates > 0
    letters = dict(run.log.dead_letters)
    assert sorted(letters) == sorted(poisoned)
    for offset, reason in poisoned.items():
        assert reason in letters[offset], (reason, letters[offset])
    assert run.trainer_events.of("progress")[-1]["rollout/dead_lettered"] == len(poisoned)


def test_a_restarted_worker_continues_each_envs_chunk_seq(in_process_run: Any) -> None:
    run = in_process_run(load_preset("cartpole-ppo"), workers=1, evaluator=False)
    run.start()
    run.step()
    run.step()
    written = len(run.log.chunks)
    last_before: dict[int, int] = {}
    for chunk in run.log.chunks:
        last_before[chunk.env_index] = chunk.chunk_seq
    restarted = run._worker(0)  # the process was killed: a new one, no counters kept
    restarted.start()
    restarted.act_share()
    after = run.log.chunks[written:]
    assert after, "the restarted worker wrote chunks"
    firsts: dict[int, int] = {}
    for chunk in after:
        firsts.setdefault(chunk.env_index, chunk.chunk_seq)
    assert firsts == {env: last_before[env] + 1 for env in firsts}
    seen: dict[tuple[int, int], set[int]] = defaultdict(set)
    for chunk in run.log.chunks:  # monotonic per (worker, env) over the whole log
        key = (chunk.worker_id, chunk.env_index)
        assert all(chunk.chunk_seq > s for s in seen[key]), key
        seen[key].add(chunk.chunk_seq)
