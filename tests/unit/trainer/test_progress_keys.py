"""The trainer's progress event: namespaced keys, and learner metrics that cannot
overwrite the loop's own fields."""

from __future__ import annotations

from typing import Any

from coach_stream.config import load_preset
from coach_stream.core import Learner


class _CollidingLearner:
    """The run's real learner, whose metrics reuse the names of the loop's fields."""

    def __init__(self, inner: Learner) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def learn(self, env_steps: int) -> tuple[dict[str, float], bool]:
        metrics, publish = self.inner.learn(env_steps)
        clash = {"env_steps": -1.0, "time/env_steps": -1.0, "eval/mean_return": -1.0}
        return {**metrics, **clash}, publish


def test_learner_metrics_are_filed_under_train_and_never_replace_loop_fields(
    in_process_run: Any,
) -> None:
    preset = load_preset(
        "cartpole-ppo", ["ppo.num_steps=8", "rollout.num_envs=2", "trainer.log_every_s=1e-9"]
    )
    run = in_process_run(preset, workers=1, evaluator=False)
    run.trainer.learner = _CollidingLearner(run.trainer.learner)
    run.start()
    while run.trainer.version < 2:
        assert run.step() is None
    progress = run.trainer_events.of("progress")[-1]

    assert progress["time/env_steps"] == run.trainer.env_steps > 0
    assert progress["eval/mean_return"] is None  # no evaluator in this run
    assert progress["train/env_steps"] == progress["train/time/env_steps"] == -1.0
    assert isinstance(progress["train/loss"], float)
    namespaces = {key.split("/", 1)[0] for key in progress}
    assert namespaces == {"time", "rollout", "eval", "train"}
