"""Where the trainer's networks live: ``--device auto|cpu|cuda`` (workers always act on CPU).

``auto`` takes the GPU when torch sees one. Batches are built on the CPU (they come from
numpy) and copied to a GPU through pinned memory, so the copy is one DMA that can overlap
the previous kernel. Whatever the device, policy versions hold CPU tensors (workers load
them on CPU) and trainer states are loaded with ``map_location="cpu"``, so a checkpoint
written on a GPU machine always loads on one without.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

import torch

from coach_stream.errors import ConfigError

DeviceName = Literal["auto", "cpu", "cuda"]
CPU = torch.device("cpu")


def resolve_device(name: str) -> torch.device:
    """The torch device for ``auto``, ``cpu`` or ``cuda``; one clear error otherwise."""
    if name == "auto":
        return torch.device("cuda") if torch.cuda.is_available() else CPU
    if name == "cpu":
        return CPU
    if name == "cuda":
        if not torch.cuda.is_available():
            raise ConfigError(
                "--device cuda was asked for but torch sees no CUDA GPU on this machine; "
                "use --device auto (or cpu), or install a CUDA build of torch."
            )
        return torch.device("cuda")
    raise ConfigError(f"Unknown device {name!r}; use auto, cpu or cuda.")


def to_device(tensor: torch.Tensor, device: torch.device) -> torch.Tensor:
    """``tensor`` on ``device``: through pinned memory for a GPU, unchanged for the CPU."""
    if device.type == "cpu":
        return tensor
    return tensor.pin_memory().to(device, non_blocking=True)


def cpu_state_dict(state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A state dict with every tensor on the CPU (what a policy version carries)."""
    return {key: value.detach().cpu() for key, value in state.items()}
