"""``replay train --normalize``: the policy learns on standardised observations and every
version it publishes carries the data's statistics, so the evaluator acts through them."""

from __future__ import annotations

import numpy as np
import torch

from coach_stream.checkpoints.serialization import policy_from_bytes, policy_to_bytes
from coach_stream.core import LoadedPolicy, PolicyVersion
from coach_stream.envs import probe_shape
from coach_stream.policies.normalization import NormalizingActor, Statistics
from coach_stream.replay.offline import OfflineConfig
from coach_stream.replay.offline.session import make_eval_actor
from coach_stream.replay.offline.train import Dataset, train_offline


def test_offline_policies_carry_the_datasets_statistics_and_the_evaluator_uses_them() -> None:
    rng = np.random.default_rng(0)
    n = 64
    obs = rng.normal(5.0, 3.0, size=(n, 4)).astype(np.float32)
    data = Dataset(
        obs=obs,
        next_obs=rng.normal(5.0, 3.0, size=(n, 4)).astype(np.float32),
        actions=(obs[:, 0] > 5.0).astype(np.int64),
        rewards=np.ones(n, np.float32),
        terminated=np.zeros(n, np.bool_),
    )
    config = OfflineConfig(steps=4, batch_size=8, normalize_observations=True)
    shape = probe_shape("CartPole-v1")
    published: list[dict[str, torch.Tensor]] = []
    train_offline(data, "bc", shape, config, 0, 2, lambda _, state: published.append(state))
    assert len(published) == 2
    weights, statistics = Statistics.split(policy_from_bytes(policy_to_bytes(published[-1])))
    assert statistics is not None and statistics.obs_mean is not None
    assert statistics.obs_var is not None
    np.testing.assert_allclose(statistics.obs_mean, obs.astype(np.float64).mean(0), rtol=1e-12)
    np.testing.assert_allclose(statistics.obs_var, obs.astype(np.float64).var(0), rtol=1e-12)
    actor = make_eval_actor("ppo", shape, config, seed=0)
    assert isinstance(actor, NormalizingActor)
    record = PolicyVersion("r", 1, "mem://1", "0" * 64, 1, 0, 0, 0)
    actor.load(LoadedPolicy(record, policy_from_bytes(policy_to_bytes(published[-1]))))
    assert actor.act(obs[:5]).actions.shape == (5,)
    assert "normalize.obs_mean" not in weights
