"""Experience transport throughput: Kafka + Avro chunks vs. Coach's pickled Redis pub/sub.

Figures (one JSON line each, baseline measured in the same run):

* end-to-end transitions/s from a producer *process* through the broker to a consumer that
  yields decoded numpy chunks, for CartPole-size (4 float32 obs) and Atari-size
  (84x84x4 uint8 obs) experience, plus Atari payload MB/s (bytes of record values);
* codec-only transitions/s (encode, decode).

The baseline is what the original Coach did: one pickled transition object per Redis
pub/sub message, published by one process and unpickled by a subscriber. The bench starts
Debian's ``redis-server`` on a free loopback port and stops it afterwards (its pub/sub
output buffer limit is lifted so the baseline loses nothing: a favour to the baseline).

Usage: ``KAFKA_BOOTSTRAP_SERVERS=host:port python bench/transport.py [--quick]``.
Observations are random (incompressible), the worst case for compression.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import pickle
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from typing import Any

import jsonl
import numpy as np

from coach_stream.codec import decode_chunk, encode_chunk
from coach_stream.core import ExperienceChunk
from coach_stream.transport import (
    KafkaExperienceReader,
    KafkaExperienceWriter,
    KafkaSettings,
    RunTopics,
    ensure_run_topics,
)
from coach_stream.transport.admin import check_broker

BASELINE = "coach_redis_pubsub_pickle"


@dataclass(frozen=True)
class Workload:
    name: str
    obs_shape: tuple[int, ...]
    obs_dtype: str
    chunk_steps: int
    kafka_transitions: int  # quick mode; full mode multiplies
    redis_transitions: int


CARTPOLE = Workload("cartpole", (4,), "float32", 500, 10_000_000, 20_000)
ATARI = Workload("atari", (84, 84, 4), "uint8", 32, 16_000, 4_000)


class Transition:
    """Coach's ``rl_coach.core_types.Transition`` shape: dict states, scalars, an info dict."""

    def __init__(
        self,
        state: dict[str, Any],
        action: Any,
        reward: float,
        next_state: dict[str, Any],
        game_over: bool,
    ) -> None:
        self.state = state
        self.action = action
        self.reward = reward
        self.next_state = next_state
        self.game_over = game_over
        self.info: dict[str, Any] = {}


def make_chunks(w: Workload, count: int, seed: int = 0) -> list[ExperienceChunk]:
    """``count`` distinct-looking chunks built from 4 random templates (data gen is not timed)."""
    rng = np.random.default_rng(seed)
    t = w.chunk_steps
    templates = []
    for _ in range(4):
        if w.obs_dtype == "uint8":
            obs = rng.integers(0, 256, (t + 1, *w.obs_shape), dtype=np.uint8)
        else:
            obs = rng.standard_normal((t + 1, *w.obs_shape)).astype(w.obs_dtype)
        templates.append(
            (obs, rng.integers(0, 4, t, dtype=np.int64), rng.standard_normal(t).astype(np.float32))
        )
    out = []
    flags = np.zeros(t, dtype=bool)
    for i in range(count):
        obs, actions, rewards = templates[i % 4]
        out.append(
            ExperienceChunk(
                run_id="bench",
                worker_id=0,
                env_index=i % 8,
                chunk_seq=i // 8,
                policy_version=0,
                first_step=0,
                observations=obs,
                actions=actions,
                rewards=rewards,
                terminated=flags,
                truncated=flags,
                created_at_ms=0,
            )
        )
    return out


def make_transitions(w: Workload, count: int) -> list[Transition]:
    rng = np.random.default_rng(1)
    if w.obs_dtype == "uint8":
        frames = [rng.integers(0, 256, w.obs_shape, dtype=np.uint8) for _ in range(5)]
    else:
        frames = [rng.standard_normal(w.obs_shape).astype(w.obs_dtype) for _ in range(5)]
    return [
        Transition(
            {"observation": frames[i % 4]},
            int(i % 4),
            1.0,
            {"observation": frames[(i + 1) % 4]},
            False,
        )
        for i in range(count)
    ]


# ----------------------------------------------------------------------------- figures


def line(metric: str, value: float, unit: str, baseline_value: float | None) -> None:
    jsonl.emit("transport", metric, value, unit, BASELINE, baseline_value, digits=1, ratio_digits=2)


