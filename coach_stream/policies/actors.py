"""Actors (``core.Actor``): a network plus the acting rule, loaded from a verified policy version.

A rollout worker holds one actor and calls ``act`` once per vector-env step with the whole
batch of observations (one forward pass for all envs). PPO samples from its categorical
policy and reports the behaviour log-prob (no value: the learners compute their own, so
no actor runs a critic); DQN acts epsilon-greedily, with an
epsilon derived from the env steps the trainer had consumed when it published the version
(so every worker follows the same schedule without talking to the others). ``greedy``
actors (the evaluator) take the arg-max and never explore. Each algorithm's builder
(``coach_stream.algorithms``) picks its actor.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Mapping
from types import ModuleType
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import numpy as np
import numpy.typing as npt
import torch

from coach_stream.core import Action, LoadedPolicy
from coach_stream.errors import IntegrityError
from coach_stream.policies.draws import NormalDraws
from coach_stream.policies.networks import (
    HALF_LOG_2PI,
    LOG_STD_MAX,
    LOG_STD_MIN,
    ActorCritic,
    GaussianActorCritic,
    QNetwork,
    SquashedGaussianActor,
)
from coach_stream.policies.numpy_mlp import NumpyMLP

_HALF_LOG_STD_RANGE = np.float32(0.5 * (LOG_STD_MAX - LOG_STD_MIN))
_log = logging.getLogger(__name__)


@functools.cache
def compiled_kernels() -> ModuleType | None:
    """``policies.compiled`` (numba), or None where it cannot load: MLP policies then act
    in numpy, which samples the same actions from the same draws, only slower."""
    try:
        from coach_stream.policies import compiled
    except Exception as error:  # numba missing or unusable on this platform: still correct
        _log.warning("acting in numpy, not compiled: numba did not load (%s)", error)
        return None
    return compiled


if TYPE_CHECKING:  # type-only: a worker importing its actors does not load the trainer
    from coach_stream.trainer.dqn import DQNConfig


def _load_into(module: torch.nn.Module, state_dict: Mapping[str, object], version: int) -> None:
    try:
        module.load_state_dict(dict(state_dict), strict=True)
    except (RuntimeError, TypeError, KeyError) as error:
        raise IntegrityError(
            f"Policy version {version} does not fit this network ({error}); the preset's "
            "network must match the trainer's."
        ) from error


Net = TypeVar("Net", bound=torch.nn.Module)


class _SamplingActor(Generic[Net]):
    """An actor that samples its network's policy with its own seeded generator."""

    def __init__(self, net: Net, greedy: bool, seed: int) -> None:
        self.net, self.greedy, self.version = net, greedy, -1
        self._generator = torch.Generator().manual_seed(seed)

    def load(self, policy: LoadedPolicy) -> None:
        _load_into(self.net, policy.state_dict, policy.version.version)
        self.version = policy.version.version


