"""The trainer's door lets every chunk a real worker writes through, for every preset's env.

The rejections themselves are tested on whole runs (tests/unit/trainer/
test_poison_and_worker_restart.py and the Kafka version in tests/integration/
test_transport.py); this guards the other side: no false alarms on good input.
"""

from __future__ import annotations

import numpy as np
import pytest

from coach_stream.codec import ChunkSpec, decode_chunk, encode_chunk
from coach_stream.config import load_preset
from coach_stream.core import Action
from coach_stream.envs import env_shape, make_vector_env, probe_shape
from coach_stream.errors import InvalidChunkError
from coach_stream.rollout.chunker import Chunker


@pytest.mark.parametrize(
    "preset", ["cartpole-ppo", "cartpole-dqn", "acrobot-ppo", "lunarlander-ppo"]
)
def test_chunks_of_every_preset_env_fit_the_spec_the_trainer_builds(preset: str) -> None:
    env_id = load_preset(preset).env_id
    shape = probe_shape(env_id)  # what `coach-stream train` builds the spec from
    spec = ChunkSpec("r", shape.obs_shape, shape.obs_dtype, shape.num_actions)
    envs = make_vector_env(env_id, 3)
    assert env_shape(envs) == shape
    space = envs.single_observation_space
    chunker = Chunker("r", 0, 3, 16, shape.obs_shape, np.dtype(space.dtype), behaviour=True)
    obs, _ = envs.reset(seed=[1, 2, 3])  # type: ignore[arg-type]  # a seed per env
    chunker.start(obs, version=0)
    rng = np.random.default_rng(0)
    chunks = []
    for _ in range(120):
        actions = rng.integers(0, shape.num_actions, 3)
        action = Action(actions, np.full(3, -0.7, np.float32))
        obs, rewards, terminated, truncated, infos = envs.step(actions)
        chunks += chunker.add(action, rewards, terminated, truncated, obs, infos)
    chunks += chunker.flush()
    envs.close()
    assert len(chunks) >= 3 * 120 // 16
    for chunk in chunks:
        spec.check(chunk)  # as written
        spec.check(decode_chunk(encode_chunk(chunk)))  # as the trainer reads it
    with pytest.raises(InvalidChunkError, match="does not fit run 'other'"):
        ChunkSpec("other", shape.obs_shape, shape.obs_dtype, shape.num_actions).check(chunks[0])
