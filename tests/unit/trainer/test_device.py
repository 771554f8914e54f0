"""``--device auto|cpu|cuda``: resolution, CPU policy versions, CPU-loadable trainer states.

The CUDA test runs only where torch sees a GPU (skipped otherwise, e.g. in CI here).
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from coach_stream.algorithms import builder_for
from coach_stream.config import load_preset
from coach_stream.envs import probe_shape
from coach_stream.errors import ConfigError
from coach_stream.trainer.device import resolve_device, to_device
from coach_stream.trainer.state import TrainerState, state_from_bytes, state_to_bytes

HAS_CUDA = torch.cuda.is_available()


def test_resolve_device() -> None:
    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_device("auto").type == ("cuda" if HAS_CUDA else "cpu")
    if not HAS_CUDA:
        with pytest.raises(ConfigError, match="no CUDA GPU"):
            resolve_device("cuda")
    with pytest.raises(ConfigError, match="use auto, cpu or cuda"):
        resolve_device("tpu")


def test_preset_device_is_validated_and_defaults_to_cpu() -> None:
    assert load_preset("cartpole-ppo").trainer.device == "cpu"
    assert load_preset("cartpole-ppo", ["trainer.device=auto"]).trainer.device == "auto"
    with pytest.raises(ConfigError, match=r"trainer\.device"):
        load_preset("cartpole-ppo", ["trainer.device=gpu"])


def _learn_once(preset_name: str, overrides: list[str], in_process_run: Any) -> Any:
    run = in_process_run(load_preset(preset_name, overrides), workers=1, evaluator=False)
    run.start()
    for _ in range(40):
        run.step()
        if run.trainer.version >= 2:
            break
    assert run.trainer.version >= 2
    return run


@pytest.mark.parametrize(
    ("preset", "small"),
    [
        ("cartpole-ppo", ["ppo.num_steps=16"]),
        ("cartpole-dqn", ["dqn.learning_starts=64", "dqn.publish_every=4"]),
        # one sample per insert: the preset's 256 is 16 gradient steps per transition here
        (
            "pendulum-sac",
            [
                "sac.learning_starts=64",
                "sac.publish_every=4",
                "sac.batch_size=16",
                "sac.samples_per_insert=16",
            ],
        ),
        ("cartpole-impala", ["impala.batch_steps=32"]),
    ],
)
@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
    not HAS_CUDA, reason="no CUDA GPU on this machine"))])  # fmt: skip
def test_learner_on_device_publishes_cpu_policies_and_cpu_loadable_states(
    in_process_run: Any, preset: str, small: list[str], device: str
) -> None:
    run = _learn_once(
        preset, ["rollout.num_envs=2", f"trainer.device={device}", *small], in_process_run
    )
    learner = run.trainer.learner
    params = next(iter(learner.state_dict().values()))
    first = next(iter(params.values())) if isinstance(params, dict) else params
    assert first.device.type == device  # the trainer learned where it was told to
    assert all(t.device.type == "cpu" for t in learner.policy_state_dict().values())
    # a trainer state written here loads on a CPU-only learner
    state = TrainerState(
        version=run.trainer.version,
        positions={},
        env_steps=run.trainer.env_steps,
        counters={},
        learner=learner.state_dict(),
        torch_rng=torch.get_rng_state(),
        generator_rng=run.trainer.generator.get_state(),
        eval_returns=[],
    )
    loaded = state_from_bytes(state_to_bytes(state))
    cpu_preset = load_preset(preset, ["trainer.device=cpu", *small])
    cpu_learner = builder_for(cpu_preset).make_learner(
        probe_shape(cpu_preset.env_id), 1, torch.Generator().manual_seed(0)
    )
    cpu_learner.load_state_dict(loaded.learner)
    for key, value in cpu_learner.policy_state_dict().items():
        torch.testing.assert_close(value, learner.policy_state_dict()[key])


def test_to_device_on_cpu_is_the_same_tensor() -> None:
    t = torch.ones(3)
    assert to_device(t, torch.device("cpu")) is t
