"""Offline replay throughput: topic -> training batches, Parquet export -> batches, memory.

Figures (one JSON line each, the baseline measured in the same run, on the same topic):

* ``topic_to_batches``: CartPole-size transitions/s from the experience topic into columnar
  training batches through ``ReplayReader`` (vectorized decode, columns concatenated);
* ``parquet_to_batches``: the same from the Parquet export (pyarrow, row-group batches);
* ``export_parquet``: transitions/s of ``replay export --format parquet`` (topic -> file);
* ``export_peak_memory``: peak traced memory (tracemalloc: Python and numpy allocations)
  while exporting the whole topic, against exporting a quarter of it: flat means ~1;
* ``columnar_decode_mixed_lengths``: the columnar decoder alone (no Kafka) on chunks of
  which a quarter were cut short by episode ends, against chunks all of one length;
* ``topic_to_batches_mb_s``: the same read in MB/s of records (keys and values, as Kafka
  counts them) against Kafka's own consumer, ``kafka-consumer-perf-test``
  (``org.apache.kafka.tools.ConsumerPerformance`` of the broker's version, its
  ``fetch.MB.sec``: group join left out, as ours leaves out opening the reader), on the same
  topic, passes alternating; the median of each with the spread (min-max) of the passes,
  and ``pass_ratios``: each of our passes against the Kafka pass just before it.
  The ceiling: a JVM consumer that reads the bytes and decodes nothing.

The baseline is a generic Kafka-to-Avro consumer: one ``poll()`` per record, one fastavro
datum per record, the transitions appended row by row into Python lists and turned into
arrays per batch, as a consumer that knows nothing of the chunk layout would.

Usage: ``KAFKA_BOOTSTRAP_SERVERS=host:port python bench/replay.py [--quick]``. The Kafka
consumer needs Java and, once, Maven: the ``kafka-tools`` jar is fetched from Maven Central
beside the stack's broker jars (``~/.cache/coach-stream/kafka/<version>/tools``).
"""

from __future__ import annotations

import argparse
import io
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fastavro
import jsonl
import numpy as np
import pyarrow.parquet as pq

from coach_stream.codec import default_registry, encode_chunk
from coach_stream.codec.avro import HEADER_SIZE
from coach_stream.codec.chunks import CHUNK_SCHEMA
from coach_stream.codec.columnar import decode_columns
from coach_stream.core import ExperienceChunk
from coach_stream.replay.export.run import run_export
from coach_stream.replay.range import Bound
from coach_stream.replay.reader import ReplayReader
from coach_stream.stack import default_cache_dir
from coach_stream.stack.kafka import DEPENDENCY_PLUGIN, KAFKA_VERSION
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


