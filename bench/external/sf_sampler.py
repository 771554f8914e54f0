"""Sample Factory's sampler on CartPole-v1, run inside Sample Factory's own venv.

Started by ``bench/against_sample_factory.py`` (not named sample_factory.py: a script's
folder comes first on sys.path and would shadow the package) with that venv's interpreter:
Sample Factory 2.1.1 needs numpy < 2 and gymnasium < 1, so it cannot share the project's
environment. Imports nothing of coach_stream. It drives ``SyncSamplingAPI`` (the simplified
sampling API of Sample Factory's own sampler example, ``sf_examples/sampler``): rollout
workers step the envs, an inference worker runs the policy, trajectories come back through
shared memory.
After ``warm_s`` of sampling it counts env steps for ``seconds`` of wall time and the CPU
seconds of its whole process tree (workers included) over the same window, and prints one
JSON object: ``{"steps", "wall_s", "cpu_s"}``.

Usage: ``python sf_sampler.py SECONDS WARM_S [Sample Factory flags ...]``.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import gymnasium as gym
import psutil
from sample_factory.algo.sampling.simplified_sampling_api import SyncSamplingAPI
from sample_factory.algo.utils.env_info import obtain_env_info_in_a_separate_process
from sample_factory.algo.utils.rl_utils import samples_per_trajectory
from sample_factory.cfg.arguments import parse_full_cfg, parse_sf_args
from sample_factory.envs.env_utils import register_env


def make_env(name: str, cfg: Any = None, env_config: Any = None, render_mode: Any = None) -> Any:
    return gym.make(name, render_mode=render_mode)


def tree_cpu_s() -> float:
    """User + system CPU seconds of this process and every live descendant."""
    me = psutil.Process()
    total = 0.0
    for process in [me, *me.children(recursive=True)]:
        try:
            times = process.cpu_times()
        except psutil.Error:
            continue
        total += times.user + times.system
    return total


def main() -> int:
    seconds, warm_s, argv = float(sys.argv[1]), float(sys.argv[2]), sys.argv[3:]
    register_env("CartPole-v1", make_env)
    parser, _ = parse_sf_args(argv=argv)
    cfg = parse_full_cfg(parser, argv)
    sampler = SyncSamplingAPI(cfg, obtain_env_info_in_a_separate_process(cfg))
    sampler.start()
    sampled = 0
    warm_until = time.time() + warm_s
    while time.time() < warm_until:
        sampled += samples_per_trajectory(sampler.get_trajectories_sync())
    steps0, wall0, cpu0 = sampled, time.time(), tree_cpu_s()
    while time.time() - wall0 < seconds:
        sampled += samples_per_trajectory(sampler.get_trajectories_sync())
    wall, cpu = time.time() - wall0, tree_cpu_s() - cpu0
    sampler.stop()
    print(json.dumps({"steps": sampled - steps0, "wall_s": wall, "cpu_s": cpu}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
