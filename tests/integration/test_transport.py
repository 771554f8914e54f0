"""Experience on the real broker: round trips, order, positions, dead-letter, delivery errors."""

from __future__ import annotations

import dataclasses
import io
import json
import time
import uuid
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import avro.io
import avro.schema
import numpy as np
import pytest
import torch
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin._config import ConfigResource
from confluent_kafka.cimpl import NewTopic

from coach_stream.algorithms import builder_for
from coach_stream.checkpoints import open_store
from coach_stream.codec import ChunkSpec, default_registry, encode_chunk
from coach_stream.codec.avro import HEADER_SIZE, MAGIC
from coach_stream.codec.chunks import CHUNK_SCHEMA
from coach_stream.config import load_preset
from coach_stream.core import Action, ExperienceChunk
from coach_stream.envs import probe_shape
from coach_stream.errors import DeliveryError, ServiceUnavailableError
from coach_stream.events import EventList
from coach_stream.rollout.chunker import Chunker
from coach_stream.trainer.loop import Trainer
from coach_stream.transport import (
    KafkaExperienceReader,
    KafkaExperienceWriter,
    KafkaRecordProducer,
    KafkaSettings,
    RunTopics,
    check_broker,
    ensure_run_topics,
    tail,
)
from coach_stream.transport.admin import delete_run_topics
from coach_stream.transport.control import KafkaControlPublisher, KafkaControlSubscriber

PARTITIONS = 4


def chunk(
    worker: int,
    env: int,
    seq: int,
    steps: int,
    obs_shape: tuple[int, ...] = (4,),
    obs_dtype: str = "float32",
) -> ExperienceChunk:
    rng = np.random.default_rng([worker, env, seq])
    terminated = np.zeros(steps, bool)
    terminated[-1] = seq % 3 == 2
    return ExperienceChunk(
        run_id="it",
        worker_id=worker,
        env_index=env,
        chunk_seq=seq,
        policy_version=seq // 4,
        first_step=(seq % 3) * steps,
        observations=(rng.random((steps + 1, *obs_shape)) * 200).astype(obs_dtype),
        actions=rng.integers(0, 2, steps, dtype=np.int64),
        rewards=rng.standard_normal(steps).astype(np.float32),
        terminated=terminated,
        truncated=np.zeros(steps, bool),
        log_probs=rng.standard_normal(steps).astype(np.float32),
        values=None,
        episode_return=float(seq) if terminated[-1] else None,
        episode_length=3 * steps if terminated[-1] else None,
        created_at_ms=1_700_000_000_000 + seq,
    )


@pytest.fixture
def settings(kafka_bootstrap: str) -> KafkaSettings:
    return KafkaSettings(bootstrap_servers=kafka_bootstrap, linger_ms=5)


@pytest.fixture
def topics(settings: KafkaSettings) -> Iterator[RunTopics]:
    run = RunTopics.for_run(f"it-{uuid.uuid4().hex[:12]}")
    ensure_run_topics(settings, run, experience_partitions=PARTITIONS)
    yield run
    delete_run_topics(settings, run)


def read_all(
    settings: KafkaSettings, topics: RunTopics, group: str = "g"
) -> tuple[list[ExperienceChunk], KafkaExperienceReader]:
    out: list[ExperienceChunk] = []
    with KafkaExperienceReader(settings, topics, group) as reader:
        for batch in reader.read_until_end(2048, timeout=30):
            out.extend(batch)
    return out, reader


def test_topics_are_created_idempotently_with_explicit_configs(
    settings: KafkaSettings, topics: RunTopics
) -> None:
    ensure_run_topics(settings, topics, experience_partitions=PARTITIONS)  # second time: no-op
    metadata = check_broker(settings, timeout=10)
    assert len(metadata.topics[topics.experience].partitions) == PARTITIONS
    assert len(metadata.topics[topics.control].partitions) == 1
    assert len(metadata.topics[topics.dead_letter].partitions) == 1
    resource = ConfigResource("topic", topics.control)
    admin = AdminClient(settings.admin_config())
    config = admin.describe_configs([resource])[resource].result(timeout=10)
    assert config["retention.ms"].value == "-1"