class PPOActor(_SamplingActor[ActorCritic]):
    """Samples from the actor-critic's categorical policy (or its mode when greedy).

    MLP networks sample in one compiled call (``policies.compiled``) when numba loads, else
    in numpy (``NumpyMLP``); both from weights copied at every version and from the same
    uniform draws, so they choose the same actions. CNNs act in torch.
    """

    def __init__(self, net: ActorCritic, greedy: bool, seed: int, compiled: bool = True) -> None:
        super().__init__(net, greedy, seed)
        self._rng = np.random.default_rng(seed)
        self._numpy: NumpyMLP | None = None  # the actor's logits
        self._use_compiled = compiled and not greedy
        self._kernels: ModuleType | None = None  # loaded with the first MLP version
        self._layers: tuple[Any, ...] = ()
        self._rows = np.arange(0)

    @property
    def compiled(self) -> bool:
        """Whether this actor samples in the compiled call (an MLP, numba loaded)."""
        return self._kernels is not None and self._numpy is not None

    def load(self, policy: LoadedPolicy) -> None:
        super().load(policy)
        if self.net.encoder is None:
            self._numpy = NumpyMLP(self.net.actor)
            self._layers = tuple(self._numpy.layers)
            if self._use_compiled and self._kernels is None:  # numba only where it acts
                self._kernels = compiled_kernels()

    def act(self, obs: npt.NDArray[np.generic]) -> Action:
        if self._numpy is None:
            return self._act_torch(obs)
        if self._kernels is not None:
            return self._act_compiled(obs)
        return self._act_numpy(obs)

    def _act_compiled(self, obs: npt.NDArray[np.generic]) -> Action:
        assert self._kernels is not None and self._numpy is not None
        n = len(obs)
        flat = np.ascontiguousarray(obs, dtype=np.float32).reshape(n, -1)
        if not flat.flags.writeable:  # a read-only array is another signature to compile
            flat = flat.copy()
        u = self._rng.random(n, dtype=np.float32)  # the numpy act's one draw per act
        actions, log_probs = np.empty(n, np.int64), np.empty(n, np.float32)
        activation = self._kernels.TANH if self._numpy.tanh else self._kernels.RELU
        try:
            self._kernels.categorical_act(flat, self._layers, activation, u, actions, log_probs)
        except Exception as error:  # e.g. LLVM refusing to compile: never a restart loop
            _log.warning("acting in numpy from now on: the compiled act failed (%s)", error)
            self._kernels, self._use_compiled = None, False
            return self._act_numpy(obs)
        return Action(actions=actions, log_probs=log_probs)

    def _act_numpy(self, obs: npt.NDArray[np.generic]) -> Action:
        assert self._numpy is not None
        n = len(obs)
        logits = self._numpy(np.asarray(obs, dtype=np.float32).reshape(n, -1))
        if self.greedy:
            return Action(actions=logits.argmax(-1).astype(np.int64))
        # Every numpy call costs ~1-2 us on 8 rows, as much as its work: the fewest calls
        # (ufunc reductions, in-place writes) and no conversions (float32 and int64 already).
        shifted = logits - np.maximum.reduce(logits, axis=-1, keepdims=True)
        cdf = np.exp(shifted)
        np.add.accumulate(cdf, axis=-1, out=cdf)
        total = cdf[:, -1]  # the softmax's normaliser
        # inverse CDF of the unnormalised weights: u scaled by their total
        u = self._rng.random(n, dtype=np.float32)
        u *= total
        actions = np.add.reduce(cdf <= u[:, None], axis=-1, dtype=np.int64)
        np.minimum(actions, logits.shape[-1] - 1, out=actions)  # u * total rounded up
        if len(self._rows) != n:
            self._rows = np.arange(n)
        log_probs = shifted[self._rows, actions]
        log_probs -= np.log(total)
        return Action(actions=actions, log_probs=log_probs)

    @torch.no_grad()
    def _act_torch(self, obs: npt.NDArray[np.generic]) -> Action:
        x = torch.as_tensor(obs)  # frames stay uint8: the network converts and scales them
        if self.greedy:
            return Action(actions=self.net.logits(x).argmax(-1).numpy().astype(np.int64))
        log_p = torch.log_softmax(self.net.logits(x), dim=-1)
        actions = torch.multinomial(log_p.exp(), 1, generator=self._generator).squeeze(-1)
        return Action(
            actions=actions.numpy().astype(np.int64),
            log_probs=log_p.gather(-1, actions[:, None]).squeeze(-1).numpy().astype(np.float32),
        )


def epsilon(config: DQNConfig, env_steps: int) -> float:
    """Linear decay from the initial to the final epsilon over ``exploration_steps``."""
    fraction = min(1.0, env_steps / config.exploration_steps)
    start, end = config.exploration_initial_eps, config.exploration_final_eps
    return start + fraction * (end - start)


