"""Rollout per core against Sample Factory's sampler: env steps per CPU-second on CartPole.

Sample Factory (2.1.1, APPO's sampler) is the reference for fast sampling on few cores.
It cannot share the project's environment (it needs numpy < 2 and gymnasium < 1), so this
bench keeps it in a venv of its own, ``~/.cache/coach-stream/bench/sample-factory-2.1.1``,
made on first use with pip (torch is not installed twice: a ``.pth`` file puts this
interpreter's site-packages after the venv's own, where torch is found). Without pip or
the network the line says ``skipped`` and why; nothing of it enters the project's
dependencies.

Per round, alternating which goes first:

* Sample Factory: ``external/sf_sampler.py`` in its venv (a folder of its own: ``make
  bench-quick`` runs every ``bench/*.py``), ``--num-workers`` rollout worker processes
  of ``--num-envs`` envs each and its inference worker, a 64x64 MLP policy (ours is 64x64
  too, Sample Factory's default 512x512), 32-step rollouts; env steps per CPU-second of its
  whole process tree after a warm-up;
* ours: ``bench/rollout.py``'s ``worker`` loop (``RolloutWorker.act_share``: policy, env,
  chunker, codec, producer to a real topic on the stack's broker; without
  ``KAFKA_BOOTSTRAP_SERVERS`` the loop without Kafka, said so in the line), one process of
  ``--num-envs`` envs, env steps per CPU-second.

* ours at equal processes: ``--num-workers`` processes of that ``worker`` loop at once
  (each its own producer), started together after a warm-up; env steps per second of
  wall time, all processes together, against Sample Factory's wall-clock rate with as
  many rollout workers (its inference worker is one process more).

JSON lines: ours, with Sample Factory's figure as the baseline (ratio > 1: ours moves
more env steps per CPU-second); ours at equal processes against Sample Factory's
wall-clock env steps/s; and that wall-clock rate of Sample Factory's alone.

Usage: ``python bench/against_sample_factory.py [--quick] [--rounds R] [--seconds S]``.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import shutil
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import jsonl
import torch
from rollout import cpu_rate, worker
from standins import DiscardingWriter
from threadpoolctl import threadpool_limits

from coach_stream.config import load_preset
from coach_stream.transport.admin import delete_run_topics, ensure_run_topics
from coach_stream.transport.settings import KafkaSettings, RunTopics
from coach_stream.transport.writer import KafkaExperienceWriter

SF_VERSION = "2.1.1"
VENV = Path.home() / ".cache" / "coach-stream" / "bench" / f"sample-factory-{SF_VERSION}"
# sample-factory's requirements but torch (taken from this interpreter's site-packages)
SF_REQUIREMENTS = [
    "numpy>=1.18.1,<2", "gymnasium>=0.27,<1.0", "pyglet", "tensorboard>=1.15.0",
    "tensorboardx>=2.0", "psutil>=5.7.0", "threadpoolctl", "colorlog",
    "signal-slot-mp>=1.0.3,<2.0", "filelock", "opencv-python-headless", "wandb>=0.12.9",
    "huggingface-hub>=0.10.0,<1.0",
]  # fmt: skip
SAMPLER = Path(__file__).resolve().parent / "external" / "sf_sampler.py"


class SampleFactoryUnavailableError(Exception):
    """Sample Factory cannot be run here; the message says why."""


def sf_python() -> Path:
    """The interpreter of Sample Factory's venv, made on first use."""
    python = VENV / "bin" / "python"
    if (VENV / ".complete").exists():
        return python
    shutil.rmtree(VENV, ignore_errors=True)
    steps = [
        [sys.executable, "-m", "venv", str(VENV)],
        [str(python), "-m", "pip", "install", "-q", "--no-deps", f"sample-factory=={SF_VERSION}"],
        [str(python), "-m", "pip", "install", "-q", *SF_REQUIREMENTS],
    ]
    for step in steps:
        done = subprocess.run(step, capture_output=True, text=True)
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ["no output"])[-1]
            why = f"installing Sample Factory {SF_VERSION} failed: {last}"
            raise SampleFactoryUnavailableError(why)
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    (Path(purelib) / "zz_coach_stream_torch.pth").write_text(sysconfig.get_paths()["purelib"])
    (VENV / ".complete").write_text(SF_VERSION)
    return python


def sample_factory(
    python: Path, workers: int, envs: int, seconds: float, warm: float
) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="sf-bench-") as train_dir:
        flags = [
            "--env=CartPole-v1", f"--experiment=bench-{uuid.uuid4().hex[:6]}",
            f"--train_dir={train_dir}", f"--num_workers={workers}",
            f"--num_envs_per_worker={envs}", "--device=cpu", "--rollout=32",
            "--encoder_mlp_layers", "64", "64", "--use_rnn=False",
        ]  # fmt: skip
        done = subprocess.run(
            [str(python), str(SAMPLER), str(seconds), str(warm), *flags],
            capture_output=True, text=True, timeout=600 + seconds,
        )  # fmt: skip
    lines = [x for x in done.stdout.splitlines() if x.startswith("{")]
    if done.returncode != 0 or not lines:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        why = f"Sample Factory's sampler exited {done.returncode}: {last}"
        raise SampleFactoryUnavailableError(why)
    result: dict[str, float] = json.loads(lines[-1])
    return result


