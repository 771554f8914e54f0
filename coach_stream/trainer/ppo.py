"""PPO with a clipped objective, GAE, value and entropy terms (after CleanRL's ``ppo.py``).

SYNC mode: the trainer announced version v; this learner gathers chunks whose
``policy_version == v`` from any workers until it holds ``steps_per_update`` steps, drops
older versions (counted as stale: they were acted by a policy the trainer has moved past),
then runs ``update_epochs`` epochs of minibatch updates and asks for version v+1.

Advantages are computed per *segment*: the chunks of one env that continue each other
(same ``(worker_id, env_index)``, same version, consecutive ``chunk_seq`` and ``first_step``,
episode still running) are joined, so the GAE recursion runs through a chunk cut as it does
through any other step, and the critic bootstraps only where the data really ends (the last
chunk of a segment, unless it terminated). Without the join, a ``chunk_steps`` below
``num_steps`` replaces part of every λ-return with the critic's guess at each cut. Values
are recomputed with the current network, which *is* version v, for every row including
the bootstrap ones; the behaviour log-probs come from the chunk. ``learn`` is two steps:
``build_batch`` (segments, values, GAE, returns; no gradients) and ``PPO._update`` (the
epochs).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Any, NamedTuple

import numpy as np
import torch
from pydantic import Field
from torch import nn, optim

from coach_stream.config import FrozenModel
from coach_stream.core import Collective, ExperienceChunk, Ingested
from coach_stream.policies.networks import ActorCritic, GaussianActorCritic
from coach_stream.trainer.collective import (
    SOLO,
    average_gradients,
    global_moments,
    total_count,
)
from coach_stream.trainer.device import CPU, to_device
from coach_stream.trainer.state import ActorCriticState
from coach_stream.trainer.steps import StepBatch


class PPOConfig(FrozenModel):
    """Proximal Policy Optimization (CleanRL names; rl-zoo values for the presets)."""

    num_steps: int = Field(default=32, ge=1)
    """Steps per environment a worker acts with each policy version (its share)."""
    steps_per_update: int | None = Field(default=None, ge=1)
    """SYNC quota of steps of version v; default workers * num_envs * num_steps."""
    learning_rate: float = Field(default=1e-3, gt=0)
    """Adam's learning rate (its start value when ``anneal_lr``)."""
    anneal_lr: bool = True
    """Decay the learning rate linearly over ``anneal_steps`` env steps, down to a floor of
    5 % of ``learning_rate`` (so a run that goes past ``anneal_steps`` still learns)."""
    anneal_steps: int | None = Field(default=None, ge=1)
    """Default: the preset's env_step_budget."""
    gamma: float = Field(default=0.98, gt=0, le=1)
    """Discount factor of the returns."""
    gae_lambda: float = Field(default=0.8, ge=0, le=1)
    """GAE's lambda: the bias/variance trade-off of the advantage estimates."""
    minibatch_size: int = Field(default=256, ge=1)
    """Steps per gradient step; the quota is split into ceil(quota / minibatch_size)."""
    update_epochs: int = Field(default=20, ge=1)
    """Passes over each quota of steps (K epochs of minibatch updates)."""
    norm_adv: bool = True
    """Normalize the advantages within each minibatch."""
    clip_coef: float = Field(default=0.2, gt=0)
    """The surrogate objective's clipping range (epsilon); also the value clip."""
    clip_vloss: bool = False
    """Clip the value loss around the values the batch was acted with."""
    ent_coef: float = Field(default=0.0, ge=0)
    """Weight of the entropy bonus in the loss."""
    vf_coef: float = Field(default=0.5, ge=0)
    """Weight of the value loss in the loss."""
    max_grad_norm: float = Field(default=0.5, gt=0)
    """Gradients are clipped to this global norm."""
    target_kl: float | None = None
    """Stop the update's epochs early once the approximate KL exceeds it (null: never)."""


_BATCH_FIELDS = ("observations", "actions", "log_probs", "values", "advantages", "returns")
_LR_FLOOR = 0.05  # of the initial learning rate: a run past anneal_steps still learns


