"""Learner throughput: transitions/s the trainer turns into updates (PPO, DQN, SAC), against
Stable-Baselines3's ``train()`` on the same batch sizes and against the bare torch cost.

What is timed is the learner the trainer process runs (``Learner.ingest`` + ``learn``), on
experience captured from real rollout workers (CartPole-v1 for PPO and DQN, Pendulum-v1
for SAC), so the batches have the episode cuts, chunk joins and dtypes a run has. Kafka is
not in it (``bench/transport.py`` measures the reader); ``..._from_records`` adds the
Avro decode of every record, the rest of the trainer's per-record work.

* ``ppo_transitions_per_s``: one ``learn`` = one version: 512 transitions (2 workers x 8
  envs x 32 steps), 20 epochs of 256-sample minibatches (40 gradient steps), as
  ``cartpole-ppo`` runs it. SB3: ``PPO.train()`` on a full 512-step rollout buffer with
  the same settings and the same network (64x64 tanh actor and critic).
* ``dqn_transitions_per_s``: env transitions per second the learner can take at the
  preset's 32 samples per insert (gradient steps/s x batch 64 / 32), with a filled replay
  buffer; ``dqn_gradient_steps_per_s`` the same as steps. SB3: ``DQN.train()``, the same
  256x256 ReLU network, batch and (plain-Q vs our double-Q) targets.
* ``sac_gradient_steps_per_s`` (``--algorithms ...,sac``): ``pendulum-sac`` vs SB3's
  ``SAC.train()``, 64x64 ReLU nets, batch 256.

Baselines, both measured in the same run, interleaved round by round: SB3's ``train()``
(the peer: what people would otherwise run) and the **floor**: forward, backward and an
Adam step of the same network on the same minibatches, without any RL loss (the cost
torch itself sets; ``ratio`` = ours / floor says how much of our time is PPO/DQN's own).
Every side gets one torch thread, as our trainer process has (``setup_process``).

``--device cpu,cuda`` (default both): on a machine without a CUDA GPU the cuda figures are
skipped with one line saying so. ``--profile`` prints cProfile's top entries of our side.
``--quick``: fewer rounds (<= 60 s).

Usage: ``python bench/learner.py [--quick] [--algorithms ppo,dqn,sac] [--device cpu,cuda]``.
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
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import jsonl
import torch
from standins import CapturingWriter, FixedPolicy

from coach_stream.algorithms import builder_for
from coach_stream.codec import decode_chunk, encode_chunk
from coach_stream.config import Preset, load_preset
from coach_stream.core import ExperienceChunk, LoadedPolicy, PolicyVersion
from coach_stream.envs import (
    EnvShape,
    SeedRole,
    env_seeds,
    env_shape,
    make_vector_env,
    process_seed,
)
from coach_stream.errors import ConfigError
from coach_stream.events import EventList
from coach_stream.rollout.worker import RolloutWorker

PPO_WORKERS = 2  # the quota of one version: bench/solve.py's launches run 2 workers


def capture(preset: Preset, worker_id: int, min_steps: int) -> list[ExperienceChunk]:
    """Chunks of one real worker acting with an untrained version 0 of the preset's policy."""
    envs = make_vector_env(preset.env_id, preset.rollout.num_envs, preset.env_wrappers)
    shape = env_shape(envs)
    builder = builder_for(preset)
    learner = builder.make_learner(shape, 1, torch.Generator().manual_seed(1))
    version = PolicyVersion("bench", 0, "mem://0", "", 0, 0, 0, 0)
    policy = LoadedPolicy(version, dict(learner.policy_state_dict()))
    actor = builder.make_actor(shape, False, process_seed(preset.seed, worker_id, SeedRole.ROLLOUT))
    settings = replace(builder.make_worker_settings("bench", worker_id), log_every_s=1e9)
    seeds = env_seeds(preset.seed, worker_id, preset.rollout.num_envs, SeedRole.ROLLOUT)
    writer = CapturingWriter()
    worker = RolloutWorker(envs, actor, writer, FixedPolicy(policy), settings, seeds, EventList())
    worker.start()
    steps = 0
    while steps < min_steps:
        steps += worker.act_share()
    envs.close()
    return writer.chunks


# --------------------------------------------------------------------------- timing


def rate(fn: Callable[[], int], seconds: float) -> float:
    """Units per second of ``fn`` (which returns the units it did), run for ``seconds``."""
    fn()  # warm-up: first-call allocations, lazy imports, the optimizer's state
    done, began = 0, time.perf_counter()
    while time.perf_counter() - began < seconds:
        done += fn()
    return done / (time.perf_counter() - began)


