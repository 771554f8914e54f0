"""Offline replay throughput: topic -> training batches, Parquet export -> batches, memory.

Figures (one JSON line each, the baseline measured in the same run, on the same topic):

* ``topic_to_batches``: CartPole-size transitions/s from the experience topic into columnar
  training batches through ``ReplayReader`` (vectorized decode, columns concatenated);
* ``parquet_to_batches``: the same from the Parquet export (pyarrow, row-group batches);
* ``export_parquet``: transitions/s of ``replay export --format parquet`` (topic -> file);
* ``export_peak_memory``: peak traced memory (tracemalloc: Python and numpy allocations)
  while exporting the whole topic, against exporting a quarter of it: flat means ~1.

The baseline is a generic Kafka-to-Avro consumer: one ``poll()`` per record, one fastavro
datum per record, the transitions appended row by row into Python lists and turned into
arrays per batch, as a consumer that knows nothing of the chunk layout would.

Usage: ``KAFKA_BOOTSTRAP_SERVERS=host:port python bench/replay.py [--quick]``.
"""

from __future__ import annotations

import argparse
import io
import os
import sys
import tempfile
import time
import tracemalloc
import uuid
from pathlib import Path
from typing import Any

import fastavro
import jsonl
import numpy as np
import pyarrow.parquet as pq

from coach_stream.codec import default_registry, encode_chunk
from coach_stream.codec.avro import HEADER_SIZE
from coach_stream.codec.chunks import CHUNK_SCHEMA
from coach_stream.core import ExperienceChunk
from coach_stream.replay.export.run import run_export
from coach_stream.replay.range import Bound
from coach_stream.replay.reader import ReplayReader
from coach_stream.transport import clients
from coach_stream.transport.admin import delete_run_topics, ensure_run_topics
from coach_stream.transport.settings import KafkaSettings, RunTopics
from coach_stream.transport.writer import KafkaRecordProducer

BASELINE = "per_record_avro_consumer"
CHUNK_STEPS = 32  # the CartPole presets' rollout.chunk_steps
PARTITIONS = 4


def line(metric: str, value: float, unit: str, baseline_value: float | None, **extra: Any) -> None:
    baseline = extra.pop("baseline", BASELINE)
    jsonl.emit(
        "replay", metric, value, unit, baseline, baseline_value, digits=1, ratio_digits=2, **extra
    )


