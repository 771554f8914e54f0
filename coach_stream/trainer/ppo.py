"""PPO with a clipped objective, GAE, value and entropy terms (after CleanRL's ``ppo.py``).

SYNC mode: the trainer announced version v; this learner gathers chunks whose
``policy_version == v`` from any workers until it holds ``steps_per_update`` steps, drops
older versions (counted as stale: they were acted by a policy the trainer has moved past),
then runs ``update_epochs`` epochs of minibatch updates and asks for version v+1.

Advantages are computed per chunk: a chunk is a contiguous piece of one episode, and its
last observation is the bootstrap row, so GAE needs nothing outside the chunk. Values are
recomputed with the current network, which *is* version v, for every row including the
bootstrap one; the behaviour log-probs come from the chunk.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
from torch import nn, optim

from coach_stream.config import PPOConfig
from coach_stream.core import ExperienceChunk, Ingested
from coach_stream.policies.networks import ActorCritic


def gae(
    rewards: np.ndarray[Any, Any],
    values: np.ndarray[Any, Any],
    bootstrap: np.ndarray[Any, Any],
    terminated: np.ndarray[Any, Any],
    chunk_end: np.ndarray[Any, Any],
    gamma: float,
    lam: float,
) -> np.ndarray[Any, Any]:
    """Generalized advantage estimates over concatenated chunks.

    ``bootstrap[i]`` is V(last observation of the chunk) where ``chunk_end[i]``; a
    terminated step does not bootstrap, a truncated one (time limit or chunk cut) does.
    """
    advantages = np.zeros_like(rewards, dtype=np.float32)
    last = 0.0
    for i in range(len(rewards) - 1, -1, -1):
        if chunk_end[i]:
            next_value, last = bootstrap[i], 0.0
        else:
            next_value = values[i + 1]
        nonterminal = 1.0 - float(terminated[i])
        delta = rewards[i] + gamma * next_value * nonterminal - values[i]
        last = delta + gamma * lam * nonterminal * last
        advantages[i] = last
    return advantages


class PPO:
    """The learner; ``steps_per_update`` is the SYNC quota of one version."""

    def __init__(
        self,
        net: ActorCritic,
        config: PPOConfig,
        steps_per_update: int,
        anneal_steps: int,
        generator: torch.Generator,
    ) -> None:
        self.net, self.config = net, config
        self.steps_per_update, self.anneal_steps = steps_per_update, anneal_steps
        self.generator = generator
        self.optimizer = optim.Adam(
            net.parameters(),
            lr=config.learning_rate,
            eps=1e-5,
            fused=True,  # ~25% faster on CPU
        )
        self._batch: list[ExperienceChunk] = []
        self._batch_steps = 0
        self._updates = 0

    @property
    def updates(self) -> int:
        return self._updates

    # ----------------------------------------------------------------- gathering

    def ingest(self, chunks: Sequence[ExperienceChunk], version: int) -> Ingested:
        used = stale_chunks = stale_steps = 0
        for chunk in chunks:
            if chunk.policy_version == version and chunk.log_probs is not None:
                self._batch.append(chunk)
                used += chunk.num_steps
            else:  # acted with an older version (or without behaviour columns): off-policy
                stale_chunks += 1
                stale_steps += chunk.num_steps
        self._batch_steps += used
        return Ingested(used, stale_chunks, stale_steps)

    def refill(self, chunks: Sequence[ExperienceChunk]) -> None:
        return None  # on-policy: nothing from before the restart is usable

    def wants_data(self) -> bool:
        return not self.ready()

    def ready(self) -> bool:
        return self._batch_steps >= self.steps_per_update

    # ----------------------------------------------------------------- the update

    def learn(self, env_steps: int) -> tuple[dict[str, float], bool]:
        c, net = self.config, self.net
        chunks, self._batch, self._batch_steps = self._batch, [], 0
        obs = torch.from_numpy(
            np.concatenate([ch.observations for ch in chunks]).astype(np.float32, copy=False)
        )
        lengths = np.array([ch.num_steps for ch in chunks])
        rows_end = np.cumsum(lengths + 1)  # each chunk contributes T+1 observation rows
        is_bootstrap = np.zeros(len(obs), dtype=np.bool_)
        is_bootstrap[rows_end - 1] = True
        with torch.no_grad():
            all_values = net.get_value(obs).numpy()
        values, b_obs = all_values[~is_bootstrap], obs[torch.from_numpy(~is_bootstrap)]
        bootstrap = np.zeros(len(values), dtype=np.float32)
        chunk_end = np.zeros(len(values), dtype=np.bool_)
        step_end = np.cumsum(lengths) - 1
        chunk_end[step_end] = True
        bootstrap[step_end] = all_values[rows_end - 1]
        rewards = np.concatenate([ch.rewards for ch in chunks])
        terminated = np.concatenate([ch.terminated for ch in chunks])
        advantages = gae(rewards, values, bootstrap, terminated, chunk_end, c.gamma, c.gae_lambda)
        b_returns = torch.from_numpy(advantages + values)
        b_advantages = torch.from_numpy(advantages)
        b_values = torch.from_numpy(values)
        b_actions = torch.from_numpy(np.concatenate([ch.actions for ch in chunks]).reshape(-1))
        b_logprobs = torch.from_numpy(
            np.concatenate([ch.log_probs for ch in chunks if ch.log_probs is not None])
        )

        # Annealing the learning rate (floored at 5%, so a run past anneal_steps still learns).
        frac = max(0.05, 1.0 - env_steps / self.anneal_steps) if c.anneal_lr else 1.0
        lr_now = frac * c.learning_rate
        self.optimizer.param_groups[0]["lr"] = lr_now

        batch_size = len(values)
        minibatch = min(c.minibatch_size, batch_size)
        clipfracs: list[float] = []
        pg_loss = v_loss = entropy_loss = approx_kl = old_approx_kl = torch.zeros(())
        for _epoch in range(c.update_epochs):
            order = torch.randperm(batch_size, generator=self.generator)
            for start in range(0, batch_size, minibatch):
                mb = order[start : start + minibatch]
                _, newlogprob, entropy, newvalue = net.get_action_and_value(
                    b_obs[mb], b_actions[mb]
                )
                logratio = newlogprob - b_logprobs[mb]
                ratio = logratio.exp()
                with torch.no_grad():
                    old_approx_kl = (-logratio).mean()
                    approx_kl = ((ratio - 1) - logratio).mean()
                    clipfracs.append(((ratio - 1.0).abs() > c.clip_coef).float().mean().item())
                mb_adv = b_advantages[mb]
                if c.norm_adv and len(mb) > 1:
                    mb_adv = (mb_adv - mb_adv.mean()) / (mb_adv.std() + 1e-8)

                # Policy loss: the clipped surrogate objective.
                pg_loss1 = -mb_adv * ratio
                pg_loss2 = -mb_adv * torch.clamp(ratio, 1 - c.clip_coef, 1 + c.clip_coef)
                pg_loss = torch.max(pg_loss1, pg_loss2).mean()

                # Value loss, optionally clipped around the values the batch was built with.
                if c.clip_vloss:
                    v_unclipped = (newvalue - b_returns[mb]) ** 2
                    v_clipped = b_values[mb] + torch.clamp(
                        newvalue - b_values[mb], -c.clip_coef, c.clip_coef
                    )
                    v_loss = 0.5 * torch.max(v_unclipped, (v_clipped - b_returns[mb]) ** 2).mean()
                else:
                    v_loss = 0.5 * ((newvalue - b_returns[mb]) ** 2).mean()

                entropy_loss = entropy.mean()
                loss = pg_loss - c.ent_coef * entropy_loss + v_loss * c.vf_coef

                self.optimizer.zero_grad()
                loss.backward()  # type: ignore[no-untyped-call]
                nn.utils.clip_grad_norm_(net.parameters(), c.max_grad_norm)
                self.optimizer.step()
            if c.target_kl is not None and approx_kl.item() > c.target_kl:
                break
        self._updates += 1

        y_pred, y_true = b_values.numpy(), b_returns.numpy()
        var_y = float(np.var(y_true))
        explained_var = math.nan if var_y == 0 else 1 - float(np.var(y_true - y_pred)) / var_y
        metrics = {
            "learning_rate": lr_now,
            "value_loss": v_loss.item(),
            "policy_loss": pg_loss.item(),
            "entropy": entropy_loss.item(),
            "old_approx_kl": old_approx_kl.item(),
            "approx_kl": approx_kl.item(),
            "clipfrac": float(np.mean(clipfracs)) if clipfracs else 0.0,
            "explained_variance": explained_var,
            "batch_steps": float(batch_size),
            "loss": pg_loss.item() + c.vf_coef * v_loss.item() - c.ent_coef * entropy_loss.item(),
        }
        return metrics, True  # on-policy: every update is a new version

    # ----------------------------------------------------------------- state

    def policy_state_dict(self) -> Mapping[str, torch.Tensor]:
        return self.net.state_dict()

    def state_dict(self) -> dict[str, Any]:
        return {
            "net": self.net.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "updates": self._updates,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.net.load_state_dict(state["net"])
        self.optimizer.load_state_dict(state["optimizer"])
        self._updates = int(state["updates"])
        self._batch, self._batch_steps = [], 0
