"""Scale: env steps/s as rollout workers are added, beside SB3's SubprocVecEnv.

Two environments, each at 1, 2, 4, 8 and 16 rollout workers (``--workers``) feeding one
trainer that learns. Each environment is one real run through the local orchestrator
(topics created, trainer and the largest count of workers started as processes; no
evaluator: the target return is out of reach, and on Pong its 20 greedy envs would take a
worker's share of the cores), measured at every count from the largest down: between
counts the surplus workers are stopped (SIGSTOP: a stopped process holds its memory, not
a core), so the counts share the trainer and the broker and differ only in the workers
acting; each window starts once every acting worker has reported again since it was
resumed. While SB3 is measured beside a count, the whole run is stopped.

* ``latency``: CartPole-v1 behind ``env_wrappers: [delay:2ms]`` (every step sleeps 2 ms
  first, as a remote simulator would take), ``cartpole-impala`` (ASYNC: workers never
  wait for a version; the learner corrects their lag with V-trace), 8 envs per worker. The
  cores are not the limit: a worker spends most of its time in the env's latency.
* ``pong``: ALE/Pong-v5 through the ``atari`` wrapper (4 stacked 84x84 uint8 frames),
  ``pong-ppo``'s env, network and 8 envs per worker, learned by IMPALA (ASYNC; SYNC PPO
  would hold every worker while a CPU trainer updates), 32-step chunks, the experience
  compressed by the codec measured to cost less (``--codec auto``; below).

Per point (one JSON line each; ``<part>_<figure>_<N>w``):

* ``env_steps_per_s``: produced, the sum of the workers' rates over the measured window
  (their progress events' own clocks); baseline: SB3 at N processes (below);
* ``transitions_per_s_consumed``: read by the trainer (learned from, plus any it dropped as
  too stale), its progress events over the window; baseline: produced;
* ``consumer_lag``: records the trainer has not read (``transport/backlog.py``: end
  offsets minus its committed positions), mean over the window, with max, end and the
  trend (records/s: above 0, the trainer falls behind);
* ``policy_lag``: versions between the trainer's newest and a chunk's behaviour version as
  the trainer read them (mean of its ``rollout/policy_lag_mean`` over the window);
* ``cpu_s_per_s``: CPU seconds per second of the run's processes (each with its children,
  from /proc), per process in ``per_process``; baseline: SB3's processes at the same N;
* ``pong`` also: ``obs_mb_per_s_into_trainer`` (uncompressed observation bytes the trainer
  read per second: its consumed steps x (chunk_steps + 1) / chunk_steps rows of 28,224
  bytes; baseline: the issue's target, 200 MB/s) and ``obs_mb_per_s_produced``.

Summary lines: ``<part>_startup_s_<N>w`` (launch to every worker's first progress report,
after its first env steps), ``latency_env_scaling_efficiency`` (env steps/s at the largest
count / (count x one worker's); baseline: SB3's same figure; target 0.8; every count's in
``linear_by_count``) and the same for pong;
``pong_trainer_read_mb_per_s``: after the largest Pong point, a reader with the trainer's
settings and door (``ChunkSpec``) reads the run's experience topic back from the start:
the uncompressed observation MB/s the trainer's read path (fetch, decompress, decode,
check) holds when no learner or env shares the cores with it; baseline: the 200 MB/s.
``pong_obs_mb_per_s_env_ceiling``: before any Pong point, one process per core steps the
preset's env (8 envs, the ``atari`` wrapper) under random actions and nothing else: the
observation MB/s the machine's cores can make at all, whatever carries them.
``pong_env_steps_vs_env_ceiling_<N>w``: each Pong point's env steps/s produced, with the
trainer learning, against that ceiling (issue 23's target: 0.8), with the CPU split of the
window (trainer, workers, broker, other, in CPU s/s) and what limits it: when every core
is busy, the trainer's share is what the workers cannot have.

The codec (``pong_compression_choice``): real Pong chunks (one share of a worker under a
random policy, ``bench/compression.py``'s recorder) compressed and decompressed per record
with lz4 and zstd at librdkafka's default levels. Both shrink frames by two orders of
magnitude, so the bytes left on the wire and in the broker are small either way, and on a
machine where the cores are the limit the codec that spends less CPU per raw MB wins; one
whose ratio were below 10x would lose instead (its bytes would then cost the broker and
the network more than the CPU saved).

SB3 baseline: ``SubprocVecEnv`` with N processes (one env each, SB3's only layout), the
same env and wrappers (``coach_stream.envs.wrappers``), PPO's ``MlpPolicy`` (64x64 tanh, as
ours) or ``CnnPolicy`` (Nature CNN, as ours), stepped by SB3's own ``collect_rollouts``
(policy forward pass, vec env step, rollout buffer) for the same window. That is SB3
PPO's ``learn()`` minus its gradient updates, so it is an upper bound of SB3's env steps/s
while learning; ours runs its learner concurrently on the same cores. One torch thread, as
our workers (with two, on a busy 2-core machine, SB3's forward pass took 10-17 ms instead
of 0.8 ms). The baseline is measured in the same run, right after our point at the same N.

Usage (stack up): ``KAFKA_BOOTSTRAP_SERVERS=host:port python bench/scale.py [--quick]
[--workers 1,2,4,8,16] [--seconds S] [--parts latency,pong]``. ``--quick``: latency at 1, 2
and 4 workers and pong at 1, a few seconds each, <= 60 s in all.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import importlib
import os
import signal
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jsonl
import torch
from confluent_kafka import TopicPartition
from soak import TICKS_PER_S, _children, _slope, tree_cpu_s

from coach_stream.algorithms import chunk_spec
from coach_stream.config import Preset, load_preset
from coach_stream.envs import probe_shape
from coach_stream.observability.fold import parse_event
from coach_stream.orchestrators import (
    LaunchSettings,
    LocalOrchestrator,
    SupervisorConfig,
    build_run_spec,
    warm_supervisor,
)
from coach_stream.orchestrators.launcher import prepare_topics
from coach_stream.transport import clients
from coach_stream.transport.admin import delete_run_topics
from coach_stream.transport.backlog import KafkaExperienceBacklog
from coach_stream.transport.names import trainer_group
from coach_stream.transport.reader import KafkaExperienceReader
from coach_stream.transport.settings import KafkaSettings, RunTopics

UNREACHABLE = ("env_step_budget=1000000000000", "target_return=1000000000.0")
"""Overrides that keep a run training until it is stopped."""
MB_TARGET = 200.0  # the Pong target, uncompressed observation MB/s into the trainer
SCALING_TARGET = 0.8  # the latency target: >= 80 % of linear at the largest count
CEILING_TARGET = 0.8  # issue 23: frames produced with the trainer learning / the bare env
MIN_RATIO = 10.0  # a codec compressing frames less than this loses on bytes, not CPU
PHASES = ("read", "learn", "publish")  # where the trainer's time goes (time/<phase>_s)
SB3_STEPS = 32  # steps per env of one SB3 collect_rollouts (a short rollout: many per window)


def emit(metric: str, value: float | None, unit: str, baseline: str | None,
         base: float | None, **extra: Any) -> None:  # fmt: skip
    jsonl.emit("scale", metric, value, unit, baseline, base, ratio_digits=3, **extra)


# --------------------------------------------------------------------------- the two envs


@dataclass(frozen=True)
class Part:
    name: str
    preset_name: str
    overrides: tuple[str, ...]
    sb3_policy: str

    @functools.cached_property
    def preset(self) -> Preset:
        return load_preset(self.preset_name, self.overrides)

    @property
    def obs_bytes(self) -> int:
        shape = probe_shape(self.preset.env_id, self.preset.env_wrappers)
        return shape.obs_dim * (1 if shape.obs_dtype == "uint8" else 4)


def latency_part(delay: str, envs_per_worker: int) -> Part:
    overrides = (f"env_wrappers=[delay:{delay}]", f"rollout.num_envs={envs_per_worker}")
    return Part("latency", "cartpole-impala", (*overrides, *UNREACHABLE), "MlpPolicy")


def pong_part(codec: str) -> Part:
    impala = (
        "algorithm=impala", "mode=async", "ppo=null", "rollout.chunk_steps=32",
        "impala.learning_rate=0.00025", "impala.batch_steps=512", "impala.ent_coef=0.01",
        "impala.publish_every=1", "trainer.checkpoint_every=10", "trainer.device=cpu",
        f"rollout.compression={codec}",
    )  # fmt: skip
    return Part("pong", "pong-ppo", (*impala, *UNREACHABLE), "CnnPolicy")


# --------------------------------------------------------------------------- ours


@dataclass
class Point:
    """One measured point of ours."""

    workers: int
    produced: float
    consumed: float | None
    """None when the trainer reported no progress inside the window (a slow learner)."""
    per_worker: dict[str, float]
    lag: list[tuple[float, int]]
    policy_lag: float | None
    cpu: dict[str, float]
    window_s: float
    extra: dict[str, Any] = field(default_factory=dict)
    machine: dict[str, Any] = field(default_factory=dict)
    """The whole machine over the window: busy cores (all users), the shared broker."""


def _rate(events: list[dict[str, Any]], since: float, start: float, steps: Any) -> float | None:
    """Steps/s over a task's progress events (their own clocks, Unix seconds): from its last
    event at or before ``start`` (else its first after it) to its last one, counting only
    events after ``since`` (when the task last resumed: older ones span the pause)."""
    fresh = [e for e in events if float(e["time"]) >= since]
    before = [e for e in fresh if float(e["time"]) <= start]
    if not fresh:
        return None
    first, last = (before[-1] if before else fresh[0]), fresh[-1]
    span = float(last["time"]) - float(first["time"])
    return None if span <= 0 else (steps(last) - steps(first)) / span


def _worker_steps(event: dict[str, Any]) -> float:
    return float(event.get("env_steps") or 0)


def _trainer_steps(event: dict[str, Any]) -> float:
    """What the trainer read: steps it kept plus steps it dropped as too stale."""
    return float(event.get("time/env_steps") or 0) + float(
        event.get("rollout/dropped_stale_steps") or 0
    )


class LogEnds:
    """Records written to the experience topic and records the trainer has read (its
    committed positions), summed over partitions: rates that need no progress event."""

    def __init__(self, settings: KafkaSettings, topics: RunTopics, group: str) -> None:
        self.topic = topics.experience
        self.consumer = clients.consumer(settings, group)  # assigns nothing: joins no group
        found = self.consumer.list_topics(self.topic, timeout=10.0).topics[self.topic]
        self.partitions = [TopicPartition(self.topic, p) for p in sorted(found.partitions)]

    def __call__(self) -> tuple[int, int]:
        committed = self.consumer.committed(self.partitions, timeout=5.0)
        read = sum(max(tp.offset, 0) for tp in committed)
        written = sum(clients.watermarks(self.consumer, tp, 5.0)[1] for tp in self.partitions)
        return written, read

    def close(self) -> None:
        self.consumer.close()


def broker_pid() -> int | None:
    """The local stack's Kafka broker (shared with whatever else uses the stack)."""
    for entry in os.listdir("/proc"):
        try:
            argv = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if entry.isdigit() and b"kafka.Kafka" in argv:
            return int(entry)
    return None