def test_200k_transitions_round_trip_bit_exact_in_per_key_order(
    settings: KafkaSettings, topics: RunTopics
) -> None:
    steps, workers, envs, per_key = 250, 4, 4, 50  # 4*4*50 chunks * 250 steps = 200,000
    sent: dict[tuple[int, int, int], ExperienceChunk] = {}
    with KafkaExperienceWriter(settings, topics.experience) as writer:
        for seq in range(per_key):
            for w in range(workers):
                for e in range(envs):
                    c = chunk(w, e, seq, steps)
                    sent[(w, e, seq)] = c
                    writer.write(c)
        writer.flush(60)
        assert writer.stats.delivered == len(sent)
    received, reader = read_all(settings, topics)
    assert sum(c.num_steps for c in received) == 200_000
    assert reader.stats.dead_lettered == 0
    last_seq: dict[tuple[int, int], int] = defaultdict(lambda: -1)
    for c in received:
        key = (c.worker_id, c.env_index)
        assert c.chunk_seq == last_seq[key] + 1, f"out of order for {key}"
        last_seq[key] = c.chunk_seq
        assert c.equals(sent[(c.worker_id, c.env_index, c.chunk_seq)])
    assert len(received) == len(sent)


def ids(chunks: list[ExperienceChunk]) -> list[tuple[str, int]]:
    """Chunk ids in per-key order (the interleaving of partitions is not deterministic)."""
    return sorted(((c.key, c.chunk_seq) for c in chunks), key=lambda kc: kc[0])


