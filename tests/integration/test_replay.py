"""Offline replay on the real broker: a recorded CartPole topic inspected, exported to Avro,
Parquet and Minari (each re-read by an independent reader), replayed from a time, with an
older schema version and dead-lettered garbage in it, and trained on offline (BC reaches
the CartPole threshold; two runs give bit-identical batches and weights)."""

from __future__ import annotations

import io
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import fastavro
import numpy as np
import pyarrow.parquet as pq
import pytest
from confluent_kafka import Producer

from coach_stream.cli.main import main
from coach_stream.codec import ChunkCodec, SchemaRegistry, default_schema_dir, encode_chunk
from coach_stream.core import ExperienceChunk
from coach_stream.envs import probe_shape
from coach_stream.replay.export.run import run_export
from coach_stream.replay.inspect import inspect
from coach_stream.replay.offline import OfflineConfig
from coach_stream.replay.offline.session import run_offline
from coach_stream.replay.offline.train import load_dataset, train_offline
from coach_stream.replay.range import parse_bound
from coach_stream.replay.reader import _BATCHES_PER_CONSUME, ReplayReader, to_transitions
from coach_stream.replay.record import Recorded, cartpole_controller, record
from coach_stream.testing.chunks import make_chunk
from coach_stream.transport.admin import delete_run_topics, ensure_run_topics
from coach_stream.transport.reader import KafkaExperienceReader
from coach_stream.transport.retention import parse_retention
from coach_stream.transport.settings import KafkaSettings, RunTopics
from coach_stream.transport.writer import KafkaExperienceWriter

pytestmark = pytest.mark.integration

