"""Rollout per core: a worker's env steps per CPU-second against the bare env's.

One process, one preset's vector env (its ``num_envs``, env and wrappers), four loops timed
in turn, each for ``--seconds`` per round (1 CPU-second, 25 rounds; ``--quick`` 0.5 and 8),
the order alternating between rounds (ABCD, DCBA, ...), the median of the rounds kept.
Rates are env steps per CPU-second of this process (``time.process_time``: every thread,
librdkafka's included), so a busy machine slows the wall clock but not the figure much,
and each loop is charged what it really costs:

* ``bare_env``: the vector env stepped with a fixed random policy (pre-drawn actions): no
  policy, no chunker, no codec, no Kafka. The ceiling;
* ``env_policy``: the same steps with the preset's torch policy choosing the actions;
* ``worker_no_kafka``: the rollout worker's own loop (``RolloutWorker.act_share``: policy,
  env and chunker) handing its chunks to a writer that neither encodes nor sends them;
* ``worker``: the same loop encoding and producing to a real experience topic through the
  worker's ``KafkaExperienceWriter`` (the stack's broker), as a rollout task does; its
  chunker writes each finished chunk's record straight from its columns (``codec.compiled``);
* ``worker_encode_after`` (``--encode-after``): the same, its chunker handing over chunks
  that are then encoded one by one (``encode_chunk``): the path before 2026-12-07 evening,
  and the one taken where numba does not load;
* ``worker_critic_pass`` (``--critic-pass``): the worker whose act also runs its network's
  critic on the act's observations, as every act did before 2026-12-07 night (the values
  went on the wire; no learner read them). The critic runs in a compiled call of its own
  after the act's (the old act ran both MLPs in one call, so this line pays one call
  more); MLP actor-critic presets only;
* ``worker_draw_per_act`` (``--draw-per-act``): the worker whose Gaussian PPO actor asks
  its generator for each act's normal draws, as before 2026-12-07 late (``policies.draws``:
  now in blocks);
* ``worker_chunk_per_env`` (``--chunk-per-env``): the worker whose chunker keeps one chunk
  per env and writes each finished chunk's record at once, as before 2026-12-07 late (now,
  where rows are small, finished chunks wait and are written together at the share's end);
* ``worker_write_per_step`` (``--write-per-step``): the worker whose chunker writes each
  step's rows into its columns as the step comes, as before 2026-12-08 (now, where rows
  are small, it keeps the steps' arrays and writes up to 128 steps in one compiled call);
* ``worker_numpy_sac`` (``--numpy-sac``): the SAC worker whose actor samples in numpy, as
  before 2026-12-08 (now in one compiled call, ``squashed_gaussian_act``; the lines of
  2026-12-08 named the other way round, ``worker_compiled_sac``, were measured before).

``--set rollout.num_envs=32`` (any preset override) measures a wider vector env: one
forward pass then serves more env steps.

One JSON line per loop (baseline: ``bare_env``; ratio = the share of the ceiling kept, of
the medians; ``paired_ratio``: the median of each round's rate over the bare env's in that
round; ``worker_over_this`` on ``worker_encode_after``: the median of the rounds' worker
over it; likewise on the other variants) and
``--profile`` prints the worker loop's top functions by own time (cProfile).

Usage (stack up for ``worker``): ``KAFKA_BOOTSTRAP_SERVERS=host:port python bench/rollout.py
[--quick] [--preset cartpole-ppo] [--seconds S] [--rounds R] [--profile] [--encode-after]
[--critic-pass] [--draw-per-act] [--chunk-per-env] [--write-per-step] [--numpy-sac]``.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from typing import Any

import gymnasium
import jsonl
import numpy as np
import torch
from standins import DiscardingWriter, bench_worker
from threadpoolctl import threadpool_limits

from coach_stream.config import Preset, load_preset
from coach_stream.envs import make_vector_env
from coach_stream.errors import ConfigError
from coach_stream.policies.actors import _rows_of, compiled_kernels
from coach_stream.policies.numpy_mlp import NumpyMLP
from coach_stream.rollout import chunker as chunker_module
from coach_stream.transport.admin import delete_run_topics, ensure_run_topics
from coach_stream.transport.settings import KafkaSettings, RunTopics
from coach_stream.transport.writer import KafkaExperienceWriter

Loop = Callable[[], int]  # one call: some env steps; returns how many

BEFORE = {
    "critic_pass": "the worker whose act runs the critic too (before 2026-12-07 night)",
    "draw_per_act": "the worker whose actor asks its generator at every act (before "
    "2026-12-07 late)",
    "chunk_per_env": "the worker whose chunker writes each finished chunk at once (before "
    "2026-12-07 late)",
    "write_per_step": "the worker whose chunker writes each step's rows as it comes "
    "(before 2026-12-08)",
    "numpy_sac": "the SAC worker whose actor samples in numpy (before 2026-12-08)",
}
"""The workers as they were before a change (``worker(..., variant=name)``), each timed
beside today's by its flag (``--critic-pass`` ...)."""