def gae(
    rewards: np.ndarray[Any, Any],
    values: np.ndarray[Any, Any],
    bootstrap: np.ndarray[Any, Any],
    terminated: np.ndarray[Any, Any],
    segment_end: np.ndarray[Any, Any],
    gamma: float,
    lam: float,
) -> np.ndarray[Any, Any]:
    """Generalized advantage estimates over concatenated segments.

    ``segment_end[i]``: step i is the last of its segment (the data of that episode ends
    there), and ``bootstrap[i]`` is V(the observation after it). Elsewhere the next value is
    ``values[i + 1]``: inside a chunk, and across a joined cut, where the next chunk's first
    observation is the previous chunk's bootstrap row. A terminated step does not
    bootstrap; a truncated one (time limit, or a segment cut short) does.
    """
    advantages = np.zeros_like(rewards, dtype=np.float32)
    last = 0.0
    for i in range(len(rewards) - 1, -1, -1):
        if segment_end[i]:
            next_value, last = bootstrap[i], 0.0
        else:
            next_value = values[i + 1]
        nonterminal = 1.0 - float(terminated[i])
        delta = rewards[i] + gamma * next_value * nonterminal - values[i]
        last = delta + gamma * lam * nonterminal * last
        advantages[i] = last
    return advantages


def continues(prev: ExperienceChunk, nxt: ExperienceChunk) -> bool:
    """``nxt`` is the next piece of ``prev``'s episode, acted with the same policy version."""
    return (
        nxt.worker_id == prev.worker_id
        and nxt.env_index == prev.env_index
        and nxt.policy_version == prev.policy_version
        and nxt.chunk_seq == prev.chunk_seq + 1
        and nxt.first_step == prev.first_step + prev.num_steps
        and not prev.episode_ended
        # the chunker guarantees it; checked so a join can never pair unrelated rows
        and np.array_equal(prev.observations[-1], nxt.observations[0])
    )


def segments(chunks: Sequence[ExperienceChunk]) -> list[list[ExperienceChunk]]:
    """The chunks joined into segments, each in ``chunk_seq`` order.

    Envs appear in the order of their first chunk (Kafka keeps each env's order anyway).
    """
    by_env: dict[tuple[int, int], list[ExperienceChunk]] = {}
    for chunk in chunks:
        by_env.setdefault((chunk.worker_id, chunk.env_index), []).append(chunk)
    joined: list[list[ExperienceChunk]] = []
    for pieces in by_env.values():
        pieces.sort(key=lambda chunk: chunk.chunk_seq)
        joined.append([pieces[0]])
        for prev, nxt in pairwise(pieces):
            if continues(prev, nxt):
                joined[-1].append(nxt)
            else:
                joined.append([nxt])
    return joined


@dataclass(frozen=True)
class PPOBatch:
    """One version's steps as flat tensors (bootstrap rows removed) and the update's targets."""

    observations: torch.Tensor  # (N, *obs_shape) float32: the observation each action was in
    actions: torch.Tensor  # (N,) int64, or (N, *action_shape) float32 for a Gaussian policy
    log_probs: torch.Tensor  # (N,) behaviour log-probs, from the chunks
    values: torch.Tensor  # (N,) V(observation) by the network that *is* version v
    advantages: torch.Tensor  # (N,) GAE
    returns: torch.Tensor  # (N,) advantages + values: the value targets
    joins: int = 0  # chunk cuts the GAE recursion ran through (chunks joined into segments)
    cut_bootstraps: int = 0  # segment ends mid-episode: the critic stands in for the rest

    @property
    def size(self) -> int:
        return int(self.actions.shape[0])

    def to(self, device: torch.device) -> PPOBatch:
        """The batch on the trainer's device (pinned-memory copies to a GPU)."""
        if device.type == "cpu":
            return self
        fields = {name: to_device(getattr(self, name), device) for name in _BATCH_FIELDS}
        return PPOBatch(**fields, joins=self.joins, cut_bootstraps=self.cut_bootstraps)