FIXTURES = Path(__file__).parents[1] / "unit" / "codec" / "fixtures"
# the broker refuses CreateTimes more than an hour ahead (message.timestamp.after.max.ms)
_PAST_MS = (int(time.time()) // 60 - 180) * 60_000
CARTPOLE_THRESHOLD = 475.0  # gymnasium's reward_threshold for CartPole-v1


@pytest.fixture(scope="module")
def settings(kafka_bootstrap: str) -> KafkaSettings:
    return KafkaSettings(bootstrap_servers=kafka_bootstrap, linger_ms=5)


def _new_run(settings: KafkaSettings, partitions: int = 2, retention: str = "7d") -> RunTopics:
    topics = RunTopics.for_run(f"rp-{uuid.uuid4().hex[:10]}")
    r = parse_retention(retention)
    ensure_run_topics(
        settings,
        topics,
        partitions,
        experience_retention_ms=r.ms,
        experience_retention_bytes=r.bytes,
    )
    return topics


@pytest.fixture(scope="module")
def recorded(settings: KafkaSettings) -> Iterator[tuple[RunTopics, Recorded]]:
    """A short CartPole run's topic: a noisy scripted expert, 2 workers x 4 envs."""
    topics = _new_run(settings)
    run_id = topics.experience.split(".")[1]
    chunks: list[ExperienceChunk] = []
    returns: list[float] = []
    with KafkaExperienceWriter(settings, topics.experience) as writer:
        for worker in range(2):
            got = record(
                writer,
                run_id,
                "CartPole-v1",
                cartpole_controller(0.2),
                900,
                worker_id=worker,
                seed=worker,
            )
            chunks += got.chunks
            returns += got.returns
    yield topics, Recorded(chunks, returns)
    delete_run_topics(settings, topics)


def _by_key(chunks: list[ExperienceChunk]) -> dict[tuple[int, int, int], ExperienceChunk]:
    return {(c.worker_id, c.env_index, c.chunk_seq): c for c in chunks}


def test_reader_returns_every_transition_written(
    settings: KafkaSettings, recorded: tuple[RunTopics, Recorded]
) -> None:
    topics, rec = recorded
    expected = _by_key(rec.chunks)
    seen = 0
    with ReplayReader(settings, topics.experience, batch_transitions=500) as reader:
        for batch in reader.chunk_batches():
            t = to_transitions(batch)
            c = batch.columns
            row = 0
            for i in range(len(c)):
                chunk = expected[(int(c.worker_id[i]), int(c.env_index[i]), int(c.chunk_seq[i]))]
                n = chunk.num_steps
                assert np.array_equal(t.observations[row : row + n], chunk.observations[:-1])
                assert np.array_equal(t.next_observations[row : row + n], chunk.observations[1:])
                assert np.array_equal(t.actions[row : row + n], chunk.actions)
                assert np.array_equal(t.rewards[row : row + n], chunk.rewards)
                assert np.array_equal(t.terminated[row : row + n], chunk.terminated)
                row += n
                seen += 1
            # a batch is cut at the first chunk boundary at or past 500 transitions
            assert c.steps[:-1].sum() < 500
        assert seen == len(rec.chunks) == reader.stats.chunks
        assert reader.stats.transitions == sum(c.num_steps for c in rec.chunks)
        # memory: the reader never held more than one batch's records
        assert reader.stats.max_held_records <= 500 // 1 + 1
        assert reader.stats.max_held_records < len(rec.chunks) // 4


def test_inspect_describes_the_topic(
    settings: KafkaSettings, recorded: tuple[RunTopics, Recorded]
) -> None:
    topics, rec = recorded
    with ReplayReader(settings, topics.experience) as reader:
        report = inspect(reader, topics.dead_letter).to_json()
    assert report["chunks"] == len(rec.chunks)
    assert report["transitions"] == sum(c.num_steps for c in rec.chunks)
    assert report["episodes"]["count"] == len(rec.returns)
    assert report["episodes"]["return"]["mean"] == pytest.approx(np.mean(rec.returns))
    assert report["gaps"] == 0 and report["duplicates"] == 0
    assert len(report["sequences"]) == 8  # 2 workers x 4 envs
    assert list(report["schemas"].values()) == [len(rec.chunks)]
    assert "ExperienceChunk v1" in next(iter(report["schemas"]))
    assert report["retention"] == "1w"
    assert report["dead_letters"] == 0 and report["undecodable"] == 0
    assert report["policy_versions"] == {"count": 1, "min": 0, "max": 0}


def test_exports_reread_by_independent_readers(
    settings: KafkaSettings, recorded: tuple[RunTopics, Recorded], tmp_path: Path
) -> None:
    topics, rec = recorded
    expected = _by_key(rec.chunks)
    steps = sum(c.num_steps for c in rec.chunks)

    with ReplayReader(settings, topics.experience, batch_transitions=1000) as reader:
        where, counts = run_export(reader, "avro", str(tmp_path / "x.avro"))
    assert counts["records"] == len(rec.chunks)
    with open(where, "rb") as f:
        records = list(fastavro.reader(f))
    assert len(records) == len(rec.chunks)
    for r in records:
        chunk = expected[(r["worker_id"], r["env_index"], r["chunk_seq"])]
        obs = np.frombuffer(r["observations"]["data"], np.float32).reshape(
            r["observations"]["shape"]
        )
        assert np.array_equal(obs, chunk.observations)
        assert np.frombuffer(r["actions"]["data"], np.int64).tolist() == chunk.actions.tolist()
        assert r["episode_return"] == chunk.episode_return

    with ReplayReader(settings, topics.experience, batch_transitions=1000) as reader:
        where, counts = run_export(reader, "parquet", str(tmp_path / "x.parquet"))
    table = pq.read_table(where)
    assert table.num_rows == steps == counts["rows"]
    assert table.schema.field("observation").type.list_size == 4
    obs = np.stack(table.column("observation").to_numpy(zero_copy_only=False))
    first = table.slice(0, 1).to_pylist()[0]
    chunk = expected[(first["worker_id"], first["env_index"], first["chunk_seq"])]
    assert np.array_equal(obs[0], chunk.observations[0])
    assert table.column("reward").to_numpy().sum() == pytest.approx(steps)  # CartPole: 1/step
    ends = table.filter(table.column("episode_return").is_valid())
    assert sorted(ends.column("episode_return").to_pylist()) == sorted(rec.returns)
    # every recorded episode began inside the range: each has its first chunk's seq as id
    assert min(ends.column("episode_id").to_pylist()) >= 0

    minari = pytest.importorskip("minari")
    with ReplayReader(settings, topics.experience, batch_transitions=1000) as reader:
        where, counts = run_export(
            reader, "minari", str(tmp_path / "datasets"), env="CartPole-v1", dataset_id="cs/t-v0"
        )
    dataset = minari.load_dataset("cs/t-v0")  # MINARI_DATASETS_PATH set by the export
    assert dataset.total_episodes == counts["episodes"] == len(rec.returns)
    returns = sorted(float(e.rewards.sum()) for e in dataset.iterate_episodes())
    assert returns == sorted(rec.returns)
    episode = next(iter(dataset.iterate_episodes()))
    assert episode.observations.shape == (len(episode.rewards) + 1, 4)
    starts = [c for c in rec.chunks if c.first_step == 0]
    assert any(np.array_equal(episode.observations[0], c.observations[0]) for c in starts)


def _produce_at(settings: KafkaSettings, topic: str, values: list[bytes], stamp_ms: int) -> None:
    producer = Producer({"bootstrap.servers": settings.bootstrap_servers})
    for v in values:
        producer.produce(topic, v, key=b"0/0", timestamp=stamp_ms)
    assert producer.flush(30) == 0


def test_replay_from_a_timestamp(settings: KafkaSettings) -> None:
    topics = _new_run(settings, partitions=1)
    try:
        t0 = _PAST_MS
        early = [encode_chunk(make_chunk(3, seed=i)) for i in range(5)]
        late = [encode_chunk(make_chunk(4, seed=100 + i)) for i in range(7)]
        _produce_at(settings, topics.experience, early, t0)
        _produce_at(settings, topics.experience, late, t0 + 60_000)
        iso = datetime.fromtimestamp((t0 + 30_000) / 1000, UTC).isoformat()
        bound = parse_bound(iso, "--from")
        assert bound.timestamp_ms == t0 + 30_000
        with ReplayReader(settings, topics.experience, start=bound) as reader:
            batches = list(reader.chunk_batches())
        assert sum(len(b) for b in batches) == 7
        assert reader.stats.transitions == 7 * 4
        with ReplayReader(
            settings, topics.experience, end=parse_bound(f"@{t0 + 30_000}", "--to")
        ) as reader:
            assert sum(len(b) for b in reader.chunk_batches()) == 5
    finally:
        delete_run_topics(settings, topics)


def test_topic_with_an_older_schema_version(settings: KafkaSettings, tmp_path: Path) -> None:
    """A release whose registry knows v2 replays a topic holding v1 (older) and v2 records."""
    with_v2 = SchemaRegistry.load(default_schema_dir(), FIXTURES)
    topics = _new_run(settings, partitions=1)
    try:
        old = [make_chunk(5, seed=i) for i in range(4)]
        new = [make_chunk(6, seed=10 + i) for i in range(3)]
        values = [encode_chunk(c) for c in old] + [ChunkCodec(with_v2).encode(c) for c in new]
        _produce_at(settings, topics.experience, values, _PAST_MS)
        with ReplayReader(settings, topics.experience, registry=with_v2) as reader:
            report = inspect(reader, None).to_json()
        assert report["chunks"] == 7 and report["undecodable"] == 0
        assert sorted(report["schemas"].values()) == [3, 4]
        assert any("v1" in k for k in report["schemas"]) and any(
            "v2" in k for k in report["schemas"]
        )
        with ReplayReader(settings, topics.experience, registry=with_v2) as reader:
            batch = next(reader.chunk_batches())
            assert np.array_equal(batch.columns.observations[:6], old[0].observations)
        with ReplayReader(settings, topics.experience, registry=with_v2) as reader:
            where, counts = run_export(reader, "avro", str(tmp_path / "mixed.avro"))
        assert counts["reencoded"] == 4  # the v1 records, resolved to the file's v2 schema
        with open(where, "rb") as f:
            avro_file = fastavro.reader(f)
            assert "env_name" in str(avro_file.writer_schema)
            rows = list(avro_file)
        assert [r["env_name"] for r in rows[:4]] == ["unknown"] * 4
        assert len(rows) == 7
    finally:
        delete_run_topics(settings, topics)


def test_topic_with_dead_lettered_garbage(settings: KafkaSettings, tmp_path: Path) -> None:
    topics = _new_run(settings, partitions=1)
    try:
        good = [encode_chunk(make_chunk(5, seed=i)) for i in range(6)]
        garbage = [b"not avro", b"\xc3\x01" + b"\x00" * 12, good[0][:-7]]
        mixed = good[:2] + garbage + good[2:]
        _produce_at(settings, topics.experience, mixed, _PAST_MS)
        # the trainer's reader dead-letters the garbage (what a live run does)
        with KafkaExperienceReader(settings, topics, "g") as live:
            list(live.read_until_end(100))
            assert live.dead_lettered == 3
        with ReplayReader(settings, topics.experience) as reader:
            report = inspect(reader, topics.dead_letter).to_json()
        assert report["undecodable"] == 3 and report["dead_letters"] == 3
        assert report["chunks"] == 6 and report["records"] == 9
        with ReplayReader(settings, topics.experience) as reader:
            where, counts = run_export(reader, "parquet", str(tmp_path / "g.parquet"))
        assert pq.read_table(where).num_rows == 30 and counts["undecodable"] == 3
    finally:
        delete_run_topics(settings, topics)


def test_a_partition_of_garbage_only_is_counted_and_the_rest_read(settings: KafkaSettings) -> None:
    # a read of undecodable records only used to break the join of the next read's chunks
    topics = _new_run(settings, partitions=2)
    try:
        producer = Producer({"bootstrap.servers": settings.bootstrap_servers})
        for i in range(4):
            producer.produce(topics.experience, b"garbage %d" % i, partition=0)
        for i in range(5):
            producer.produce(topics.experience, encode_chunk(make_chunk(3, seed=i)), partition=1)
        assert producer.flush(30) == 0
        with ReplayReader(settings, topics.experience, batch_transitions=7) as reader:
            rows = sum(len(batch) for batch in reader.batches())
            assert rows == 15 and reader.stats.undecodable == 4
        with ReplayReader(settings, topics.experience) as reader:
            report = inspect(reader, topics.dead_letter).to_json()
        assert report["undecodable"] == 4 and report["chunks"] == 5
        first = report["undecodable_first"]
        assert [(u["partition"], u["offset"]) for u in first] == [(0, 0), (0, 1), (0, 2)]
    finally:
        delete_run_topics(settings, topics)


def test_partitions_are_read_one_after_the_other(settings: KafkaSettings) -> None:
    # every record of every partition, in partition then offset order, an empty one skipped
    topics = _new_run(settings, partitions=5)
    try:
        producer = Producer({"bootstrap.servers": settings.bootstrap_servers})
        counts = {0: 7, 1: 3, 2: 0, 3: 9, 4: 4}
        for partition, n in counts.items():
            for i in range(n):
                chunk = make_chunk(2, seed=10 * partition + i)
                producer.produce(topics.experience, encode_chunk(chunk), partition=partition)
        assert producer.flush(30) == 0
        expected = [(p, o) for p, n in counts.items() for o in range(n)]
        for _ in range(2):  # the same order on a second reader
            with ReplayReader(settings, topics.experience, batch_transitions=5) as reader:
                got = [
                    (int(p), int(o))
                    for batch in reader.chunk_batches()
                    for p, o in zip(batch.partitions, batch.offsets, strict=True)
                ]
            assert got == expected
    finally:
        delete_run_topics(settings, topics)


def test_a_partition_of_another_runs_shape_is_counted_not_a_crash(
    settings: KafkaSettings, tmp_path: Path
) -> None:
    topics = _new_run(settings, partitions=2)
    try:
        producer = Producer({"bootstrap.servers": settings.bootstrap_servers})
        for i in range(5):
            producer.produce(topics.experience, encode_chunk(make_chunk(3, seed=i)), partition=0)
        for i in range(2):
            other = make_chunk(3, seed=i, obs_shape=(2, 2), obs_dtype="uint8")
            producer.produce(topics.experience, encode_chunk(other), partition=1)
        assert producer.flush(30) == 0
        with ReplayReader(settings, topics.experience) as reader:
            where, counts = run_export(reader, "parquet", str(tmp_path / "s.parquet"))
        assert pq.read_table(where).num_rows == 15 and counts["undecodable"] == 2
    finally:
        delete_run_topics(settings, topics)


def test_offline_training_is_bit_reproducible(
    settings: KafkaSettings, recorded: tuple[RunTopics, Recorded]
) -> None:
    topics, _ = recorded
    shape = probe_shape("CartPole-v1")
    config = OfflineConfig(steps=200, batch_size=64)
    results = []
    for _ in range(2):
        with ReplayReader(settings, topics.experience, batch_transitions=700) as reader:
            data = load_dataset(reader, 1_000_000)
        for algo in ("bc", "cql"):
            _, result = train_offline(data, algo, shape, config, 7, 1000, lambda *_: None)
            results.append((algo, result.batches_sha256, result.weights_sha256))
    assert results[:2] == results[2:]
    _, other = train_offline(data, "bc", shape, config, 8, 1000, lambda *_: None)
    assert other.weights_sha256 != results[0][2]  # the seed matters


def test_behaviour_cloning_reaches_the_cartpole_threshold(
    settings: KafkaSettings, recorded: tuple[RunTopics, Recorded], tmp_path: Path
) -> None:
    """A noisy (20 % random actions) scripted expert's data; BC's greedy policy solves it."""
    topics, _ = recorded
    with ReplayReader(settings, topics.experience) as reader:
        data = load_dataset(reader, 1_000_000)
    run_id = f"rp-bc-{uuid.uuid4().hex[:8]}"
    result = run_offline(
        data,
        settings=settings,
        run_id=run_id,
        checkpoints=tmp_path.as_uri(),
        gcs_emulator=None,
        env_id="CartPole-v1",
        algo="bc",
        config=OfflineConfig(steps=1000, batch_size=128),
        seed=0,
        publish_every=500,
        eval_episodes=8,
    )
    try:
        assert result["mean_return"] >= CARTPOLE_THRESHOLD
        assert result["policy_version"] == 1  # versions 0 and 1 announced, both stored
        assert (tmp_path / "runs" / run_id / "policies" / "00000001.pt").is_file()
    finally:
        delete_run_topics(settings, RunTopics.for_run(run_id))


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["inspect", "rp-no-such-run"], "does not exist"),
        (["inspect", "{run}", "--from", "yesterday"], "is not a position"),
        (["inspect", "{run}", "--from", "2026-01-01T00:00:00"], "no time zone"),
        (["export", "{run}", "--format", "avro", "--out", "/proc/nope/x.avro"], "does not exist"),
        (["export", "{run}", "--format", "csv", "--out", "x.csv"], "--format"),
        (["export", "{run}", "--format", "avro", "--out", "{tmp}/x", "--from", "99999"], "empty"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    settings: KafkaSettings,
    recorded: tuple[RunTopics, Recorded],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    args: list[str],
    message: str,
) -> None:
    run = recorded[0].experience.split(".")[1]
    argv = ["replay", *(a.format(run=run, tmp=tmp_path) for a in args)]
    argv += ["--kafka", settings.bootstrap_servers, "--no-progress"]
    code = main(argv)
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert len(err.splitlines()) == 1 and message in err and "Traceback" not in err


