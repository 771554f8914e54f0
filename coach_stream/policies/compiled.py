"""MLP policies' acts, compiled with numba: one call per vector-env step.

``PPOActor``'s numpy act costs about 25 numpy calls per step, each ~1-2 us on a few rows,
and between env steps that code runs cold: on CartPole's 8 envs the act took 0.37 of the
worker's env + policy CPU. Here the actor MLP's pass, the softmax, the inverse-CDF draw
from the uniforms given and the chosen action's log-probability are one compiled call
(``categorical_act``; ``bench/compiled_act.py``: 0.63 -> 0.80 of the bare env for env +
policy on CartPole). PPO's diagonal Gaussian (``gaussian_act``) and SAC's squashed Gaussian
(``squashed_gaussian_act``) are compiled the same way, from the normal draws their numpy
acts take (SAC's act on HalfCheetah: 41 -> 18 us). No act runs the critic: the learners
take V(x) from their own network (``core.Action``).

The arithmetic is the numpy act's, in float32, with one difference: tanh is Eigen's fast
float tanh (a 13/6 rational, clamped at +-7.9, within a few ulp of libm's), because LLVM
vectorises it where libm's ``tanhf``, one call per unit, made the 8-row act twice as slow.
Every function takes numpy's error model: under Python's, each float division checks for
zero and raises, and that branch kept LLVM from vectorising the tanh (2,048 of them took
5.4 us, 0.95 without it).
Compiled on a process's first act, or loaded from numba's on-disk cache (``__pycache__``
beside this file, or ``NUMBA_CACHE_DIR``): ~8 s cold, ~0.4 s cached. ``make setup`` and
the runtime image build fill the cache (``python -m coach_stream.rollout.compiled``, which
warms this module too), so tasks start warm.
"""

from __future__ import annotations

from typing import Any

import numba
import numpy as np
import numpy.typing as npt

from coach_stream.policies.networks import HALF_LOG_2PI, LOG_STD_MAX, LOG_STD_MIN

Layers = tuple[tuple[npt.NDArray[np.float32], npt.NDArray[np.float32]], ...]
"""An MLP's (weight (inputs, outputs), bias) pairs, as ``NumpyMLP.layers``."""

TANH, RELU, NONE = 1, 2, 0

_CLAMP = np.float32(7.90531110763549805)
_P0, _P1, _P2, _P3, _P4, _P5, _P6 = (np.float32(c) for c in (
    -2.76076847742355e-16, 2.00018790482477e-13, -8.60467152213735e-11,
    5.12229709037114e-08, 1.48572235717979e-05, 6.37261928875436e-04, 4.89352455891786e-03,
))  # fmt: skip
_Q0, _Q1, _Q2, _Q3 = (np.float32(c) for c in (
    1.19825839466702e-06, 1.18534705686654e-04, 2.26843463243900e-03, 4.89352518554385e-03,
))  # fmt: skip
_ZERO = np.float32(0.0)
_HALF_LOG_2PI = np.float32(HALF_LOG_2PI)
_LOG_STD_MIN = np.float32(LOG_STD_MIN)
_HALF_LOG_STD_RANGE = np.float32(0.5 * (LOG_STD_MAX - LOG_STD_MIN))


@numba.njit(fastmath=True, error_model="numpy", inline="always", cache=True)
def _tanh(x: Any) -> Any:
    x = min(max(x, -_CLAMP), _CLAMP)
    x2 = x * x
    p = ((((((_P0 * x2 + _P1) * x2 + _P2) * x2 + _P3) * x2 + _P4) * x2 + _P5) * x2 + _P6) * x
    return p / (((_Q0 * x2 + _Q1) * x2 + _Q2) * x2 + _Q3)


@numba.njit(fastmath=True, error_model="numpy", inline="always", cache=True)
def _activate(acc: Any, out: Any, activation: int) -> None:
    for j in range(acc.shape[0]):
        if activation == TANH:
            out[j] = _tanh(acc[j])
        elif activation == RELU:
            out[j] = max(acc[j], _ZERO)
        else:
            out[j] = acc[j]


@numba.njit(fastmath=True, error_model="numpy", cache=True)
def _dense(x: Any, weight: Any, bias: Any, activation: int) -> Any:
    """activation(x @ weight + bias), two rows at a time: each weight row read once per pair,
    the loop over outputs vectorised. Few outputs (a policy or value head) vectorise poorly
    that way: those take one dot product per row and output (``_narrow_dense``)."""
    if weight.shape[1] < 8:
        return _narrow_dense(x, weight, bias, activation)
    n, inputs = x.shape
    out = np.empty((n, weight.shape[1]), np.float32)
    first, second = np.empty_like(bias), np.empty_like(bias)
    for i in range(0, n - 1, 2):
        first[:] = bias
        second[:] = bias
        for p in range(inputs):
            a, b, row = x[i, p], x[i + 1, p], weight[p]
            for j in range(row.shape[0]):
                first[j] += a * row[j]
                second[j] += b * row[j]
        _activate(first, out[i], activation)
        _activate(second, out[i + 1], activation)
    if n % 2:
        first[:] = bias
        for p in range(inputs):
            a, row = x[n - 1, p], weight[p]
            for j in range(row.shape[0]):
                first[j] += a * row[j]
        _activate(first, out[n - 1], activation)
    return out


