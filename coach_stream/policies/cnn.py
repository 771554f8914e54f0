"""Image encoders: the Nature CNN (Atari) and a small CNN (MiniGrid's 7x7 views).

Frames travel as uint8 from the env to the network (chunks, the wire, replay buffers and
batches all keep uint8, a quarter of float32's bytes); the encoder is the one place they
become float32 and, when they are pixels, are scaled by 1/255, on whatever device the
network lives on. MiniGrid's symbolic view is uint8 too, but holds object, colour and state
indices (at most about 10): those are fed unscaled (``network.pixels``).

Which torso a network gets (``network_kind``): ``network.kind`` in the preset, or with
``auto`` (the default) a CNN for a 3-D uint8 observation — the Nature CNN when both sides
are at least 36 pixels (its smallest input), the small CNN below that — and the MLP for
everything else. Layout: gymnasium's images are channel-last (H, W, C), Atari frames
stacked by ``FrameStackObservation`` are channel-first (stack, H, W); an observation whose
first axis is smaller than its last is taken as channel-first, any other as channel-last
and permuted to channel-first inside the encoder.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import torch
from torch import nn

from coach_stream.config import NetworkConfig
from coach_stream.envs import EnvShape
from coach_stream.errors import ConfigError

Kind = Literal["mlp", "nature_cnn", "small_cnn"]
NATURE_MIN_SIDE = 36
"""The Nature CNN's smallest input side: 8x8 stride 4, 4x4 stride 2, 3x3 leave 1x1."""
SMALL_MIN_SIDE = 7
"""The small CNN's: 2x2, max-pool 2, 2x2, 2x2 leave 1x1 (MiniGrid's agent view is 7x7)."""


def is_image(shape: EnvShape) -> bool:
    """A 3-D uint8 observation: frames, whatever their channel order."""
    return len(shape.obs_shape) == 3 and shape.obs_dtype == "uint8"


def network_kind(shape: EnvShape, config: NetworkConfig) -> Kind:
    """The torso for ``shape``: the preset's ``network.kind``, or chosen by the shape."""
    if config.kind == "mlp":
        return "mlp"
    if config.kind == "auto":
        if not is_image(shape):
            return "mlp"
        side = min(_channels_first_shape(shape.obs_shape)[1:])
        return "nature_cnn" if side >= NATURE_MIN_SIDE else "small_cnn"
    if len(shape.obs_shape) != 3:
        raise ConfigError(
            f"network.kind {config.kind!r} needs image observations (3-D) but they have shape "
            f"{shape.obs_shape}; use network.kind mlp (or auto)."
        )
    side = min(_channels_first_shape(shape.obs_shape)[1:])
    least = NATURE_MIN_SIDE if config.kind == "nature_cnn" else SMALL_MIN_SIDE
    if side < least:
        raise ConfigError(
            f"network.kind {config.kind!r} needs frames of at least {least}x{least} pixels "
            f"but they have shape {shape.obs_shape}; use "
            f"{'small_cnn' if config.kind == 'nature_cnn' else 'mlp'} (or auto)."
        )
    return config.kind


def _channels_last(obs_shape: tuple[int, ...]) -> bool:
    return obs_shape[0] >= obs_shape[-1]


def _channels_first_shape(obs_shape: tuple[int, ...]) -> tuple[int, int, int]:
    c_first = obs_shape if not _channels_last(obs_shape) else (obs_shape[2], *obs_shape[:2])
    return (int(c_first[0]), int(c_first[1]), int(c_first[2]))


def _conv(inputs: int, outputs: int, kernel: int, stride: int = 1) -> nn.Conv2d:
    """Orthogonal init (gain sqrt 2) with zero bias, as CleanRL's Atari agent."""
    layer = nn.Conv2d(inputs, outputs, kernel, stride)
    nn.init.orthogonal_(layer.weight, float(np.sqrt(2)))
    nn.init.zeros_(layer.bias)  # type: ignore[arg-type]  # Conv2d has a bias unless asked
    return layer


class ImageEncoder(nn.Module):
    """uint8 frames (N, *obs_shape) -> float32 features (N, ``features``).

    ``nature_cnn``: Mnih et al. 2015 (conv 32 8x8/4, 64 4x4/2, 64 3x3/1, fc 512, ReLU).
    ``small_cnn``: rl-starter-files' MiniGrid torso (conv 16 2x2, max-pool 2, 32 2x2,
    64 2x2, ReLU), flattened.
    """

    def __init__(self, shape: EnvShape, kind: Kind, pixels: bool = True) -> None:
        super().__init__()
        self.channels_last = _channels_last(shape.obs_shape)
        # uint8 pixels are scaled to [0, 1]; a float image is taken as already scaled, and
        # integer codes (MiniGrid's indices, ``pixels`` False) are fed as they are
        self.scale = 1.0 / 255.0 if pixels and shape.obs_dtype == "uint8" else 1.0
        channels, height, width = _channels_first_shape(shape.obs_shape)
        if kind == "nature_cnn":
            convs: list[nn.Module] = [
                _conv(channels, 32, 8, 4),
                nn.ReLU(),
                _conv(32, 64, 4, 2),
                nn.ReLU(),
                _conv(64, 64, 3, 1),
                nn.ReLU(),
                nn.Flatten(),
            ]
        elif kind == "small_cnn":
            convs = [
                _conv(channels, 16, 2),
                nn.ReLU(),
                nn.MaxPool2d(2),
                _conv(16, 32, 2),
                nn.ReLU(),
                _conv(32, 64, 2),
                nn.ReLU(),
                nn.Flatten(),
            ]
        else:
            raise ValueError(f"ImageEncoder builds CNN kinds, not {kind!r}")
        with torch.no_grad():
            flat = int(nn.Sequential(*convs)(torch.zeros(1, channels, height, width)).shape[1])
        if kind == "nature_cnn":
            fc = nn.Linear(flat, 512)
            nn.init.orthogonal_(fc.weight, float(np.sqrt(2)))
            nn.init.constant_(fc.bias, 0.0)
            convs += [fc, nn.ReLU()]
            flat = 512
        self.net = nn.Sequential(*convs)
        self.features = flat

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        x = obs.permute(0, 3, 1, 2) if self.channels_last else obs
        # the only uint8 -> float32 conversion of a frame, on the network's device
        features: torch.Tensor = self.net(x.to(torch.float32) * self.scale)
        return features