def test_positions_seek_and_commit(settings: KafkaSettings, topics: RunTopics) -> None:
    with KafkaExperienceWriter(settings, topics.experience) as writer:
        for seq in range(40):
            writer.write(chunk(seq % 5, 0, seq // 5, 3))
    # commit_every_s=None: only the explicit commit() records a position (read does not)
    with KafkaExperienceReader(settings, topics, "trainer", commit_every_s=None) as reader:
        first: list[ExperienceChunk] = []
        while len(first) < 15:
            first += reader.read(15 - len(first), timeout=10)
        saved = reader.positions()
        assert sum(saved.values()) == 15
        reader.commit()
        rest = [c for batch in reader.read_until_end(100, timeout=30) for c in batch]
        assert reader.at_end()
        reader.seek(saved)  # the same reader rewinds (prefetched records are discarded)
        replayed = [c for batch in reader.read_until_end(100, timeout=30) for c in batch]
        assert ids(replayed) == ids(rest)
    with KafkaExperienceReader(settings, topics, "trainer-restarted") as resumed:
        resumed.seek(saved)
        again = [c for batch in resumed.read_until_end(100, timeout=30) for c in batch]
        assert resumed.at_end()
    assert ids(again) == ids(rest)
    assert sorted(ids(first) + ids(rest)) == sorted((f"{s % 5}/0", s // 5) for s in range(40))
    with KafkaExperienceReader(settings, topics, "trainer", start="committed") as committed:
        assert committed.positions() == saved


def _zigzag(n: int) -> bytes:
    value, out = (n << 1) ^ (n >> 63), bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _s(text: str) -> bytes:
    return _zigzag(len(text)) + text.encode()


def hostile(kind: int, rng: np.random.Generator, good: bytes) -> bytes:
    obs_head = _s("float32") + _zigzag(2) + _zigzag(7) + _zigzag(4) + b"\x00"
    if kind == 0:
        return rng.bytes(int(rng.integers(0, 400)))
    if kind == 1:
        return good[: int(rng.integers(0, len(good) - 1))]
    if kind == 2:
        return MAGIC + rng.bytes(8) + good[HEADER_SIZE:]
    if kind == 3:  # wrong dtype for the observations
        return good.replace(obs_head, _s("float64") + obs_head[8:], 1)
    if kind == 4:  # wrong shape (7, 4) -> (4, 7): byte count matches, T+1 rows do not
        return good.replace(
            obs_head, _s("float32") + _zigzag(2) + _zigzag(4) + _zigzag(7) + b"\x00", 1
        )
    # huge declared shape
    return good.replace(
        obs_head, _s("float32") + _zigzag(2) + _zigzag(2**40) + _zigzag(2**40) + b"\x00", 1
    )


def test_hostile_records_are_dead_lettered_and_good_ones_delivered(
    settings: KafkaSettings, topics: RunTopics, caplog: pytest.LogCaptureFixture
) -> None:
    rng = np.random.default_rng(7)
    good_chunks = [chunk(w, 0, s, 6) for s in range(30) for w in range(10)]
    bad: dict[bytes, tuple[int, bytes]] = {}
    with KafkaRecordProducer(settings, topics.experience) as producer:
        for i, c in enumerate(good_chunks):
            producer.produce(c.key.encode(), encode_chunk(c))
            if i % 3 == 0 and len(bad) < 100:
                key = f"hostile-{len(bad)}".encode()
                value = hostile(len(bad) % 6, rng, encode_chunk(c))
                assert value != encode_chunk(c)
                bad[key] = (len(bad) % 6, value)
                producer.produce(key, value)
    assert len(bad) == 100
    with caplog.at_level("WARNING", logger="coach_stream.transport.reader"):
        received, reader = read_all(settings, topics)
    assert reader.stats.dead_lettered == 100
    # A flood of bad records is not a flood of log lines: one per kind of fault per 30 s.
    lines = [r for r in caplog.records if "dead-lettering" in r.getMessage()]
    assert 1 <= len(lines) <= 5, [r.getMessage() for r in lines]
    assert sorted((c.worker_id, c.chunk_seq) for c in received) == sorted(
        (c.worker_id, c.chunk_seq) for c in good_chunks
    )
    by_key = {(c.worker_id, c.chunk_seq): c for c in good_chunks}
    assert all(c.equals(by_key[(c.worker_id, c.chunk_seq)]) for c in received)

    consumer = Consumer({**settings.consumer_config(f"dlq-{uuid.uuid4().hex}")})
    consumer.assign([TopicPartition(topics.dead_letter, 0, 0)])
    letters: list[Any] = []
    try:
        while len(letters) < 100:
            batch = consumer.consume(100, timeout=10)
            assert batch, "dead-letter topic has fewer than 100 records"
            letters += [m for m in batch if m.error() is None]
    finally:
        consumer.close()
    reasons: dict[int, set[str]] = defaultdict(set)
    sources: set[tuple[int, int]] = set()
    for letter in letters:
        headers = {k: v.decode() for k, v in letter.headers()}
        kind, value = bad[letter.key()]
        assert letter.value() == value
        assert headers["source.topic"] == topics.experience
        assert int(headers["source.partition"]) in range(PARTITIONS)
        sources.add((int(headers["source.partition"]), int(headers["source.offset"])))
        assert headers["error"]
        reasons[kind].add(headers["error"].split(" ")[0])
    assert set(reasons) == set(range(6))
    assert len(sources) == 100  # each letter names its own source record


def test_produced_bytes_are_standard_avro(settings: KafkaSettings, topics: RunTopics) -> None:
    sent = chunk(1, 2, 3, 5, obs_shape=(84, 84, 4), obs_dtype="uint8")
    with KafkaExperienceWriter(settings, topics.experience) as writer:
        writer.write(sent)
    consumer = Consumer(settings.consumer_config(f"ref-{uuid.uuid4().hex}"))
    consumer.assign([TopicPartition(topics.experience, p, 0) for p in range(PARTITIONS)])
    try:
        message = consumer.poll(30)
        while message is not None and message.error() is not None:
            message = consumer.poll(30)
    finally:
        consumer.close()
    assert message is not None
    data = message.value()
    assert data is not None and message.key() == b"1/2"
    reference = avro.schema.parse(json.dumps(default_registry().latest(CHUNK_SCHEMA).schema))
    assert data[:2] == b"\xc3\x01" and data[2:10] == reference.fingerprint("CRC-64-AVRO")
    decoder = avro.io.BinaryDecoder(io.BytesIO(data[10:]))
    record: Any = avro.io.DatumReader(reference).read(decoder)
    obs = record["observations"]
    assert obs["dtype"] == "uint8" and obs["shape"] == [6, 84, 84, 4]
    assert obs["data"] == sent.observations.tobytes()
    assert record["log_probs"]["data"] == sent.log_probs.tobytes()  # type: ignore[union-attr]


def test_a_rejected_record_surfaces_as_a_delivery_error(
    settings: KafkaSettings, kafka_bootstrap: str
) -> None:
    topic = f"coach-stream.it-small-{uuid.uuid4().hex[:12]}"
    admin = AdminClient(settings.admin_config())
    admin.create_topics([NewTopic(topic, 1, -1, config={"max.message.bytes": "2000"})])[
        topic
    ].result(timeout=10)
    try:
        writer = KafkaExperienceWriter(settings.model_copy(update={"compression": "none"}), topic)
        with pytest.raises(DeliveryError, match="did not acknowledge 1 record"), writer:
            writer.write(chunk(0, 0, 0, 200))
            writer.flush(30)
        assert writer.stats.failed == 1
    finally:
        admin.delete_topics([topic], operation_timeout=10)


def test_unreachable_broker_is_one_clear_error() -> None:
    settings = KafkaSettings(bootstrap_servers="127.0.0.1:1")
    with pytest.raises(ServiceUnavailableError, match=r"127\.0\.0\.1:1 did not answer.*stack up"):
        check_broker(settings, timeout=1.5)


# ------------------------------------------------------------------ the trainer's door


def _dead_letters(settings: KafkaSettings, topics: RunTopics, count: int) -> list[Any]:
    consumer = Consumer(settings.consumer_config(f"dlq-{uuid.uuid4().hex}"))
    consumer.assign([TopicPartition(topics.dead_letter, 0, 0)])
    letters: list[Any] = []
    try:
        while len(letters) < count:
            batch = consumer.consume(count, timeout=10)
            assert batch, f"the dead-letter topic has {len(letters)} records, expected {count}"
            letters += [m for m in batch if m.error() is None]
    finally:
        consumer.close()
    return letters


def _unfit(good: ExperienceChunk) -> dict[str, ExperienceChunk]:
    """Chunks that encode and decode, but not as chunks of a CartPole run named "it"."""
    t = good.num_steps
    actions = good.actions.copy()
    actions[-1] = 7
    rewards = good.rewards.copy()
    rewards[0] = np.nan
    return {
        "observations are float32(": dataclasses.replace(
            good, observations=np.zeros((t + 1, 5), np.float32)
        ),
        "observations are float64(": dataclasses.replace(
            good, observations=good.observations.astype(np.float64)
        ),
        "run_id is 'another-run'": dataclasses.replace(good, run_id="another-run"),
        "actions span 0..7": dataclasses.replace(good, actions=actions),
        "actions are int32(": dataclasses.replace(good, actions=good.actions.astype(np.int32)),
        "rewards hold NaN": dataclasses.replace(good, rewards=rewards),
    }


def test_unfit_records_are_dead_lettered_with_the_reason_and_the_trainer_goes_on(
    settings: KafkaSettings, topics: RunTopics, tmp_path: Path
) -> None:
    # Before the trainer's door, the first chunk of another shape crashed DQN's replay
    # buffer; the restarted trainer read the same record and crashed again.
    preset = load_preset(
        "cartpole-dqn",
        ["network.hidden_sizes=[16]", "dqn.learning_starts=32", "dqn.samples_per_insert=1"],
    )
    builder = builder_for(preset)
    shape = probe_shape(preset.env_id)
    good = [chunk(w, 0, s, 6) for s in range(12) for w in range(4)]
    expected: dict[bytes, str] = {}  # dead-letter key -> reason
    with KafkaRecordProducer(settings, topics.experience) as producer:
        for i, c in enumerate(good):
            producer.produce(c.key.encode(), encode_chunk(c))
            if i % 8 == 0:
                for reason, bad in _unfit(c).items():
                    key = f"unfit-{len(expected)}".encode()
                    expected[key] = reason
                    producer.produce(key, encode_chunk(bad))
    spec = ChunkSpec("it", shape.obs_shape, shape.obs_dtype, shape.num_actions)
    generator = torch.Generator().manual_seed(0)
    with (
        open_store(tmp_path.as_uri()) as store,
        KafkaExperienceReader(settings, topics, "trainer", spec=spec) as reader,
        KafkaControlSubscriber(settings, topics) as control,
        KafkaControlPublisher(settings, topics) as publisher,
    ):
        events = EventList()
        trainer = Trainer(
            builder.make_learner(shape, 4, generator),
            reader,
            control,
            publisher,
            store,
            dataclasses.replace(builder.make_trainer_settings("it"), log_every_s=0.0),
            events,
            generator,
        )
        assert trainer.start() is None
        deadline = time.monotonic() + 60
        while not reader.at_end() or trainer.learner.ready():
            assert trainer.iterate() is None
            assert time.monotonic() < deadline, "the trainer did not reach the end of the log"
        assert trainer.env_steps == sum(c.num_steps for c in good)  # every good one, only them
        assert trainer.learner.updates > 0
        assert reader.stats.dead_lettered == reader.stats.invalid == len(expected) == 36
        assert events.of("progress")[-1]["rollout/dead_lettered"] == len(expected)
    for letter in _dead_letters(settings, topics, len(expected)):
        headers = {k: v.decode() for k, v in letter.headers()}
        assert expected[letter.key()] in headers["error"], headers["error"]
        assert headers["error.kind"] == "invalid"
        assert headers["source.topic"] == topics.experience


# ------------------------------------------------------------------ chunk_seq across restarts


def _act(chunker: Chunker, steps: int, rng: np.random.Generator) -> list[ExperienceChunk]:
    """``steps`` vector steps of a made-up env whose episodes never end."""
    n, out = chunker.num_envs, []
    for _ in range(steps):
        flags = np.zeros(n, bool)
        obs = rng.random((n, 4)).astype(np.float32)
        action = Action(rng.integers(0, 2, n))
        out += chunker.add(action, np.ones(n, np.float32), flags, flags, obs, {})
    return out + chunker.flush()


def test_a_restarted_worker_continues_each_keys_chunk_seq(
    settings: KafkaSettings, topics: RunTopics
) -> None:
    worker, envs, rng = 3, 6, np.random.default_rng(3)

    def new_chunker() -> Chunker:  # what a restarted worker process builds
        return Chunker("it", worker, envs, 2, (4,), np.dtype(np.float32), behaviour=False)

    first = new_chunker()
    with KafkaExperienceWriter(settings, topics.experience) as writer:
        assert writer.next_chunk_seqs(worker, envs) == [0] * envs  # an empty topic
        first.start(rng.random((envs, 4)).astype(np.float32), 0, [0] * envs)
        for c in _act(first, 7, rng):  # 4 chunks per env
            writer.write(c)
            writer.write(chunk(1, c.env_index, c.chunk_seq, 2))  # another worker's keys
    with KafkaExperienceWriter(settings, topics.experience) as restarted:
        next_seqs = restarted.next_chunk_seqs(worker, envs)
        assert next_seqs == [4] * envs
        # small windows walk back over the other worker's records; a key never written
        # (env 6) reads its partition back to the low watermark and starts at 0
        assert tail.next_chunk_seqs(
            settings, topics.experience, worker, envs + 1, window=1, max_window=2
        ) == [*next_seqs, 0]
        second = new_chunker()
        second.start(rng.random((envs, 4)).astype(np.float32), 1, next_seqs)
        for c in _act(second, 3, rng):
            restarted.write(c)
    received, _ = read_all(settings, topics)
    for env in range(envs):
        seqs = [c.chunk_seq for c in received if (c.worker_id, c.env_index) == (worker, env)]
        assert seqs == list(range(6)), (env, seqs)  # monotonic, no repeats, no gaps


def test_keys_land_on_the_partition_the_tail_search_computes(
    settings: KafkaSettings, topics: RunTopics
) -> None:
    keys = [f"{w}/{e}".encode() for w in range(8) for e in range(8)]
    with KafkaRecordProducer(settings, topics.experience) as producer:
        for key in keys:
            producer.produce(key, b"x")
    consumer = Consumer(settings.consumer_config(f"where-{uuid.uuid4().hex}"))
    consumer.assign([TopicPartition(topics.experience, p, 0) for p in range(PARTITIONS)])
    landed: dict[bytes | None, int | None] = {}
    try:
        while len(landed) < len(keys):
            batch = consumer.consume(len(keys) - len(landed), timeout=10)
            assert batch, f"only {len(landed)} of {len(keys)} records arrived"
            landed.update({m.key(): m.partition() for m in batch if m.error() is None})
    finally:
        consumer.close()
    assert landed == {key: tail.partition_for(key, PARTITIONS) for key in keys}
    assert len(set(landed.values())) == PARTITIONS  # the test would notice a constant


def test_the_writer_reports_the_last_acknowledged_chunk_seq_of_each_key(
    settings: KafkaSettings, topics: RunTopics
) -> None:
    with KafkaExperienceWriter(settings, topics.experience) as writer:
        assert writer.acknowledged() == {}
        for seq in range(5):
            for env in range(3):
                writer.write(chunk(4, env, seq, 6))
        writer.flush(30.0)
        assert writer.acknowledged() == {"4/0": 4, "4/1": 4, "4/2": 4}
        assert writer.stats.delivered == 15
    received, _ = read_all(settings, topics)
    assert {(c.key, c.chunk_seq) for c in received} == {
        (f"4/{env}", seq) for env in range(3) for seq in range(5)
    }


def test_a_chunkers_records_travel_and_read_back_as_the_chunks_it_cuts(
    settings: KafkaSettings, topics: RunTopics
) -> None:
    """``Chunker.add_encoded`` (records written from its columns) through the producer and
    the trainer's reader: the same chunks as ``add`` cuts from the same steps, acknowledged
    per key."""
    envs = 4

    def cut(encoded: bool) -> list[Any]:
        chunker = Chunker("it", 2, envs, 3, (4,), np.dtype(np.float32), behaviour=True)
        rng = np.random.default_rng(11)
        chunker.start(rng.random((envs, 4)).astype(np.float32), 0, [0] * envs)
        add = chunker.add_encoded if encoded else chunker.add
        out: list[Any] = []
        for _ in range(10):
            done = rng.random(envs) < 0.2
            action = Action(rng.integers(0, 2, envs), rng.random(envs).astype(np.float32))
            infos = {"final_obs": rng.random((envs, 4)).astype(np.float32), "_final_obs": done}
            obs = rng.random((envs, 4)).astype(np.float32)
            out += add(action, rng.random(envs), done, np.zeros(envs, bool), obs, infos)
        return out + (chunker.flush_encoded() if encoded else chunker.flush())

    records, chunks = cut(encoded=True), cut(encoded=False)
    assert len(records) == len(chunks) > envs
    with KafkaExperienceWriter(settings, topics.experience) as writer:
        for record in records:
            writer.write_encoded(record)
        writer.flush(30.0)
        last = {c.key: c.chunk_seq for c in chunks}
        assert writer.acknowledged() == last
    received, _ = read_all(settings, topics)
    by_key = {(c.key, c.chunk_seq): c for c in received}
    assert len(by_key) == len(chunks)
    for want in chunks:
        got = by_key[(want.key, want.chunk_seq)]
        assert got.equals(dataclasses.replace(want, created_at_ms=got.created_at_ms))
