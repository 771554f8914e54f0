"""The evaluator: greedy episodes with the newest policy, reported on the control topic.

It produces no experience. For each policy version it gets to, it plays ``episodes``
episodes at once (one per sub-env, fresh seeds every round), publishes an
``EvaluationReport`` (the trainer ends the run on these), prints an ``evaluation`` event,
and then moves to the newest version, skipping those announced meanwhile: evaluating every
version of a fast PPO run would cost more CPU than the training it measures.

A sub-env whose episode has ended is not stepped again in that round: stepping the vector
env as a whole until the longest episode ended spent a third of a CartPole round's env
steps on episodes already over (measured over two whole CartPole runs' evaluations).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import numpy as np
from gymnasium.vector import SyncVectorEnv, VectorEnv

from coach_stream.core import (
    Actor,
    ControlPublisher,
    EvaluationReport,
    EventSink,
    PolicySource,
    RunFinished,
)
from coach_stream.errors import IntegrityError, RunEndedError
from coach_stream.rollout.worker import first_policy


class Evaluator:
    """``run()``, or ``start()`` + ``evaluate()`` + ``next_version()`` for tests."""

    def __init__(
        self,
        envs: VectorEnv,
        actor: Actor,
        policy_source: PolicySource,
        publisher: ControlPublisher,
        run_id: str,
        seeds: Sequence[int],
        events: EventSink,
        policy_wait_s: float = 120.0,
        poll_s: float = 0.5,
    ) -> None:
        if not isinstance(envs, SyncVectorEnv):
            raise TypeError(f"The evaluator steps each sub-env alone; {envs} is not synchronous.")
        self.envs, self.actor, self.source, self.publisher = envs, actor, policy_source, publisher
        self.run_id, self.seeds, self.events = run_id, list(seeds), events
        self.policy_wait_s, self.poll_s = policy_wait_s, poll_s
        self.rounds = 0
        self._trainer_env_steps = 0

    def run(self) -> RunFinished:
        self.start()
        while (finished := self.source.finished) is None:
            self.evaluate()
            while self.source.finished is None and not self.next_version(self.poll_s):
                pass
        return finished

    def start(self) -> None:
        policy = first_policy(self.source, self.policy_wait_s)
        self.actor.load(policy)
        self._trainer_env_steps = policy.version.env_steps

    def _play(self) -> np.ndarray:
        """The return of one greedy episode per sub-env, each stepped until its episode ends."""
        seeds = [(s + 7919 * self.rounds) % 2**32 for s in self.seeds]
        obs, _ = self.envs.reset(seed=seeds)  # type: ignore[arg-type]  # a seed per env
        obs = np.array(obs)  # rows are overwritten below: not the vector env's own buffer
        sub_envs: list[Any] = list(self.envs.envs)
        returns = np.zeros(len(sub_envs), dtype=np.float64)
        running = np.arange(len(sub_envs))
        while running.size:
            actions = self.actor.act(obs[running]).actions
            still = []
            for row, i in enumerate(running):
                ob, reward, terminated, truncated, _ = sub_envs[i].step(actions[row])
                returns[i] += float(reward)
                if not (terminated or truncated):
                    obs[i] = ob
                    still.append(i)
            running = np.array(still, dtype=np.intp)
        return returns

    def evaluate(self) -> EvaluationReport:
        """Play one episode per sub-env greedily with the current version and publish."""
        returns = self._play()
        report = EvaluationReport(
            run_id=self.run_id,
            policy_version=self.actor.version,
            env_steps=self._trainer_env_steps,
            returns=tuple(float(r) for r in returns),
            created_at_ms=int(time.time() * 1000),
        )
        self.publisher.publish(report)
        self.rounds += 1
        self.events(
            "evaluation",
            {
                "policy_version": report.policy_version,
                "env_steps": report.env_steps,
                "mean_return": report.mean_return,
                "min_return": min(report.returns),
                "max_return": max(report.returns),
                "episodes": len(report.returns),
            },
        )
        return report

    def next_version(self, timeout: float) -> bool:
        """Load the newest version after the current one (waiting up to ``timeout``)."""
        try:
            newer = self.source.wait_for(self.actor.version + 1, timeout=timeout)
        except (TimeoutError, RunEndedError):
            return False
        latest = self.source.poll() or newer  # skip versions announced while we played
        try:
            self.actor.load(latest)
        except IntegrityError:
            return False
        self._trainer_env_steps = latest.version.env_steps
        return True