def build_batch(
    chunks: Sequence[ExperienceChunk],
    value_fn: Callable[[torch.Tensor], torch.Tensor],
    gamma: float,
    lam: float,
) -> PPOBatch:
    """The batch of one version: values of every row, GAE per segment, bootstrap rows dropped.

    Each chunk has T+1 observation rows; the last is its bootstrap row, valued for GAE and
    then left out of the batch (no action was taken in it). Chunks are laid out segment by
    segment, so a joined chunk's first step follows its predecessor's last. ``value_fn`` is
    called once on all rows of all chunks (one forward pass).
    """
    joined = segments(chunks)
    steps = StepBatch.from_chunks([chunk for segment in joined for chunk in segment])
    log_probs = steps.behaviour_log_probs()
    step_rows = steps.step_rows
    all_values = value_fn(steps.observations).numpy()
    values = all_values[step_rows]
    bootstrap = np.zeros(len(values), dtype=np.float32)
    bootstrap[steps.chunk_ends] = all_values[steps.bootstrap_rows]
    # Only a segment's last chunk ends the data; a joined chunk's last step reads the next
    # value from the following chunk's first row, which is its own bootstrap observation.
    last_in_segment = np.array([i == len(seg) - 1 for seg in joined for i in range(len(seg))])
    segment_end = np.zeros(len(values), dtype=np.bool_)
    segment_end[steps.chunk_ends[last_in_segment]] = True
    advantages = gae(steps.rewards, values, bootstrap, steps.terminated, segment_end, gamma, lam)
    return PPOBatch(
        observations=steps.observations[torch.from_numpy(step_rows)],
        actions=steps.actions,
        log_probs=log_probs,
        values=torch.from_numpy(values),
        advantages=torch.from_numpy(advantages),
        returns=torch.from_numpy(advantages + values),
        joins=len(steps.lengths) - len(joined),
        cut_bootstraps=sum(not seg[-1].episode_ended for seg in joined),
    )


def _empty_batch() -> PPOBatch:
    """No rows: a rank with nothing of this version still takes part in every step."""
    empty = torch.zeros(0)
    return PPOBatch(empty, empty.long(), empty, empty, empty, empty)


class _Step(NamedTuple):
    """One minibatch step's terms: losses, entropy (per sample unless in the loss), ratios."""

    pg_loss: torch.Tensor
    v_loss: torch.Tensor
    entropy: torch.Tensor
    logratio: torch.Tensor
    ratio: torch.Tensor