def _timed_worker(
    envs: int, seconds: float, servers: str | None, topic: str, start: Any, out: Any
) -> None:
    """One process of ``ours_at_equal_processes``: warm, wait for the others, run."""
    torch.set_num_threads(1)
    threadpool_limits(limits=1, user_api="blas")
    preset = load_preset("cartpole-ppo", [f"rollout.num_envs={envs}"])
    settings = KafkaSettings(bootstrap_servers=servers) if servers else None
    writer = DiscardingWriter() if settings is None else KafkaExperienceWriter(settings, topic)
    loop = worker(preset, writer)
    loop()
    start.wait()
    done, began = 0, time.perf_counter()
    while time.perf_counter() - began < seconds:
        done += loop()
    out.put(done / (time.perf_counter() - began))
    writer.close()


def ours_at_equal_processes(
    workers: int, envs: int, seconds: float, servers: str | None, topic: str
) -> float:
    """Env steps/s of wall time of ``workers`` worker processes running at once."""
    context = multiprocessing.get_context("spawn")
    start, out = context.Barrier(workers), context.Queue()
    processes = [
        context.Process(target=_timed_worker, args=(envs, seconds, servers, topic, start, out))
        for _ in range(workers)
    ]
    for process in processes:
        process.start()
    rates = [out.get(timeout=120 + seconds) for _ in processes]
    for process in processes:
        process.join(30)
    return sum(rates)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one short round: < 60 s")
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--seconds", type=float, default=None, help="per side and round")
    parser.add_argument("--num-workers", type=int, default=2)
    parser.add_argument("--num-envs", type=int, default=8)
    args = parser.parse_args()
    rounds = args.rounds or (1 if args.quick else 3)
    seconds = args.seconds or (6.0 if args.quick else 30.0)
    warm = 3.0 if args.quick else 5.0  # Sample Factory sampling before its window opens
    torch.set_num_threads(1)
    threadpool_limits(limits=1, user_api="blas")
    extra = {"env": "CartPole-v1", "num_envs": args.num_envs, "sf_workers": args.num_workers}
    try:
        python = sf_python()
    except SampleFactoryUnavailableError as why:
        jsonl.emit("sample_factory", "worker_steps_per_cpu_s", None, "env steps/cpu-s",
                   "sample_factory_sampler", None, skipped=str(why), **extra)  # fmt: skip
        return 0
    preset = load_preset("cartpole-ppo", [f"rollout.num_envs={args.num_envs}"])
    servers = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    settings = KafkaSettings(bootstrap_servers=servers) if servers else None
    topics = RunTopics.for_run(f"bench-sf-{uuid.uuid4().hex[:8]}")
    writer: KafkaExperienceWriter | DiscardingWriter = DiscardingWriter()
    if settings is not None:
        ensure_run_topics(settings, topics, 4)
        writer = KafkaExperienceWriter(settings, topics.experience)
    ours: list[float] = []
    ours_wall: list[float] = []
    theirs: list[dict[str, float]] = []
    try:
        loop = worker(preset, writer)
        for round_ in range(rounds):
            sides = ("ours", "ours_wall", "sf")
            for side in sides if round_ % 2 == 0 else sides[::-1]:
                if side == "ours":
                    ours.append(cpu_rate(loop, seconds / 2))
                elif side == "ours_wall":
                    ours_wall.append(ours_at_equal_processes(
                        args.num_workers, args.num_envs, seconds / 2, servers, topics.experience
                    ))  # fmt: skip
                else:
                    theirs.append(
                        sample_factory(python, args.num_workers, args.num_envs, seconds, warm)
                    )
    except SampleFactoryUnavailableError as why:
        jsonl.emit("sample_factory", "worker_steps_per_cpu_s", None, "env steps/cpu-s",
                   "sample_factory_sampler", None, skipped=str(why), **extra)  # fmt: skip
        return 0
    finally:
        if isinstance(writer, KafkaExperienceWriter) and settings is not None:
            writer.close(30.0)
            delete_run_topics(settings, topics)
    per_cpu = [t["steps"] / t["cpu_s"] for t in theirs]
    jsonl.emit(
        "sample_factory", "worker_steps_per_cpu_s", statistics.median(ours), "env steps/cpu-s",
        "sample_factory_sampler", statistics.median(per_cpu), digits=0, ratio_digits=2,
        rounds=rounds, kafka=settings is not None, spread=[round(min(ours)), round(max(ours))],
        baseline_spread=[round(min(per_cpu)), round(max(per_cpu))], **extra,
    )  # fmt: skip
    wall = [t["steps"] / t["wall_s"] for t in theirs]
    jsonl.emit(
        "sample_factory", "equal_processes_env_steps_per_s", statistics.median(ours_wall),
        "env steps/s", "sample_factory_sampler_wall", statistics.median(wall), digits=0,
        ratio_digits=2, rounds=rounds, kafka=settings is not None, processes=args.num_workers,
        spread=[round(min(ours_wall)), round(max(ours_wall))],
        baseline_spread=[round(min(wall)), round(max(wall))], **extra,
    )  # fmt: skip
    jsonl.emit(
        "sample_factory", "sampler_env_steps_per_s", statistics.median(wall), "env steps/s",
        None, None, digits=0, cpu_s_per_s=round(statistics.median(
            t["cpu_s"] / t["wall_s"] for t in theirs), 2), **extra,
    )  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(jsonl.run(main))
