"""Data-parallel learners: transitions/s of K = 1 and K = 2 trainer ranks, and what the
gradient all-reduce costs per step beside the step's compute.

Each rank is a real process with one torch thread (as a trainer process runs), joined over
gloo on 127.0.0.1 exactly as ``launch --trainers K`` joins them (``TorchCollective``); K = 1
runs the same code with ``Solo`` in one process of its own. Every rank holds its share of
one version's experience captured from real rollout workers (``bench/learner.py``'s
``capture``: episode cuts, dtypes and chunk sizes as a run has them; the quota is that of
``--workers`` workers), and learns it ``--versions`` times. The figure is the run's
learner throughput: steps learned per second of wall time, summed over the ranks
(``ratio`` = K ranks / 1 rank). The ranks' time in collectives is timed apart
(``allreduce_ms_per_step`` beside ``compute_ms_per_step``, per gradient step).

On this 2-core machine two ranks share the cores, so a ratio near 1 is what to expect: the
figure says what the all-reduce costs, not what a second machine would add. The GPU
machine (``--device cuda``, NCCL) is where K > 1 is meant to pay.

Usage: ``python bench/learners.py [--quick] [--presets cartpole-ppo,cartpole-impala]
[--ranks 1,2] [--device cpu]``.
"""

from __future__ import annotations

import argparse
import multiprocessing
import sys
import time
from dataclasses import dataclass
from typing import Any

import jsonl
import torch
from learner import capture

from coach_stream.algorithms import builder_for
from coach_stream.config import load_preset
from coach_stream.core import Collective, ExperienceChunk
from coach_stream.envs import env_shape, make_vector_env
from coach_stream.processes import free_port
from coach_stream.trainer.collective import SOLO, TorchCollective
from coach_stream.trainer.ppo import PPOConfig
from coach_stream.trainer.rendezvous import FixedRendezvous

BENCH = "learners"


class Timed:
    """A ``Collective`` that counts the seconds spent in ``sum`` (the all-reduces)."""

    def __init__(self, inner: Collective) -> None:
        self.inner, self.rank, self.world = inner, inner.rank, inner.world
        self.seconds = 0.0
        self.calls = 0

    def sum(self, values: torch.Tensor) -> torch.Tensor:
        began = time.perf_counter()
        out = self.inner.sum(values)
        self.seconds += time.perf_counter() - began
        self.calls += 1
        return out

    def broadcast_object(self, value: Any) -> Any:
        return self.inner.broadcast_object(value)

    def gather_objects(self, value: Any) -> list[Any]:
        return self.inner.gather_objects(value)


@dataclass(frozen=True)
class Case:
    preset: str
    workers: int
    ranks: int
    versions: int
    device: str


def shares(case: Case) -> list[list[ExperienceChunk]]:
    """One version's quota of chunks from ``case.workers`` workers, split by worker as the
    partitions split them (worker w's partition goes to rank w % K)."""
    preset = load_preset(case.preset)
    steps = preset.rollout.num_envs * preset.rollout.chunk_steps
    if preset.algorithm == "ppo":
        steps = preset.rollout.num_envs * preset.section_of(PPOConfig).num_steps
    out: list[list[ExperienceChunk]] = [[] for _ in range(case.ranks)]
    for worker in range(case.workers):
        chunks = capture(preset, worker, steps)
        taken, total = [], 0
        for chunk in chunks:  # exactly the first `steps` steps of the worker
            if total >= steps:
                break
            taken.append(chunk)
            total += chunk.num_steps
        out[worker % case.ranks].extend(taken)
    return out


def run_rank(rank: int, port: int, case: Case, share: list[ExperienceChunk], out: Any) -> None:
    torch.set_num_threads(1)
    meeting = FixedRendezvous(("127.0.0.1", port))
    inner = SOLO if case.ranks == 1 else TorchCollective(rank, case.ranks, meeting)
    collective = Timed(inner)
    preset = load_preset(case.preset, [f"trainer.device={case.device}"])
    builder = builder_for(preset)
    shape = env_shape(make_vector_env(preset.env_id, 1))
    learner = builder.make_learner(
        shape, case.workers, torch.Generator().manual_seed(1), collective
    )
    version = share[0].policy_version if share else 0

    def one_version() -> int:
        learner.ingest(share, version)
        learned = 0
        while learner.ready():
            learner.learn(0)
            learned += 1
        return learned

    one_version()  # warm-up: the optimizer's state, first-call allocations
    collective.seconds, collective.calls = 0.0, 0
    updates_before = learner.updates
    began = time.perf_counter()
    for _ in range(case.versions):
        one_version()
    wall = time.perf_counter() - began
    steps = sum(chunk.num_steps for chunk in share) * case.versions
    out.put((rank, wall, steps, learner.updates - updates_before, collective.seconds))
    if isinstance(inner, TorchCollective):
        inner.close()


