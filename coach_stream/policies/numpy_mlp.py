"""MLP policies acted in numpy: a worker's forward pass without torch's per-operation cost.

For a network of a few thousand weights acting on a few observations, torch's per-operation
dispatch (~10 us each, ~15 of them per act) is most of the cost; after every env in the
vector env has slept (a latency-bound env) that code runs cold and costs 3-4x more again:
625 us of CPU per act of a 64x64 MLP on 8 CartPole observations, 154 us in numpy
(``bench/scale.py``, docs/performance.md). The actors (``policies.actors``) copy their
network's weights here at every policy version: the actor's only, since no worker runs
the critic (``core.Action``).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import torch


class NumpyMLP:
    """The forward pass of an MLP (``networks._mlp``: Linear, activation, ..., Linear) in
    numpy, with a copy of its weights."""

    def __init__(self, mlp: torch.nn.Sequential) -> None:
        modules = list(mlp)
        linears = modules[0::2]
        activations = {type(m) for m in modules[1::2]}
        if not all(isinstance(m, torch.nn.Linear) for m in linears) or not activations <= {
            torch.nn.Tanh,
            torch.nn.ReLU,
        }:
            raise TypeError(f"not an MLP of Linear layers and one activation: {mlp}")
        self.layers = [
            (m.weight.detach().numpy().T.copy(), m.bias.detach().numpy().copy())
            for m in linears
            if isinstance(m, torch.nn.Linear)
        ]
        self.tanh = torch.nn.Tanh in activations

    def __call__(self, x: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
        last = len(self.layers) - 1
        for i, (weight, bias) in enumerate(self.layers):
            x = x @ weight
            x += bias
            if i < last:
                if self.tanh:
                    np.tanh(x, out=x)
                else:
                    np.maximum(x, 0.0, out=x)
        return x
