"""K trainer ranks in K real processes (gloo on 127.0.0.1), for the data-parallel tests.

``learn_in_ranks`` gives each rank its own chunks, lets every rank's learner update on them
and returns each rank's weights afterwards, so a test can compare K ranks with one learner
given the union. The ranks are forked from a fresh forkserver, not from the caller: torch's
threads and the caller's sockets stay out of them, and the server imports torch once for all
ranks instead of once per spawned rank.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from coach_stream.core import Collective, ExperienceChunk, Learner
from coach_stream.processes import free_port
from coach_stream.trainer.collective import SOLO, TorchCollective
from coach_stream.trainer.rendezvous import FixedRendezvous

LearnerFactory = Callable[[Collective], Learner]
"""Builds one rank's learner (a module-level function: it is pickled into the rank)."""


def learn(
    factory: LearnerFactory,
    chunks: Sequence[ExperienceChunk],
    version: int,
    rounds: int,
    collective: Collective = SOLO,
) -> dict[str, torch.Tensor]:
    """``rounds`` times: ingest ``chunks``, learn while the learner is ready, publish (take
    ``policy_state_dict``, which moves a normalisation snapshot on). The last version's
    weights (and statistics)."""
    torch.set_num_threads(1)
    learner = factory(collective)
    published: dict[str, torch.Tensor] = {}
    for _ in range(rounds):
        learner.ingest(chunks, version)
        if not learner.ready():
            raise RuntimeError("the learner is not ready: give it a quota's worth of chunks")
        while learner.ready():
            learner.learn(0)
        published = {k: v.detach().clone() for k, v in learner.policy_state_dict().items()}
    return published


@dataclass(frozen=True)
class Job:
    """One comparison: each rank's chunks (``shares[rank]``), learned for ``rounds``."""

    factory: LearnerFactory
    shares: Sequence[Sequence[ExperienceChunk]]
    version: int
    rounds: int


def _rank_main(rank: int, world: int, port: int, jobs: Sequence[Job], results: Any) -> None:
    collective = TorchCollective(rank, world, FixedRendezvous(("127.0.0.1", port)), timeout_s=60)
    try:
        for index, job in enumerate(jobs):
            weights = learn(job.factory, job.shares[rank], job.version, job.rounds, collective)
            # numpy arrays travel by value; tensors would go as shared memory freed at exit
            results.put((index, rank, {name: w.numpy() for name, w in weights.items()}))
    finally:
        collective.close()


def learn_in_ranks(
    jobs: Sequence[Job], timeout_s: float = 120.0
) -> list[list[dict[str, torch.Tensor]]]:
    """Every job in one group of ranks (one process per rank, started once for all jobs,
    all-reducing as trainer ranks do): per job, each rank's weights after it."""
    world = len(jobs[0].shares)
    if any(len(job.shares) != world for job in jobs):
        raise ValueError("every job needs one share per rank")
    context = multiprocessing.get_context("forkserver")
    # torch's optimizers import torch._dynamo on first use (about 3 s of a core): once in the
    # server, not once per rank. Ignored when this process already started its server.
    context.set_forkserver_preload([__name__, "torch._dynamo"])
    results = context.Queue()
    port = free_port("127.0.0.1")
    ranks = [
        context.Process(target=_rank_main, args=(rank, world, port, list(jobs), results))
        for rank in range(world)
    ]
    for process in ranks:
        process.start()
    try:
        out: list[list[dict[str, torch.Tensor]]] = [[{}] * world for _ in jobs]
        for _ in range(len(jobs) * world):
            index, rank, state = results.get(timeout=timeout_s)
            out[index][rank] = {name: torch.from_numpy(w) for name, w in state.items()}
        return out
    finally:
        for process in ranks:
            process.join(timeout=10)
            if process.is_alive():
                process.kill()