class DQNActor:
    """Epsilon-greedy on Q; epsilon follows the trainer's env-step count in the version."""

    def __init__(self, net: QNetwork, config: DQNConfig, greedy: bool, seed: int) -> None:
        self.net, self.config, self.greedy, self.version = net, config, greedy, -1
        self._rng = np.random.default_rng(seed)
        self._trainer_env_steps = 0
        self._own_steps = 0  # steps since the last load: epsilon keeps decaying between versions

    def load(self, policy: LoadedPolicy) -> None:
        _load_into(self.net, policy.state_dict, policy.version.version)
        self.version = policy.version.version
        self._trainer_env_steps, self._own_steps = policy.version.env_steps, 0

    @property
    def epsilon(self) -> float:
        if self.greedy:
            return 0.0
        return epsilon(self.config, self._trainer_env_steps + self._own_steps)

    @torch.no_grad()
    def act(self, obs: npt.NDArray[np.generic]) -> Action:
        n = obs.shape[0]
        eps = self.epsilon
        self._own_steps += n
        if eps >= 1.0:  # skip the forward pass while acting uniformly at random
            uniform = self._rng.integers(0, self.net.num_actions, size=n, dtype=np.int64)
            return Action(actions=np.asarray(uniform, dtype=np.int64))
        q = self.net(torch.as_tensor(obs))  # frames stay uint8: the network scales them
        actions = q.argmax(-1).numpy().astype(np.int64)
        if eps > 0.0:
            explore = self._rng.random(n) < eps
            random_actions = self._rng.integers(0, q.shape[-1], n, dtype=np.int64)
            actions = np.where(explore, random_actions, actions)
        return Action(actions=actions)


class GaussianPPOActor(_SamplingActor[GaussianActorCritic]):
    """Samples PPO's diagonal Gaussian (its mean when greedy); the env clips to bounds.

    The mean comes from numpy (``NumpyMLP``, refreshed at every version), as ``PPOActor``'s
    logits do: on HalfCheetah's one env a worker's torch act cost about
    as much CPU as the MuJoCo step itself (``bench/rollout.py``). Sampling, it acts in one
    compiled call (``policies.compiled.gaussian_act``) where numba loads, from the same
    normal draws as the numpy act.
    """

    def __init__(
        self, net: GaussianActorCritic, greedy: bool, seed: int, compiled: bool = True
    ) -> None:
        super().__init__(net, greedy, seed)
        self._noise = NormalDraws(np.random.default_rng(seed), int(np.prod(net.action_shape)))
        self._kernels = compiled_kernels() if compiled and not greedy else None
        self._refresh()

    @property
    def compiled(self) -> bool:
        """Whether this actor samples in the compiled call (numba loaded, not greedy)."""
        return self._kernels is not None

    def load(self, policy: LoadedPolicy) -> None:
        super().load(policy)
        self._refresh()

    def _refresh(self) -> None:
        self._numpy = NumpyMLP(self.net.actor_mean)
        self._log_std = self.net.actor_logstd.detach().numpy().reshape(-1).copy()
        self._layers = tuple(self._numpy.layers)

    def act(self, obs: npt.NDArray[np.generic]) -> Action:
        n = len(obs)
        if self._kernels is not None:
            try:
                return self._act_compiled(_rows_of(obs, n))
            except Exception as error:  # e.g. LLVM refusing to compile: never a restart loop
                _log.warning("acting in numpy from now on: the compiled act failed (%s)", error)
                self._kernels = None
        mean = self._numpy(np.asarray(obs, dtype=np.float32).reshape(n, -1))
        shape = (n, *self.net.action_shape)
        if self.greedy:
            return Action(actions=mean.reshape(shape).copy())
        noise = self._noise.take(n)
        sample = mean + np.exp(self._log_std) * noise
        # log N(sample; mean, std): (sample - mean) / std is the noise itself
        log_probs = (-0.5 * noise * noise - self._log_std - HALF_LOG_2PI).sum(-1)
        return Action(actions=sample.reshape(shape), log_probs=log_probs.astype(np.float32))

    def _act_compiled(self, flat: npt.NDArray[np.float32]) -> Action:
        assert self._kernels is not None
        n, dims = len(flat), self._log_std.size
        noise = self._noise.take(n)  # the numpy act's draws
        actions = np.empty((n, dims), np.float32)
        log_probs = np.empty(n, np.float32)
        activation = self._kernels.TANH if self._numpy.tanh else self._kernels.RELU
        self._kernels.gaussian_act(flat, self._layers, activation, self._log_std, noise,
                                   actions, log_probs)  # fmt: skip
        shape = (n, *self.net.action_shape)
        return Action(actions=actions.reshape(shape), log_probs=log_probs)