def codec_figures(w: Workload, seconds: float) -> dict[str, float]:
    chunks = make_chunks(w, 16)
    transitions = make_transitions(w, 64)

    def rate(fn: Any, items: list[Any], per_item: int) -> float:
        done, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            for item in items:
                fn(item)
            done += len(items) * per_item
        return done / (time.perf_counter() - start)

    encoded = [encode_chunk(c) for c in chunks]
    pickled = [pickle.dumps(t) for t in transitions]
    return {
        "encode": rate(encode_chunk, chunks, w.chunk_steps),
        "decode": rate(decode_chunk, encoded, w.chunk_steps),
        "baseline_encode": rate(pickle.dumps, transitions, 1),
        "baseline_decode": rate(pickle.loads, pickled, 1),
    }


# ------------------------------------------------------------------ Kafka end to end


def _kafka_producer(
    bootstrap: str, topic: str, w: Workload, count: int, ready: Any, go: Any, result: Any
) -> None:
    chunks = make_chunks(w, count)
    settings = KafkaSettings(bootstrap_servers=bootstrap)
    with KafkaExperienceWriter(settings, topic) as writer:  # __enter__ creates the client
        ready.set()
        go.wait()
        start = time.monotonic()
        for chunk in chunks:
            writer.write(chunk)
        writer.flush()
        result.put((start, time.monotonic(), writer.stats.delivered, writer.stats.delivered_bytes))


