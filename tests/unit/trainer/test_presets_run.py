"""Every built-in preset builds its env, networks and learner, and completes one version."""

from __future__ import annotations

from typing import Any

import pytest

from coach_stream.config import builtin_presets, load_preset

# Per algorithm, what makes one version cheap (a new algorithm needs its entry here).
_SMALL = {
    "ppo": ["ppo.num_steps=16"],
    "dqn": ["dqn.learning_starts=64", "dqn.publish_every=4", "dqn.batch_size=16"],
    # one sample per insert: the preset's 256 made 1,024 gradient steps of the 64 inserted
    "sac": [
        "sac.learning_starts=64",
        "sac.publish_every=4",
        "sac.batch_size=16",
        "sac.samples_per_insert=16",
    ],
    "impala": ["impala.batch_steps=32"],
}
_EPISODE_STEPS = 64
"""Episodes cut short (Pong's games and HalfCheetah's 1,000 steps made the evaluations most
of the test's time); the target is then out of reach, as a short episode of Acrobot's
(-1 a step) would otherwise reach -100 and end the run."""


@pytest.mark.parametrize("name", builtin_presets())
def test_preset_runs_one_version(in_process_run: Any, name: str) -> None:
    preset = load_preset(name)
    wrappers = ",".join([*preset.env_wrappers, f"limit:{_EPISODE_STEPS}"])
    small = [
        "eval_episodes=2",
        "rollout.num_envs=2",
        f"env_wrappers=[{wrappers}]",
        "target_return=1e9",
        *_SMALL[preset.algorithm],
    ]
    run = in_process_run(load_preset(name, small), workers=1)
    run.start()
    for _ in range(20):
        if run.trainer.version >= 1:
            break
        assert run.step() is None
    assert run.trainer.version >= 1
    assert run.trainer.env_steps > 0
    assert run.eval is not None and run.eval_events.of("evaluation")