def cpu_rate(loop: Loop, seconds: float) -> float:
    """Env steps per CPU-second of ``loop`` run for ``seconds`` of CPU time (warmed first)."""
    loop()
    done, began = 0, time.process_time()
    while time.process_time() - began < seconds:
        done += loop()
    return done / (time.process_time() - began)


def bare_env(preset: Preset) -> Loop:
    envs = make_vector_env(preset.env_id, preset.rollout.num_envs, preset.env_wrappers)
    envs.reset(seed=0)
    space = envs.action_space
    space.seed(0)
    actions = [space.sample() for _ in range(64)]  # drawn before timing: a fixed policy
    counter = iter(range(1 << 62))

    def step() -> int:
        envs.step(actions[next(counter) % 64])
        return envs.num_envs

    return step


def add_critic_pass(actor: Any) -> None:
    """Make an MLP actor-critic's actor also run its critic on every act's observations
    (after its ``NormalizingActor``'s standardising, where the preset normalises)."""
    inner = getattr(actor, "inner", actor)
    kernels = compiled_kernels()
    if getattr(inner.net, "encoder", None) is not None:
        raise ConfigError("--critic-pass runs an MLP critic; this preset's network is a CNN.")
    if kernels is None:
        raise ConfigError("--critic-pass runs the critic compiled, and numba did not load.")
    critic = NumpyMLP(inner.net.critic)
    layers = tuple(critic.layers)
    activation = kernels.TANH if critic.tanh else kernels.RELU
    real_act = inner.act

    def act(obs: Any) -> Any:
        action = real_act(obs)
        kernels._mlp(_rows_of(obs, len(obs)), layers, activation)
        return action

    inner.act = act


class OneCallPerAct:
    """A Gaussian actor's normal draws asked of its generator at every act (before
    ``policies.draws``)."""

    def __init__(self, draws: Any) -> None:
        self.rng, self.width = draws._rng, draws._width

    def take(self, n: int) -> Any:
        return self.rng.standard_normal((n, self.width), dtype=np.float32)


def continuous(preset: Preset) -> bool:
    probe = make_vector_env(preset.env_id, 1, preset.env_wrappers)
    try:
        return isinstance(probe.single_action_space, gymnasium.spaces.Box)
    finally:
        probe.close()


def draw_per_act(actor: Any) -> None:
    inner = getattr(actor, "inner", actor)
    if not hasattr(inner, "_noise"):
        raise ConfigError("--draw-per-act times a Gaussian PPO actor's draws; this preset's "
                          "actor asks its generator at every act already.")  # fmt: skip
    inner._noise = OneCallPerAct(inner._noise)


def worker(
    preset: Preset, writer: object, with_env_only: bool = False, encode_after: bool = False,
    variant: str | None = None,
) -> Loop:  # fmt: skip
    """``RolloutWorker.act_share`` (or, ``with_env_only``, only its policy + env steps;
    ``encode_after``: chunks emitted, then encoded, as without numba; ``variant``: one of
    the workers before a change, ``critic_pass``, ``draw_per_act``, ``chunk_per_env`` or
    ``write_per_step``; or ``numpy_sac``, SAC's numpy act)."""
    spans, kept = chunker_module._MAX_SPANS, chunker_module._KEPT_STEPS
    if variant == "chunk_per_env":
        chunker_module._MAX_SPANS = 1
    if variant == "write_per_step":
        chunker_module._KEPT_STEPS = 0
    try:
        loop = bench_worker(preset, writer)
    finally:
        chunker_module._MAX_SPANS, chunker_module._KEPT_STEPS = spans, kept
    envs, actor, settings = loop.envs, loop.actor, loop.settings
    if encode_after:
        loop.chunker._records = None  # the chunker's fallback when numba does not load
    if variant == "critic_pass":
        add_critic_pass(actor)
    elif variant == "draw_per_act":
        draw_per_act(actor)
    elif variant == "numpy_sac":
        getattr(actor, "inner", actor)._kernels = None
    loop.start()
    if not with_env_only:
        return loop.act_share

    last = [loop.chunker.last_obs]

    def policy_and_env() -> int:
        obs = last[0]
        for _ in range(settings.share_steps):
            obs, *_ = envs.step(actor.act(obs).actions)
        last[0] = obs
        return settings.share_steps * envs.num_envs

    return policy_and_env


def interleaved(loops: dict[str, Loop], seconds: float, rounds: int) -> dict[str, list[float]]:
    rates: dict[str, list[float]] = {name: [] for name in loops}
    names = list(loops)
    for round_ in range(rounds):
        for name in names if round_ % 2 == 0 else names[::-1]:
            rates[name].append(cpu_rate(loops[name], seconds))
    return rates