def produce(settings: KafkaSettings, topic: str, records: int) -> int:
    """``records`` CartPole chunks of CHUNK_STEPS steps (random observations); transitions."""
    rng = np.random.default_rng(0)
    run_id = topic.split(".")[1]
    with KafkaRecordProducer(settings, topic) as producer:
        for i in range(records):
            worker, env = i % 8, (i // 8) % 8
            obs = rng.standard_normal((CHUNK_STEPS + 1, 4)).astype(np.float32)
            chunk = ExperienceChunk(
                run_id=run_id,
                worker_id=worker,
                env_index=env,
                chunk_seq=i // 64,
                policy_version=i // 1000,
                first_step=0,
                observations=obs,
                actions=rng.integers(0, 2, CHUNK_STEPS),
                rewards=np.ones(CHUNK_STEPS, np.float32),
                terminated=np.zeros(CHUNK_STEPS, np.bool_),
                truncated=np.zeros(CHUNK_STEPS, np.bool_),
                created_at_ms=1,
            )
            producer.produce(chunk.key.encode(), encode_chunk(chunk))
        producer.flush(120)
    return records * CHUNK_STEPS


def topic_to_batches(settings: KafkaSettings, topic: str) -> tuple[float, float, int]:
    """(wall-clock rate, rate per CPU-second of this process, transitions).

    Timed from the opened reader (metadata and watermarks asked) like the baseline is
    timed from its first record (its group rebalance left out)."""
    rows = 0
    with ReplayReader(settings, topic, batch_transitions=65_536) as reader:
        start, cpu = time.perf_counter(), time.process_time()
        for batch in reader.batches():
            rows += len(batch)
    return rows / (time.perf_counter() - start), rows / (time.process_time() - cpu), rows


def baseline(settings: KafkaSettings, topic: str, records: int) -> tuple[float, float]:
    """One poll and one fastavro datum per record; rows appended one by one."""
    schema = default_registry().latest(CHUNK_SCHEMA).parsed
    consumer = clients.consumer(settings, f"bench-{uuid.uuid4().hex[:8]}")
    consumer.subscribe([topic])
    obs_rows: list[Any] = []
    next_rows: list[Any] = []
    actions: list[int] = []
    rewards: list[float] = []
    done: list[bool] = []
    rows = seen = 0
    start = None
    idle_since = time.monotonic()
    cpu = 0.0
    try:
        while seen < records:
            message = consumer.poll(0.5)
            if message is None or message.error() is not None:
                if time.monotonic() - idle_since > 30:
                    break
                continue
            if start is None:  # the first record arrives after the group's rebalance
                start, cpu = time.perf_counter(), time.process_time()
            idle_since = time.monotonic()
            value = message.value() or b""
            datum = fastavro.schemaless_reader(io.BytesIO(value[HEADER_SIZE:]), schema, None)
            o = datum["observations"]
            obs = np.frombuffer(o["data"], np.float32).reshape(o["shape"])
            acts = np.frombuffer(datum["actions"]["data"], np.int64)
            rews = np.frombuffer(datum["rewards"]["data"], np.float32)
            terms = np.frombuffer(datum["terminated"]["data"], np.bool_)
            for t in range(len(rews)):
                obs_rows.append(obs[t])
                next_rows.append(obs[t + 1])
                actions.append(int(acts[t]))
                rewards.append(float(rews[t]))
                done.append(bool(terms[t]))
            seen += 1
            if len(rewards) >= 65_536:
                rows += _flush(obs_rows, next_rows, actions, rewards, done)
        rows += _flush(obs_rows, next_rows, actions, rewards, done)
        wall, cpu = time.perf_counter() - (start or 0.0), time.process_time() - cpu
    finally:
        consumer.close()
    return rows / wall, rows / cpu


def _flush(*columns: list[Any]) -> int:
    arrays = [np.array(c) for c in columns]
    for c in columns:
        c.clear()
    return len(arrays[0])


def parquet_to_batches(path: Path) -> tuple[float, int]:
    start = time.perf_counter()
    rows = 0
    for batch in pq.ParquetFile(path).iter_batches(batch_size=65_536):
        obs = batch.column("observation").flatten().to_numpy().reshape(-1, 4)
        nxt = batch.column("next_observation").flatten().to_numpy().reshape(-1, 4)
        actions = batch.column("action").to_numpy()
        rewards = batch.column("reward").to_numpy()
        rows += len(obs) + 0 * (len(nxt) + len(actions) + len(rewards))
    return rows / (time.perf_counter() - start), rows


def export_peak(settings: KafkaSettings, topic: str, end: Bound, folder: Path, name: str) -> float:
    tracemalloc.start()
    try:
        with ReplayReader(settings, topic, end=end, batch_transitions=16_384) as reader:
            run_export(reader, "parquet", str(folder / name))
        return tracemalloc.get_traced_memory()[1] / 2**20
    finally:
        tracemalloc.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a smaller topic, < 60 s")
    args = parser.parse_args()
    servers = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    if not servers:
        print("bench/replay.py: set KAFKA_BOOTSTRAP_SERVERS (eval $(coach-stream stack env))")
        return 2
    settings = KafkaSettings(bootstrap_servers=servers)
    records = 10_000 if args.quick else 120_000
    baseline_records = 1_000 if args.quick else 10_000
    topics = RunTopics.for_run(f"bench-replay-{uuid.uuid4().hex[:8]}")
    ensure_run_topics(settings, topics, PARTITIONS)
    try:
        produce(settings, topics.experience, records)
        # best of two: on a shared machine a pass can lose the CPU to others for a while
        bases = [baseline(settings, topics.experience, baseline_records) for _ in range(2)]
        base, base_cpu = max(b[0] for b in bases), max(b[1] for b in bases)
        passes = [topic_to_batches(settings, topics.experience) for _ in range(2)]
        rate, rate_cpu = max(p[0] for p in passes), max(p[1] for p in passes)
        rows = passes[0][2]
        line("topic_to_batches", rate, "transitions/s", base, transitions=rows)
        # the same per CPU-second used by this process (librdkafka's threads included): what
        # one idle core gives, independent of how busy a shared machine is
        line("topic_to_batches_per_cpu_s", rate_cpu, "transitions/cpu-s", base_cpu)
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp)
            start = time.perf_counter()
            with ReplayReader(settings, topics.experience) as reader:
                run_export(reader, "parquet", str(folder / "all.parquet"))
            export_rate = rows / (time.perf_counter() - start)
            line("export_parquet", export_rate, "transitions/s", base)
            p_rate, p_rows = max(parquet_to_batches(folder / "all.parquet") for _ in range(3))
            assert p_rows == rows
            line("parquet_to_batches", p_rate, "transitions/s", base)
            quarter = Bound(offset=records // PARTITIONS // 4, text="quarter")
            small = export_peak(settings, topics.experience, quarter, folder, "q.parquet")
            full = export_peak(settings, topics.experience, Bound(), folder, "f.parquet")
            line(
                "export_peak_memory",
                full,
                "MiB",
                small,
                baseline="export_of_a_quarter_of_the_topic",
                topic_mib=round(records * (CHUNK_STEPS * 25 + 120) / 2**20, 1),
            )
    finally:
        delete_run_topics(settings, topics)
    return 0


if __name__ == "__main__":
    sys.exit(main())
