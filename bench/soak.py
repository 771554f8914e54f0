"""Soak: a sustained real run, watched for memory growth, consumer lag and throughput.

A preset (default ``cartpole-dqn``, ASYNC) is launched as a real run (topics created,
trainer, rollout workers and evaluator started as processes by the local orchestrator) with
an env-step budget it cannot spend and a target return it cannot reach, so it trains for
the whole time. Every few seconds one ``sample`` line reports:

* ``rss_mib``: VmRSS of each task's process and its descendants (``/proc/<pid>/status``;
  the pids from ``orchestrator.status``), in MiB; ``cpu_s``: their CPU seconds so far;
* ``lag``: records on the experience topic the trainer has not consumed yet (the high
  watermarks minus the trainer group's committed positions, which its reader commits
  every 0.25 s while reading: ``transport.backlog``, the figure the workers' rate limit
  bounds), and ``lag_env_steps`` (records x the preset's ``chunk_steps``, an upper bound);
* ``env_steps_per_s``: env steps per second the trainer consumed over its last "progress"
  interval, and ``produced_env_steps_per_s``: the sum of the rollout workers' latest rates;
  ``updates_per_s``: the trainer's gradient steps; ``trainer_s``: its seconds so far spent
  reading (waiting for experience included), learning and publishing; ``limit_wait_s``: per
  worker, seconds its rate limit (``rollout.async_max_unread_steps``) has held it so far.

At the end, summary lines (one JSON object each, like the other benches):

* ``trainer_rss_growth_after_warmup``: trainer RSS at the end / RSS once warm (after the
  first ``--warmup`` fraction of the time, default 20 %); baseline 1.0, target within 10 %;
* ``worker_rss_growth_after_warmup``: the same, the largest over the rollout workers;
* ``consumer_lag_max`` / ``consumer_lag_end``: records, after warm-up / at the last sample;
* ``env_steps_per_s``: trainer-consumed, between its first and last progress events (its
  own clock, start-up left out); ``produced_mean``: the workers' rate, after warm-up;
* ``consumer_lag_slope_second_half``: the least-squares trend of the lag over the second
  half of the sampled time, records/s, with ``bounded``: whether that trend adds at most a
  quarter of the largest lag after warm-up over the half (a lag that grows without bound
  adds about half of it; a bounded one only its noise), or the second half's largest lag
  is no new high (at most 10 % over the warm first half's);
* ``verdict``: value 1 when both targets hold (RSS within 10 % of the warm value for the
  trainer and every worker, and the lag bounded), else 0, with each part.

The run is stopped and its topics deleted at the end, whatever happens.

Usage (stack up): ``KAFKA_BOOTSTRAP_SERVERS=host:port python bench/soak.py [--quick |
--minutes N] [--preset NAME] [--workers N] [--set KEY=VALUE ...]``. ``--quick`` takes <= 60 s
in all; ``--set rollout.async_max_unread_steps=null`` runs without the workers' rate limit.
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

from coach_stream.config import load_preset
from coach_stream.observability.fold import RunTelemetry
from coach_stream.orchestrators import (
    LaunchSettings,
    LocalOrchestrator,
    SupervisorConfig,
    build_run_spec,
    warm_supervisor,
)
from coach_stream.orchestrators.launcher import prepare_topics
from coach_stream.transport.admin import delete_run_topics
from coach_stream.transport.backlog import KafkaExperienceBacklog
from coach_stream.transport.names import trainer_group
from coach_stream.transport.settings import KafkaSettings, RunTopics

UNREACHABLE = ("env_step_budget=1000000000000", "target_return=1000000000.0")
"""Overrides that keep any preset training until stopped."""
RSS_TOLERANCE = 0.10  # the target: RSS flat within 10 % after warm-up
LAG_GROWTH_TOLERANCE = 0.25  # of the largest lag after warm-up, added by the trend over a half
TICKS_PER_S = os.sysconf("SC_CLK_TCK")
PHASES = ("read", "learn", "publish")  # where the trainer's time goes (time/<phase>_s)


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


def _cpu_ticks(pid: int) -> int:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0
    return int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of stat)


def _tree(pid: int, tree: dict[int, list[int]]) -> list[int]:
    """``pid`` and all its descendants (a vector env may run subprocesses)."""
    found, stack = [], [pid]
    while stack:
        current = stack.pop()
        found.append(current)
        stack += tree.get(current, [])
    return found


def tree_rss_mib(pid: int, tree: dict[int, list[int]]) -> float | None:
    """RSS of ``pid`` and all its descendants."""
    if not Path(f"/proc/{pid}").exists():
        return None
    return sum(_vm_rss_kib(p) for p in _tree(pid, tree)) / 1024


def tree_cpu_s(pid: int, tree: dict[int, list[int]]) -> float | None:
    """CPU seconds (user + system) of ``pid`` and its live descendants so far."""
    if not Path(f"/proc/{pid}").exists():
        return None
    return sum(_cpu_ticks(p) for p in _tree(pid, tree)) / TICKS_PER_S


# --------------------------------------------------------------------------- soak


def soak(args: argparse.Namespace, kafka: str, state: Path) -> list[dict[str, Any]]:
    """Launch, sample until the time is up, stop; the samples."""
    overrides = (*UNREACHABLE, *args.set)
    preset = load_preset(args.preset, overrides)
    run_id = f"bench-soak-{uuid.uuid4().hex[:8]}"
    settings = KafkaSettings(bootstrap_servers=kafka)
    topics = RunTopics.for_run(run_id)
    orchestrator = LocalOrchestrator(state, config=warm_supervisor(SupervisorConfig(linger_s=2.0)))
    launch = LaunchSettings(
        preset=args.preset, run_id=run_id, workers=args.workers, kafka_bootstrap=kafka,
        checkpoints=(state / "checkpoints").as_uri(), seed=1, overrides=overrides,
    )  # fmt: skip
    samples: list[dict[str, Any]] = []
    submitted = False
    probe: KafkaExperienceBacklog | None = None
    began = time.monotonic()
    deadline = began + args.seconds
    try:
        prepare_topics(launch)
        probe = KafkaExperienceBacklog(settings, topics, trainer_group(run_id),
                                       timeout=10.0, retry_after_s=0.0)  # fmt: skip
        orchestrator.submit(build_run_spec(launch))
        submitted = True
        follower = orchestrator.task_lines(run_id)
        progress = RunTelemetry(run_id)
        while True:
            for task, line in follower.poll():
                progress.feed_line(task, line)
            record = orchestrator.record(run_id)
            if record.state.terminal or progress.finished is not None:
                raise RuntimeError(f"run {run_id} ended early ({record.state}); see "
                                   f"{orchestrator.run_dir(run_id).logs_dir}")  # fmt: skip
            now = time.monotonic()
            tree = _children()
            statuses = orchestrator.status(run_id)
            rss = {s.name: (tree_rss_mib(s.pid, tree) if s.pid else None) for s in statuses}
            cpu = {s.name: (tree_cpu_s(s.pid, tree) if s.pid else None) for s in statuses}
            steps, wall = progress.env_steps, progress.figure("time/wall_s")
            rate = progress.figure("time/env_steps_per_s")  # over its last progress interval
            updates = progress.figure("time/updates_per_s")
            produced = progress.worker_env_steps_per_s
            held = {task: event.get("limit_wait_s")
                    for task, event in progress.worker_progress.items()
                    if task.startswith("rollout-")}  # fmt: skip
            lag = probe.unread()
            sample = {
                "bench": "soak", "metric": "sample", "t": round(now - began, 1),
                "rss_mib": {k: None if v is None else round(v, 1) for k, v in rss.items()},
                "cpu_s": {k: None if v is None else round(v, 1) for k, v in cpu.items()},
                "restarts": {s.name: s.restarts for s in statuses if s.restarts},
                "lag": lag,
                "lag_env_steps": None if lag is None else lag * preset.rollout.chunk_steps,
                "env_steps": steps,
                "env_steps_per_s": None if rate is None else round(rate, 1),
                "produced_env_steps_per_s": None if produced is None else round(produced, 1),
                "updates_per_s": None if updates is None else round(updates, 1),
                "trainer_s": {k: progress.figure(f"time/{k}_s") for k in PHASES},
                "limit_wait_s": held,
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


def summarize(
    samples: list[dict[str, Any]], warmup: float, seconds: float, limit_steps: int | None
) -> None:
    warm = [s for s in samples if s["t"] >= warmup * seconds]
    if not warm:
        raise RuntimeError("no sample after warm-up; run longer (--minutes) or sample more often")
    first, end = warm[0], samples[-1]
    target = "within_10pct_of_1.0"

    def growth(task: str) -> float | None:
        before, after = first["rss_mib"].get(task), end["rss_mib"].get(task)
        return None if not before or after is None else after / before

    def flat(ratio: float | None) -> bool:
        return ratio is not None and abs(ratio - 1.0) <= RSS_TOLERANCE

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
    lag_max = max(lags) if lags else None
    emit("consumer_lag_max", lag_max, "records", None, None,
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
    half = [(s["t"], s["lag"]) for s in samples if s["t"] >= seconds / 2 and s["lag"] is not None]
    slope = _slope(half)
    added = None if slope is None else slope * (half[-1][0] - half[0][0])
    # Bounded: the trend over the second half adds at most a quarter of the largest lag
    # (+1 record: a lag near 0 may wobble by one), or the second half sets no new high
    # (a lag that grows without bound does; one that swings under a limit does not, even
    # when a swing's low at the half's start tilts the trend).
    early = [s["lag"] for s in warm if s["t"] < seconds / 2 and s["lag"] is not None]
    late_max = max((lag for _, lag in half), default=None)
    no_new_high = bool(early) and late_max is not None and late_max <= max(early) * 1.1 + 1
    flat_trend = added is not None and added <= LAG_GROWTH_TOLERANCE * (lag_max or 0) + 1
    bounded = flat_trend or no_new_high
    emit("consumer_lag_slope_second_half", slope, "records/s",
         f"bounded_if_the_trend_adds_<=_{LAG_GROWTH_TOLERANCE}_x_lag_max_or_no_new_high", None,
         bounded=bounded, added_over_half=None if added is None else round(added, 1),
         max_first_half=max(early) if early else None, max_second_half=late_max,
         lag_max_after_warmup=lag_max, samples=len(half),
         from_s=half[0][0] if half else None, to_s=half[-1][0] if half else None,
         )  # fmt: skip
    # The same lag in env steps, against the workers' rate limit (what bounds it by design;
    # it may be passed by the shares in flight when the limit is checked).
    steps = [s["lag_env_steps"] for s in warm if s["lag_env_steps"] is not None]
    emit(
        "consumer_lag_env_steps_max",
        max(steps) if steps else None,
        "env_steps",
        "rollout.async_max_unread_steps",
        limit_steps,
    )
    trainer, worst_worker = growth("trainer"), known.get(worst) if worst else None
    rss_flat = flat(trainer) and bool(known) and all(flat(g) for g in known.values())
    emit("verdict", float(rss_flat and bounded), "pass", "rss_flat_and_lag_bounded", 1.0,
         rss_within_10pct=rss_flat, trainer_rss_growth=trainer,
         worker_rss_growth_max=worst_worker, lag_bounded=bounded,
         lag_slope_second_half=None if slope is None else round(slope, 3), lag_max=lag_max,
         )  # fmt: skip


def _slope(points: list[tuple[float, float]]) -> float | None:
    """Least-squares slope of y over t (None with fewer than 3 points)."""
    if len(points) < 3:
        return None
    n = len(points)
    mean_t = sum(t for t, _ in points) / n
    mean_y = sum(y for _, y in points) / n
    spread = sum((t - mean_t) ** 2 for t, _ in points)
    if spread == 0:
        return None
    return sum((t - mean_t) * (y - mean_y) for t, y in points) / spread


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="<= 60 s in all (a smoke run).")
    parser.add_argument("--minutes", type=float, default=10.0, help="Sampled time (default 10).")
    parser.add_argument("--preset", default="cartpole-dqn")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--every", type=float, help="Seconds between samples (5; quick: 2).")
    parser.add_argument("--warmup", type=float, default=0.2, help="Warm-up fraction of the time.")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="A preset override (repeatable), e.g. "
                             "rollout.async_max_unread_steps=null.")  # fmt: skip
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
    limit = load_preset(args.preset, (*UNREACHABLE, *args.set)).rollout.async_max_unread_steps
    summarize(samples, args.warmup, args.seconds, limit)
    return 0


if __name__ == "__main__":
    sys.exit(jsonl.run(main))