def interleaved(
    sides: dict[str, Callable[[], int]], seconds: float, rounds: int
) -> dict[str, float]:
    """Median rate of each side over ``rounds`` rounds, sides alternating (ABC, CBA, ...)."""
    rates: dict[str, list[float]] = {name: [] for name in sides}
    names = list(sides)
    for round_ in range(rounds):
        for name in names if round_ % 2 == 0 else names[::-1]:
            rates[name].append(rate(sides[name], seconds))
    return {name: statistics.median(values) for name, values in rates.items()}


def profiled(fn: Callable[[], int], seconds: float, top: int = 25) -> str:
    profile = cProfile.Profile()
    profile.enable()
    rate(fn, seconds)
    profile.disable()
    out = io.StringIO()
    pstats.Stats(profile, stream=out).sort_stats("tottime").print_stats(top)
    return out.getvalue()


# --------------------------------------------------------------------------- PPO


def ppo_sides(device: torch.device) -> dict[str, Callable[[], int]]:
    preset = load_preset("cartpole-ppo", [f"trainer.device={device.type}"])
    per_worker = preset.rollout.num_envs * preset.ppo_config.num_steps
    chunks = [c for w in range(PPO_WORKERS) for c in capture(preset, w, per_worker)]
    chunks = _one_share(chunks, preset.ppo_config.num_steps)
    records = [encode_chunk(c) for c in chunks]
    builder = builder_for(preset)
    shape = env_shape(make_vector_env(preset.env_id, 1))
    learner = builder.make_learner(shape, PPO_WORKERS, torch.Generator().manual_seed(1))
    quota = builder.steps_per_update(PPO_WORKERS)  # type: ignore[attr-defined]

    def ours() -> int:
        learner.ingest(chunks, 0)
        learner.learn(0)
        return quota

    def ours_from_records() -> int:
        learner.ingest([decode_chunk(r) for r in records], 0)
        learner.learn(0)
        return quota

    sb3 = _sb3_ppo(preset, quota, device)

    def sb3_train() -> int:
        sb3.train()
        return quota

    c = preset.ppo_config
    steps = c.update_epochs * (quota // c.minibatch_size)  # 40 gradient steps per version
    net = learner.net  # type: ignore[attr-defined]
    floor = _floor(net, c.minibatch_size, quota, steps, shape.obs_dim, device, units=quota)
    return {"ours": ours, "ours_from_records": ours_from_records, "sb3": sb3_train,
            "floor": floor}  # fmt: skip


def _one_share(chunks: list[ExperienceChunk], num_steps: int) -> list[ExperienceChunk]:
    """The chunks of every env's first ``num_steps`` steps: one version's quota exactly."""
    kept: list[ExperienceChunk] = []
    steps: dict[tuple[int, int], int] = {}
    for chunk in chunks:
        key = (chunk.worker_id, chunk.env_index)
        if steps.get(key, 0) + chunk.num_steps <= num_steps:
            kept.append(chunk)
            steps[key] = steps.get(key, 0) + chunk.num_steps
    return kept


def _sb3_ppo(preset: Preset, quota: int, device: torch.device) -> Any:
    """SB3 PPO with cartpole-ppo's settings and a full rollout buffer of ``quota`` steps."""
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env

    c = preset.ppo_config
    n_envs = quota // c.num_steps
    model = PPO(
        "MlpPolicy", make_vec_env(preset.env_id, n_envs=n_envs, seed=1),
        n_steps=c.num_steps, batch_size=c.minibatch_size, n_epochs=c.update_epochs,
        gamma=c.gamma, gae_lambda=c.gae_lambda, clip_range=c.clip_coef, ent_coef=c.ent_coef,
        vf_coef=c.vf_coef, max_grad_norm=c.max_grad_norm, learning_rate=c.learning_rate,
        seed=1, verbose=0, device=device.type,
    )  # fmt: skip
    model.learn(total_timesteps=quota)  # one collection (fills the buffer) and one train()
    return model


def _replay_learner(preset: Preset, min_steps: int) -> tuple[list[ExperienceChunk], EnvShape, Any]:
    """One worker's captured chunks, the env's shape and a fresh replay learner (DQN, SAC)
    holding them."""
    chunks = capture(preset, 0, min_steps)
    shape = env_shape(make_vector_env(preset.env_id, 1))
    learner = builder_for(preset).make_learner(shape, 1, torch.Generator().manual_seed(1))
    learner.ingest(chunks, 0)
    return chunks, shape, learner


def _fill_replay_buffer(model: Any, chunks: list[ExperienceChunk]) -> None:
    """SB3's replay buffer gets the same transitions ours holds, one at a time."""
    for chunk in chunks:
        for t in range(chunk.num_steps):
            model.replay_buffer.add(
                chunk.observations[t : t + 1], chunk.observations[t + 1 : t + 2],
                chunk.actions[t : t + 1], chunk.rewards[t : t + 1],
                chunk.terminated[t : t + 1], [{}],
            )  # fmt: skip


# --------------------------------------------------------------------------- DQN


def dqn_sides(device: torch.device) -> dict[str, Callable[[], int]]:
    preset = load_preset("cartpole-dqn", [f"trainer.device={device.type}"])
    c = preset.dqn_config
    chunks, shape, learner = _replay_learner(preset, 20_000)
    steps_per_learn = 32

    def ours() -> int:
        learner.limiter.insert(steps_per_learn * c.batch_size)  # budget for one learn()
        metrics, _ = learner.learn(0)
        return int(metrics["gradient_steps"])

    sb3 = _sb3_dqn(preset, chunks, device)

    def sb3_train() -> int:
        sb3.train(gradient_steps=steps_per_learn, batch_size=c.batch_size)
        return steps_per_learn

    floor = _floor(learner.q_network, c.batch_size, learner.buffer.size, steps_per_learn,
                   shape.obs_dim, device)  # fmt: skip
    return {"ours": ours, "sb3": sb3_train, "floor": floor}


def _sb3_dqn(preset: Preset, chunks: list[ExperienceChunk], device: torch.device) -> Any:
    from stable_baselines3 import DQN
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.logger import configure

    c = preset.dqn_config
    model = DQN(
        "MlpPolicy", make_vec_env(preset.env_id, n_envs=1, seed=1),
        learning_rate=c.learning_rate, batch_size=c.batch_size, buffer_size=c.buffer_size,
        learning_starts=0, gamma=c.gamma, max_grad_norm=c.max_grad_norm,
        policy_kwargs={"net_arch": list(preset.network.hidden_sizes)},
        seed=1, verbose=0, device=device.type,
    )  # fmt: skip
    model.set_logger(configure(None, []))
    _fill_replay_buffer(model, chunks)
    return model


# --------------------------------------------------------------------------- SAC


def sac_sides(device: torch.device, name: str = "pendulum-sac") -> dict[str, Callable[[], int]]:
    preset = load_preset(name, [f"trainer.device={device.type}"])
    c = preset.sac
    chunks, _, learner = _replay_learner(preset, 10_000)

    def ours() -> int:
        learner.limiter.insert(10**6)  # never paced here: the learner's own speed
        metrics, _ = learner.learn(0)
        return int(metrics.get("gradient_steps", 1))

    sb3 = _sb3_sac(preset, chunks, device)
    steps = 32

    def sb3_train() -> int:
        sb3.train(gradient_steps=steps, batch_size=c.batch_size)
        return steps

    return {"ours": ours, "sb3": sb3_train}


def _sb3_sac(preset: Preset, chunks: list[ExperienceChunk], device: torch.device) -> Any:
    from stable_baselines3 import SAC
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.logger import configure

    sac = preset.sac
    model = SAC(
        "MlpPolicy", make_vec_env(preset.env_id, n_envs=1, seed=1),
        learning_rate=sac.policy_lr, buffer_size=sac.buffer_size, batch_size=sac.batch_size,
        learning_starts=0, gamma=sac.gamma, tau=sac.tau, ent_coef="auto",
        policy_kwargs={"net_arch": list(preset.network.hidden_sizes),
                       "activation_fn": torch.nn.ReLU},
        seed=1, verbose=0, device=device.type,
    )  # fmt: skip
    model.set_logger(configure(None, []))
    _fill_replay_buffer(model, chunks)
    return model


# --------------------------------------------------------------------------- the floor


def _floor(
    net: torch.nn.Module,
    batch: int,
    rows: int,
    steps: int,
    obs_dim: int,
    device: torch.device,
    units: int | None = None,
) -> Callable[[], int]:
    """``steps`` minibatches of forward + backward + Adam on a copy of ``net``, loss = the
    sum of its outputs: the network's own cost, no RL terms, no bookkeeping. Returns
    ``units`` per call (default: ``steps``), the unit of the side it is the floor of."""
    import copy

    model = copy.deepcopy(net).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4, fused=True)
    obs = torch.randn(rows, obs_dim, device=device)
    forward = getattr(model, "logits_and_value", None)

    def run() -> int:
        for _ in range(steps):
            mb = obs[torch.randint(0, rows, (batch,), device=device)]
            if forward is not None:
                logits, value = forward(mb)
                loss = logits.sum() + value.sum()
            else:
                loss = model(mb).sum()
            optimizer.zero_grad()
            loss.backward()  # type: ignore[no-untyped-call]
            optimizer.step()
        if device.type == "cuda":
            torch.cuda.synchronize()
        return steps if units is None else units

    return run


