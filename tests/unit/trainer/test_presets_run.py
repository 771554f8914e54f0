"""Every built-in preset builds its env, networks and learner, and completes one version."""

from __future__ import annotations

from typing import Any

import pytest

from coach_stream.config import builtin_presets, load_preset

# Per algorithm, what makes one version cheap (a new algorithm needs its entry here).
_SMALL = {
    "ppo": ["ppo.num_steps=16"],
    "dqn": ["dqn.learning_starts=64", "dqn.publish_every=4", "dqn.batch_size=16"],
    "sac": ["sac.learning_starts=64", "sac.publish_every=4", "sac.batch_size=16"],
    "impala": ["impala.batch_steps=32"],
}


@pytest.mark.parametrize("name", builtin_presets())
def test_preset_runs_one_version(in_process_run: Any, name: str) -> None:
    small = ["eval_episodes=2", "rollout.num_envs=2", *_SMALL[load_preset(name).algorithm]]
    run = in_process_run(load_preset(name, small), workers=1)
    run.start()
    for _ in range(20):
        if run.trainer.version >= 1:
            break
        assert run.step() is None
    assert run.trainer.version >= 1
    assert run.trainer.env_steps > 0
    assert run.eval is not None and run.eval_events.of("evaluation")