def measure(case: Case) -> dict[str, float]:
    """The case's learner figures: steps/s over every rank, and per-step costs (rank 0)."""
    context = multiprocessing.get_context("spawn")
    out = context.Queue()
    port = free_port("127.0.0.1")
    parts = shares(case)
    ranks = [
        context.Process(target=run_rank, args=(r, port, case, parts[r], out))
        for r in range(case.ranks)
    ]
    for process in ranks:
        process.start()
    results = {}
    for _ in ranks:
        rank, wall, steps, updates, collective_s = out.get(timeout=600)
        results[rank] = (wall, steps, updates, collective_s)
    for process in ranks:
        process.join()
    wall = max(r[0] for r in results.values())
    steps = sum(r[1] for r in results.values())
    _, _, updates, collective_s = results[0]
    # PPO: the gradient steps of a version are update_epochs x minibatches (learn() once)
    gradient_steps = _gradient_steps(case, updates, steps // max(case.versions, 1))
    return {
        "steps_per_s": steps / wall,
        "allreduce_ms_per_step": 1e3 * collective_s / max(gradient_steps, 1),
        "compute_ms_per_step": 1e3 * (results[0][0] - collective_s) / max(gradient_steps, 1),
        "gradient_steps": float(gradient_steps),
    }


def _gradient_steps(case: Case, updates: int, quota: int) -> int:
    preset = load_preset(case.preset)
    if preset.algorithm != "ppo":
        return updates
    c = preset.section_of(PPOConfig)
    return int(updates * c.update_epochs * max(1, -(-quota // c.minibatch_size)))


def allreduce_rank(rank: int, port: int, numel: int, repeats: int, out: Any) -> None:
    """Time ``repeats`` all-reduces of a gradient-sized buffer (rank 0 reports)."""
    torch.set_num_threads(1)
    group = TorchCollective(rank, 2, FixedRendezvous(("127.0.0.1", port)))
    flat = torch.ones(numel)
    group.sum(flat)  # warm-up: the pair's connection and buffers
    began = time.perf_counter()
    for _ in range(repeats):
        group.sum(flat)
    seconds = (time.perf_counter() - began) / repeats
    copy = torch.empty_like(flat)
    copy.copy_(flat)  # warm-up: the copy's pages
    began = time.perf_counter()
    for _ in range(repeats):
        copy.copy_(flat)
    copy_s = (time.perf_counter() - began) / repeats
    if rank == 0:
        out.put((seconds, copy_s))
    group.close()


def allreduce_cost(preset_name: str, repeats: int) -> tuple[int, float, float]:
    """(parameters, all-reduce s, local copy s) for the preset's policy network, 2 ranks."""
    preset = load_preset(preset_name)
    builder = builder_for(preset)
    shape = env_shape(make_vector_env(preset.env_id, 1, preset.env_wrappers))
    learner = builder.make_learner(shape, 1, torch.Generator().manual_seed(1))
    numel = sum(int(t.numel()) for t in learner.policy_state_dict().values())
    context = multiprocessing.get_context("spawn")
    out = context.Queue()
    port = free_port("127.0.0.1")
    ranks = [
        context.Process(target=allreduce_rank, args=(r, port, numel, repeats, out))
        for r in range(2)
    ]
    for process in ranks:
        process.start()
    seconds, copy_s = out.get(timeout=600)
    for process in ranks:
        process.join()
    return numel, seconds, copy_s


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer versions, < 60 s")
    parser.add_argument("--presets", default="cartpole-ppo,cartpole-impala")
    parser.add_argument("--ranks", default="1,2")
    parser.add_argument("--workers", type=int, default=4, help="workers whose quota is learned")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument(
        "--allreduce",
        default="cartpole-ppo,pong-ppo",
        help="presets whose policy-sized gradient buffer is all-reduced between 2 ranks",
    )
    args = parser.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        print("learners: no CUDA GPU on this machine; the cuda figures are skipped")
        return 0
    versions = 3 if args.quick else 20
    for name in args.presets.split(","):
        figures = {
            k: measure(Case(name, args.workers, k, versions, args.device))
            for k in (int(r) for r in args.ranks.split(","))
        }
        one = figures.get(1)
        for k, fig in figures.items():
            jsonl.emit(
                BENCH,
                f"{name}_learner_steps_per_s_ranks_{k}",
                fig["steps_per_s"],
                "env steps/s",
                "1 rank" if one else None,
                one["steps_per_s"] if one else None,
                ranks=k,
                workers=args.workers,
                device=args.device,
                allreduce_ms_per_step=round(fig["allreduce_ms_per_step"], 3),
                compute_ms_per_step=round(fig["compute_ms_per_step"], 3),
                gradient_steps=int(fig["gradient_steps"]),
                versions=versions,
            )
    for name in filter(None, args.allreduce.split(",")):
        numel, seconds, copy_s = allreduce_cost(name, 5 if args.quick else 30)
        jsonl.emit(
            BENCH,
            f"{name}_allreduce_ms_2_ranks",
            1e3 * seconds,
            "ms per all-reduce",
            "a local copy of the same bytes (ms)",
            1e3 * copy_s,
            parameters=numel,
            megabytes=round(4 * numel / 1e6, 2),
            backend="gloo",
        )
    return 0


if __name__ == "__main__":
    sys.exit(jsonl.run(main))
