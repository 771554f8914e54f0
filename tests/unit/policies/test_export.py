"""An exported policy acts as the torch policy: ONNX under onnxruntime and TorchScript give
the same actions on 1,000 observations (discrete: equal; continuous: within 1e-5), with
the version's observation normalisation inside the file."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime
import pytest
import torch

from coach_stream.algorithms import builder_for
from coach_stream.config import load_preset
from coach_stream.core import LoadedPolicy, PolicyVersion
from coach_stream.envs import probe_shape
from coach_stream.policies.export import export, greedy_policy
from coach_stream.trainer.normalize import NormalizingLearner

# One worker exports them all: the first ONNX export in a process imports the exporter
# (about 3 s of a core), and `make unit` would otherwise pay it on both workers.
pytestmark = pytest.mark.xdist_group("onnx-export")

CASES = {
    "cartpole-ppo": ["normalize.observations=true"],
    "pendulum-ppo": [],  # normalises observations and rewards
    "pendulum-sac": [],
    "cartpole-dqn": [],
    "minigrid-ppo": [],  # uint8 frames into a CNN
}


def loaded_actor(preset_name: str, overrides: list[str]) -> tuple[object, object, np.ndarray]:
    preset = load_preset(preset_name, overrides)
    shape = probe_shape(preset.env_id, preset.env_wrappers)
    builder = builder_for(preset)
    learner = builder.make_learner(shape, 1, torch.Generator().manual_seed(0))
    rng = np.random.default_rng(0)
    if isinstance(learner, NormalizingLearner) and learner.obs_rms is not None:
        learner.obs_rms.update(rng.normal(2.0, 3.0, (500, *shape.obs_shape)))
    record = PolicyVersion("r", 3, "mem://3", "0" * 64, 1, 0, 0, 0)
    actor = builder.make_actor(shape, greedy=True, seed=0)
    actor.load(LoadedPolicy(record, dict(learner.policy_state_dict())))
    if shape.obs_dtype == "uint8":
        obs = rng.integers(0, 11, (1000, *shape.obs_shape)).astype(np.uint8)
    else:
        obs = rng.normal(2.0, 3.0, (1000, *shape.obs_shape)).astype(np.float32)
    return actor, shape, obs


@pytest.mark.parametrize("preset_name", sorted(CASES))
def test_onnx_and_torchscript_act_as_the_torch_policy(preset_name: str, tmp_path: Path) -> None:
    actor, shape, obs = loaded_actor(preset_name, CASES[preset_name])
    policy = greedy_policy(actor, shape)  # type: ignore[arg-type]
    with torch.no_grad():
        expected = policy(torch.from_numpy(obs)).numpy()
    export(policy, obs[:4], tmp_path / "p.onnx", "onnx")
    export(policy, obs[:4], tmp_path / "p.pt", "torchscript")
    session = onnxruntime.InferenceSession(str(tmp_path / "p.onnx"))
    from_onnx = session.run(None, {session.get_inputs()[0].name: obs})[0]
    with torch.no_grad():
        from_script = torch.jit.load(str(tmp_path / "p.pt"))(torch.from_numpy(obs)).numpy()
    assert from_onnx.shape == from_script.shape == expected.shape
    if np.issubdtype(expected.dtype, np.integer):
        np.testing.assert_array_equal(from_onnx, expected)
        np.testing.assert_array_equal(from_script, expected)
        assert len(np.unique(expected)) > 1  # not a constant policy: the check means something
    else:
        np.testing.assert_allclose(from_onnx, expected, atol=1e-5, rtol=0)
        np.testing.assert_allclose(from_script, expected, atol=1e-5, rtol=0)
        assert np.all(expected >= np.asarray(shape.action_low) - 1e-6)  # type: ignore[attr-defined]
        assert np.all(expected <= np.asarray(shape.action_high) + 1e-6)  # type: ignore[attr-defined]