@numba.njit(fastmath=True, error_model="numpy", cache=True)
def _narrow_dense(x: Any, weight: Any, bias: Any, activation: int) -> Any:
    """activation(x @ weight + bias) as dot products over the inputs, the sum vectorised:
    3-4x the pairs' speed for 1 or 2 outputs of 64 inputs."""
    n, inputs = x.shape
    outputs = weight.shape[1]
    columns = np.empty((outputs, inputs), np.float32)  # the weight's columns, contiguous
    for p in range(inputs):
        for j in range(outputs):
            columns[j, p] = weight[p, j]
    out = np.empty((n, outputs), np.float32)
    for i in range(n):
        row = x[i]
        for j in range(outputs):
            column, total = columns[j], _ZERO
            for p in range(inputs):
                total += row[p] * column[p]
            out[i, j] = total + bias[j]
        _activate(out[i], out[i], activation)
    return out


@numba.njit(fastmath=True, error_model="numpy", cache=True)
def _mlp(x: Any, layers: Any, activation: int) -> Any:
    last = len(layers) - 1
    for i in range(len(layers)):
        weight, bias = layers[i]
        x = _dense(x, weight, bias, activation if i < last else NONE)
    return x


@numba.njit(error_model="numpy", cache=True)
def categorical_act(
    obs: Any, actor: Any, activation: int, u: Any, actions: Any, log_probs: Any
) -> None:
    """Each row's action drawn by inverse CDF of its softmax at ``u`` (in [0, 1)) and its
    log-probability, written into the two output arrays."""
    logits = _mlp(obs, actor, activation)
    for i in range(logits.shape[0]):
        row = logits[i]
        top = row.max()
        total = _ZERO
        for j in range(row.shape[0]):
            total += np.exp(row[j] - top)
        target, cdf, chosen = u[i] * total, _ZERO, row.shape[0] - 1
        for j in range(row.shape[0]):
            cdf += np.exp(row[j] - top)
            if target < cdf:
                chosen = j
                break
        actions[i] = chosen
        log_probs[i] = row[chosen] - top - np.log(total)


@numba.njit(fastmath=True, error_model="numpy", cache=True)
def gaussian_act(
    obs: Any, actor: Any, activation: int, log_std: Any, noise: Any, actions: Any,
    log_probs: Any,
) -> None:  # fmt: skip
    """PPO's diagonal Gaussian: each row's action ``mean + exp(log_std) * noise`` and its
    log-density (the standardised sample is the noise itself)."""
    mean = _mlp(obs, actor, activation)
    for i in range(mean.shape[0]):
        total = _ZERO
        for d in range(mean.shape[1]):
            actions[i, d] = mean[i, d] + np.exp(log_std[d]) * noise[i, d]
            total += np.float32(-0.5) * noise[i, d] * noise[i, d] - log_std[d]
        log_probs[i] = total - mean.shape[1] * _HALF_LOG_2PI


@numba.njit(fastmath=True, error_model="numpy", cache=True)
def squashed_gaussian_act(
    obs: Any, torso: Any, activation: int, noise: Any, scale: Any, bias: Any, actions: Any
) -> None:
    """SAC's squashed Gaussian: ``tanh(mean + std * noise) * scale + bias``, the torso's
    outputs being the means then the log-stds' pre-images (``std = exp(LOG_STD_MIN + half
    range * (tanh(x) + 1))``, as ``SquashedGaussianActor.sample``)."""
    out = _mlp(obs, torso, activation)
    dims = scale.shape[0]
    for i in range(out.shape[0]):
        for d in range(dims):
            log_std = _LOG_STD_MIN + _HALF_LOG_STD_RANGE * (_tanh(out[i, dims + d]) + 1)
            squashed = _tanh(out[i, d] + np.exp(log_std) * noise[i, d])
            actions[i, d] = squashed * scale[d] + bias[d]


@numba.njit(error_model="numpy", cache=True)
def standardize(obs: Any, mean: Any, std: Any, clip: float, out: Any) -> None:
    """``out`` (float32) = ``(obs - mean) / std`` clipped to +-``clip``, computed in float64:
    numpy's ``Statistics.observations`` to the bit (no fast-math; NaN stays NaN)."""
    for i in range(obs.shape[0]):
        for j in range(obs.shape[1]):
            x = (np.float64(obs[i, j]) - mean[j]) / std[j]
            if x < -clip:
                x = -clip
            elif x > clip:
                x = clip
            out[i, j] = np.float32(x)


def warm_up() -> None:
    """Compile (or load) each act for float32 MLPs of 1 to 4 layers, filling numba's cache
    so that no task compiles on its first step."""
    for depth in range(1, 5):
        layer = np.zeros((2, 2), np.float32), np.zeros(2, np.float32)
        layers = (layer,) * depth
        out = np.empty(1, np.int64), np.empty(1, np.float32)
        obs, u = np.zeros((1, 2), np.float32), np.zeros(1, np.float32)
        categorical_act(obs, layers, TANH, u, *out)
        sample, one = np.empty((1, 2), np.float32), np.zeros(2, np.float32)
        gaussian_act(obs, layers, TANH, one, sample.copy(), sample, out[1])
        squashed = np.empty((1, 1), np.float32)
        squashed_gaussian_act(obs, layers, RELU, squashed.copy(), one[:1], one[:1], squashed)
    for dtype in (np.float32, np.float64):  # observations as the envs give them
        scaled = np.empty((1, 2), np.float32)
        standardize(np.zeros((1, 2), dtype), np.zeros(2), np.ones(2), 5.0, scaled)


if __name__ == "__main__":
    warm_up()
