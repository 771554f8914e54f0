"""IMPALA's learner with V-trace off-policy correction (Espeholt et al. 2018, "IMPALA:
Scalable Distributed Deep-RL with Importance Weighted Actor-Learner Architectures").

ASYNC on-policy: workers never wait for a version; each chunk carries the behaviour
policy's log-probs (mu), and the chunk may be several versions behind the learner's
policy (pi). V-trace corrects for that lag with truncated importance weights. Per chunk
of T steps with observations x_0..x_T (x_T the bootstrap row)::

    rho_t = min(rho_bar, pi(a_t|x_t) / mu(a_t|x_t))        c_t = min(c_bar, pi / mu)
    d_t   = gamma * (1 - terminated_t)
    delta_t = rho_t * (r_t + d_t * V(x_{t+1}) - V(x_t))
    v_t - V(x_t) = delta_t + d_t * c_t * (v_{t+1} - V(x_{t+1}))      with v_T = V(x_T)
    policy gradient advantage: min(pg_rho_bar, pi / mu) * (r_t + d_t * v_{t+1} - V(x_t))

A chunk cut mid-episode (chunk or time limit) bootstraps from V(x_T); a terminated step
does not. Loss: -A * log pi(a|x) + vf_coef * 0.5 (v - V)^2 - ent_coef * entropy (A
standardised within the batch with ``norm_adv``), one gradient step per ``batch_steps`` env
steps (the oldest pending chunks first), and every ``publish_every`` steps a new version.
With ``anneal_lr`` the learning rate decays linearly over ``anneal_steps`` env steps to a
floor of 5 %, as PPO's does: late, large steps on a nearly solved task are what undid
runs that had reached the target's neighbourhood. The lag
(the trainer's version when it learns from a chunk minus the chunk's behaviour version,
taken at learning time: a chunk that waited in a backlog aged meanwhile) is reported as a
histogram (``lag_0`` .. ``lag_4+``), with the mean importance weight and the fraction
truncated, so the correction V-trace made is visible.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from pydantic import Field
from torch import nn, optim

from coach_stream.config import FrozenModel
from coach_stream.core import Collective, ExperienceChunk, Ingested
from coach_stream.policies.networks import ActorCritic, GaussianActorCritic
from coach_stream.trainer.collective import (
    SOLO,
    average_optimizer_gradients,
    global_moments,
    total_count,
)
from coach_stream.trainer.device import CPU, to_device
from coach_stream.trainer.state import ActorCriticState
from coach_stream.trainer.steps import StepBatch


class IMPALAConfig(FrozenModel):
    """IMPALA's learner with V-trace targets (Espeholt et al. 2018), ASYNC on-policy."""

    learning_rate: float = Field(default=1e-3, gt=0)
    """Adam's learning rate (its start value when ``anneal_lr``)."""
    anneal_lr: bool = False
    """Decay the learning rate linearly over ``anneal_steps`` env steps, down to a floor of
    5 % of ``learning_rate`` (as PPO's)."""
    anneal_steps: int | None = Field(default=None, ge=1)
    """Default: the preset's env_step_budget."""
    norm_adv: bool = False
    """Normalize the policy-gradient advantages within each batch (as PPO's ``norm_adv``)."""
    gamma: float = Field(default=0.99, gt=0, le=1)
    """Discount factor of the V-trace targets."""
    batch_steps: int = Field(default=512, ge=1)
    """Env steps per gradient step: the newest chunks, whatever version acted them."""
    rho_bar: float = Field(default=1.0, gt=0)
    """Truncation of the importance weights in the V-trace targets (rho-bar)."""
    c_bar: float = Field(default=1.0, gt=0)
    """Truncation of the trace-cutting weights (c-bar)."""
    pg_rho_bar: float = Field(default=1.0, gt=0)
    """Truncation of the importance weight in the policy-gradient term."""
    vf_coef: float = Field(default=0.5, ge=0)
    """Weight of the value loss in the loss."""
    ent_coef: float = Field(default=0.01, ge=0)
    """Weight of the entropy bonus in the loss."""
    max_grad_norm: float = Field(default=40.0, gt=0)
    """Gradients are clipped to this global norm."""
    max_lag: int = Field(default=50, ge=0)
    """Chunks acted more than this many versions behind are dropped as stale (counted)."""
    publish_every: int = Field(default=1, ge=1)
    """Gradient steps per published policy version (publishing costs a checkpoint write and
    an announcement; a trainer on a busy machine keeps up by publishing less often)."""


