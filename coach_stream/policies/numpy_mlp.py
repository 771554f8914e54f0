"""MLP policies acted in numpy: a worker's forward pass without torch's per-operation cost.

For a network of a few thousand weights acting on a few observations, torch's per-operation
dispatch (~10 us each, ~15 of them per act) is most of the cost; after every env in the
vector env has slept (a latency-bound env) that code runs cold and costs 3-4x more again:
625 us of CPU per act of a 64x64 MLP on 8 CartPole observations, 154 us in numpy
(``bench/scale.py``, docs/performance.md). The actors (``policies.actors``) copy their
network's weights here at every policy version.
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

    @classmethod
    def side_by_side(cls, first: torch.nn.Sequential, second: torch.nn.Sequential) -> NumpyMLP:
        """One MLP whose outputs are ``first``'s then ``second``'s (an actor and a critic).

        The weights are block-diagonal: both networks cost one pass of numpy calls instead
        of two, and the zero blocks add exact zeros. On 8 CartPole observations with 64x64
        layers, the act with its sampling took 72 us against 113 us as two passes.
        """
        return cls.joined(cls(first), cls(second))

    @classmethod
    def joined(cls, a: NumpyMLP, b: NumpyMLP) -> NumpyMLP:
        """``side_by_side`` of two numpy MLPs already copied (neither is changed)."""
        if len(a.layers) != len(b.layers) or a.tanh != b.tanh:
            raise TypeError("side_by_side needs two MLPs of the same depth and activation")
        layers = []
        for i, ((wa, ba), (wb, bb)) in enumerate(zip(a.layers, b.layers, strict=True)):
            if i == 0:  # both read the same input
                weight = np.concatenate([wa, wb], axis=1)
            else:
                weight = np.zeros((wa.shape[0] + wb.shape[0], wa.shape[1] + wb.shape[1]), wa.dtype)
                weight[: wa.shape[0], : wa.shape[1]] = wa
                weight[wa.shape[0] :, wa.shape[1] :] = wb
            layers.append((weight, np.concatenate([ba, bb])))
        both = object.__new__(cls)
        both.layers, both.tanh = layers, a.tanh
        return both

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


class NumpyActorCritic:
    """An actor MLP and a critic MLP on the same input: (actor's outputs, values).

    Side by side (one block-diagonal pass) costs fewer numpy calls but multiplies zero
    blocks too, so it pays only while the batch times the hidden width squared is small:
    per act of 8 observations, 9.6 against 13.3 us at 64x64, but 82 against 36 us at
    256x256 (1 observation: 23 against 18 us). Both forms are kept and each call takes the
    cheaper one for its batch.
    """

    SIDE_BY_SIDE_MAX_WORK = 32_768
    """Batch rows x the widest hidden layer squared up to which one pass is cheaper
    (measured on one core: the crossing lies between 16k and 65k)."""

    def __init__(self, actor: torch.nn.Sequential, critic: torch.nn.Sequential) -> None:
        self.actor, self.critic = NumpyMLP(actor), NumpyMLP(critic)
        widths = [w.shape[1] for w, _ in self.actor.layers[:-1] + self.critic.layers[:-1]]
        self._width_sq = max(widths, default=1) ** 2
        try:  # from the copies above: the weights leave torch once per version
            self.both: NumpyMLP | None = NumpyMLP.joined(self.actor, self.critic)
        except TypeError:  # different depths: two passes always
            self.both = None

    def __call__(
        self, x: npt.NDArray[np.float32]
    ) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.float32]]:
        if self.both is not None and len(x) * self._width_sq <= self.SIDE_BY_SIDE_MAX_WORK:
            out = self.both(x)
            return out[:, :-1], out[:, -1]
        return self.actor(x), self.critic(x)[:, 0]
