"""The compiled act against the numpy act: an MLP policy's act and env + policy per CPU-second.

``bench/rollout.py`` found the policy's act the largest cost a CartPole worker adds to its
env (``env_policy`` kept 0.6-0.8 of the bare env). ``policies/compiled.py`` does a
categorical actor-critic's whole act (both MLPs, the softmax, the draw, the
log-probability) in one numba call; ``PPOActor(compiled=False)`` does it in ~25 numpy
calls. PPO's diagonal Gaussian (``GaussianPPOActor``) and SAC's squashed Gaussian
(``SACActor``) have their compiled acts too, measured the same way. One process, the
preset's vector env and an untrained version (as ``bench/rollout.py``), loops timed in
CPU-seconds and alternated between rounds, medians kept:

* ``act_us_compiled`` against ``act_us_numpy``: one act on the vector env's observations,
  in microseconds (ratio below 1: the compiled act is faster), measured warm, in a loop;
* ``env_policy_numpy`` / ``env_policy_compiled``: the vector env stepped with each act's
  actions, env steps per CPU-second, against ``bare_env`` (pre-drawn random actions, the
  ceiling ``bench/rollout.py`` uses). Between env steps the act runs cold, which costs the
  numpy act's many calls more than the one compiled call.

Both acts draw the same uniforms (or normals); on the same observations and draws,
``max_log_prob_diff`` is the largest difference between their log-probabilities and
``max_action_diff`` between their continuous actions, or how many discrete actions differ
(float32 rounding: a categorical draw on a CDF edge could round apart, and its
log-probability is left out).

Usage: ``python bench/compiled_act.py [--quick] [--preset cartpole-ppo] [--set K=V]``
(MLP presets: cartpole-ppo, cartpole-impala, lunarlander-ppo, acrobot-ppo,
halfcheetah-ppo, halfcheetah-sac, pendulum-ppo, ...).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from typing import Any

import jsonl
import numpy as np
import torch
from rollout import Loop, bare_env, interleaved
from standins import DiscardingWriter, bench_worker
from threadpoolctl import threadpool_limits

from coach_stream.config import Preset, load_preset
from coach_stream.errors import ConfigError
from coach_stream.policies.actors import GaussianPPOActor, PPOActor, SACActor
from coach_stream.policies.normalization import NormalizingActor


def policy_loop(envs: Any, first_obs: Any, act: Any) -> Loop:
    last = [first_obs]

    def step() -> int:
        obs = last[0]
        for _ in range(32):
            obs, *_ = envs.step(act(obs).actions)
        last[0] = obs
        return 32 * envs.num_envs

    return step


def act_loop(act: Any, obs: Any) -> Loop:
    def step() -> int:
        for _ in range(100):
            act(obs)
        return 100

    return step


def differences(fast: Any, slow: Any, obs: Any) -> dict[str, Any]:
    """Largest |log-prob| and |action| differences of the two acts from the same draws."""
    inner = getattr(slow, "inner", slow)  # a NormalizingActor's actor draws
    inner._rng.bit_generator.state = getattr(fast, "inner", fast)._rng.bit_generator.state
    got, want = fast.act(obs), slow.act(obs)
    if got.actions.dtype.kind == "i":
        same = got.actions == want.actions  # a draw on a CDF edge could round apart
        out: dict[str, Any] = {"max_action_diff": float((~same).sum())}
    else:
        same = np.ones(len(obs), bool)
        out = {"max_action_diff": float(np.abs(got.actions - want.actions).max())}
    if got.log_probs is not None and want.log_probs is not None:
        gap = np.abs(got.log_probs - want.log_probs)[same].max(initial=0.0)
        out["max_log_prob_diff"] = float(gap)
    return out


def acting_pair(preset: Preset) -> tuple[Any, Any, Any]:
    """The bench worker (its envs, first observations, compiled actor) and a numpy twin
    (seeing observations through the same statistics where the preset normalises)."""
    worker = bench_worker(preset, DiscardingWriter())
    worker.start()
    fast = getattr(worker.actor, "inner", worker.actor)
    if isinstance(fast, SACActor):  # compiled only on request (SACActor's docstring)
        uniform, steps = fast.uniform_steps, fast._trainer_env_steps
        fast = SACActor(fast.net, False, 0, uniform, compiled=True)
        fast._trainer_env_steps = steps
    if not getattr(fast, "compiled", False):
        raise ConfigError(
            f"{preset.name} does not act with a compiled MLP policy; pick cartpole-ppo, "
            "lunarlander-ppo, halfcheetah-ppo or halfcheetah-sac."
        )
    if isinstance(fast, PPOActor):
        slow: Any = PPOActor(fast.net, greedy=False, seed=0, compiled=False)
        slow._numpy = fast._numpy  # the same weights, acted in numpy
    elif isinstance(fast, GaussianPPOActor):
        slow = GaussianPPOActor(fast.net, greedy=False, seed=0, compiled=False)
    else:
        assert isinstance(fast, SACActor)
        slow = SACActor(fast.net, False, 0, fast.uniform_steps, compiled=False)
        slow._trainer_env_steps = fast._trainer_env_steps  # past the uniform warm-up too
    if isinstance(worker.actor, NormalizingActor):
        slow = NormalizingActor(slow)
        slow.statistics, slow.version = worker.actor.statistics, worker.actor.version
        return worker, worker.actor, slow
    return worker, fast, slow


def measure(preset: Preset, seconds: float, rounds: int) -> None:
    worker, fast, slow = acting_pair(preset)
    envs, obs = worker.envs, worker.chunker.last_obs
    acts = interleaved({"numpy": act_loop(slow.act, obs), "compiled": act_loop(fast.act, obs)},
                       seconds / 2, rounds)  # fmt: skip
    numpy_us, compiled_us = (1e6 / statistics.median(acts[k]) for k in ("numpy", "compiled"))
    common = {"preset": preset.name, "num_envs": envs.num_envs, "rounds": rounds}
    jsonl.emit("compiled_act", "act_us_compiled", compiled_us, "us", "act_us_numpy", numpy_us,
               **differences(fast, slow, obs), **common)  # fmt: skip
    loops = {"bare_env": bare_env(preset), "env_policy_numpy": policy_loop(envs, obs, slow.act),
             "env_policy_compiled": policy_loop(envs, obs, fast.act)}  # fmt: skip
    rates = interleaved(loops, seconds, rounds)
    ceiling = statistics.median(rates["bare_env"])
    for name in ("env_policy_numpy", "env_policy_compiled"):
        jsonl.emit("compiled_act", f"{name}_steps_per_cpu_s", statistics.median(rates[name]),
                   "env steps/cpu-s", "bare_env", ceiling, digits=0, ratio_digits=3,
                   spread=[round(min(rates[name])), round(max(rates[name]))], **common)  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer, shorter rounds: < 60 s")
    parser.add_argument("--preset", default="cartpole-ppo")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="preset override, e.g. rollout.num_envs=32")  # fmt: skip
    args = parser.parse_args()
    seconds, rounds = (1.0, 2) if args.quick else (4.0, 5)
    torch.set_num_threads(1)
    threadpool_limits(limits=1, user_api="blas")
    measure(load_preset(args.preset, args.set), seconds, rounds)
    return 0


if __name__ == "__main__":
    np.seterr(all="ignore")
    sys.exit(jsonl.run(main))