_LR_FLOOR = 0.05  # of the initial learning rate: a run past anneal_steps still learns
LAG_BUCKETS = 5
"""Histogram buckets lag_0 .. lag_3 and lag_4+ (the last collects everything older)."""


def vtrace(
    log_rhos: torch.Tensor,
    rewards: torch.Tensor,
    values: torch.Tensor,
    next_values: torch.Tensor,
    discounts: torch.Tensor,
    chunk_end: torch.Tensor,
    rho_bar: float,
    c_bar: float,
    pg_rho_bar: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """V-trace targets v_t and policy-gradient advantages over concatenated chunks.

    All arguments are (N,) over the steps of one or more chunks laid end to end;
    ``next_values[t]`` is V(x_{t+1}) (the bootstrap row's value on a chunk's last step),
    ``discounts[t]`` is gamma * (1 - terminated_t), and ``chunk_end[t]`` marks each
    chunk's last step, where the recursion restarts from v_T = V(x_T).
    """
    rhos = log_rhos.exp()
    clipped_rhos = rhos.clamp(max=rho_bar)
    cs = rhos.clamp(max=c_bar)
    deltas = clipped_rhos * (rewards + discounts * next_values - values)
    # The recursion runs backward in time inside each chunk. Chunks are laid side by side
    # as the rows of a (chunks, longest) grid, padded after their last step with zeros
    # (the carry past a chunk's end is 0), so the loop is over time steps, not over steps.
    if len(values) and not bool(chunk_end[-1]):
        raise ValueError("chunk_end must mark the last step: every step belongs to a chunk")
    ends = torch.nonzero(chunk_end).flatten()
    lengths = torch.diff(ends, prepend=torch.tensor([-1])).tolist()
    rows, longest = len(lengths), max(lengths, default=0)
    row = torch.repeat_interleave(torch.arange(rows), torch.tensor(lengths, dtype=torch.long))
    starts = torch.repeat_interleave(ends + 1 - torch.tensor(lengths), torch.tensor(lengths))
    col = torch.arange(len(values)) - starts
    grid_deltas = torch.zeros(rows, longest, dtype=values.dtype)
    grid_decay = torch.zeros(rows, longest, dtype=values.dtype)  # d_t * c_t
    grid_deltas[row, col] = deltas
    grid_decay[row, col] = discounts * cs
    grid = torch.zeros(rows, longest, dtype=values.dtype)  # v_t - V(x_t)
    carry = torch.zeros(rows, dtype=values.dtype)
    for t in range(longest - 1, -1, -1):
        carry = grid_deltas[:, t] + grid_decay[:, t] * carry
        grid[:, t] = carry
    corrections = grid[row, col]
    vs = values + corrections
    # v_{t+1}: the next step's target inside a chunk, V(x_T) after its last step
    next_vs = torch.where(chunk_end, next_values, torch.roll(vs, -1))
    pg_advantages = rhos.clamp(max=pg_rho_bar) * (rewards + discounts * next_vs - values)
    return vs, pg_advantages


def lag_metrics(lags: np.ndarray[Any, Any], lengths: np.ndarray[Any, Any]) -> dict[str, float]:
    """The policy lag of the steps learned from: their mean and a histogram in env steps."""
    histogram = np.bincount(np.minimum(lags, LAG_BUCKETS - 1), lengths, minlength=LAG_BUCKETS)
    metrics = {"vtrace/lag_mean": float(np.average(lags, weights=lengths))}
    for bucket, steps in enumerate(histogram):  # env steps learned at each lag
        label = f"{bucket}+" if bucket == LAG_BUCKETS - 1 else str(bucket)
        metrics[f"vtrace/lag_{label}"] = float(steps)
    return metrics


class IMPALA(ActorCriticState):
    """The learner: an actor-critic updated on the newest chunks with V-trace targets."""

    net: ActorCritic | GaussianActorCritic

    def __init__(
        self,
        net: ActorCritic | GaussianActorCritic,
        config: IMPALAConfig,
        generator: torch.Generator,
        device: torch.device = CPU,
        anneal_steps: int = 1,
        collective: Collective = SOLO,
    ) -> None:
        self.net, self.config, self.generator = net.to(device), config, generator
        self.collective = collective
        self._pending_total = 0  # pending steps over every rank, as the last ready() saw
        self.device, self.anneal_steps = device, anneal_steps
        self.optimizer = optim.Adam(net.parameters(), lr=config.learning_rate, eps=1e-5)
        self._pending: list[ExperienceChunk] = []
        self._pending_steps = 0
        self._version = 0  # the trainer's version: from ingest, plus the publishes since
        self._updates = 0

    def ingest(self, chunks: Sequence[ExperienceChunk], version: int) -> Ingested:
        used = stale_chunks = stale_steps = 0
        self._version = version
        for chunk in chunks:
            lag = max(0, version - chunk.policy_version)
            if chunk.log_probs is None or lag > self.config.max_lag:
                stale_chunks += 1  # no behaviour log-probs, or too old to correct usefully
                stale_steps += chunk.num_steps
                continue
            self._pending.append(chunk)
            used += chunk.num_steps
        self._pending_steps += used
        return Ingested(used, stale_chunks, stale_steps)

    def refill(self, chunks: Sequence[ExperienceChunk]) -> None:
        return None  # experience from before a restart is left behind, like PPO's

    def wants_data(self) -> bool:
        return not self.ready()

    def ready(self) -> bool:
        """``batch_steps`` are pending, counted over every trainer rank's share."""
        self._pending_total = total_count(self.collective, self._pending_steps)
        return self._pending_total >= self.config.batch_steps

    def _take_batch(self) -> list[ExperienceChunk]:
        """The oldest pending chunks, whole, up to ``batch_steps`` steps (at least one).

        A trainer that fell behind learns the backlog one batch per gradient step, oldest
        first, as IMPALA's learner queue does, instead of one large step over all of it.
        With K ranks each takes its part of ``batch_steps`` in proportion to its backlog, so
        a rank fed by more workers drains as fast as it fills.
        """
        quota = self.config.batch_steps
        if self.collective.world > 1:
            if not self._pending_steps:
                return []
            quota = math.ceil(quota * self._pending_steps / max(self._pending_total, 1))
        taken = steps = 0
        for chunk in self._pending:
            if taken and steps + chunk.num_steps > quota:
                break
            taken += 1
            steps += chunk.num_steps
        batch, self._pending = self._pending[:taken], self._pending[taken:]
        self._pending_steps -= steps
        return batch

    def learning_rate(self, env_steps: int) -> float:
        """Linear decay over ``anneal_steps`` env steps, floored at 5 % of the initial rate."""
        c = self.config
        if not c.anneal_lr:
            return c.learning_rate
        return max(_LR_FLOOR, 1.0 - env_steps / self.anneal_steps) * c.learning_rate

    def learn(self, env_steps: int) -> tuple[dict[str, float], bool]:
        pending = self._take_batch()
        c = self.config
        lr = self.learning_rate(env_steps)
        self.optimizer.param_groups[0]["lr"] = lr
        self.optimizer.zero_grad()
        metrics: dict[str, float] = {"learning_rate": lr}
        if pending:
            metrics |= self._loss_backward(pending)
        elif self.collective.world > 1:  # nothing pending here: still in every collective
            if c.norm_adv:
                global_moments(self.collective, torch.zeros(0))
            metrics["batch_steps"] = 0.0
        rows = int(metrics.get("batch_steps", 0))
        average_optimizer_gradients(self.collective, self.optimizer, float(rows))
        nn.utils.clip_grad_norm_(self.net.parameters(), c.max_grad_norm)
        self.optimizer.step()
        self._updates += 1
        publish = self._updates % c.publish_every == 0
        if publish:
            self._version += 1  # the version the trainer announces next
        return metrics, publish

    def _loss_backward(self, pending: list[ExperienceChunk]) -> dict[str, float]:
        """The V-trace loss of ``pending`` (this rank's part), its gradients in ``.grad``."""
        # the lag that matters: the version learning now minus the one that acted each chunk
        lags = np.array([max(0, self._version - chunk.policy_version) for chunk in pending])
        c, dev = self.config, self.device
        steps = StepBatch.from_chunks(pending)
        # frames stay uint8 up to the device (a quarter of the bytes); the network scales them
        step_rows = torch.from_numpy(steps.step_rows).to(dev)
        # one pass: every frame (bootstrap rows included) is encoded once, not twice
        log_pi, entropy, all_values = self.net.evaluate(
            to_device(steps.observations, dev), step_rows, to_device(steps.actions, dev)
        )
        values = all_values[step_rows]
        # x_{t+1} is the next row, bootstrap row included
        next_values = all_values[torch.from_numpy(steps.next_rows).to(dev)]
        # the V-trace recursion is a sequential loop: run it on the CPU, whatever the device
        log_rhos = log_pi.detach().cpu() - steps.behaviour_log_probs()
        vs, pg_adv = self._targets(steps, log_rhos, values, next_values)
        pg_loss = -(pg_adv * log_pi).mean()
        v_loss = 0.5 * ((vs - values) ** 2).mean()
        entropy_loss = entropy.mean()
        loss = pg_loss + c.vf_coef * v_loss - c.ent_coef * entropy_loss
        loss.backward()  # type: ignore[no-untyped-call]
        rhos = log_rhos.exp()
        metrics = {
            "loss": loss.item(),
            "policy_loss": pg_loss.item(),
            "value_loss": v_loss.item(),
            "entropy": entropy_loss.item(),
            "batch_steps": float(steps.size),
            "vtrace/rho_mean": rhos.mean().item(),
            "vtrace/rho_clipped_fraction": (rhos > c.rho_bar).float().mean().item(),
        }
        return metrics | lag_metrics(lags, steps.lengths)

    def _targets(
        self,
        steps: StepBatch,
        log_rhos: torch.Tensor,
        values: torch.Tensor,
        next_values: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """V-trace targets and policy-gradient advantages, on the learner's device."""
        c = self.config
        chunk_end = torch.zeros(steps.size, dtype=torch.bool)
        chunk_end[torch.from_numpy(steps.chunk_ends)] = True
        discounts = c.gamma * (~torch.from_numpy(steps.terminated)).float()
        with torch.no_grad():
            vs, pg_adv = vtrace(
                log_rhos,
                torch.from_numpy(steps.rewards),
                values.detach().cpu(),
                next_values.detach().cpu(),
                discounts,
                chunk_end,
                c.rho_bar,
                c.c_bar,
                c.pg_rho_bar,
            )
            if c.norm_adv and (len(pg_adv) > 1 or self.collective.world > 1):
                mean, std = global_moments(self.collective, pg_adv)  # over every rank's rows
                pg_adv = (pg_adv - mean) / (std + 1e-8)
        return vs.to(self.device), pg_adv.to(self.device)

    def _forget_unlearned(self) -> None:
        self._pending, self._pending_steps = [], 0