def test_export_to_gcs_archive(
    settings: KafkaSettings,
    recorded: tuple[RunTopics, Recorded],
    gcs_endpoint: str,
    gcs_bucket: str,
    gcs_client: object,
) -> None:
    topics, rec = recorded
    with ReplayReader(settings, topics.experience) as reader:
        where, _ = run_export(reader, "parquet", f"gs://{gcs_bucket}/archive", gcs_endpoint)
    run_id = topics.experience.split(".")[1]
    assert where == f"gs://{gcs_bucket}/archive/{run_id}.parquet"
    blob = gcs_client.bucket(gcs_bucket).blob(f"archive/{run_id}.parquet")  # type: ignore[attr-defined]
    table = pq.read_table(io.BytesIO(blob.download_as_bytes()))
    assert table.num_rows == sum(c.num_steps for c in rec.chunks)


def test_export_memory_is_bounded_by_the_batch(settings: KafkaSettings, tmp_path: Path) -> None:
    """Peak traced memory exporting a topic of 48 reads equals that of a quarter of it.

    A read (one consume) holds ``_BATCHES_PER_CONSUME`` batches' records: the batches are
    made that much smaller so that a read stays 4,000 transitions, a small part of the topic.
    """
    import tracemalloc

    topics = _new_run(settings, partitions=1)
    try:
        rng = np.random.default_rng(0)
        values = []
        for i in range(6000):
            chunk = make_chunk(32, seed=0, behaviour=False, ended=False)
            obs = rng.standard_normal((33, 4)).astype(np.float32)
            values.append(
                encode_chunk(
                    ExperienceChunk(**{**chunk.__dict__, "chunk_seq": i, "observations": obs})
                )
            )
        topic_bytes = sum(map(len, values))
        _produce_at(settings, topics.experience, values, _PAST_MS)
        peaks = []
        batch = 4_000 // _BATCHES_PER_CONSUME
        for end in (1500, 6000):  # a quarter, then all of it: 12 and 48 reads
            tracemalloc.start()
            with ReplayReader(
                settings,
                topics.experience,
                end=parse_bound(str(end), "--to"),
                batch_transitions=batch,
            ) as reader:
                run_export(reader, "parquet", str(tmp_path / f"{end}.parquet"))
            peaks.append(tracemalloc.get_traced_memory()[1])
            tracemalloc.stop()
            assert reader.stats.max_held_records <= batch // 32 + 1
        assert peaks[1] < peaks[0] * 1.25 + 256 * 1024
        assert peaks[1] < topic_bytes / 3
    finally:
        delete_run_topics(settings, topics)
