"""Time to solve CartPole-v1 (PPO, DQN), Pendulum-v1 (SAC), LunarLander-v3 and Acrobot-v1
(PPO): our distributed launches vs Stable-Baselines3, and the cost of producing experience
in a rollout worker.

Figures (one JSON line each, baseline measured in the same run, on the same machine):

* ``cartpole_{ppo,dqn}_wall_s_to_475``: seconds from launch (topics created, trainer, 2
  rollout workers and the evaluator started as processes) to the trainer's ``finished``
  line with reason ``target_reached``, vs SB3 PPO/DQN with rl-zoo hyperparameters in
  one process, its clock started at model construction. Our launches fork their
  supervisor from the warm zygote, as ``coach-stream launch`` does; it is started before
  any clock (``zygote_ready_s``), as SB3's imports are (``--no-zygote``: spawn it). SB3
  runs with every core (torch's default; baseline ``sb3_<algo>_rlzoo_1proc``) and with
  one torch thread (``..._1thread``), each its own line (``--sb3-threads``): on a busy
  2-core machine its two threads wait for each other and take many times longer;
* ``cartpole_{ppo,dqn}_env_steps_to_475``: env steps consumed by then;
* ``pendulum_sac_{wall_s,env_steps}_to_-200`` (``--algorithms sac``): the same for the
  ``pendulum-sac`` preset (ASYNC) vs SB3 SAC with rl-zoo's Pendulum-v1 settings, matched to
  the preset where they correspond (64x64 ReLU nets, buffer 100k, learning_starts 1000);
* ``lunarlander_ppo_..._to_200`` and ``acrobot_ppo_..._to_-100`` (``--env lunarlander,acrobot``,
  minutes each): the ``lunarlander-ppo`` / ``acrobot-ppo`` presets vs SB3 PPO with rl-zoo's
  settings for the env (16 envs; LunarLander n_steps 1024, batch 64; Acrobot n_steps 256
  behind VecNormalize, which the greedy evaluation applies too);
* ``rollout_env_steps_per_s_producing``: a rollout worker's acting loop with the Kafka
  writer vs the same loop with a writer that discards (ratio = producing / discarding;
  the target is >= 0.9, i.e. producing costs <= 10 %); ``..._per_cpu_s_...`` is the same
  per CPU second of the process (producer threads included), which other processes on a
  shared machine cannot distort.

Solved means the same for both sides: mean return >= the preset's ``target_return`` (475
on CartPole, -200 on Pendulum, 200 on LunarLander, -100 on Acrobot) over 20 greedy
episodes. SB3 is evaluated every ``--eval-every`` env steps (default: every time its
policy changes, i.e. after each PPO rollout or DQN training round and every 256 steps
for SAC, as our evaluator checks every new version)
with 20 deterministic episodes, and the time spent evaluating is taken off its clock
(our evaluator runs as its own process, so its cost is inside our figure: a favour to
the baseline). An unsolved run within the
preset's budget prints ``null``.

Usage (stack up): ``KAFKA_BOOTSTRAP_SERVERS=host:port python bench/solve.py [--quick]``.
``--quick`` (< 60 s) measures only the rollout overhead, as a smoke figure.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonl
import torch
from sb3_solve import learn_until_solved
from standins import DiscardingWriter, bench_worker

from coach_stream.config import Preset, load_preset
from coach_stream.orchestrators import (
    LaunchSettings,
    LocalOrchestrator,
    SupervisorConfig,
    build_run_spec,
    warm_supervisor,
    warm_zygote,
)
from coach_stream.orchestrators.launcher import follow, prepare_topics
from coach_stream.orchestrators.zygote_client import ZygoteClient
from coach_stream.transport.admin import ensure_run_topics
from coach_stream.transport.settings import KafkaSettings, RunTopics
from coach_stream.transport.writer import KafkaExperienceWriter

SOLVES = {
    "cartpole": {"ppo": "cartpole-ppo", "dqn": "cartpole-dqn"},
    "pendulum": {"sac": "pendulum-sac"},
    "lunarlander": {"ppo": "lunarlander-ppo"},
    "acrobot": {"ppo": "acrobot-ppo"},
}
"""``--env`` x ``--algorithms`` -> the preset each launches; its env, target and budget hold
for SB3 too. CartPole and Pendulum are seconds; LunarLander and Acrobot minutes."""
ALGORITHMS = sorted({a for by_algorithm in SOLVES.values() for a in by_algorithm})


def selected_presets(envs: list[str], algorithms: list[str]) -> list[str]:
    """The presets ``--env`` x ``--algorithms`` names, or a ValueError naming the fix."""
    if unknown := [e for e in envs if e not in SOLVES]:
        raise ValueError(f"unknown env(s) {unknown}: choose from {', '.join(SOLVES)}")
    if unknown := [a for a in algorithms if a not in ALGORITHMS]:
        raise ValueError(f"unknown algorithm(s) {unknown}: choose from {', '.join(ALGORITHMS)}")
    presets = [SOLVES[e][a] for e in envs for a in algorithms if a in SOLVES[e]]
    if not presets:
        offered = ", ".join(f"{e}: {'/'.join(SOLVES[e])}" for e in envs)
        raise ValueError(f"no preset for {algorithms} on {envs} ({offered})")
    return presets


def emit(
    metric: str, value: float | None, unit: str, baseline: str, base: float | None, **extra: Any
) -> None:
    jsonl.emit("solve", metric, value, unit, baseline or None, base, ratio_digits=3, **extra)


# --------------------------------------------------------------------------- ours


def solve_ours(
    preset_name: str,
    kafka: str,
    workers: int,
    state: Path,
    seed: int = 1,
    zygote: ZygoteClient | None = None,
) -> tuple[float | None, int | None]:
    """Launch a real run and follow it; (wall seconds, env steps) to target, or Nones."""
    run_id = f"bench-{preset_name}-{uuid.uuid4().hex[:8]}"
    config = warm_supervisor(SupervisorConfig(linger_s=5.0))
    orchestrator = LocalOrchestrator(state, config=config, zygote=zygote)
    started_epoch = time.time()
    settings = LaunchSettings(
        preset=preset_name, run_id=run_id, workers=workers, kafka_bootstrap=kafka,
        checkpoints=(state / "checkpoints").as_uri(), seed=seed,
    )  # fmt: skip
    prepare_topics(settings)
    orchestrator.submit(build_run_spec(settings))
    outcome = follow(orchestrator, run_id, timeout_s=3600.0)
    finished = outcome.finished
    if not outcome.solved or finished is None:
        print(f"# {run_id}: not solved ({outcome.reason or outcome.state})", file=sys.stderr)
        return None, None
    return float(finished["time"]) - started_epoch, int(finished["env_steps"])


# --------------------------------------------------------------------------- SB3


def _linear(start: float) -> Callable[[float], float]:
    return lambda progress_remaining: progress_remaining * start


def sb3_model(algorithm: str, seed: int, preset: Preset) -> Any:
    """SB3 with rl-zoo's hyperparameters for the preset's env (rl-baselines3-zoo
    hyperparams/*.yml); SAC's are matched to the preset where rl-zoo leaves SB3's defaults."""
    from stable_baselines3 import DQN, PPO, SAC
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import VecNormalize

    if algorithm == "sac":  # rl-zoo Pendulum-v1: lr 1e-3, the rest SB3's defaults
        sac = preset.sac
        if sac.policy_lr != sac.q_lr:
            raise ValueError(f"{preset.name}: SB3 SAC has one learning rate; set policy_lr "
                             "and q_lr alike to compare it.")  # fmt: skip
        return SAC(
            "MlpPolicy", make_vec_env(preset.env_id, n_envs=1, seed=seed),
            learning_rate=sac.policy_lr, buffer_size=sac.buffer_size,
            batch_size=sac.batch_size, learning_starts=sac.learning_starts, gamma=sac.gamma,
            tau=sac.tau, train_freq=1, gradient_steps=1, ent_coef="auto",
            policy_kwargs={"net_arch": list(preset.network.hidden_sizes),
                           "activation_fn": torch.nn.ReLU},
            seed=seed, verbose=0, device="cpu",
        )  # fmt: skip
    if preset.env_id.startswith("LunarLander"):  # rl-zoo LunarLander-v2 PPO, 1e6 steps
        return PPO(
            "MlpPolicy", make_vec_env(preset.env_id, n_envs=16, seed=seed),
            n_steps=1024, batch_size=64, gae_lambda=0.98, gamma=0.999, n_epochs=4,
            ent_coef=0.01, seed=seed, verbose=0, device="cpu",
        )  # fmt: skip
    if preset.env_id.startswith("Acrobot"):  # rl-zoo Acrobot-v1 PPO, 1e6 steps
        return PPO(
            "MlpPolicy", VecNormalize(make_vec_env(preset.env_id, n_envs=16, seed=seed)),
            n_steps=256, gae_lambda=0.94, gamma=0.99, n_epochs=4, ent_coef=0.0,
            seed=seed, verbose=0, device="cpu",
        )  # fmt: skip
    if algorithm == "ppo":  # rl-zoo CartPole-v1 PPO
        return PPO(
            "MlpPolicy", make_vec_env("CartPole-v1", n_envs=8, seed=seed),
            n_steps=32, batch_size=256, gae_lambda=0.8, gamma=0.98, n_epochs=20,
            ent_coef=0.0, learning_rate=_linear(1e-3), clip_range=_linear(0.2),
            seed=seed, verbose=0, device="cpu",
        )  # fmt: skip
    return DQN(
        "MlpPolicy", make_vec_env("CartPole-v1", n_envs=1, seed=seed),
        learning_rate=2.3e-3, batch_size=64, buffer_size=100_000, learning_starts=1000,
        gamma=0.99, target_update_interval=10, train_freq=256, gradient_steps=128,
        exploration_fraction=0.16, exploration_final_eps=0.04,
        policy_kwargs={"net_arch": [256, 256]}, seed=seed, verbose=0, device="cpu",
    )  # fmt: skip


def policy_changes_every(model: Any) -> int:
    """Env steps between two changes of SB3's policy: PPO's rollout, DQN's train_freq, 1."""
    if hasattr(model, "n_steps"):  # PPO: one update per rollout of n_steps in each env
        return int(model.n_steps * model.n_envs)
    frequency = getattr(model, "train_freq", None)
    return int(frequency.frequency) if frequency is not None else 1


def solve_sb3(
    algorithm: str, preset: Preset, eval_every: int | None, seed: int = 1
) -> tuple[float | None, int | None]:
    """SB3's (wall seconds, env steps) to the preset's target; it is evaluated every
    ``eval_every`` env steps, by default each time its policy changes (at least 256 apart,
    as SAC's changes every step), as our evaluator checks every new version."""
    budget = preset.env_step_budget
    model = sb3_model(algorithm, seed, preset)
    every = eval_every or max(256, policy_changes_every(model))
    wall, steps = learn_until_solved(model, budget, every, preset.target_return, preset.env_id)
    if wall is None:
        print(f"# sb3 {preset.name}: not solved in {budget} steps", file=sys.stderr)
    return wall, steps


# --------------------------------------------------------------------------- rollout overhead


def rollout_rate(preset: Preset, writer: Any, seconds: float) -> tuple[float, float]:
    """Env steps per wall second and per CPU second (all threads) of a worker's acting loop.

    CPU time counts the producer's background threads too, and it is what a busy, shared
    machine cannot distort by descheduling us; on a dedicated core the two agree.
    """
    worker = bench_worker(preset, writer)
    worker.start()
    worker.act_share()  # warm-up
    steps, began, cpu_began = 0, time.perf_counter(), time.process_time()
    while time.perf_counter() - began < seconds:
        steps += worker.act_share()
    writer.flush(30.0)  # producing is not done until the broker has it
    wall, cpu = time.perf_counter() - began, time.process_time() - cpu_began
    worker.envs.close()
    return steps / wall, steps / cpu


def rollout_overhead(kafka: str, seconds: float, rounds: int) -> dict[str, tuple[float, float]]:
    """Median steps/s (wall and CPU) producing and discarding, over interleaved rounds."""
    preset = load_preset("cartpole-ppo")  # SYNC: the heavier chunks (behaviour columns)
    settings = KafkaSettings(bootstrap_servers=kafka)
    topics = RunTopics.for_run(f"bench-rollout-{uuid.uuid4().hex[:8]}")
    ensure_run_topics(settings, topics, experience_partitions=1)
    producing: list[tuple[float, float]] = []
    discarding: list[tuple[float, float]] = []
    with KafkaExperienceWriter(settings, topics.experience) as writer:
        for round_ in range(rounds):  # interleaved, so drift in machine load hits both alike
            first_discarding = round_ % 2 == 0  # and in ABBA order, so neither is always first
            for discard in (first_discarding, not first_discarding):
                if discard:
                    discarding.append(rollout_rate(preset, DiscardingWriter(), seconds))
                else:
                    producing.append(rollout_rate(preset, writer, seconds))
    return {
        kind: (
            statistics.median(p[i] for p in producing),
            statistics.median(d[i] for d in discarding),
        )
        for i, kind in enumerate(("wall", "cpu"))
    }


# --------------------------------------------------------------------------- main


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="Only the rollout overhead (< 60 s).")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument(
        "--eval-every",
        type=int,
        default=None,
        help="SB3 eval period in env steps (default: each time its policy changes).",
    )
    parser.add_argument(
        "--algorithms", default="ppo,dqn", help=f"Comma-separated, of {', '.join(ALGORITHMS)}."
    )
    parser.add_argument(
        "--env", default="cartpole,pendulum", help=f"Comma-separated, of {', '.join(SOLVES)}; "
        "each with the --algorithms it has a preset for (lunarlander, acrobot: minutes)."
    )  # fmt: skip
    parser.add_argument("--repeats", type=int, default=3, help="Runs per side (median).")
    parser.add_argument(
        "--sb3-threads", default="all,1", help="SB3's torch threads, one baseline each: all "
        "(torch's default, every core) and/or 1 (fastest for its small nets on a busy machine)."
    )  # fmt: skip
    parser.add_argument(
        "--no-zygote", action="store_true", help="Spawn each launch's supervisor (imports "
        "and all) instead of forking it from the warm zygote `coach-stream launch` uses."
    )  # fmt: skip
    args = parser.parse_args()
    try:
        presets = selected_presets(args.env.split(","), args.algorithms.split(","))
    except ValueError as error:
        parser.error(str(error))
    kafka = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    if not kafka:
        sys.exit("KAFKA_BOOTSTRAP_SERVERS is not set: start the stack (coach-stream stack up) "
                 "and eval \"$(coach-stream stack env)\".")  # fmt: skip
    torch.set_num_threads(1)  # as in a worker process

    seconds, rounds = (2.0, 4) if args.quick else (4.0, 8)
    rates = rollout_overhead(kafka, seconds, rounds)
    baseline = "same_loop_discarding_writer"
    emit("rollout_env_steps_per_s_producing", *rates["wall"][:1], "env_steps/s", baseline,
         rates["wall"][1])  # fmt: skip
    emit("rollout_env_steps_per_cpu_s_producing", rates["cpu"][0], "env_steps/cpu_s", baseline,
         rates["cpu"][1])  # fmt: skip
    if args.quick:
        return 0

    zygote = None if args.no_zygote else warm_zygote()
    if zygote is not None:
        # Started before any clock, as SB3's imports are done before its clock starts (and
        # as a user's previous launch leaves it): the launches fork from it warm.
        began = time.monotonic()
        zygote.ensure(os.environ)
        emit("zygote_ready_s", time.monotonic() - began, "s", "", None)
    threads = {"all": os.cpu_count() or 1, "1": 1}
    sb3_threads = args.sb3_threads.split(",")
    with tempfile.TemporaryDirectory(prefix="bench-solve-") as tmp:
        for preset_name in presets:
            preset = load_preset(preset_name)
            algorithm = preset.algorithm
            ours: list[tuple[float | None, int | None]] = []
            sb3: dict[str, list[tuple[float | None, int | None]]] = {t: [] for t in sb3_threads}
            for repeat in range(args.repeats):  # alternate, so load drift hits both alike
                ours.append(
                    solve_ours(preset.name, kafka, args.workers, Path(tmp), 1 + repeat, zygote)
                )
                for name in sb3_threads:
                    torch.set_num_threads(threads[name])
                    sb3[name].append(solve_sb3(algorithm, preset, args.eval_every, 1 + repeat))
                torch.set_num_threads(1)
                print(f"# {preset.name} repeat {repeat}: ours {ours[-1]} sb3 "
                      f"{ {t: runs[-1] for t, runs in sb3.items()} } load "
                      f"{os.getloadavg()[0]:.2f}", file=sys.stderr)  # fmt: skip
            env = preset.env_id.split("-")[0].lower()  # "cartpole", "lunarlander", ...
            to = f"to_{preset.target_return:g}"  # "to_475", "to_-200"
            for name, runs in sb3.items():
                baseline = f"sb3_{algorithm}_rlzoo_1proc" + ("" if name == "all" else "_1thread")
                load = round(os.getloadavg()[0], 2)
                emit(f"{env}_{algorithm}_wall_s_{to}", _median(ours, 0), "s", baseline,
                     _median(runs, 0), runs=[_r(r[0]) for r in ours],
                     baseline_runs=[_r(r[0]) for r in runs], load_1min=load)  # fmt: skip
                emit(f"{env}_{algorithm}_env_steps_{to}", _median(ours, 1), "env_steps",
                     baseline, _median(runs, 1))  # fmt: skip
    return 0


def _r(value: float | int | None) -> float | None:
    return None if value is None else round(float(value), 2)


def _median(runs: list[tuple[float | None, int | None]], index: int) -> float | None:
    """Median over the runs (an unsolved run counts as worse than any solved one)."""
    values = sorted((float("inf") if r[index] is None else float(r[index] or 0)) for r in runs)
    middle = values[(len(values) - 1) // 2]
    return None if middle == float("inf") else middle


if __name__ == "__main__":
    sys.exit(jsonl.run(main))