def kafka_e2e(bootstrap: str, w: Workload, transitions: int) -> dict[str, float]:
    settings = KafkaSettings(bootstrap_servers=bootstrap)
    topics = RunTopics.for_run(f"bench-{uuid.uuid4().hex[:10]}")
    ensure_run_topics(settings, topics, experience_partitions=2)
    count = max(1, transitions // w.chunk_steps)
    ctx = mp.get_context("spawn")
    ready, go, result = ctx.Event(), ctx.Event(), ctx.Queue()
    proc = ctx.Process(
        target=_kafka_producer, args=(bootstrap, topics.experience, w, count, ready, go, result)
    )
    proc.start()
    try:
        with KafkaExperienceReader(settings, topics, f"bench-{uuid.uuid4().hex}") as reader:
            if not ready.wait(120):
                raise RuntimeError("the producer process did not start within 120 s")
            got = 0
            go.set()
            start = time.monotonic()
            deadline = start + 300
            while got < count * w.chunk_steps:
                for chunk in reader.read(1024, 1.0):
                    got += chunk.num_steps
                if time.monotonic() > deadline:
                    raise RuntimeError(f"only {got} transitions arrived within 300 s")
            end = time.monotonic()
            payload = reader.stats.bytes
        p_start, p_end, delivered, _ = result.get(timeout=60)
        if delivered != count:
            raise RuntimeError(f"the producer delivered {delivered} of {count} chunks")
    finally:
        proc.join(30)
        if proc.is_alive():
            proc.kill()
        from coach_stream.transport.admin import delete_run_topics

        delete_run_topics(settings, topics)
    elapsed = end - min(start, p_start)
    return {
        "transitions_per_s": got / elapsed,
        "bytes_per_s": payload / elapsed,
        "producer_s": p_end - p_start,
        "elapsed_s": elapsed,
    }


# ------------------------------------------------------------------ Redis baseline


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class RedisServer:
    """A throwaway ``redis-server`` on loopback, stopped on exit."""

    def __init__(self, binary: str) -> None:
        self.binary = binary
        self.port = _free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.dir = tempfile.TemporaryDirectory(prefix="bench-redis-")

    def __enter__(self) -> RedisServer:
        import redis

        self.proc = subprocess.Popen(
            [
                self.binary,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                self.dir.name,
                "--client-output-buffer-limit",
                "pubsub",
                "0",
                "0",
                "0",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        client = redis.Redis(port=self.port)
        deadline = time.monotonic() + 20
        while True:  # readiness probe: the server answers PING
            try:
                client.ping()
                return self
            except redis.ConnectionError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    raise RuntimeError(f"redis-server did not start on port {self.port}") from None
                time.sleep(0.05)

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(10)
        self.dir.cleanup()


def _redis_publisher(port: int, channel: str, w: Workload, count: int, ready: Any, go: Any) -> None:
    import redis

    transitions = make_transitions(w, count)
    client = redis.Redis(port=port)
    client.ping()
    ready.set()
    go.wait()
    for t in transitions:  # Coach: RedisPubSubBackend.store -> publish(channel, pickle.dumps)
        client.publish(channel, pickle.dumps(t))


def redis_e2e(port: int, w: Workload, transitions: int) -> dict[str, float]:
    import redis

    channel = f"bench-{uuid.uuid4().hex}"
    ctx = mp.get_context("spawn")
    ready, go = ctx.Event(), ctx.Event()
    client: Any = redis.Redis(port=port)
    sub = client.pubsub(ignore_subscribe_messages=True)
    sub.subscribe(channel)
    proc = ctx.Process(target=_redis_publisher, args=(port, channel, w, transitions, ready, go))
    proc.start()
    try:
        if not ready.wait(120):
            raise RuntimeError("the Redis publisher process did not start within 120 s")
        got, payload = 0, 0
        go.set()
        start = last = time.monotonic()
        while got < transitions:
            message = sub.get_message(timeout=1.0)
            if message is None:  # also returned for the (ignored) subscribe confirmation
                if time.monotonic() - last > 30:
                    raise RuntimeError(f"Redis baseline lost messages: {got}/{transitions} arrived")
                continue
            last = time.monotonic()
            data = message["data"]
            transition = pickle.loads(data)
            assert transition.state["observation"].shape == w.obs_shape
            got += 1
            payload += len(data)
        end = time.monotonic()
    finally:
        proc.join(30)
        if proc.is_alive():
            proc.kill()
        sub.close()
    return {"transitions_per_s": got / (end - start), "bytes_per_s": payload / (end - start)}


# ----------------------------------------------------------------------------- main


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller workloads, < 60 s")
    args = parser.parse_args()
    scale = 1 if args.quick else 5
    codec_seconds = 0.5 if args.quick else 2.0

    bootstrap = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    if not bootstrap:
        print(
            "bench/transport.py needs a broker: set KAFKA_BOOTSTRAP_SERVERS "
            "(e.g. `eval $(coach-stream stack env)`).",
            file=sys.stderr,
        )
        return 2
    check_broker(KafkaSettings(bootstrap_servers=bootstrap), timeout=10)
    redis_binary = shutil.which("redis-server")
    if redis_binary is None:
        print(
            "redis-server not found on PATH: the Coach-style baseline cannot run "
            "(install it with `apt-get install -y redis-server`); baselines are null.",
            file=sys.stderr,
        )

    for w in (CARTPOLE, ATARI):
        codec = codec_figures(w, codec_seconds)
        line(
            f"{w.name}_encode_transitions_per_s",
            codec["encode"],
            "transitions/s",
            codec["baseline_encode"],
        )
        line(
            f"{w.name}_decode_transitions_per_s",
            codec["decode"],
            "transitions/s",
            codec["baseline_decode"],
        )

    results: dict[str, tuple[dict[str, float], dict[str, float] | None]] = {}
    for w in (CARTPOLE, ATARI):
        kafka = kafka_e2e(bootstrap, w, w.kafka_transitions * scale)
        results[w.name] = (kafka, None)
        print(f"# {w.name}: kafka {kafka}", file=sys.stderr)
    if redis_binary is not None:
        with RedisServer(redis_binary) as server:
            for w in (CARTPOLE, ATARI):
                redis_figures = redis_e2e(server.port, w, w.redis_transitions * scale)
                results[w.name] = (results[w.name][0], redis_figures)
                print(f"# {w.name}: redis {redis_figures}", file=sys.stderr)
    for name, (kafka, base) in results.items():
        line(
            f"{name}_e2e_transitions_per_s",
            kafka["transitions_per_s"],
            "transitions/s",
            None if base is None else base["transitions_per_s"],
        )
        if name == ATARI.name:
            line(
                f"{name}_e2e_payload_MB_per_s",
                kafka["bytes_per_s"] / 1e6,
                "MB/s",
                None if base is None else base["bytes_per_s"] / 1e6,
            )
    return 0


if __name__ == "__main__":
    sys.exit(jsonl.run(main))