class PPO(ActorCriticState):
    """The learner; ``steps_per_update`` is the SYNC quota of one version."""

    net: ActorCritic | GaussianActorCritic

    def __init__(
        self,
        net: ActorCritic | GaussianActorCritic,
        config: PPOConfig,
        steps_per_update: int,
        anneal_steps: int,
        generator: torch.Generator,
        device: torch.device = CPU,
        collective: Collective = SOLO,
    ) -> None:
        self.net, self.config, self.device = net.to(device), config, device
        self.steps_per_update, self.anneal_steps = steps_per_update, anneal_steps
        self.generator, self.collective = generator, collective
        self.optimizer = optim.Adam(
            net.parameters(),
            lr=config.learning_rate,
            eps=1e-5,
            fused=True,  # ~25% faster on CPU
        )
        self._params = list(self.net.parameters())  # walked by every gradient-norm clip
        self._batch: list[ExperienceChunk] = []
        self._batch_steps = 0
        self._updates = 0

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
        """The version's quota is gathered, counted over every trainer rank's share."""
        return total_count(self.collective, self._batch_steps) >= self.steps_per_update

    # ----------------------------------------------------------------- the update

    def learn(self, env_steps: int) -> tuple[dict[str, float], bool]:
        """Build the batch of version v from the gathered chunks, then update on it."""
        chunks, self._batch, self._batch_steps = self._batch, [], 0
        c = self.config
        with torch.no_grad():  # the targets are fixed before the first gradient step
            if chunks:
                batch = build_batch(chunks, self._values_on_cpu, c.gamma, c.gae_lambda)
            else:  # a trainer rank whose partitions brought nothing of this version
                batch = _empty_batch()
        metrics = self._update(batch.to(self.device), self.learning_rate(env_steps))
        self._updates += 1
        return metrics, True  # on-policy: every update is a new version

    def _values_on_cpu(self, obs: torch.Tensor) -> torch.Tensor:
        return self.net.get_value(to_device(obs, self.device)).cpu()

    def learning_rate(self, env_steps: int) -> float:
        """Linear decay over ``anneal_steps`` env steps, floored at 5 % of the initial rate."""
        c = self.config
        if not c.anneal_lr:
            return c.learning_rate
        return max(_LR_FLOOR, 1.0 - env_steps / self.anneal_steps) * c.learning_rate

    def _update(self, batch: PPOBatch, lr: float) -> dict[str, float]:
        """``update_epochs`` epochs of minibatch steps on the clipped objective."""
        c = self.config
        self.optimizer.param_groups[0]["lr"] = lr
        size = batch.size
        slices = self._minibatch_slices(size)
        # Per-step costs add up: 40 minibatch steps per CartPole version, each ~1 ms of torch
        # work. So the parameter list is walked once, the clip fractions stay tensors (one
        # sync at the end, not one per step: on a GPU each .item() waits for the device),
        # the KL estimates are computed once per epoch (only the last minibatch's are
        # checked and logged), and the entropy enters the graph only when it is in the loss.
        clipfracs: list[torch.Tensor] = []
        step = _Step(*(torch.zeros(()),) * 3, torch.zeros(0), torch.zeros(0))
        kl = (torch.zeros(()), torch.zeros(()))
        for _epoch in range(c.update_epochs):
            order = torch.randperm(size, generator=self.generator)
            for part in slices:
                step = self._minibatch_step(batch, order[part])
                if len(step.ratio):
                    with torch.no_grad():
                        clipfracs.append(((step.ratio - 1.0).abs() > c.clip_coef).float().mean())
            with torch.no_grad():  # of the epoch's last minibatch, as CleanRL checks them
                kl = self._kl(step)
            if c.target_kl is not None and kl[1].item() > c.target_kl:
                break
        return self._metrics(batch, lr, step, kl, clipfracs)

    def _kl(self, step: _Step) -> tuple[torch.Tensor, torch.Tensor]:
        """The two KL estimates of a minibatch (over the union of every rank's part: ranks
        that stopped their epochs at different points would wait on each other forever)."""
        old_kl, kl = -step.logratio, (step.ratio - 1) - step.logratio
        if self.collective.world == 1:
            return old_kl.mean(), kl.mean()
        sums = torch.tensor([float(len(kl)), old_kl.sum().item(), kl.sum().item()])
        n, old_sum, kl_sum = self.collective.sum(sums.double()).tolist()
        return torch.tensor(old_sum / max(n, 1.0)), torch.tensor(kl_sum / max(n, 1.0))

    def _minibatch_slices(self, size: int) -> list[slice]:
        """Each epoch's minibatches, as slices of a permutation of this rank's ``size`` rows.

        One trainer: ``minibatch_size`` rows each (the last one shorter). K ranks: the number
        of minibatches comes from the rows of every rank, so all ranks take the same number
        of gradient steps, and each rank cuts its own rows into that many near-equal parts
        (some empty on a rank that holds few): step i's minibatch is the union of the parts.
        """
        c, collective = self.config, self.collective
        if collective.world == 1:
            minibatch = min(c.minibatch_size, size)
            return [slice(start, start + minibatch) for start in range(0, size, minibatch)]
        parts = max(1, math.ceil(total_count(collective, size) / c.minibatch_size))
        bounds = [round(i * size / parts) for i in range(parts + 1)]
        return [slice(a, b) for a, b in pairwise(bounds)]

    def _minibatch_step(self, batch: PPOBatch, mb: torch.Tensor) -> _Step:
        """One gradient step on the minibatch ``mb`` (indices into ``batch``).

        With K ranks, ``mb`` is this rank's part of the step's minibatch: the advantages are
        standardised by the union's moments and the gradients averaged weighted by each
        part's rows, so the step is the one a single trainer holding the union would take.
        A rank whose part is empty still joins both collectives.
        """
        c, n = self.config, len(mb)
        mb_adv = batch.advantages[mb]
        if c.norm_adv and (n > 1 or self.collective.world > 1):
            mean, std = global_moments(self.collective, mb_adv)
            mb_adv = (mb_adv - mean) / (std + 1e-8)
        self.optimizer.zero_grad()
        if n:
            step = self._loss_backward(batch, mb, mb_adv)
        else:
            empty = torch.zeros(0)
            step = _Step(torch.zeros(()), torch.zeros(()), torch.zeros(()), empty, empty)
        average_gradients(self.collective, self._params, float(n))
        nn.utils.clip_grad_norm_(self._params, c.max_grad_norm)
        self.optimizer.step()
        return step

    def _loss_backward(self, batch: PPOBatch, mb: torch.Tensor, mb_adv: torch.Tensor) -> _Step:
        """The clipped objective on ``mb``, its gradients left in ``.grad``."""
        c = self.config
        _, newlogprob, entropy, newvalue = self.net.get_action_and_value(
            batch.observations[mb], batch.actions[mb]
        )
        logratio = newlogprob - batch.log_probs[mb]
        ratio = logratio.exp()
        # Policy loss: the clipped surrogate objective.
        clipped_ratio = torch.clamp(ratio, 1 - c.clip_coef, 1 + c.clip_coef)
        pg_loss = torch.max(-mb_adv * ratio, -mb_adv * clipped_ratio).mean()
        # Value loss, optionally clipped around the values the batch was built with.
        mb_returns, mb_values = batch.returns[mb], batch.values[mb]
        v_loss_per = (newvalue - mb_returns) ** 2
        if c.clip_vloss:
            v_clipped = mb_values + torch.clamp(newvalue - mb_values, -c.clip_coef, c.clip_coef)
            v_loss_per = torch.max(v_loss_per, (v_clipped - mb_returns) ** 2)
        v_loss = 0.5 * v_loss_per.mean()
        loss = pg_loss + v_loss * c.vf_coef
        if c.ent_coef:  # the entropy enters the graph only when it is in the loss
            entropy = entropy.mean()
            loss = loss - c.ent_coef * entropy
        loss.backward()  # type: ignore[no-untyped-call]
        return _Step(pg_loss, v_loss, entropy, logratio, ratio)

    def _metrics(
        self,
        batch: PPOBatch,
        lr: float,
        last: _Step,
        kl: tuple[torch.Tensor, torch.Tensor],
        clipfracs: list[torch.Tensor],
    ) -> dict[str, float]:
        """The last minibatch's terms, as CleanRL logs them; "loss" is their weighted sum."""
        c = self.config
        y_pred, y_true = batch.values.cpu().numpy(), batch.returns.cpu().numpy()
        var_y = float(np.var(y_true)) if len(y_true) else 0.0
        explained_var = math.nan if var_y == 0 else 1 - float(np.var(y_true - y_pred)) / var_y
        pg_loss, v_loss = last.pg_loss.item(), last.v_loss.item()
        entropy = last.entropy.detach().mean().item()
        return {
            "learning_rate": lr,
            "loss": pg_loss + c.vf_coef * v_loss - c.ent_coef * entropy,
            "policy_loss": pg_loss,
            "value_loss": v_loss,
            "entropy": entropy,
            "old_approx_kl": kl[0].item(),
            "approx_kl": kl[1].item(),
            "clipfrac": torch.stack(clipfracs).mean().item() if clipfracs else 0.0,
            "explained_variance": explained_var,
            "batch_steps": float(batch.size),
            "chunk_joins": float(batch.joins),
            "cut_bootstraps": float(batch.cut_bootstraps),
        }

    # ----------------------------------------------------------------- state

    def _forget_unlearned(self) -> None:
        self._batch, self._batch_steps = [], 0
