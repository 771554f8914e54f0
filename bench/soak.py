"""Soak: a sustained real run, watched for memory growth, consumer lag and throughput.

A preset (default ``cartpole-dqn``, ASYNC) is launched as a real run (topics created,
trainer, rollout workers and evaluator started as processes by the local orchestrator) with
an env-step budget it cannot spend and a target return it cannot reach, so it trains for
the whole time. Every few seconds one ``sample`` line reports:

* ``rss_mib``: VmRSS of each task's process and its descendants (``/proc/<pid>/status``;
  the pids from ``orchestrator.status``), in MiB;
* ``lag``: records on the experience topic the trainer has not consumed yet (the high
  watermarks minus the trainer group's committed positions, which it commits at every
  policy version), and ``lag_env_steps`` (records x the preset's ``chunk_steps``);
* ``env_steps_per_s``: env steps per second the trainer consumed over its last "progress"
  interval, and ``produced_env_steps_per_s``: the sum of the rollout workers' latest rates.

At the end, summary lines (one JSON object each, like the other benches):

* ``trainer_rss_growth_after_warmup``: trainer RSS at the end / RSS once warm (after the
  first ``--warmup`` fraction of the time, default 20 %); baseline 1.0, target within 10 %;
* ``worker_rss_growth_after_warmup``: the same, the largest over the rollout workers;
* ``consumer_lag_max`` / ``consumer_lag_end``: records, after warm-up / at the last sample;
* ``env_steps_per_s``: trainer-consumed, between its first and last progress events (its
  own clock, start-up left out); ``produced_mean``: the workers' rate, after warm-up.

The run is stopped and its topics deleted at the end, whatever happens.

Usage (stack up): ``KAFKA_BOOTSTRAP_SERVERS=host:port python bench/soak.py [--quick |
--minutes N] [--preset NAME] [--workers N]``. ``--quick`` takes <= 60 s in all.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import jsonl
from confluent_kafka import TopicPartition

from coach_stream.config import load_preset
from coach_stream.orchestrators import (
    LaunchSettings,
    LocalOrchestrator,
    SupervisorConfig,
    build_run_spec,
    warm_supervisor,
)
from coach_stream.orchestrators.launcher import prepare_topics
from coach_stream.orchestrators.progress import RunProgress
from coach_stream.transport import clients
from coach_stream.transport.admin import delete_run_topics
from coach_stream.transport.settings import KafkaSettings, RunTopics

UNREACHABLE = ("env_step_budget=1000000000000", "target_return=1000000000.0")
"""Overrides that keep any preset training until stopped."""


def emit(
    metric: str,
    value: float | None,
    unit: str,
    baseline: str | None,
    base: float | None,
    **extra: Any,
) -> None:
    jsonl.emit("soak", metric, value, unit, baseline, base, ratio_digits=3, **extra)


# --------------------------------------------------------------------------- probes


def _children() -> dict[int, list[int]]:
    """Parent pid -> child pids, for every process visible in /proc."""
    tree: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        # The command name may hold spaces and parentheses: fields follow the last ")".
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        tree.setdefault(ppid, []).append(int(entry))
    return tree


def _vm_rss_kib(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0  # gone, or a zombie (no VmRSS line)


def tree_rss_mib(pid: int, tree: dict[int, list[int]]) -> float | None:
    """RSS of ``pid`` and all its descendants (a vector env may run subprocesses)."""
    if not Path(f"/proc/{pid}").exists():
        return None
    total, stack = 0, [pid]
    while stack:
        current = stack.pop()
        total += _vm_rss_kib(current)
        stack += tree.get(current, [])
    return total / 1024


class LagProbe:
    """The trainer's consumer lag: high watermarks minus its group's committed positions.

    The trainer reads with ``assign`` (no group membership), so asking its group's committed
    offsets from another consumer disturbs nothing.
    """

    def __init__(self, settings: KafkaSettings, topics: RunTopics, group: str) -> None:
        self._consumer = clients.consumer(settings, group)
        self._topic = topics.experience
        metadata = self._consumer.list_topics(self._topic, timeout=10.0)
        self._partitions = sorted(metadata.topics[self._topic].partitions)

    def lag(self) -> int | None:
        """Records not yet consumed (None while the trainer has committed nothing)."""
        wanted = [TopicPartition(self._topic, p) for p in self._partitions]
        committed = self._consumer.committed(wanted, timeout=10.0)
        if all(tp.offset < 0 for tp in committed):
            return None
        total = 0
        for tp in committed:
            high = clients.watermarks(self._consumer, TopicPartition(self._topic, tp.partition),
                                      10.0)[1]  # fmt: skip
            total += high - max(tp.offset, 0)
        return total

    def close(self) -> None:
        self._consumer.close()


# --------------------------------------------------------------------------- soak


def soak(args: argparse.Namespace, kafka: str, state: Path) -> list[dict[str, Any]]:
    """Launch, sample until the time is up, stop; the samples."""
    preset = load_preset(args.preset)
    run_id = f"bench-soak-{uuid.uuid4().hex[:8]}"
    settings = KafkaSettings(bootstrap_servers=kafka)
    topics = RunTopics.for_run(run_id, settings.topic_prefix)
    orchestrator = LocalOrchestrator(state, config=warm_supervisor(SupervisorConfig(linger_s=2.0)))
    launch = LaunchSettings(
        preset=args.preset, run_id=run_id, workers=args.workers, kafka_bootstrap=kafka,
        checkpoints=(state / "checkpoints").as_uri(), seed=1, overrides=UNREACHABLE,
    )  # fmt: skip
    samples: list[dict[str, Any]] = []
    submitted = False
    probe: LagProbe | None = None
    began = time.monotonic()
    deadline = began + args.seconds
    try:
        prepare_topics(launch)
        probe = LagProbe(settings, topics, f"{settings.topic_prefix}.{run_id}.trainer")
        orchestrator.submit(build_run_spec(launch))
        submitted = True
        follower = orchestrator.task_lines(run_id)
        progress = RunProgress()
        while True:
            for task, line in follower.poll():
                progress.feed(task, line)
            record = orchestrator.record(run_id)
            if record.state.terminal or progress.finished is not None:
                raise RuntimeError(f"run {run_id} ended early ({record.state}); see "
                                   f"{orchestrator.run_dir(run_id).logs_dir}")  # fmt: skip
            now = time.monotonic()
            tree = _children()
            statuses = orchestrator.status(run_id)
            rss = {s.name: (tree_rss_mib(s.pid, tree) if s.pid else None) for s in statuses}
            steps, wall = progress.env_steps, progress.figure("time/wall_s")
            rate = progress.figure("time/env_steps_per_s")  # over its last progress interval
            produced = progress.worker_env_steps_per_s
            lag = probe.lag()
            sample = {
                "bench": "soak", "metric": "sample", "t": round(now - began, 1),
                "rss_mib": {k: None if v is None else round(v, 1) for k, v in rss.items()},
                "restarts": {s.name: s.restarts for s in statuses if s.restarts},
                "lag": lag,
                "lag_env_steps": None if lag is None else lag * preset.rollout.chunk_steps,
                "env_steps": steps,
                "env_steps_per_s": None if rate is None else round(rate, 1),
                "produced_env_steps_per_s": None if produced is None else round(produced, 1),
                "trainer_wall_s": None if wall is None else round(wall, 2),
            }  # fmt: skip
            samples.append(sample)
            print(json.dumps(sample), flush=True)
            if now >= deadline:
                break
            time.sleep(max(0.0, min(args.every, deadline - time.monotonic())))
    finally:
        if probe is not None:
            probe.close()
        if submitted:
            pids = [s.pid for s in orchestrator.status(run_id) if s.pid]
            orchestrator.stop(run_id)
            left = [pid for pid in pids if _alive(pid)]
            if left:
                print(f"# processes left after stop: {left}", file=sys.stderr)
        delete_run_topics(settings, topics)
    return samples


def _alive(pid: int) -> bool:
    """A live, non-zombie process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def summarize(samples: list[dict[str, Any]], warmup: float, seconds: float) -> None:
    warm = [s for s in samples if s["t"] >= warmup * seconds]
    if not warm:
        raise RuntimeError("no sample after warm-up; run longer (--minutes) or sample more often")
    first, end = warm[0], samples[-1]
    target = "within_10pct_of_1.0"

    def growth(task: str) -> float | None:
        before, after = first["rss_mib"].get(task), end["rss_mib"].get(task)
        return None if not before or after is None else after / before

    emit("trainer_rss_growth_after_warmup", growth("trainer"), "ratio", target, 1.0,
         rss_warm_mib=first["rss_mib"].get("trainer"), rss_end_mib=end["rss_mib"].get("trainer"),
         warm_at_s=first["t"], end_at_s=end["t"])  # fmt: skip
    workers = sorted(t for t in end["rss_mib"] if t.startswith("rollout-"))
    growths = {w: growth(w) for w in workers}
    known = {w: g for w, g in growths.items() if g is not None}
    worst = max(known, key=lambda w: known[w]) if known else None
    emit("worker_rss_growth_after_warmup", known.get(worst) if worst else None, "ratio", target,
         1.0, worker=worst, rss_warm_mib=first["rss_mib"].get(worst) if worst else None,
         rss_end_mib=end["rss_mib"].get(worst) if worst else None,
         all_workers={w: None if g is None else round(g, 3) for w, g in growths.items()},
         )  # fmt: skip
    lags = [s["lag"] for s in warm if s["lag"] is not None]
    emit("consumer_lag_max", max(lags) if lags else None, "records", None, None,
         after_warmup=True, lag_warm=first["lag"])  # fmt: skip
    emit("consumer_lag_end", end["lag"], "records", None, None,
         env_steps=end["lag_env_steps"])  # fmt: skip
    # Between the trainer's first and last progress events, on its own clock: start-up
    # (before the first event) is left out, and the events' timing does not alias.
    reported = [s for s in samples if s["env_steps"] is not None and s["trainer_wall_s"]]
    rate = span = None
    if len(reported) >= 2 and reported[-1]["trainer_wall_s"] > reported[0]["trainer_wall_s"]:
        span = reported[-1]["trainer_wall_s"] - reported[0]["trainer_wall_s"]
        rate = (reported[-1]["env_steps"] - reported[0]["env_steps"]) / span
    produced = [s["produced_env_steps_per_s"] for s in warm if s["produced_env_steps_per_s"]]
    emit("env_steps_per_s", rate, "env_steps/s", None, None, env_steps_end=end["env_steps"],
         measured_s=None if span is None else round(span, 1),
         produced_mean=round(sum(produced) / len(produced), 1) if produced else None,
         )  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="<= 60 s in all (a smoke run).")
    parser.add_argument("--minutes", type=float, default=10.0, help="Sampled time (default 10).")
    parser.add_argument("--preset", default="cartpole-dqn")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--every", type=float, help="Seconds between samples (5; quick: 2).")
    parser.add_argument("--warmup", type=float, default=0.2, help="Warm-up fraction of the time.")
    args = parser.parse_args()
    kafka = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    if not kafka:
        sys.exit("KAFKA_BOOTSTRAP_SERVERS is not set: start the stack (coach-stream stack up) "
                 "and eval \"$(coach-stream stack env)\".")  # fmt: skip
    # --quick: start-up (topics, supervisor, warm forks) takes ~10 s, stopping a few more.
    args.seconds = 35.0 if args.quick else args.minutes * 60.0
    args.every = args.every or (2.0 if args.quick else 5.0)
    with tempfile.TemporaryDirectory(prefix="bench-soak-") as tmp:
        samples = soak(args, kafka, Path(tmp))
    summarize(samples, args.warmup, args.seconds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
