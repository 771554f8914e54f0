"""The trainer's backlog at the broker: what the ASYNC rate limit and bench/soak.py read."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import numpy as np
import pytest

from coach_stream.core import ExperienceChunk
from coach_stream.transport import (
    KafkaExperienceReader,
    KafkaExperienceWriter,
    KafkaSettings,
    RunTopics,
    ensure_run_topics,
)
from coach_stream.transport.admin import delete_run_topics
from coach_stream.transport.backlog import KafkaExperienceBacklog
from coach_stream.transport.names import trainer_group

RECORDS = 40


def chunk(env: int, seq: int) -> ExperienceChunk:
    steps = 4
    return ExperienceChunk(
        run_id="it", worker_id=0, env_index=env, chunk_seq=seq, policy_version=0,
        first_step=seq * steps, observations=np.zeros((steps + 1, 4), np.float32),
        actions=np.zeros(steps, np.int64), rewards=np.ones(steps, np.float32),
        terminated=np.zeros(steps, bool), truncated=np.zeros(steps, bool),
    )  # fmt: skip


@pytest.fixture
def settings(kafka_bootstrap: str) -> KafkaSettings:
    return KafkaSettings(bootstrap_servers=kafka_bootstrap, linger_ms=5)


@pytest.fixture
def topics(settings: KafkaSettings) -> Iterator[RunTopics]:
    run = RunTopics.for_run(f"it-{uuid.uuid4().hex[:12]}")
    ensure_run_topics(settings, run, experience_partitions=3)
    yield run
    delete_run_topics(settings, run)


def test_backlog_is_the_log_past_the_trainers_position_as_its_reader_commits_it(
    settings: KafkaSettings, topics: RunTopics
) -> None:
    with KafkaExperienceWriter(settings, topics.experience) as writer:
        for seq in range(RECORDS):
            writer.write(chunk(seq % 5, seq // 5))
        writer.flush(30)
    group = trainer_group("it")
    with KafkaExperienceBacklog(settings, topics, group) as backlog:
        assert backlog.unread() is None  # the trainer has recorded no position yet
        with KafkaExperienceReader(settings, topics, group, commit_every_s=None) as reader:
            first: list[ExperienceChunk] = []
            while len(first) < 15:
                first += reader.read(15 - len(first), timeout=10)
            assert backlog.unread() is None  # read, but nothing committed
            reader.commit()
            assert backlog.unread() == RECORDS - 15
        # The trainer's reader commits by itself while it reads (here: at every read).
        with KafkaExperienceReader(settings, topics, group, commit_every_s=0.0) as reader:
            rest = [c for batch in reader.read_until_end(100, timeout=30) for c in batch]
            assert len(rest) == RECORDS  # a new reader starts at the earliest offset
            deadline = time.monotonic() + 10
            while (unread := backlog.unread()) != 0 and time.monotonic() < deadline:
                reader.read(1, 0.1)  # asynchronous commit: serve the client until it lands
            assert unread == 0


def test_an_unanswering_broker_makes_the_backlog_unknown_for_a_while(
    caplog: pytest.LogCaptureFixture,
) -> None:
    settings = KafkaSettings(bootstrap_servers="127.0.0.1:9")  # discard port: nobody answers
    topics = RunTopics.for_run("it-nobody")
    with KafkaExperienceBacklog(settings, topics, "g", timeout=0.5, retry_after_s=60) as backlog:
        assert backlog.unread() is None
        assert "backlog on coach-stream.it-nobody.experience is unknown" in caplog.text
        asks = 0
        real_ask = backlog._ask

        def counted_ask() -> int | None:
            nonlocal asks
            asks += 1
            return real_ask()

        backlog._ask = counted_ask  # type: ignore[method-assign]
        assert backlog.unread() is None  # not asked again within retry_after_s
        assert asks == 0  # counted, not timed: a loaded machine may stall for 0.4 s