# --------------------------------------------------------------------------- main

SIDES = {"ppo": ppo_sides, "dqn": dqn_sides, "sac": sac_sides}
UNITS = {"ppo": "transitions", "dqn": "gradient_steps", "sac": "gradient_steps"}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="Fewer, shorter rounds (<= 60 s).")
    parser.add_argument("--algorithms", default="ppo,dqn", help="Of ppo, dqn, sac.")
    parser.add_argument("--device", default="cpu,cuda", help="cpu, cuda or both.")
    parser.add_argument("--profile", action="store_true", help="cProfile of our side (stderr).")
    parser.add_argument(
        "--sac-preset", default="pendulum-sac", help="The SAC preset (halfcheetah-sac: 256x256)."
    )
    args = parser.parse_args()
    try:
        if load_preset(args.sac_preset).algorithm != "sac":
            parser.error(f"--sac-preset {args.sac_preset} is not a SAC preset")
    except ConfigError as error:
        parser.error(str(error))
    torch.set_num_threads(1)  # as the trainer process (setup_process)
    seconds, rounds = (1.0, 3) if args.quick else (3.0, 5)
    load = round(os.getloadavg()[0], 2)
    for device_name in args.device.split(","):
        if device_name == "cuda" and not torch.cuda.is_available():
            jsonl.emit("learner", "cuda", None, "", None, None,
                       skipped="no CUDA device on this machine (torch.cuda.is_available() "
                       "is False): the cuda figures are not measured")  # fmt: skip
            continue
        device = torch.device(device_name)
        for algorithm in args.algorithms.split(","):
            sides = (
                sac_sides(device, args.sac_preset)
                if algorithm == "sac"
                else SIDES[algorithm](device)
            )
            if args.profile:
                print(f"# {algorithm} {device_name}: ours\n{profiled(sides['ours'], 3.0)}",
                      file=sys.stderr)  # fmt: skip
            rates = interleaved(sides, seconds, rounds)
            _report(algorithm, device_name, rates, load, args.sac_preset)
    return 0


