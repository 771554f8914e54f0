"""The evaluator plays one greedy episode per sub-env and steps no episode past its end."""

from __future__ import annotations

from typing import Any, cast

import numpy as np
import numpy.typing as npt
import pytest

from coach_stream.core import Action, LoadedPolicy, PolicySource
from coach_stream.envs import make_env, make_vector_env
from coach_stream.events import EventList
from coach_stream.rollout.evaluator import Evaluator
from coach_stream.testing.memory_control import MemoryControlLog, MemoryControlPublisher

SEEDS = [11, 12, 13, 14, 15]


class PushTowardsTheFall:
    """Pushes the cart the way the pole falls: CartPole episodes of very different lengths."""

    version = 3

    def load(self, policy: LoadedPolicy) -> None:
        raise AssertionError("not loaded in this test")

    def act(self, obs: npt.NDArray[np.generic]) -> Action:
        return Action((np.asarray(obs)[:, 2] > 0).astype(np.int64))


def _alone(seed: int) -> tuple[float, int]:
    """The return and length of one episode on an env of its own, with the same seed."""
    env = make_env("CartPole-v1")
    obs, _ = env.reset(seed=seed)
    total, steps, done = 0.0, 0, False
    while not done:
        action = PushTowardsTheFall().act(obs[None])
        obs, reward, terminated, truncated, _ = env.step(action.actions[0])
        total, steps, done = total + float(reward), steps + 1, terminated or truncated
    env.close()
    return total, steps


def test_each_episode_is_played_to_its_end_and_no_further() -> None:
    envs = make_vector_env("CartPole-v1", len(SEEDS))
    steps = [0] * len(SEEDS)
    for i, sub_env in enumerate(envs.envs):  # type: ignore[attr-defined]
        step = sub_env.step

        def counted(action: Any, i: int = i, step: Any = step) -> Any:
            steps[i] += 1
            return step(action)

        sub_env.step = counted
    log = MemoryControlLog()
    events = EventList()
    evaluator = Evaluator(
        envs,
        PushTowardsTheFall(),
        cast(PolicySource, None),  # evaluate() plays the loaded version; start() would wait
        MemoryControlPublisher(log),
        "eval-run",
        SEEDS,
        events,
    )
    report = evaluator.evaluate()
    expected = [_alone(seed) for seed in SEEDS]
    assert list(report.returns) == [ret for ret, _ in expected]
    assert steps == [length for _, length in expected]
    assert len(set(steps)) > 1, "episodes of one length would not show a finished env idling"
    assert log.messages == [report]
    assert events.of("evaluation")[0]["policy_version"] == 3
    envs.close()


def test_an_asynchronous_vector_env_is_refused() -> None:
    with pytest.raises(TypeError, match="not synchronous"):
        Evaluator(
            cast(Any, object()),
            PushTowardsTheFall(),
            cast(PolicySource, None),
            MemoryControlPublisher(MemoryControlLog()),
            "eval-run",
            SEEDS,
            EventList(),
        )
