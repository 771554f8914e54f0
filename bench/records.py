"""A worker's chunks to Kafka records: written from the chunker's columns against emitted, then
encoded, in CPU microseconds per vector step, warm, without the env.

``bench/rollout.py --encode-after`` compares the two inside the whole worker loop, where
the env's own noise (its speed drifts by a third between rounds on these machines) hides
a few microseconds. Here one preset's vector env and untrained policy play ``--steps``
vector steps once; the recorded steps are then fed, again and again, to two chunkers of
the preset's shape:

* ``chunker_records``: ``Chunker.add_encoded`` (the records of each step's finished
  chunks written in numba straight from the columns, ``codec.compiled``), the rollout
  worker's path since 2026-12-07 evening;
* ``chunker_then_encode``: ``Chunker.add`` and ``encode_chunk`` of each chunk it emits,
  the path before (and where numba does not load), the baseline;
* ``chunker_only``: ``Chunker.add`` with its chunks dropped, for scale.

Rounds alternate the order; medians of the rounds. Both paths' records of the first
recorded steps are decoded and compared field by field (``same_chunks``).

Usage: ``python bench/records.py [--quick] [--preset cartpole-ppo] [--set K=V]``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import jsonl
import numpy as np
import torch
from standins import DiscardingWriter, bench_worker

from coach_stream.codec import decode_chunk, encode_chunk
from coach_stream.config import load_preset
from coach_stream.rollout.chunker import Chunker

Step = tuple[Any, ...]


def record_steps(preset: Any, steps: int) -> tuple[list[Step], Callable[[], Chunker]]:
    """``steps`` recorded vector steps (``Chunker.add``'s arguments) and a factory of
    chunkers like the worker's, started in the recording's first observations."""
    worker = bench_worker(preset, DiscardingWriter())
    worker.start()
    envs, actor, model = worker.envs, worker.actor, worker.chunker
    first = obs = np.array(model.last_obs)
    recorded: list[Step] = []
    for _ in range(steps):
        action = actor.act(obs)
        obs, rewards, terminated, truncated, infos = envs.step(action.actions)
        infos = {k: np.array(v) for k, v in infos.items() if k in ("final_obs", "_final_obs")}
        recorded.append((action, np.array(rewards), np.array(terminated),
                         np.array(truncated), np.array(obs), infos))  # fmt: skip
        obs = np.array(obs)

    def chunker() -> Chunker:
        c = Chunker(model.run_id, model.worker_id, model.num_envs, model.chunk_steps,
                    model._obs.shape[2:], model._obs.dtype, model.behaviour,
                    model._actions.shape[2:], model._actions.dtype.type)  # fmt: skip
        c.start(first, version=0)
        return c

    return recorded, chunker


def loop(kind: str, chunker: Chunker, recorded: list[Step]) -> Callable[[], int]:
    def records() -> int:
        for step in recorded:
            chunker.add_encoded(*step)
        return len(recorded)

    def then_encode() -> int:
        for step in recorded:
            for chunk in chunker.add(*step):
                encode_chunk(chunk)
        return len(recorded)

    def only() -> int:
        for step in recorded:
            chunker.add(*step)
        return len(recorded)

    return {"chunker_records": records, "chunker_then_encode": then_encode,
            "chunker_only": only}[kind]  # fmt: skip


def us_per_step(fn: Callable[[], int], seconds: float) -> float:
    fn()
    done, began = 0, time.process_time()
    while time.process_time() - began < seconds:
        done += fn()
    return (time.process_time() - began) / done * 1e6


def same_chunks(make: Callable[[], Chunker], recorded: list[Step]) -> tuple[bool, int]:
    """Both paths' chunks of the recorded steps, the records decoded: equal but for the
    creation time? And how many chunks."""
    fast, slow = make(), make()
    records = [r for step in recorded for r in fast.add_encoded(*step)] + fast.flush_encoded()
    chunks = [c for step in recorded for c in slow.add(*step)] + slow.flush()
    if len(records) != len(chunks):
        return False, len(chunks)
    for record, chunk in zip(records, chunks, strict=True):
        got = decode_chunk(record.value)
        if not got.equals(replace(chunk, created_at_ms=got.created_at_ms)):
            return False, len(chunks)
    return True, len(chunks)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer, shorter rounds: < 60 s")
    parser.add_argument("--preset", default="cartpole-ppo")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--steps", type=int, default=None, help="vector steps recorded")
    args = parser.parse_args()
    seconds, rounds = (1.0, 3) if args.quick else (3.0, 7)
    torch.set_num_threads(1)
    preset = load_preset(args.preset, args.set)
    steps = args.steps or (512 if preset.rollout.num_envs * 64 < 4096 else 64)
    recorded, make = record_steps(preset, steps)
    kinds = ("chunker_records", "chunker_then_encode", "chunker_only")
    loops = {kind: loop(kind, make(), recorded) for kind in kinds}
    times: dict[str, list[float]] = {kind: [] for kind in kinds}
    for r in range(rounds):
        for kind in kinds if r % 2 == 0 else kinds[::-1]:
            times[kind].append(us_per_step(loops[kind], seconds))
    same, chunks = same_chunks(make, recorded)
    base = statistics.median(times["chunker_then_encode"])
    for kind in kinds:
        jsonl.emit(
            "records", f"{kind}_us_per_step", statistics.median(times[kind]), "us/vector step",
            "chunker_then_encode_us_per_step", base, preset=args.preset,
            num_envs=preset.rollout.num_envs, chunks_per_step=round(chunks / len(recorded), 3),
            rounds=rounds, spread=[round(min(times[kind]), 2), round(max(times[kind]), 2)],
            same_chunks=same, overrides=args.set,
        )  # fmt: skip
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(jsonl.run(main))
