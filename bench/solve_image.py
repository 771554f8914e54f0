"""Time to solve the small image task: our ``minigrid-ppo`` launch vs Stable-Baselines3 PPO.

Figures (one JSON line each, baseline measured in the same run, on the same machine):

* ``minigrid_ppo_wall_s_to_0.9``: seconds from launch (topics created, trainer, 2 rollout
  workers and the evaluator started as processes; ``bench/solve.py``'s ``solve_ours``) to
  the trainer's ``finished`` line with reason ``target_reached``, vs SB3 PPO in one process
  (every core), its clock started at model construction, evaluation time taken off;
* ``minigrid_ppo_env_steps_to_0.9``: env steps consumed by then;
* ``--quick`` only: ``minigrid_ppo_train_env_steps_per_s``: env steps per second over a
  fixed 16,384-step run (no evaluation, nothing to solve), launch to ``finished`` vs SB3.

Both sides learn MiniGrid-Empty-Random-5x5-v0 from the 7x7x3 uint8 view (ImgObsWrapper)
with the same network (rl-starter-files' small CNN shared by 64-unit tanh heads, SB3's
``CnnPolicy`` with that features extractor; SB3 scales by 1/255 and permutes to
channel-first as our encoder does) and the preset's hyperparameters; SB3 gets 16 envs, the
steps per update of our 2 workers x 8 envs. Solved means the same for both: mean return
>= 0.9 over 20 greedy episodes; SB3 is evaluated after every update (2,048 steps), as our
evaluator checks every new version.

Usage (stack up): ``KAFKA_BOOTSTRAP_SERVERS=host:port python bench/solve_image.py
[--quick]``; ``--quick`` (< 60 s) measures the fixed-length throughput only.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sb3_solve import learn_until_solved
from solve import _median, emit, solve_ours

from coach_stream.config import load_preset
from coach_stream.orchestrators import (
    LaunchSettings,
    LocalOrchestrator,
    SupervisorConfig,
    build_run_spec,
    warm_supervisor,
)
from coach_stream.orchestrators.launcher import follow, prepare_topics

PRESET = "minigrid-ppo"
QUICK_STEPS = 16_384


def sb3_model(seed: int) -> Any:
    from minigrid.wrappers import ImgObsWrapper
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.torch_layers import BaseFeaturesExtractor
    from torch import nn

    class SmallCNN(BaseFeaturesExtractor):  # rl-starter-files' torso, as policies.cnn's
        def __init__(self, space: Any) -> None:
            super().__init__(space, 64)
            self.net = nn.Sequential(
                nn.Conv2d(3, 16, 2), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(16, 32, 2),
                nn.ReLU(), nn.Conv2d(32, 64, 2), nn.ReLU(), nn.Flatten(),
            )  # fmt: skip

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            out: torch.Tensor = self.net(x)
            return out

    preset = load_preset(PRESET)
    c = preset.ppo_config
    envs = make_vec_env(preset.env_id, n_envs=16, seed=seed, wrapper_class=ImgObsWrapper)
    return PPO(
        "CnnPolicy", envs, n_steps=c.num_steps, batch_size=c.minibatch_size,
        n_epochs=c.update_epochs, learning_rate=c.learning_rate, gamma=c.gamma,
        gae_lambda=c.gae_lambda, ent_coef=c.ent_coef, clip_range=c.clip_coef,
        vf_coef=c.vf_coef, max_grad_norm=c.max_grad_norm,
        policy_kwargs={"features_extractor_class": SmallCNN,
                       "net_arch": {"pi": [64], "vf": [64]}, "activation_fn": nn.Tanh},
        seed=seed, verbose=0, device="cpu",
    )  # fmt: skip


def solve_sb3(seed: int) -> tuple[float | None, int | None]:
    preset = load_preset(PRESET)
    wall, steps = learn_until_solved(
        sb3_model(seed),
        preset.env_step_budget,
        16 * preset.ppo_config.num_steps,
        preset.target_return,
        preset.env_id,
        preset.env_wrappers,
    )
    if wall is None:
        print(f"# sb3: not solved in {preset.env_step_budget} steps", file=sys.stderr)
    return wall, steps


def throughput_ours(kafka: str, workers: int, state: Path) -> float:
    """Env steps per second of a launch that trains ``QUICK_STEPS`` steps (no evaluator)."""
    run_id = f"bench-img-{os.getpid()}-{time.monotonic_ns() % 10**8}"
    orchestrator = LocalOrchestrator(state, config=warm_supervisor(SupervisorConfig(linger_s=5.0)))
    started_epoch = time.time()
    settings = LaunchSettings(
        preset=PRESET, run_id=run_id, workers=workers, kafka_bootstrap=kafka,
        checkpoints=(state / "checkpoints").as_uri(), evaluator=False,
        overrides=(f"env_step_budget={QUICK_STEPS}",),
    )  # fmt: skip
    prepare_topics(settings)
    orchestrator.submit(build_run_spec(settings))
    finished = follow(orchestrator, run_id, timeout_s=300.0).finished
    if finished is None:
        raise SystemExit(f"{run_id} did not finish; see its logs in {state}")
    return int(finished["env_steps"]) / (float(finished["time"]) - started_epoch)


def throughput_sb3() -> float:
    started = time.perf_counter()
    sb3_model(seed=1).learn(total_timesteps=QUICK_STEPS)
    return QUICK_STEPS / (time.perf_counter() - started)


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one seed per side (< 60 s)")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    kafka = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    if not kafka:
        sys.exit("KAFKA_BOOTSTRAP_SERVERS is not set: start the stack (coach-stream stack up) "
                 "and eval \"$(coach-stream stack env)\".")  # fmt: skip
    baseline = "sb3_ppo_same_cnn_1proc"
    if args.quick:
        with tempfile.TemporaryDirectory(prefix="bench-solve-image-") as tmp:
            torch.set_num_threads(1)
            rate = throughput_ours(kafka, args.workers, Path(tmp))
        torch.set_num_threads(os.cpu_count() or 1)
        emit("minigrid_ppo_train_env_steps_per_s", rate, "env_steps/s", baseline,
             throughput_sb3())  # fmt: skip
        return 0
    ours: list[tuple[float | None, int | None]] = []
    sb3: list[tuple[float | None, int | None]] = []
    with tempfile.TemporaryDirectory(prefix="bench-solve-image-") as tmp:
        for repeat in range(3):  # alternate: load drift hits both alike
            torch.set_num_threads(1)
            ours.append(solve_ours(PRESET, kafka, args.workers, Path(tmp), seed=1 + repeat))
            torch.set_num_threads(os.cpu_count() or 1)  # SB3 gets every core: its default
            sb3.append(solve_sb3(seed=1 + repeat))
            print(f"# repeat {repeat}: ours {ours[-1]} sb3 {sb3[-1]}", file=sys.stderr)
    emit("minigrid_ppo_wall_s_to_0.9", _median(ours, 0), "s", baseline, _median(sb3, 0))
    emit("minigrid_ppo_env_steps_to_0.9", _median(ours, 1), "env_steps", baseline,
         _median(sb3, 1))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
