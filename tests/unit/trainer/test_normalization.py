"""Normalisation kept by the trainer, shipped in each version, used by every actor.

The statistics equal numpy's over the same chunks; a resumed trainer continues them bit
for bit; a worker acting on version v sees observations through v's statistics; a policy
loaded from its checkpoint acts exactly as the actor that trained with it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pytest
import torch

from coach_stream.checkpoints.keys import policy_key
from coach_stream.checkpoints.serialization import policy_from_bytes, policy_to_bytes
from coach_stream.config import NormalizeConfig, load_preset
from coach_stream.core import Action, ExperienceChunk, Ingested, LoadedPolicy, PolicyVersion
from coach_stream.envs import probe_shape
from coach_stream.errors import ConfigError, IntegrityError, ResumeError
from coach_stream.policies.normalization import NormalizingActor, RunningMeanStd, Statistics
from coach_stream.trainer.normalize import NormalizingLearner
from coach_stream.trainer.state import TrainerState, state_from_bytes, state_to_bytes

GAMMA = 0.9
CONFIG = NormalizeConfig(observations=True, rewards=True)
OVERRIDES = ["normalize.observations=true", "normalize.rewards=true"]


class Recorder:
    """A learner (or actor) that keeps what it is given."""

    def __init__(self) -> None:
        self.chunks: list[ExperienceChunk] = []
        self.seen: list[np.ndarray] = []
        self.version = -1
        self.weights: dict[str, object] = {}

    def ingest(self, chunks: Sequence[ExperienceChunk], version: int) -> Ingested:
        self.chunks.extend(chunks)
        return Ingested(used_steps=sum(c.num_steps for c in chunks))

    def refill(self, chunks: Sequence[ExperienceChunk]) -> None: ...

    def wants_data(self) -> bool:
        return True

    def ready(self) -> bool:
        return False

    def learn(self, env_steps: int) -> tuple[dict[str, float], bool]:
        return {}, True

    @property
    def updates(self) -> int:
        return 0

    def policy_state_dict(self) -> Mapping[str, torch.Tensor]:
        return {"w": torch.ones(2)}

    def state_dict(self) -> dict[str, Any]:
        return {"w": torch.ones(2)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        assert set(state) == {"w"}

    def load(self, policy: LoadedPolicy) -> None:
        self.weights, self.version = dict(policy.state_dict), policy.version.version

    def act(self, obs: np.ndarray) -> Action:
        self.seen.append(obs)
        return Action(actions=np.zeros(len(obs), np.int64))


def chunk(
    rng: np.random.Generator, key: tuple[int, int], seq: int, first_step: int, steps: int, end: bool
) -> ExperienceChunk:
    terminated = np.zeros(steps, bool)
    terminated[-1] = end
    return ExperienceChunk(
        run_id="r",
        worker_id=key[0],
        env_index=key[1],
        chunk_seq=seq,
        policy_version=0,
        first_step=first_step,
        observations=(rng.normal(3.0, 5.0, (steps + 1, 3))).astype(np.float32),
        actions=np.zeros(steps, np.int64),
        rewards=rng.normal(1.0, 2.0, steps).astype(np.float32),
        terminated=terminated,
        truncated=np.zeros(steps, bool),
    )


def stream(seed: int, n: int = 12) -> list[ExperienceChunk]:
    """Chunks of two (worker, env) streams, interleaved, with episodes that end mid-stream."""
    rng = np.random.default_rng(seed)
    chunks, first = [], {(0, 0): 0, (1, 2): 0}
    for i in range(n):
        key = (0, 0) if i % 2 == 0 else (1, 2)
        end = i % 5 == 3
        steps = int(rng.integers(3, 9))
        chunks.append(chunk(rng, key, i, first[key], steps, end))
        first[key] = 0 if end else first[key] + steps
    return chunks


def expected_returns(chunks: Sequence[ExperienceChunk]) -> np.ndarray:
    """The discounted return of each step, per stream, restarted where an episode starts."""
    running: dict[str, float] = {}
    out = []
    for c in chunks:
        ret = 0.0 if c.first_step == 0 else running[c.key]
        for r in c.rewards.astype(np.float64):
            ret = ret * GAMMA + r
            out.append(ret)
        running[c.key] = 0.0 if c.episode_ended else ret
    return np.asarray(out)


def test_the_statistics_equal_numpys_over_the_same_chunks() -> None:
    chunks = stream(0)
    learner = NormalizingLearner(Recorder(), CONFIG, GAMMA, (3,))
    for batch in (chunks[:5], chunks[5:6], chunks[6:]):
        learner.ingest(batch, 0)
    observed = np.concatenate([c.observations[:-1] for c in chunks]).astype(np.float64)
    assert learner.obs_rms is not None and learner.return_rms is not None
    assert learner.obs_rms.count == len(observed)
    np.testing.assert_allclose(learner.obs_rms.mean, observed.mean(0), rtol=1e-12)
    np.testing.assert_allclose(learner.obs_rms.var, observed.var(0), rtol=1e-12)
    returns = expected_returns(chunks)
    np.testing.assert_allclose(learner.return_rms.mean, returns.mean(), rtol=1e-12)
    np.testing.assert_allclose(learner.return_rms.var, returns.var(), rtol=1e-12)


def test_the_learner_sees_each_version_through_the_statistics_published_with_it() -> None:
    chunks = stream(1)
    recorder = Recorder()
    learner = NormalizingLearner(recorder, CONFIG, GAMMA, (3,))
    first = Statistics.split(learner.policy_state_dict())[1]  # version 0: before any data
    learner.ingest(chunks[:6], 0)
    second = Statistics.split(learner.policy_state_dict())[1]  # version 1
    learner.ingest(chunks[6:], 1)
    assert first is not None and second is not None
    assert first.obs_mean is not None and second.obs_mean is not None
    np.testing.assert_array_equal(first.obs_mean, np.zeros(3))  # mean 0, var 1: clip only
    for given, raw in zip(recorder.chunks, chunks, strict=True):
        stats = first if raw in chunks[:6] else second
        np.testing.assert_array_equal(given.observations, stats.observations(raw.observations))
        np.testing.assert_array_equal(given.rewards, stats.rewards(raw.rewards))
        assert given.observations.dtype == np.float32
    assert not np.array_equal(second.obs_mean, first.obs_mean)


def test_a_resumed_trainer_continues_the_statistics_bit_for_bit() -> None:
    chunks = stream(2, n=20)
    straight = NormalizingLearner(Recorder(), CONFIG, GAMMA, (3,))
    straight.ingest(chunks[:9], 0)
    saved = straight.state_dict()
    blob = state_to_bytes(
        TrainerState(0, {}, 0, {}, saved, torch.get_rng_state(), torch.get_rng_state(), [], {})
    )
    resumed = NormalizingLearner(Recorder(), CONFIG, GAMMA, (3,))
    resumed.load_state_dict(state_from_bytes(blob).learner)
    for learner in (straight, resumed):
        learner.ingest(chunks[9:], 1)
    a, b = straight.policy_state_dict(), resumed.policy_state_dict()
    assert set(a) == set(b)
    for key in a:
        assert a[key].numpy().tobytes() == b[key].numpy().tobytes(), key
    assert straight.returns == resumed.returns


def test_a_state_without_statistics_is_a_resume_error() -> None:
    learner = NormalizingLearner(Recorder(), CONFIG, GAMMA, (3,))
    with pytest.raises(ResumeError, match="without 'normalize'"):
        learner.load_state_dict({"w": torch.ones(2)})
    only_obs = NormalizingLearner(Recorder(), NormalizeConfig(observations=True), GAMMA, (3,))
    with pytest.raises(ResumeError, match="return statistics"):
        learner.load_state_dict(only_obs.state_dict())


def policy(version: int, state_dict: Mapping[str, object]) -> LoadedPolicy:
    record = PolicyVersion("r", version, f"mem://{version}", "0" * 64, 1, 0, 0, 0)
    return LoadedPolicy(record, state_dict)


def test_an_actor_acts_on_the_statistics_of_the_version_it_holds() -> None:
    chunks = stream(3)
    learner = NormalizingLearner(Recorder(), CONFIG, GAMMA, (3,))
    learner.ingest(chunks, 0)
    published = policy_from_bytes(policy_to_bytes(learner.policy_state_dict()))
    inner = Recorder()
    actor = NormalizingActor(inner)
    actor.load(policy(7, published))
    raw = np.random.default_rng(9).normal(3.0, 5.0, (4, 3)).astype(np.float32)
    actor.act(raw)
    assert actor.version == 7 and set(inner.weights) == {"w"}  # the net gets its weights only
    np.testing.assert_array_equal(inner.seen[0], learner.published.observations(raw))
    assert not np.array_equal(inner.seen[0], raw)


def test_an_actor_refuses_a_version_without_statistics_and_keeps_the_one_it_has() -> None:
    actor = NormalizingActor(Recorder())
    learner = NormalizingLearner(Recorder(), CONFIG, GAMMA, (3,))
    actor.load(policy(1, learner.policy_state_dict()))
    with pytest.raises(IntegrityError, match="no normalisation statistics"):
        actor.load(policy(2, {"w": torch.ones(2)}))
    bad = {**learner.policy_state_dict(), "normalize.obs_var": torch.full((3,), -1.0)}
    with pytest.raises(IntegrityError, match="negative"):
        actor.load(policy(3, bad))
    assert actor.version == 1


def test_running_mean_std_merges_batches_like_one_pass() -> None:
    rng = np.random.default_rng(4)
    data = rng.normal(0, 1, (101, 2))
    rms = RunningMeanStd((2,))
    for part in np.array_split(data, 7):
        rms.update(part)
    np.testing.assert_allclose(rms.mean, data.mean(0), rtol=1e-12)
    np.testing.assert_allclose(rms.var, data.var(0), rtol=1e-12)


def test_dqn_sac_and_image_observations_are_refused() -> None:
    for preset in ("cartpole-dqn", "pendulum-sac"):
        with pytest.raises(ConfigError, match="on-policy learners"):
            load_preset(preset, OVERRIDES)
    from coach_stream.algorithms import builder_for

    minigrid = load_preset("minigrid-ppo", ["normalize.observations=true"])
    shape = probe_shape(minigrid.env_id, minigrid.env_wrappers)
    with pytest.raises(ConfigError, match="images"):
        builder_for(minigrid).make_actor(shape, greedy=True, seed=0)


@pytest.mark.slow
def test_in_a_run_workers_act_on_their_versions_statistics_and_a_loaded_policy_acts_the_same(
    in_process_run: Any,
) -> None:
    from coach_stream.algorithms import builder_for

    # 2 workers x 2 envs x 256 steps = 1,024 env steps per version: 6 versions of budget
    # two greedy episodes a round: what the evaluator acts with is the point, not its mean
    small = ["env_step_budget=6144", "rollout.num_envs=2", "ppo.num_steps=256", "eval_episodes=2"]
    preset = load_preset("pendulum-ppo", [*OVERRIDES, *small])
    run = in_process_run(preset, workers=2)
    run.start()
    for _ in range(3):
        assert run.step() is None
    store = run.store
    for worker in run.rollouts:
        actor = worker.actor
        assert isinstance(actor, NormalizingActor) and actor.version >= 2
        held = store.get(store.uri(policy_key(run.run_id, actor.version)))
        _, statistics = Statistics.split(policy_from_bytes(held))
        assert statistics is not None and actor.statistics is not None
        assert statistics.obs_var is not None and actor.statistics.obs_var is not None
        np.testing.assert_array_equal(actor.statistics.obs_var, statistics.obs_var)
        assert statistics.obs_mean is not None and np.any(statistics.obs_mean != 0.0)
    assert run.eval is not None
    trained = run.eval.actor
    latest = run.trainer.last_policy
    blob = store.get(latest.uri, expected_sha256=latest.sha256)
    loaded = builder_for(preset).make_actor(
        probe_shape(preset.env_id, preset.env_wrappers), greedy=True, seed=0
    )
    loaded.load(LoadedPolicy(latest, policy_from_bytes(blob)))
    obs = np.random.default_rng(5).uniform(-1.0, 1.0, (64, 3)).astype(np.float32)
    if trained.version != latest.version:
        trained.load(LoadedPolicy(latest, policy_from_bytes(blob)))
    np.testing.assert_array_equal(loaded.act(obs).actions, trained.act(obs).actions)