def _report(
    algorithm: str, device: str, rates: dict[str, float], load: float, sac_preset: str
) -> None:
    unit = UNITS[algorithm]
    extra: dict[str, object] = {
        "device": device, "load_1min": load, "threads": torch.get_num_threads()
    }  # fmt: skip
    if algorithm == "sac":  # one gradient step per env step (256 samples per insert, batch 256)
        extra["preset"] = sac_preset
        extra["hours_per_400k_env_steps"] = round(400_000 / rates["ours"] / 3600, 2)
    if algorithm == "dqn":  # steps -> the env transitions they consume at 32 samples/insert
        per_step = load_preset("cartpole-dqn").dqn_config.batch_size / 32.0
        jsonl.emit("learner", "dqn_gradient_steps_per_s", rates["ours"], "gradient_steps/s",
                   "sb3_dqn_train", rates["sb3"], **extra)  # fmt: skip
        jsonl.emit("learner", "dqn_gradient_steps_per_s", rates["ours"], "gradient_steps/s",
                   "torch_forward_backward_adam_floor", rates["floor"], **extra)  # fmt: skip
        jsonl.emit("learner", "dqn_transitions_per_s", rates["ours"] * per_step,
                   "transitions/s", "sb3_dqn_train", rates["sb3"] * per_step,
                   samples_per_insert=32, **extra)  # fmt: skip
        return
    metric = f"{algorithm}_{unit}_per_s"
    jsonl.emit("learner", metric, rates["ours"], f"{unit}/s", f"sb3_{algorithm}_train",
               rates["sb3"], **extra)  # fmt: skip
    if "floor" in rates:
        jsonl.emit("learner", metric, rates["ours"], f"{unit}/s",
                   "torch_forward_backward_adam_floor", rates["floor"], **extra)  # fmt: skip
    if "ours_from_records" in rates:
        jsonl.emit("learner", f"{metric}_from_records", rates["ours_from_records"], f"{unit}/s",
                   f"sb3_{algorithm}_train", rates["sb3"], **extra)  # fmt: skip


if __name__ == "__main__":
    sys.exit(jsonl.run(main))