def cartpole_chunks(run_id: str, count: int, cut_every: int = 0) -> Iterator[ExperienceChunk]:
    """``count`` CartPole chunks of CHUNK_STEPS steps (random observations); every
    ``cut_every``-th (0: none) ends its episode after 1 to CHUNK_STEPS - 1 steps, as episode
    ends cut real chunks."""
    rng = np.random.default_rng(0)
    for i in range(count):
        cut = cut_every and i % cut_every == 0
        steps = int(rng.integers(1, CHUNK_STEPS)) if cut else CHUNK_STEPS
        ended = np.arange(steps) == steps - 1 if cut else np.zeros(steps, np.bool_)
        yield ExperienceChunk(
            run_id=run_id, worker_id=i % 8, env_index=(i // 8) % 8, chunk_seq=i // 64,
            policy_version=i // 1000, first_step=0,
            observations=rng.standard_normal((steps + 1, 4)).astype(np.float32),
            actions=rng.integers(0, 2, steps), rewards=np.ones(steps, np.float32),
            terminated=ended, truncated=np.zeros(steps, np.bool_),
            episode_return=float(steps) if cut else None, episode_length=steps if cut else None,
            created_at_ms=1,
        )  # fmt: skip


def produce(settings: KafkaSettings, topic: str, records: int) -> tuple[int, int]:
    """``records`` chunks of ``cartpole_chunks``: (transitions, bytes of keys and values)."""
    size = 0
    with KafkaRecordProducer(settings, topic) as producer:
        for chunk in cartpole_chunks(topic.split(".")[1], records):
            key, value = chunk.key.encode(), encode_chunk(chunk)
            size += len(key) + len(value)
            producer.produce(key, value)
        producer.flush(120)
    return records * CHUNK_STEPS, size


def decode_mixed_lengths(rounds: int) -> None:
    """The columnar decoder on a read of chunks of which a quarter were cut short, against
    the same decoder on chunks all of one length (its fastest case), in MB per CPU-second,
    alternating. A read holds 8,192 CartPole records (``replay.reader``'s usual call)."""
    reads = {
        name: [encode_chunk(c) for c in cartpole_chunks("bench", 8192, cut_every)]
        for name, cut_every in (("mixed", 4), ("uniform", 0))
    }
    rates: dict[str, list[float]] = {name: [] for name in reads}
    for round_ in range(rounds):
        for name in reads if round_ % 2 == 0 else list(reads)[::-1]:
            values = reads[name]
            began = time.process_time()
            columns, ok = decode_columns(values)
            assert columns is not None and ok.all()
            rates[name].append(sum(map(len, values)) / 1e6 / (time.process_time() - began))
    mixed, uniform = (statistics.median(rates[name]) for name in ("mixed", "uniform"))
    line("columnar_decode_mixed_lengths", mixed, "MB/cpu-s", uniform,
         baseline="columnar_decode_uniform_lengths", rounds=rounds,
         spread=[round(min(rates["mixed"]), 1), round(max(rates["mixed"]), 1)])  # fmt: skip


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


def kafka_tools_jar() -> Path | str:
    """The ``kafka-tools`` jar of the broker's version (fetched once), or why there is none."""
    folder = default_cache_dir() / "kafka" / KAFKA_VERSION / "tools"
    jar = folder / f"kafka-tools-{KAFKA_VERSION}.jar"
    if jar.exists():
        return jar
    mvn = shutil.which("mvn")
    if mvn is None or shutil.which("java") is None:
        return "kafka-consumer-perf-test needs java and mvn on PATH"
    fetched = subprocess.run(
        [mvn, "-B", "-q", f"{DEPENDENCY_PLUGIN}:copy",
         f"-Dartifact=org.apache.kafka:kafka-tools:{KAFKA_VERSION}", f"-DoutputDirectory={folder}"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if fetched.returncode != 0 or not jar.exists():
        return f"mvn could not fetch kafka-tools {KAFKA_VERSION}: {fetched.stdout[-300:]}"
    return jar


def kafka_consumer_perf(tools: Path, servers: str, topic: str, records: int) -> float:
    """Kafka's own consumer on ``topic``: MB/s while fetching (``fetch.MB.sec``)."""
    libs = default_cache_dir() / "kafka" / KAFKA_VERSION / "libs"
    done = subprocess.run(
        ["java", "-Xmx512m", "-cp", f"{libs}/*:{tools}",
         "org.apache.kafka.tools.ConsumerPerformance", "--bootstrap-server", servers,
         "--topic", topic, "--num-records", str(records), "--timeout", "60000",
         "--group", f"bench-perf-{uuid.uuid4().hex[:8]}"],
        capture_output=True, text=True, check=True, timeout=300,
    )  # fmt: skip
    header, values = [ln for ln in done.stdout.splitlines() if "," in ln][-2:]
    stats = dict(zip([h.strip() for h in header.split(",")], values.split(","), strict=True))
    if int(stats["data.consumed.in.nMsg"]) != records:
        raise RuntimeError(f"kafka-consumer-perf-test read {stats['data.consumed.in.nMsg']}")
    return float(stats["fetch.MB.sec"])


def against_kafka(
    settings: KafkaSettings, topic: str, records: int, size: int, passes: int
) -> None:
    """Topic -> batches in MB/s against Kafka's own consumer, passes alternating."""
    tools = kafka_tools_jar()
    if isinstance(tools, str):
        jsonl.emit("replay", "topic_to_batches_mb_s", None, "MB/s", "kafka_consumer_perf_test",
                   None, skipped=tools)  # fmt: skip
        return
    ours, theirs = [], []
    for _ in range(passes):
        theirs.append(kafka_consumer_perf(tools, settings.bootstrap_servers, topic, records))
        ours.append(size / 2**20 * topic_to_batches(settings, topic)[0] / (records * CHUNK_STEPS))
    line(
        "topic_to_batches_mb_s", statistics.median(ours), "MB/s", statistics.median(theirs),
        baseline="kafka_consumer_perf_test", passes=passes,
        spread=[round(min(ours), 1), round(max(ours), 1)],
        baseline_spread=[round(min(theirs), 1), round(max(theirs), 1)],
        ratio_spread=[round(min(ours) / max(theirs), 2), round(max(ours) / min(theirs), 2)],
        # each pass against the Kafka pass just before it: the same moment's machine
        pass_ratios=[round(o / t, 2) for o, t in zip(ours, theirs, strict=True)],
    )  # fmt: skip


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
    decode_mixed_lengths(10 if args.quick else 40)
    # passes of ~1.5 s each at full size: in shorter ones (0.5 s at 120,000 records) Kafka's
    # consumer spent much of each pass warming its JVM (121.5 MB/s against 231-279 here),
    # and the pass ratios moved between 0.76 and 1.52 on a 2-core machine
    records = 10_000 if args.quick else 300_000
    baseline_records = 1_000 if args.quick else 10_000
    topics = RunTopics.for_run(f"bench-replay-{uuid.uuid4().hex[:8]}")
    ensure_run_topics(settings, topics, PARTITIONS)
    try:
        _, size = produce(settings, topics.experience, records)
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
        against_kafka(settings, topics.experience, records, size, 2 if args.quick else 5)
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
    sys.exit(jsonl.run(main))