def machine_busy_s() -> float:
    """CPU seconds every core of the machine has been busy (all users), from /proc/stat."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return (sum(fields[:8]) - idle) / TICKS_PER_S


def _cpu(pids: dict[str, int]) -> dict[str, float]:
    tree = _children()
    return {task: tree_cpu_s(pid, tree) or 0.0 for task, pid in pids.items()}


def _signal(pids: list[int], sig: signal.Signals) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


def measure_part(
    part: Part,
    counts: list[int],
    args: argparse.Namespace,
    kafka: str,
    state: Path,
    keep_topic: Any = None,
    ceiling: float | None = None,
) -> tuple[dict[int, Point], dict[int, Sb3Point]]:
    """One run with the largest count of workers, measured at every count from the largest
    down, SB3 beside each count; (our points, SB3's points) by count.

    Between counts the surplus workers are stopped (SIGSTOP: a stopped process holds its
    memory, not a core), so every count has the same trainer and broker and differs only
    in the workers acting; while SB3 is measured, the whole run is stopped. Each window
    starts once every acting worker has reported again since it was resumed.
    ``keep_topic(settings, topics, run_id)``: called after the run stopped and before its
    topics are deleted (the Pong read-back).
    """
    top = max(counts)
    run_id = f"bench-scale-{part.name}-{uuid.uuid4().hex[:6]}"
    settings = KafkaSettings(bootstrap_servers=kafka)
    topics = RunTopics.for_run(run_id)
    orchestrator = LocalOrchestrator(state, config=warm_supervisor(SupervisorConfig(linger_s=2.0)))
    launch = LaunchSettings(
        preset=part.preset_name, run_id=run_id, workers=top, kafka_bootstrap=kafka,
        checkpoints=(state / "checkpoints").as_uri(), seed=1, overrides=part.overrides,
        evaluator=False,
    )  # fmt: skip
    names = [f"rollout-{i}" for i in range(top)]
    series: dict[str, list[dict[str, Any]]] = {}
    ours: dict[int, Point] = {}
    sb3: dict[int, Sb3Point] = {}
    submitted, probe, ends = False, None, None
    pids: dict[str, int] = {}
    began = time.monotonic()
    try:
        prepare_topics(launch)
        group = trainer_group(run_id)
        probe = KafkaExperienceBacklog(settings, topics, group, timeout=5.0, retry_after_s=0.0)
        ends = LogEnds(settings, topics, group)
        orchestrator.submit(build_run_spec(launch))
        submitted = True
        importlib.import_module("stable_baselines3")  # seconds, while the run starts anyway
        follower = orchestrator.task_lines(run_id)

        def pump() -> None:
            for task, line in follower.poll():
                event = parse_event(line)
                if event is not None and event["event"] == "progress":
                    series.setdefault(task, []).append(event)
            if orchestrator.record(run_id).state.terminal:
                raise RuntimeError(f"run {run_id} ended early; see "
                                   f"{orchestrator.run_dir(run_id).logs_dir}")  # fmt: skip

        def reported(tasks: list[str], since: float) -> bool:
            return all(series.get(t) and float(series[t][-1]["time"]) > since for t in tasks)

        def wait_for(tasks: list[str], since: float, what: str) -> None:
            deadline = time.monotonic() + args.start_timeout
            while not reported(tasks, since):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"run {run_id}: {what} within {args.start_timeout:.0f} s")
                pump()
                time.sleep(0.2)

        wait_for([*names, "trainer"], 0.0, "not every worker stepped")
        startup = time.monotonic() - began
        emit(f"{part.name}_startup_s_{top}w", startup, "s", None, None, workers=top,
             what="launch (topics, supervisor, trainer's first version) to every worker's "
                  "first progress report (after its first env steps)")  # fmt: skip
        pids = {s.name: s.pid for s in orchestrator.status(run_id) if s.pid}
        broker = broker_pid()
        for n in sorted(counts, reverse=True):
            acting = names[:n]
            _signal([pids[w] for w in names[n:]], signal.SIGSTOP)
            resumed = time.time()
            _signal([pids["trainer"], *(pids[w] for w in acting)], signal.SIGCONT)
            wait_for(acting, resumed, f"{n} workers did not report after resuming")
            time.sleep(args.warmup)
            pump()
            watched = {t: pids[t] for t in ("trainer", *acting)}
            if broker is not None:
                watched["kafka_broker_shared"] = broker
            busy_before, start = machine_busy_s(), time.time()
            cpu_before, ends_before, t0 = _cpu(watched), ends(), time.monotonic()
            lag: list[tuple[float, int]] = []
            while (now := time.monotonic()) - t0 < args.seconds:
                unread = probe.unread()
                if unread is not None:
                    lag.append((now - t0, unread))
                pump()
                time.sleep(min(0.5, max(0.0, args.seconds - (time.monotonic() - t0))))
            pump()
            window = time.monotonic() - t0
            cpu_after, ends_after, busy = _cpu(watched), ends(), machine_busy_s() - busy_before
            ours[n] = _point(n, series, acting, resumed, start, window, lag,
                             {t: (cpu_after[t] - cpu_before[t]) / window for t in watched},
                             ends_before, ends_after, busy)  # fmt: skip
            _signal(list(pids.values()), signal.SIGSTOP)  # SB3 gets the cores to itself
            t1 = time.monotonic()
            sb3[n] = run_sb3(part, n, args.seconds)
            print(f"# {part.name} {n}: ours {window:.1f} s, sb3 {time.monotonic() - t1:.1f} s",
                  file=sys.stderr)  # fmt: skip
            report_point(part, ours[n], sb3[n], ceiling)
    finally:
        _signal(list(pids.values()), signal.SIGCONT)  # a stopped task cannot act on SIGTERM
        for closing in (probe, ends):
            if closing is not None:
                closing.close()
        if submitted:
            orchestrator.stop(run_id)
        try:
            if keep_topic is not None and submitted:
                keep_topic(settings, topics, run_id)
        finally:
            delete_run_topics(settings, topics)
    return ours, sb3


def _point(
    n: int,
    series: dict[str, list[dict[str, Any]]],
    acting: list[str],
    resumed: float,
    start: float,
    window: float,
    lag: list[tuple[float, int]],
    cpu: dict[str, float],
    ends_before: tuple[int, int],
    ends_after: tuple[int, int],
    busy: float,
) -> Point:
    per_worker = {w: _rate(series[w], resumed, start, _worker_steps) or 0.0 for w in acting}
    trainer = [e for e in series["trainer"] if float(e["time"]) >= resumed]
    in_window = [e for e in trainer if float(e["time"]) >= start] or trainer[-1:]
    lags = [float(e["rollout/policy_lag_mean"]) for e in in_window
            if e.get("rollout/policy_lag_mean") is not None]  # fmt: skip
    broker = cpu.pop("kafka_broker_shared", None)
    last = in_window[-1] if in_window else {}
    return Point(
        workers=n,
        produced=sum(per_worker.values()),
        consumed=_rate(series["trainer"], resumed, start, _trainer_steps),
        per_worker=per_worker,
        lag=lag,
        policy_lag=sum(lags) / len(lags) if lags else None,
        cpu=cpu,
        window_s=window,
        extra={
            "trainer_updates_per_s": last.get("time/updates_per_s"),
            "trainer_s_since_start": {k: last.get(f"time/{k}_s") for k in PHASES},
            "dropped_stale_steps": last.get("rollout/dropped_stale_steps"),
            "records_per_s_written": round((ends_after[0] - ends_before[0]) / window, 1),
            "records_per_s_read": round((ends_after[1] - ends_before[1]) / window, 1),
        },
        machine={
            "busy_cores": round(busy / window, 2),  # every user's processes, ours included
            "cores": os.cpu_count(),
            "kafka_broker_cpu_s_per_s": None if broker is None else round(broker, 3),
            "load1": round(os.getloadavg()[0], 2),
        },
    )  # fmt: skip


# --------------------------------------------------------------------------- SB3


def sb3_env(env_id: str, wrappers: tuple[str, ...]) -> Any:
    """One env with our wrappers, as each SubprocVecEnv process makes it."""
    import gymnasium as gym

    from coach_stream.envs.wrappers import import_env_package, make_kwargs, wrapper_fns

    import_env_package(env_id)
    env = gym.make(env_id, **make_kwargs(wrappers))
    for wrap in wrapper_fns(wrappers):
        env = wrap(env)
    return env


@dataclass
class Sb3Point:
    processes: int
    env_steps_per_s: float
    cpu_s_per_s: float
    window_s: float
    busy_cores: float
    """Cores busy over the window, every user's processes included."""


def run_sb3(part: Part, processes: int, seconds: float) -> Sb3Point:
    """SB3 PPO's ``collect_rollouts`` over a SubprocVecEnv of ``processes`` envs."""
    from stable_baselines3 import PPO
    from stable_baselines3.common.vec_env import SubprocVecEnv

    preset = part.preset
    make = functools.partial(sb3_env, preset.env_id, preset.env_wrappers)
    venv = SubprocVecEnv([make] * processes, start_method="fork")  # fast to start
    threads = torch.get_num_threads()
    # One thread, as our workers act: with two, on a busy 2-core machine, one forward pass
    # of the 64x64 MLP takes 10-17 ms instead of 0.8 ms (the threads wait for each other).
    torch.set_num_threads(1)
    try:
        venv.seed(1)
        model = PPO(part.sb3_policy, venv, n_steps=SB3_STEPS, batch_size=SB3_STEPS * processes,
                    device="cpu", seed=1, verbose=0)  # fmt: skip
        _, callback = model._setup_learn(total_timesteps=10**12, callback=None)
        callback.on_training_start(locals(), globals())

        def collect() -> None:
            assert model.env is not None
            model.collect_rollouts(model.env, callback, model.rollout_buffer, SB3_STEPS)

        collect()  # warm-up: the subprocesses have started and stepped
        me = os.getpid()
        cpu_before, busy_before = tree_cpu_s(me, _children()) or 0.0, machine_busy_s()
        t0, steps = time.monotonic(), 0
        while time.monotonic() - t0 < seconds:
            collect()
            steps += SB3_STEPS * processes
        window = time.monotonic() - t0
        cpu = ((tree_cpu_s(me, _children()) or 0.0) - cpu_before) / window
        busy = (machine_busy_s() - busy_before) / window
    finally:
        venv.close()
        torch.set_num_threads(threads)
    return Sb3Point(processes, steps / window, cpu, window, busy)


# --------------------------------------------------------------------------- codec


def choose_codec() -> str:
    """lz4 or zstd on real Pong chunks: the one spending less CPU per raw MB (ratio >= 10x)."""
    from compression import codecs, measure, record

    data = record("pong-ppo", shares=1)
    raw = sum(len(r) for r in data.records)
    results = {c.name: measure(c, data.records, repeats=2) for c in codecs()}
    fit = {name: s for name, (ratio, s) in results.items() if ratio >= MIN_RATIO}
    chosen = min(fit or {n: s for n, (_, s) in results.items()}, key=lambda n: results[n][1])
    other = "zstd" if chosen == "lz4" else "lz4"
    emit("pong_compression_choice", results[chosen][0], "x", other, results[other][0],
         chosen=chosen, reason="less CPU per raw MB (compress + decompress), ratio >= 10x",
         mb_per_s={n: round(raw / s / 1e6, 1) for n, (_, s) in results.items()},
         ratio_x={n: round(r, 1) for n, (r, _) in results.items()},
         us_per_step={n: round(s / data.steps * 1e6, 2) for n, (_, s) in results.items()},
         env_step_us=round(data.step_us, 1), raw_mb=round(raw / 1e6, 1))  # fmt: skip
    return chosen


# --------------------------------------------------------------------------- read-back


def read_back(part: Part, seconds: float) -> Any:
    """A reader with the trainer's settings and door reads a stopped run's topic back."""
    shape = probe_shape(part.preset.env_id, part.preset.env_wrappers)
    result: dict[str, float] = {}

    def read(settings: KafkaSettings, topics: RunTopics, run_id: str) -> None:
        spec = chunk_spec(part.preset, run_id, shape)
        group = f"bench-scale-readback-{uuid.uuid4().hex[:6]}"
        with KafkaExperienceReader(settings, topics, group, spec=spec,
                                   commit_every_s=None) as reader:  # fmt: skip
            end = reader.end_offsets()  # connected: the clock starts at the first fetch
            obs = steps = 0
            t0, cpu0 = time.perf_counter(), time.process_time()
            while any(reader.positions().get(p, 0) < e for p, e in end.items()):
                chunks = reader.read(part.preset.trainer.read_batch, 1.0)
                obs += sum(c.observations.nbytes for c in chunks)
                steps += sum(c.num_steps for c in chunks)
                if time.perf_counter() - t0 >= seconds:
                    break
            result.update(wall=time.perf_counter() - t0, cpu=time.process_time() - cpu0,
                          obs=obs, steps=steps, records=reader.stats.records,
                          record_bytes=reader.stats.bytes)  # fmt: skip

    return read, result


# --------------------------------------------------------------------------- ceiling


def _step_randomly(preset: Preset, num_envs: int, seconds: float, out: Any) -> None:
    """One process: the preset's vector env under uniform random actions, nothing else."""
    from coach_stream.envs import make_vector_env

    envs = make_vector_env(preset.env_id, num_envs, preset.env_wrappers)
    envs.reset(seed=1)
    envs.action_space.seed(1)
    envs.step(envs.action_space.sample())  # warm-up
    steps, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        envs.step(envs.action_space.sample())
        steps += num_envs
    out.put(steps / (time.perf_counter() - t0))
    envs.close()


def env_ceiling(part: Part, seconds: float) -> float:
    """The most any pipeline could produce here: one process per core stepping the env alone
    (no policy, no codec, no Kafka, no trainer), its observation MB/s beside the target."""
    import multiprocessing

    context = multiprocessing.get_context("fork")
    out = context.Queue()
    cores = os.cpu_count() or 1
    envs = part.preset.rollout.num_envs
    processes = [
        context.Process(target=_step_randomly, args=(part.preset, envs, seconds, out))
        for _ in range(cores)
    ]
    busy_before, t0 = machine_busy_s(), time.monotonic()
    for process in processes:
        process.start()
    rates = [out.get(timeout=seconds + 120) for _ in processes]
    for process in processes:
        process.join()
    steps = sum(rates)  # busy_cores spans the envs' start-up too, not only their window
    busy = (machine_busy_s() - busy_before) / (time.monotonic() - t0)
    emit(f"{part.name}_obs_mb_per_s_env_ceiling", steps * part.obs_bytes / 1e6, "MB/s",
         "target", MB_TARGET, env_steps_per_s=round(steps, 1), processes=cores,
         envs_per_process=envs, busy_cores=round(busy, 2), load1=os.getloadavg()[0])  # fmt: skip
    return steps


# --------------------------------------------------------------------------- report


def report_point(part: Part, ours: Point, sb3: Sb3Point, ceiling: float | None = None) -> None:
    n, p = ours.workers, part.name
    base = f"sb3_subprocvecenv_{n}proc_collect_rollouts"
    emit(f"{p}_env_steps_per_s_{n}w", ours.produced, "env_steps/s", base, sb3.env_steps_per_s,
         workers=n, envs_per_worker=part.preset.rollout.num_envs,
         per_worker={k: round(v, 1) for k, v in ours.per_worker.items()},
         window_s=round(ours.window_s, 1), load1=round(os.getloadavg()[0], 2))  # fmt: skip
    emit(f"{p}_transitions_per_s_consumed_{n}w", ours.consumed, "transitions/s",
         "produced_env_steps_per_s", ours.produced, **ours.extra)  # fmt: skip
    records = [r for _, r in ours.lag]
    emit(f"{p}_consumer_lag_{n}w", sum(records) / len(records) if records else None,
         "records", None, None, max=max(records, default=None),
         end=records[-1] if records else None, samples=len(records),
         trend_records_per_s=None if (s := _slope([(t, float(r)) for t, r in ours.lag])) is None
         else round(s, 2), chunk_steps=part.preset.rollout.chunk_steps)  # fmt: skip
    emit(f"{p}_policy_lag_{n}w", ours.policy_lag, "versions", None, None,
         gradient_steps_per_version=part.preset.impala_config.publish_every)  # fmt: skip
    emit(f"{p}_cpu_s_per_s_{n}w", sum(ours.cpu.values()), "cpu_s/s", f"sb3_{n}proc",
         sb3.cpu_s_per_s, per_process={k: round(v, 3) for k, v in ours.cpu.items()},
         **ours.machine, sb3_busy_cores=round(sb3.busy_cores, 2))  # fmt: skip
    if p == "pong":
        rows = (part.preset.rollout.chunk_steps + 1) / part.preset.rollout.chunk_steps
        mb = part.obs_bytes * rows / 1e6
        into = None if ours.consumed is None else ours.consumed * mb
        emit(f"pong_obs_mb_per_s_into_trainer_{n}w", into, "MB/s", "target", MB_TARGET)
        emit(f"pong_obs_mb_per_s_produced_{n}w", ours.produced * mb, "MB/s", "target", MB_TARGET)
        if ceiling:
            report_against_ceiling(ours, ceiling)


def report_against_ceiling(ours: Point, ceiling: float) -> None:
    """Pong's frames produced with the trainer learning, against the bare env on the same
    cores (``env_ceiling``), and where the CPU went: the trainer's share of it is what the
    workers cannot have on a machine whose cores are all busy."""
    n, cpu = ours.workers, ours.cpu
    trainer = cpu.get("trainer", 0.0)
    workers = sum(v for k, v in cpu.items() if k.startswith("rollout"))
    broker = ours.machine.get("kafka_broker_cpu_s_per_s") or 0.0
    cores, busy = ours.machine.get("cores") or 1, ours.machine.get("busy_cores") or 0.0
    saturated = busy >= 0.9 * cores
    limit = (
        f"the cores: all {cores} busy, the trainer learning on {trainer / cores:.0%} of them"
        if saturated else f"not the cores ({busy:.2f} of {cores} busy)"
    )  # fmt: skip
    emit(f"pong_env_steps_vs_env_ceiling_{n}w", ours.produced, "env_steps/s",
         "bare_env_random_actions_one_process_per_core", ceiling, target=CEILING_TARGET,
         cpu_split={"trainer": round(trainer, 3), "workers": round(workers, 3),
                    "broker": round(broker, 3), "other": round(max(0.0, busy - trainer
                    - workers - broker), 3)},
         workers_share_of_busy=round(workers / busy, 3) if busy else None,
         limit=limit)  # fmt: skip


def _linear(rate: dict[int, float]) -> dict[int, float | None]:
    """Each count's rate / (count x one worker's)."""
    return {n: round(r / (n * rate[1]), 3) if rate[1] else None for n, r in rate.items()}


def report_scaling(part: Part, ours: dict[int, Point], sb3: dict[int, Sb3Point]) -> None:
    counts = sorted(ours)
    if len(counts) < 2 or counts[0] != 1:
        return
    top = counts[-1]

    def efficiency(rate: dict[int, float]) -> float | None:
        return rate[top] / (top * rate[1]) if rate[1] else None

    produced = {n: p.produced for n, p in ours.items()}
    theirs = {n: s.env_steps_per_s for n, s in sb3.items()}
    ahead = {n: produced[n] > theirs[n] for n in counts}
    mine = efficiency(produced)
    emit(f"{part.name}_env_scaling_efficiency", mine, "fraction_of_linear",
         f"sb3_subprocvecenv_{top}proc", efficiency(theirs), workers=top,
         linear_by_count=_linear(produced), sb3_linear_by_count=_linear(theirs),
         target=SCALING_TARGET, met=None if mine is None else mine >= SCALING_TARGET,
         ahead_of_sb3_at_every_count=all(ahead.values()), ahead_of_sb3=ahead)  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="<= 60 s in all.")
    parser.add_argument("--workers", help="Worker counts (default 1,2,4,8,16; quick 1,2,4).")
    parser.add_argument("--pong-workers", help="Pong's counts (default --workers; quick 1).")
    parser.add_argument("--seconds", type=float, help="Measured window per point (20; quick 2).")
    parser.add_argument("--parts", default="latency,pong", help="latency, pong or both.")
    parser.add_argument("--delay", default="2ms", help="The latency env's per-step delay.")
    parser.add_argument("--envs-per-worker", type=int, default=8)
    parser.add_argument("--codec", choices=("auto", "lz4", "zstd"),
                        help="Pong's compression (auto: measure and pick; quick: lz4, the "
                             "full run's pick, so the smoke run stays within 60 s).")  # fmt: skip
    parser.add_argument("--warmup", type=float, help="Seconds after start-up (3; quick 0).")
    parser.add_argument("--start-timeout", type=float, default=180.0)
    args = parser.parse_args()
    kafka = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    if not kafka:
        sys.exit("KAFKA_BOOTSTRAP_SERVERS is not set: start the stack (coach-stream stack up) "
                 "and eval \"$(coach-stream stack env)\".")  # fmt: skip
    counts = [
        int(n) for n in (args.workers or ("1,2,4" if args.quick else "1,2,4,8,16")).split(",")
    ]
    pong_counts = [int(n) for n in args.pong_workers.split(",")] if args.pong_workers else (
        [1] if args.quick else counts)  # fmt: skip
    args.seconds = args.seconds or (2.0 if args.quick else 20.0)
    args.warmup = args.warmup if args.warmup is not None else (0.0 if args.quick else 3.0)
    parts = args.parts.split(",")
    began, ceiling = time.monotonic(), None
    with tempfile.TemporaryDirectory(prefix="bench-scale-") as tmp:
        state = Path(tmp)
        plan: list[tuple[Part, list[int]]] = []
        if "latency" in parts:
            plan.append((latency_part(args.delay, args.envs_per_worker), counts))
        if "pong" in parts:
            codec = args.codec or ("lz4" if args.quick else "auto")
            codec = choose_codec() if codec == "auto" else codec
            plan.append((pong_part(codec), pong_counts))
            ceiling = env_ceiling(plan[-1][0], args.seconds)
        for part, part_counts in plan:
            keep, result = read_back(part, args.seconds) if part.name == "pong" else (None, {})
            ours, sb3 = measure_part(part, part_counts, args, kafka, state, keep_topic=keep,
                                     ceiling=ceiling if part.name == "pong" else None)  # fmt: skip
            report_scaling(part, ours, sb3)
            if result:
                emit("pong_trainer_read_mb_per_s", result["obs"] / result["wall"] / 1e6, "MB/s",
                     "target", MB_TARGET, steps_per_s=round(result["steps"] / result["wall"], 1),
                     cpu_s_per_s=round(result["cpu"] / result["wall"], 3),
                     records=result["records"], seconds=round(result["wall"], 2),
                     record_mb=round(result["record_bytes"] / 1e6, 1),
                     obs_mb=round(result["obs"] / 1e6, 1))  # fmt: skip
    print(f"# bench/scale.py: {time.monotonic() - began:.0f} s in all", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(jsonl.run(main))
