"""Where a CartPole PPO run's time goes from ``launch`` to solved: the start-up phases.

A run is launched as ``bench/solve.py`` (and ``coach-stream launch``) launch it: topics
created, the warm supervisor started, trainer + 2 rollout workers + evaluator forked.
Afterwards every phase is read from what the run left on Kafka and in its run directory,
so nothing in the run is instrumented for the bench:

* ``topics_created_s``, ``tasks_started_s``: in this (the launching) process, the return
  of ``prepare_topics`` and of ``submit`` (every task forked);
* ``supervisor_ready_s``: when the supervisor forked its first task, i.e. its imports
  done (the kernel's start times of the supervisor and of the tasks, in clock ticks);
* ``trainer_started_s``, ``worker_started_s``, ``evaluator_started_s``: each task's
  ``started`` telemetry event (its Kafka clients built, the preset loaded);
* ``version_0_s``, ``version_1_s``: the control topic's first two ``PolicyVersion``
  records (the first version the workers act with; the first update's);
* ``first_experience_s``: the earliest record on the experience topic;
* ``first_evaluation_s``: the evaluator's first ``EvaluationReport``;
* ``solved_s``: the trainer's ``finished`` event with reason ``target_reached``.

Each is seconds after the launch began (median over ``--repeats``; Kafka timestamps are
the producers' clocks, all on this machine). One JSON line per phase; their baseline is
the previous phase, so ``ratio`` - 1 is not meaningful, ``value - baseline_value`` is the
phase's own cost. ``--quick``: 2 repeats and no learning beyond version 1 (<= 60 s).

Usage (stack up): ``KAFKA_BOOTSTRAP_SERVERS=host:port python bench/startup.py [--quick]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

import jsonl
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from coach_stream.codec import decode_control
from coach_stream.core import EvaluationReport, PolicyVersion
from coach_stream.orchestrators import (
    LaunchSettings,
    LocalOrchestrator,
    SupervisorConfig,
    build_run_spec,
    warm_supervisor,
)
from coach_stream.orchestrators.launcher import follow, prepare_topics
from coach_stream.orchestrators.state import RunDirectory
from coach_stream.transport import clients
from coach_stream.transport.admin import delete_run_topics
from coach_stream.transport.settings import KafkaSettings, RunTopics
from coach_stream.transport.telemetry import decode_event

if TYPE_CHECKING:  # the zygote is imported only where it is used: --baseline-src has none
    from coach_stream.orchestrators.zygote_client import ZygoteClient

PHASES = (
    "topics_created_s",
    "supervisor_ready_s",
    "tasks_started_s",
    "trainer_started_s",
    "worker_started_s",
    "evaluator_started_s",
    "version_0_s",
    "first_experience_s",
    "version_1_s",
    "first_evaluation_s",
    "solved_s",
)
"""In the order a run passes them (the evaluator's and the workers' start may swap)."""


def launch_once(
    preset: str,
    kafka: str,
    workers: int,
    state: Path,
    seed: int,
    overrides: tuple[str, ...],
    zygote: ZygoteClient | None,
) -> dict[str, float | None]:
    """Launch one run, follow it to its end, and read its phases back (seconds after launch)."""
    run_id = f"bench-startup-{uuid.uuid4().hex[:8]}"
    config = warm_supervisor(SupervisorConfig(linger_s=5.0))
    warm: dict[str, Any] = {} if zygote is None else {"zygote": zygote}
    orchestrator = LocalOrchestrator(state, config=config, **warm)
    settings = LaunchSettings(
        preset=preset, run_id=run_id, workers=workers, kafka_bootstrap=kafka,
        checkpoints=(state / "checkpoints").as_uri(), seed=seed, overrides=overrides,
    )  # fmt: skip
    began = time.time()
    prepare_topics(settings)
    topics_created = time.time()
    orchestrator.submit(build_run_spec(settings))
    tasks_started = time.time()
    outcome = follow(orchestrator, run_id, timeout_s=300.0)
    phases: dict[str, float | None] = dict.fromkeys(PHASES)
    phases["topics_created_s"] = topics_created - began
    phases["tasks_started_s"] = tasks_started - began
    phases["supervisor_ready_s"] = _supervisor_ready(
        RunDirectory(state, run_id), topics_created - began
    )
    kafka_settings = KafkaSettings(bootstrap_servers=kafka)
    topics = RunTopics.for_run(run_id)
    phases.update(_from_topics(kafka_settings, topics, began))
    finished = outcome.finished
    if outcome.solved and finished is not None:
        phases["solved_s"] = float(finished["time"]) - began
    delete_run_topics(kafka_settings, topics)
    return phases


def _supervisor_ready(run_dir: RunDirectory, spawned_at: float) -> float | None:
    """When the supervisor forked its first task: its import time after it was spawned."""
    record = run_dir.read()
    if record.supervisor is None:
        return None
    forks = [t.process.start_time for t in record.tasks if t.process is not None]
    if not forks:
        return None
    ticks = os.sysconf("SC_CLK_TCK")
    return spawned_at + (min(forks) - record.supervisor.start_time) / ticks


def _records(consumer: Consumer, topic: str, partitions: int, per_partition: int | None) -> list:
    """Records of ``topic`` from the beginning (up to ``per_partition`` from each)."""
    out = []
    for partition in range(partitions):
        tp = TopicPartition(topic, partition)
        low, high = clients.watermarks(consumer, tp, 10.0)
        end = high if per_partition is None else min(high, low + per_partition)
        if end <= low:
            continue
        consumer.assign([TopicPartition(topic, partition, OFFSET_BEGINNING)])
        got = 0
        deadline = time.monotonic() + 10.0
        while got < end - low and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None or message.error() is not None:
                continue
            out.append(message)
            got += 1
    return out


def _from_topics(settings: KafkaSettings, topics: RunTopics, began: float) -> dict[str, float]:
    """The phases the run's telemetry, control and experience topics hold."""
    found: dict[str, float] = {}
    consumer = clients.consumer(settings, f"bench-startup-{uuid.uuid4().hex}")
    try:
        for message in _records(consumer, topics.telemetry, 1, None):
            task, event = decode_event(message.value())
            if event["event"] != "started":
                continue
            key = {"trainer": "trainer_started_s", "evaluator": "evaluator_started_s"}.get(
                task, "worker_started_s"
            )
            found.setdefault(key, event["time"] - began)  # the first worker to start
            found[key] = min(found[key], event["time"] - began)
        versions = 0
        for message in _records(consumer, topics.control, 1, None):
            control = decode_control(message.value())
            at = message.timestamp()[1] / 1000 - began
            if isinstance(control, PolicyVersion) and versions < 2:
                found[f"version_{versions}_s"] = at
                versions += 1
            elif isinstance(control, EvaluationReport):
                found.setdefault("first_evaluation_s", at)
        metadata = consumer.list_topics(topics.experience, timeout=10.0)
        partitions = len(metadata.topics[topics.experience].partitions)
        first = _records(consumer, topics.experience, partitions, 1)
        if first:
            found["first_experience_s"] = min(m.timestamp()[1] for m in first) / 1000 - began
    finally:
        consumer.close()
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2 runs each, to version 1 only.")
    parser.add_argument("--preset", default="cartpole-ppo")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3, help="Runs per mode (median).")
    parser.add_argument(
        "--modes", default="cold,warm", help="cold: a supervisor spawned per launch; warm: "
        "forked from the zygote; before: the code in --baseline-src (cold). Alternated."
    )  # fmt: skip
    parser.add_argument(
        "--baseline-src", type=Path, help="A checkout's source root (e.g. `git archive` of an "
        "older commit): mode `before` launches with PYTHONPATH set to it, in a subprocess."
    )  # fmt: skip
    parser.add_argument("--one", help=argparse.SUPPRESS)  # internal: one launch, phases as JSON
    parser.add_argument("--seed", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--raw", action="store_true", help="Also print each run's phases.")
    args = parser.parse_args()
    kafka = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    if not kafka:
        sys.exit("KAFKA_BOOTSTRAP_SERVERS is not set: start the stack (coach-stream stack up) "
                 "and eval \"$(coach-stream stack env)\".")  # fmt: skip
    # --quick: a budget of one update, so the run ends right after version 1.
    overrides = ("env_step_budget=512",) if args.quick else ()
    if args.one:
        with tempfile.TemporaryDirectory(prefix="bench-startup-") as tmp:
            phases = launch_once(args.preset, kafka, args.workers, Path(tmp), args.seed,
                                 overrides, _zygote() if args.one == "warm" else None)  # fmt: skip
        print(json.dumps({"phases": phases}))
        return 0
    modes = args.modes.split(",")
    if "before" in modes and args.baseline_src is None:
        parser.error("mode `before` needs --baseline-src DIR")
    repeats = 2 if args.quick else args.repeats
    zygote = _zygote() if "warm" in modes else None
    if zygote is not None:
        began = time.monotonic()
        zygote.ensure(os.environ)  # as a user's earlier launch would have
        jsonl.emit("startup", "zygote_ready_s", time.monotonic() - began, "s", None, None,
                   load_1min=round(os.getloadavg()[0], 2))  # fmt: skip
    runs: dict[str, list[dict[str, float | None]]] = {mode: [] for mode in modes}
    with tempfile.TemporaryDirectory(prefix="bench-startup-") as tmp:
        for repeat in range(repeats):
            # ABBA order, so drift in the machine's load hits every mode alike.
            for mode in modes if repeat % 2 == 0 else modes[::-1]:
                if mode == "before":
                    phases = _before(args, repeat + 1)
                else:
                    phases = launch_once(
                        args.preset, kafka, args.workers, Path(tmp), 1 + repeat, overrides,
                        zygote if mode == "warm" else None,
                    )  # fmt: skip
                runs[mode].append(phases)
                if args.raw:
                    print(f"# {mode} run {repeat}: {json.dumps(phases)}", file=sys.stderr)
    load = os.getloadavg()[0]
    base_mode = "before" if "before" in modes else "cold" if "cold" in modes else None
    for mode in modes:
        for phase in PHASES:
            value = _median([run[phase] for run in runs[mode]])
            if value is None and phase == "solved_s" and args.quick:
                continue
            baseline = None if base_mode is None or mode == base_mode else base_mode
            base = _median([run[phase] for run in runs[baseline]]) if baseline else None
            jsonl.emit("startup", phase, value, "s", baseline and f"{phase}_{baseline}", base,
                       mode=mode, runs=[_round(r[phase]) for r in runs[mode]],
                       load_1min=round(load, 2))  # fmt: skip
    return 0


def _zygote() -> ZygoteClient:
    from coach_stream.orchestrators import warm_zygote

    return warm_zygote()


def _before(args: argparse.Namespace, seed: int) -> dict[str, float | None]:
    """One launch of the code in ``--baseline-src`` (its supervisor, tasks and launcher)."""
    env = {**os.environ, "PYTHONPATH": str(args.baseline_src.resolve())}
    command = [sys.executable, os.path.abspath(__file__), "--one", "cold", "--seed", str(seed),
               "--preset", args.preset, "--workers", str(args.workers)]  # fmt: skip
    if args.quick:
        command.append("--quick")
    # Run from there too: `python -m` puts the working directory first on the import path
    # of the supervisor and the tasks, ahead of PYTHONPATH.
    done = subprocess.run(
        command, env=env, cwd=args.baseline_src, capture_output=True, text=True, check=True
    )
    result: dict[str, float | None] = json.loads(done.stdout.strip().splitlines()[-1])["phases"]
    return result


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def _median(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


if __name__ == "__main__":
    sys.exit(jsonl.run(main))
