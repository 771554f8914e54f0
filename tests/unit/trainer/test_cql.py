"""DQN's CQL term (``dqn.cql_alpha``): on experience that only ever took action 0, the
conservative term keeps the never-taken action's value below the taken one's; plain DQN,
with nothing to say about action 1, leaves it wherever its initial weights put it."""

from __future__ import annotations

import dataclasses

import numpy as np
import torch

from coach_stream.algorithms import builder_for
from coach_stream.config import load_preset
from coach_stream.envs import probe_shape
from coach_stream.testing.chunks import make_chunk


def action_gap(cql_alpha: float) -> float:
    """Mean of Q(s, 1) - Q(s, 0) over the data's observations after 64 gradient steps."""
    preset = load_preset(
        "cartpole-dqn",
        ["dqn.learning_starts=0", "dqn.samples_per_insert=64", f"dqn.cql_alpha={cql_alpha}",
         "dqn.batch_size=32"],
    )  # fmt: skip
    generator = torch.Generator().manual_seed(3)
    learner = builder_for(preset).make_learner(probe_shape("CartPole-v1"), 1, generator)
    chunks = [make_chunk(16, seed=i, behaviour=False) for i in range(8)]
    chunks = [dataclasses.replace(c, actions=np.zeros_like(c.actions)) for c in chunks]
    learner.ingest(chunks, 0)
    for _ in range(2):
        learner.learn(0)
    observations = torch.from_numpy(np.concatenate([c.observations for c in chunks]))
    with torch.no_grad():
        q = learner.q_network(observations)  # type: ignore[attr-defined]
    return float((q[:, 1] - q[:, 0]).mean())


def test_cql_keeps_an_action_the_data_never_took_below_the_one_it_took() -> None:
    plain, conservative = action_gap(0.0), action_gap(1.0)
    assert conservative < -0.5
    assert conservative < plain - 0.5, (plain, conservative)