def _rows_of(obs: npt.NDArray[np.generic], n: int) -> npt.NDArray[np.float32]:
    """``obs`` as n contiguous, writeable float32 rows: the one array type the compiled
    acts take (a read-only array would be another signature to compile)."""
    flat = np.ascontiguousarray(obs, dtype=np.float32).reshape(n, -1)
    return flat if flat.flags.writeable else flat.copy()


class SACActor:
    """Samples SAC's squashed Gaussian (tanh of its mean when greedy): always in bounds.

    Until the trainer has consumed ``uniform_steps`` env steps (the version says how
    many), it acts uniformly at random in the bounds, as SB3's and CleanRL's
    ``learning_starts`` do, so the first replay is not one untrained policy's. The torso
    runs in numpy (``NumpyMLP``), the squashing as ``SquashedGaussianActor.sample`` does it.
    """

    def __init__(
        self,
        net: SquashedGaussianActor,
        greedy: bool,
        seed: int,
        uniform_steps: int = 0,
        compiled: bool = False,
    ) -> None:
        """``compiled``: sample in one numba call (``squashed_gaussian_act``) where numba
        loads, from the same normal draws as the numpy act. The SAC builder asks for it
        (since 2026-12-08, with ``pendulum-sac``'s backlog bounded: docs/performance.md);
        off here, so that this actor alone is the numpy act the compiled one is tested
        against."""
        self.net, self.greedy, self.version = net, greedy, -1
        self.uniform_steps = uniform_steps
        self._rng = np.random.default_rng(seed)
        self._kernels = compiled_kernels() if compiled and not greedy else None
        self._trainer_env_steps = 0
        self._refresh()

    def load(self, policy: LoadedPolicy) -> None:
        _load_into(self.net, policy.state_dict, policy.version.version)
        self.version = policy.version.version
        self._trainer_env_steps = policy.version.env_steps
        self._refresh()

    def _refresh(self) -> None:
        self._numpy = NumpyMLP(self.net.torso)
        self._layers = tuple(self._numpy.layers)
        self._scale = self.net.action_scale.numpy().copy()
        self._bias = self.net.action_bias.numpy().copy()

    @property
    def compiled(self) -> bool:
        """Whether this actor samples in the compiled call (numba loaded, not greedy)."""
        return self._kernels is not None

    def act(self, obs: npt.NDArray[np.generic]) -> Action:
        n, dims = len(obs), self._scale.size
        shape = (n, *self.net.action_shape)
        if not self.greedy and self._trainer_env_steps < self.uniform_steps:
            u = self._rng.random((n, dims), dtype=np.float32)
            actions = (2 * u - 1) * self._scale + self._bias
            return Action(actions=actions.reshape(shape))
        if self._kernels is not None:
            try:
                return Action(actions=self._act_compiled(_rows_of(obs, n)).reshape(shape))
            except Exception as error:  # e.g. LLVM refusing to compile: never a restart loop
                _log.warning("acting in numpy from now on: the compiled act failed (%s)", error)
                self._kernels = None
        out = self._numpy(np.asarray(obs, dtype=np.float32).reshape(n, -1))
        pre_squash = out[:, :dims]  # a fresh array's view: written in place below
        if not self.greedy:
            # std = exp(LOG_STD_MIN + half range * (tanh(torso's) + 1)), in place: each numpy
            # call costs ~1 us on one env's 6 numbers, as much as its work
            std = np.tanh(out[:, dims:])
            std *= _HALF_LOG_STD_RANGE
            std += LOG_STD_MIN + _HALF_LOG_STD_RANGE
            np.exp(std, out=std)
            std *= self._rng.standard_normal(pre_squash.shape, dtype=np.float32)
            pre_squash += std
        actions = np.tanh(pre_squash)
        actions *= self._scale
        actions += self._bias
        return Action(actions=actions.reshape(shape))

    def _act_compiled(self, flat: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
        assert self._kernels is not None
        n, dims = len(flat), self._scale.size
        noise = self._rng.standard_normal((n, dims), dtype=np.float32)  # the numpy act's draw
        actions = np.empty((n, dims), np.float32)
        activation = self._kernels.TANH if self._numpy.tanh else self._kernels.RELU
        self._kernels.squashed_gaussian_act(flat, self._layers, activation, noise, self._scale,
                                            self._bias, actions)  # fmt: skip
        return actions
