"""A policy version as one file that acts alone: ONNX or TorchScript.

``GreedyPolicy`` is the greedy action function of a loaded actor as one ``torch.nn.Module``:
the observation normalisation of its version (when the preset normalises), the network,
and the greedy rule of its kind: the arg-max of a categorical policy's logits (PPO,
IMPALA) or of Q (DQN), a Gaussian policy's mean clipped to the action bounds (PPO; the
env would clip it), a squashed Gaussian's tanh of the mean (SAC). Exported, it maps a
batch of observations (the env's dtype) to a batch of actions, so ``onnxruntime`` and
numpy or ``torch.jit.load`` are all a user needs next to the env.
"""

from __future__ import annotations

import contextlib
import logging
import os
from pathlib import Path
from typing import Literal

import numpy as np
import torch
from torch import nn

from coach_stream.core import Actor
from coach_stream.envs import EnvShape
from coach_stream.policies.networks import (
    ActorCritic,
    GaussianActorCritic,
    QNetwork,
    SquashedGaussianActor,
)
from coach_stream.policies.normalization import NormalizingActor, Statistics

Format = Literal["onnx", "torchscript"]
_NETS = (ActorCritic, GaussianActorCritic, QNetwork, SquashedGaussianActor)


class GreedyPolicy(nn.Module):
    """Observations (batch, *obs_shape) -> greedy actions (batch, *action_shape)."""

    obs_mean: torch.Tensor
    obs_std: torch.Tensor
    action_low: torch.Tensor
    action_high: torch.Tensor

    def __init__(self, net: nn.Module, shape: EnvShape, statistics: Statistics | None) -> None:
        super().__init__()
        if not isinstance(
            net, ActorCritic | GaussianActorCritic | QNetwork | SquashedGaussianActor
        ):
            raise TypeError(f"no greedy rule for a {type(net).__name__}")
        self.net = net
        self.normalize = statistics is not None and statistics.obs_mean is not None
        if statistics is not None and statistics.obs_mean is not None:
            assert statistics.obs_var is not None
            std = np.sqrt(statistics.obs_var + statistics.epsilon)
            self.register_buffer("obs_mean", torch.from_numpy(statistics.obs_mean.copy()))
            self.register_buffer("obs_std", torch.from_numpy(std))
            self.clip = float(statistics.clip_observations)
        low = torch.tensor(shape.action_low or (0.0,), dtype=torch.float32)
        high = torch.tensor(shape.action_high or (0.0,), dtype=torch.float32)
        self.register_buffer("action_low", low)
        self.register_buffer("action_high", high)
        self.action_shape = tuple(shape.action_shape)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        if self.normalize:  # as Statistics.observations: float64, then float32
            scaled = (obs.to(torch.float64) - self.obs_mean) / self.obs_std
            obs = scaled.clamp(-self.clip, self.clip).to(torch.float32)
        net = self.net
        if isinstance(net, ActorCritic):
            return net.logits(obs).argmax(-1)
        if isinstance(net, QNetwork):
            q: torch.Tensor = net(obs)
            return q.argmax(-1)
        if isinstance(net, SquashedGaussianActor):
            return net.greedy(obs).reshape((obs.shape[0], *self.action_shape))
        mean, _ = net.mean_and_log_std(obs.to(torch.float32))
        mean = torch.minimum(torch.maximum(mean, self.action_low), self.action_high)
        return mean.reshape((obs.shape[0], *self.action_shape))


def greedy_policy(actor: Actor, shape: EnvShape) -> GreedyPolicy:
    """The greedy module of a loaded greedy actor (its network and its version's statistics)."""
    statistics = None
    if isinstance(actor, NormalizingActor):
        statistics, actor = actor.statistics, actor.inner
    net = getattr(actor, "net", None)
    if not isinstance(net, nn.Module):
        raise TypeError(f"{type(actor).__name__} has no network to export")
    return GreedyPolicy(net, shape, statistics).eval()


def export(policy: GreedyPolicy, example: np.ndarray, path: Path, fmt: Format) -> None:
    """Write ``policy`` to ``path`` (batch size free); ``example``: observations to trace."""
    obs = torch.as_tensor(example)
    with torch.no_grad():
        if fmt == "torchscript":
            torch.jit.save(torch.jit.trace(policy, (obs,)), str(path))  # type: ignore[no-untyped-call]
            return
        batch = torch.export.Dim("batch", min=1)
        # its registry logs every optional op library it lacks (torchvision) as a warning
        logging.getLogger("torch.onnx").setLevel(logging.ERROR)
        # The exporter reports each stage on stdout: keep a command's output to its own.
        with open(os.devnull, "w") as quiet, contextlib.redirect_stdout(quiet):
            program = torch.onnx.export(
                policy,
                (obs,),
                input_names=["obs"],
                output_names=["action"],
                dynamic_shapes=({0: batch},),
                dynamo=True,
                verbose=False,
            )
        assert program is not None
        program.save(str(path))
