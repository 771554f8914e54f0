"""What the solve benches share: SB3 trained until its greedy policy reaches the target,
checked the way our evaluator checks (one deterministic episode in each of 20 envs), with
the evaluation's own time left out of the wall time."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from coach_stream.envs import make_vector_env

EVAL_EPISODES = 20


def greedy_mean_return(model: Any, env_id: str, seed: int, wrappers: Sequence[str] = ()) -> float:
    """One deterministic episode in each of 20 envs, as our evaluator plays them."""
    envs = make_vector_env(env_id, EVAL_EPISODES, wrappers)
    obs, _ = envs.reset(seed=[seed + i for i in range(EVAL_EPISODES)])  # type: ignore[arg-type]
    normalize = model.get_vec_normalize_env()  # rl-zoo's VecNormalize (Acrobot), frozen here
    returns = np.zeros(EVAL_EPISODES)
    running = np.ones(EVAL_EPISODES, dtype=bool)
    while running.any():
        seen = obs if normalize is None else normalize.normalize_obs(obs)
        actions, _ = model.predict(seen, deterministic=True)
        obs, rewards, terminated, truncated, _ = envs.step(actions)
        returns += np.where(running, rewards, 0.0)
        running &= ~(terminated | truncated)
    envs.close()
    return float(returns.mean())


def learn_until_solved(
    model: Any,
    budget: int,
    eval_every: int,
    target: float,
    env_id: str,
    wrappers: Sequence[str] = (),
) -> tuple[float | None, int | None]:
    """(wall seconds without evaluations, env steps) when ``model`` solved; (None, None)."""
    from stable_baselines3.common.callbacks import BaseCallback

    class SolveCheck(BaseCallback):
        def __init__(self) -> None:
            super().__init__()
            self.next_eval, self.eval_s = eval_every, 0.0
            self.solved_at: int | None = None

        def _on_step(self) -> bool:
            if self.num_timesteps < self.next_eval:
                return True
            self.next_eval += eval_every
            began = time.perf_counter()
            seed = 10_000 + self.num_timesteps
            mean = greedy_mean_return(self.model, env_id, seed, wrappers)
            self.eval_s += time.perf_counter() - began
            if mean >= target:
                self.solved_at = self.num_timesteps
                return False
            return True

    started = time.perf_counter()
    check = SolveCheck()
    model.learn(total_timesteps=budget, callback=check)
    if check.solved_at is None:
        return None, None
    return time.perf_counter() - started - check.eval_s, int(check.solved_at)