def profile(loop: Loop, seconds: float, top: int = 20) -> str:
    profiler = cProfile.Profile()
    profiler.enable()
    cpu_rate(loop, seconds)
    profiler.disable()
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(top)
    return out.getvalue()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer, shorter rounds: < 60 s")
    parser.add_argument("--preset", default="cartpole-ppo")
    parser.add_argument("--seconds", type=float, default=None, help="CPU-seconds per loop")
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument(
        "--encode-after", action="store_true",
        help="also time the worker whose chunks are encoded after the chunker emits them",
    )  # fmt: skip
    for name, worker_before in BEFORE.items():
        flag = "--" + name.replace("_", "-")
        parser.add_argument(flag, action="store_true", help=f"also time {worker_before}")
    parser.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE",
        help="preset override, e.g. rollout.num_envs=32 (the policy's cost per env step "
        "falls as one forward pass serves more envs)",
    )  # fmt: skip
    args = parser.parse_args()
    # Short slices, many rounds: these machines' speed moves by a quarter within seconds (a
    # fixed Python loop took 82-139 ms in one run), and a round's loops are paired in time
    seconds = args.seconds or (0.5 if args.quick else 1.0)
    rounds = args.rounds or (8 if args.quick else 25)
    torch.set_num_threads(1)  # as a rollout task runs (one core per worker) ...
    threadpool_limits(limits=1, user_api="blas")  # ... and one BLAS thread (setup_process)
    preset = load_preset(args.preset, args.set)
    variants = [name for name in BEFORE if getattr(args, name)]
    if args.critic_pass and preset.algorithm not in ("ppo", "impala"):
        raise ConfigError(f"--critic-pass times an actor-critic's critic; {args.preset} is "
                          f"{preset.algorithm}: use a PPO or IMPALA preset.")  # fmt: skip
    if args.draw_per_act and (preset.algorithm != "ppo" or not continuous(preset)):
        raise ConfigError("--draw-per-act times a Gaussian PPO actor's draws; use "
                          "halfcheetah-ppo or pendulum-ppo.")  # fmt: skip
    if args.numpy_sac and preset.algorithm != "sac":
        raise ConfigError(f"--numpy-sac times SAC's numpy act; {args.preset} is "
                          f"{preset.algorithm}: use halfcheetah-sac or pendulum-sac.")  # fmt: skip
    servers = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    loops = {
        "bare_env": bare_env(preset),
        "env_policy": worker(preset, DiscardingWriter(), with_env_only=True),
        "worker_no_kafka": worker(preset, DiscardingWriter()),
    }
    settings = KafkaSettings(bootstrap_servers=servers) if servers else None
    topics = RunTopics.for_run(f"bench-rollout-{uuid.uuid4().hex[:8]}")
    writer = None
    if settings is not None:
        ensure_run_topics(settings, topics, 4)
        writer = KafkaExperienceWriter(settings, topics.experience)
        loops["worker"] = worker(preset, writer)
        if args.encode_after:
            loops["worker_encode_after"] = worker(preset, writer, encode_after=True)
        for name in variants:
            loops[f"worker_{name}"] = worker(preset, writer, variant=name)
    try:
        rates = interleaved(loops, seconds, rounds)
        if args.profile:
            print(profile(loops.get("worker", loops["worker_no_kafka"]), seconds), file=sys.stderr)
    finally:
        if writer is not None and settings is not None:
            writer.flush(30.0)
            writer.close()
            delete_run_topics(settings, topics)
    ceiling = statistics.median(rates["bare_env"])
    for name, values in rates.items():
        # each round's rate over the bare env's in the same round: steadier than the ratio
        # of the medians when the machine's speed drifts between rounds
        paired = [v / b for v, b in zip(values, rates["bare_env"], strict=True)]
        extra = {}
        if name not in ("bare_env", "env_policy", "worker_no_kafka", "worker"):
            extra["worker_over_this"] = round(statistics.median(
                [w / v for w, v in zip(rates["worker"], values, strict=True)]), 3)  # fmt: skip
        jsonl.emit(
            "rollout", f"{name}_steps_per_cpu_s", statistics.median(values), "env steps/cpu-s",
            "bare_env", ceiling, digits=0, ratio_digits=3, preset=args.preset,
            num_envs=preset.rollout.num_envs, rounds=rounds, overrides=args.set,
            spread=[round(min(values)), round(max(values))],
            paired_ratio=round(statistics.median(paired), 3), **extra,
        )  # fmt: skip
    if settings is None:
        why = "set KAFKA_BOOTSTRAP_SERVERS (eval $(coach-stream stack env))"
        wanted = ["worker"] + ["worker_encode_after"] * args.encode_after
        for name in wanted + [f"worker_{name}" for name in variants]:
            jsonl.emit("rollout", f"{name}_steps_per_cpu_s", None, "env steps/cpu-s",
                       "bare_env", ceiling, skipped=why)  # fmt: skip
    return 0


if __name__ == "__main__":
    np.seterr(all="ignore")
    sys.exit(jsonl.run(main))
