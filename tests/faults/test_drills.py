"""Fault drills: one real SYNC run (cartpole-ppo, 2 workers) through every fault in turn.

The run uses its own broker and fake-gcs-server (``services.py``), so the drills can
``kill -9`` them. The evaluator is held (SIGSTOP) while the faults happen, so the run
cannot solve and end before the last one, however fast CartPole learns; then it is let go
and the run must solve. Each drill measures its recovery time (``timeline.py``) and the
whole run must keep its promises, counted with ``chunk_seq`` (monotonic per worker env
across restarts):

- 0 acknowledged transitions lost: every chunk a worker reported as acknowledged is in
  the experience topic, and each worker env's chunks there run 0, 1, 2, ... without a
  gap or a repeat;
- 0 duplicates trained: the trainer's chunk ledger (kept in its trainer state across
  restarts) saw no chunk twice and none missing;
- 0 trainer crashes on input: hostile records and forged announcements restart nothing.

The recovery times are written as JSON lines to ``$COACH_STREAM_DRILL_REPORT`` when set
(docs/operations.md quotes them) and printed in the test's output.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import signal
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from confluent_kafka import Consumer, TopicPartition
from services import DrillBroker, DrillGcs, fill_disk
from timeline import Timeline

from coach_stream import processes
from coach_stream.codec import decode_chunk, encode_chunk, encode_control
from coach_stream.core import (
    EvaluationReport,
    ExperienceChunk,
    PolicyVersion,
    RunFinished,
)
from coach_stream.errors import CoachStreamError
from coach_stream.orchestrators import LaunchSettings, LocalOrchestrator, build_run_spec
from coach_stream.orchestrators.launcher import follow, prepare_topics
from coach_stream.orchestrators.plan import TaskState
from coach_stream.stack.gcs import DEFAULT_BUCKET
from coach_stream.transport.control import KafkaControlPublisher, KafkaControlSubscriber
from coach_stream.transport.settings import KafkaSettings, RunTopics
from coach_stream.transport.writer import KafkaRecordProducer

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(1200)]

RECOVERY_TARGET_S = 30.0
WORKERS = ("rollout-0", "rollout-1")
HOSTILE_RECORDS = 1000  # into each of the experience and control topics


@dataclasses.dataclass
class Drill:
    """One running drill run and what the drills measured."""

    orchestrator: LocalOrchestrator
    run_id: str
    broker: DrillBroker
    gcs: DrillGcs
    timeline: Timeline
    results: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    held_evaluator: int | None = None

    @property
    def kafka(self) -> KafkaSettings:
        return KafkaSettings(bootstrap_servers=self.broker.bootstrap)

    @property
    def topics(self) -> RunTopics:
        return RunTopics.for_run(self.run_id)

    def status(self) -> dict[str, Any]:
        return {s.name: s for s in self.orchestrator.status(self.run_id)}

    def pid(self, task: str) -> int:
        pid = self.status()[task].pid
        assert pid is not None, f"{task} is not running\n{self.timeline.tail()}"
        return int(pid)

    def hold_evaluator(self) -> None:
        """SIGSTOP the evaluator: only its reports can end the run, so it outlasts the faults."""
        self.timeline.wait(
            "the evaluator to start",
            lambda: "evaluator" in self.status() and self.status()["evaluator"].pid is not None,
            timeout_s=120,
        )
        self.held_evaluator = self.pid("evaluator")
        os.kill(self.held_evaluator, signal.SIGSTOP)

    def release_evaluator(self) -> None:
        if self.held_evaluator is not None:
            with contextlib.suppress(ProcessLookupError):  # stopped with its run meanwhile
                os.kill(self.held_evaluator, signal.SIGCONT)
            self.held_evaluator = None

    def restarts(self) -> dict[str, int]:
        return {name: s.restarts for name, s in self.status().items()}

    def fault(self, name: str, inject: Callable[[], None]) -> None:
        """Run ``inject`` (the fault, from its start to its end), then wait for recovery."""
        self.timeline.wait(
            f"training before the {name} drill",
            lambda: self.timeline.trainer_version() >= 1,
            timeout_s=300,
        )
        version, restarts = self.timeline.trainer_version(), self.restarts()
        started = time.time()
        inject()
        ended = time.time()
        recovered: list[float] = []

        def back() -> bool:
            seconds = self.timeline.recovered_after(ended, WORKERS, version)
            recovered[:] = [] if seconds is None else [seconds]
            return seconds is not None

        self.timeline.wait(f"recovery from the {name} drill", back, timeout_s=300)
        after = self.restarts()
        result = {
            "drill": name,
            "fault_s": round(ended - started, 1),
            "recovery_s": round(recovered[0], 1),
            "restarts": {
                task: after[task] - restarts.get(task, 0)
                for task in after
                if after[task] > restarts.get(task, 0)
            },
        }
        self.results.append(result)
        print(json.dumps(result))


def running_drill(
    orchestrator: LocalOrchestrator, broker: DrillBroker, gcs: DrillGcs, trainers: int = 1
) -> Iterator[Drill]:
    run_id = f"drill-{uuid.uuid4().hex[:10]}"
    settings = LaunchSettings(
        preset="cartpole-ppo",
        run_id=run_id,
        workers=len(WORKERS),
        kafka_bootstrap=broker.bootstrap,
        checkpoints=f"gs://{DEFAULT_BUCKET}/drills",
        gcs_emulator=gcs.endpoint,
        # The faults take minutes: a budget they cannot exhaust, and a learning rate that
        # does not anneal to 0 before the evaluator is let go.
        overrides=("env_step_budget=50000000", "ppo.anneal_lr=false"),
        trainers=trainers,
    )
    prepare_topics(settings)
    orchestrator.submit(build_run_spec(settings))
    running = Drill(orchestrator, run_id, broker, gcs, Timeline(orchestrator, run_id))
    yield running
    if report := os.environ.get("COACH_STREAM_DRILL_REPORT"):
        with Path(report).open("a") as out:
            for result in running.results:
                out.write(json.dumps(result) + "\n")


@pytest.fixture
def drill(
    orchestrator: LocalOrchestrator, drill_broker: DrillBroker, drill_gcs: DrillGcs
) -> Iterator[Drill]:
    yield from running_drill(orchestrator, drill_broker, drill_gcs)


@pytest.fixture
def rank_drill(
    orchestrator: LocalOrchestrator, drill_broker: DrillBroker, drill_gcs: DrillGcs
) -> Iterator[Drill]:
    yield from running_drill(orchestrator, drill_broker, drill_gcs, trainers=2)


@pytest.fixture
def disk_drill(
    orchestrator: LocalOrchestrator, small_disk_broker: DrillBroker, drill_gcs: DrillGcs
) -> Iterator[Drill]:
    yield from running_drill(orchestrator, small_disk_broker, drill_gcs)


@contextmanager
def evaluator_held(drill: Drill) -> Iterator[None]:
    """Hold the evaluator for the block (released also when the block fails)."""
    drill.hold_evaluator()
    try:
        yield
    finally:
        drill.release_evaluator()


@contextmanager
def held(pid: int) -> Iterator[None]:
    """SIGSTOP ``pid`` for the block (SIGCONT afterwards, also when the block fails)."""
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


# ---------------------------------------------------------------------------- hostile input


def _cartpole_chunk(run_id: str, worker: int, seq: int) -> ExperienceChunk:
    steps = 8
    return ExperienceChunk(
        run_id=run_id,
        worker_id=worker,
        env_index=0,
        chunk_seq=seq,
        policy_version=0,
        first_step=0,
        observations=np.zeros((steps + 1, 4), np.float32),
        actions=np.zeros(steps, np.int64),
        rewards=np.ones(steps, np.float32),
        terminated=np.zeros(steps, bool),
        truncated=np.zeros(steps, bool),
        log_probs=np.zeros(steps, np.float32),
        values=np.zeros(steps, np.float32),
    )


def hostile_experience(run_id: str, rng: np.random.Generator) -> Iterator[tuple[bytes, bytes]]:
    """Half undecodable bytes, half chunks that decode but are no chunks of this run.

    Their worker ids (900+) are no real worker's, so the accounting of the real workers'
    chunks is not confused by them.
    """
    good = _cartpole_chunk(run_id, 900, 0)
    wrong_action = good.actions.copy()
    wrong_action[0] = 5
    nan_reward = good.rewards.copy()
    nan_reward[-1] = np.nan
    unfit = [
        dataclasses.replace(good, run_id="another-run"),
        dataclasses.replace(good, observations=np.zeros((9, 7), np.float32)),
        dataclasses.replace(good, observations=good.observations.astype(np.float64)),
        dataclasses.replace(good, actions=wrong_action),
        dataclasses.replace(good, rewards=nan_reward),
    ]
    encoded = encode_chunk(good)
    for i in range(HOSTILE_RECORDS):
        key = f"{900 + i % 50}/0".encode()
        if i % 2 == 0:
            cut = int(rng.integers(0, len(encoded)))
            yield key, (rng.bytes(int(rng.integers(0, 300))) if i % 4 == 0 else encoded[:cut])
        else:
            chunk = dataclasses.replace(unfit[(i // 2) % len(unfit)], chunk_seq=i)
            yield key, encode_chunk(chunk)


def hostile_control(run_id: str, rng: np.random.Generator) -> Iterator[bytes]:
    """Half undecodable bytes, half messages that decode but must change nothing."""
    wrong: list[Any] = [
        RunFinished("another-run", final_version=3, reason="stopped", created_at_ms=0),
        EvaluationReport("another-run", 0, 0, returns=(500.0,) * 20, created_at_ms=0),
        EvaluationReport(run_id, 0, 0, returns=(float("nan"),) * 20, created_at_ms=0),
        PolicyVersion("another-run", 10**6, "gs://elsewhere/x.pt", "0" * 64, 1, 0, 0, 0),
    ]
    for i in range(HOSTILE_RECORDS):
        if i % 2 == 0:
            yield rng.bytes(int(rng.integers(0, 200)))
        else:
            yield encode_control(wrong[(i // 2) % len(wrong)])


def inject_hostile_records(drill: Drill) -> None:
    rng = np.random.default_rng(13)
    with KafkaRecordProducer(drill.kafka, drill.topics.experience) as producer:
        for key, value in hostile_experience(drill.run_id, rng):
            producer.produce(key, value)
    with KafkaRecordProducer(drill.kafka, drill.topics.control) as producer:
        for value in hostile_control(drill.run_id, rng):
            producer.produce(b"hostile", value)


def forge_next_version(drill: Drill) -> None:
    """With the trainer held, announce "v+1": the bytes of v under a wrong sha256; wait
    until both workers have refused it, then let the trainer publish the real v+1."""
    with held(drill.pid("trainer")):
        with KafkaControlSubscriber(drill.kafka, drill.topics) as control:
            versions = [
                m
                for m in control.read_to_end(30.0)
                if isinstance(m, PolicyVersion) and m.run_id == drill.run_id
            ]
        newest = max(versions, key=lambda m: m.version)
        forged = dataclasses.replace(newest, version=newest.version + 1, sha256="0" * 64)
        with KafkaControlPublisher(drill.kafka, drill.topics) as publisher:
            publisher.publish(forged)
        drill.timeline.wait(
            "both workers refusing the forged version",
            lambda: all(
                drill.timeline.logged(worker, f"rejected policy version {forged.version} ")
                for worker in WORKERS
            ),
            timeout_s=60,
        )


# ---------------------------------------------------------------------------- accounting


def experience_by_key(drill: Drill) -> dict[str, list[int]]:
    """Every chunk_seq of this run's real workers in the experience topic, per key, in order."""
    config = drill.kafka.consumer_config(f"drill-audit-{uuid.uuid4().hex}")
    consumer = Consumer({**config, "enable.partition.eof": True})
    topic = drill.topics.experience
    partitions = consumer.list_topics(topic, timeout=30).topics[topic].partitions
    consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
    seqs: dict[str, list[int]] = defaultdict(list)
    at_end: set[int] = set()
    try:
        while len(at_end) < len(partitions):
            for message in consumer.consume(10_000, timeout=10):
                if message.error() is not None:
                    at_end.add(int(message.partition() or 0))
                    continue
                try:
                    chunk = decode_chunk(message.value() or b"")
                except CoachStreamError:
                    continue  # a hostile record: the reader dead-lettered it
                if chunk.run_id == drill.run_id and chunk.worker_id < 900:
                    seqs[chunk.key].append(chunk.chunk_seq)
    finally:
        consumer.close()
    return seqs


def acknowledged_by_key(drill: Drill) -> dict[str, int]:
    """The newest chunk_seq each worker env reported acknowledged, over all its lives."""
    acked: dict[str, int] = {}
    for worker in WORKERS:
        for event in drill.timeline.of("progress", worker):
            reported = event.get("acked_chunk_seqs") or {}
            if isinstance(reported, str):  # telemetry carries nested values as JSON text
                reported = json.loads(reported)
            for key, seq in reported.items():
                acked[key] = max(acked.get(key, -1), int(seq))
    return acked


# ---------------------------------------------------------------------------- the drills


def test_a_sync_run_rides_through_every_fault_and_keeps_its_promises(drill: Drill) -> None:
    timeline = drill.timeline
    with evaluator_held(drill):
        drill.fault(
            "rollout worker kill -9", lambda: os.kill(drill.pid("rollout-0"), signal.SIGKILL)
        )
        drill.fault("trainer kill -9", lambda: os.kill(drill.pid("trainer"), signal.SIGKILL))

        def broker_kill_and_restart() -> None:
            drill.broker.kill()
            drill.broker.start()

        drill.fault("broker kill -9 and restart", broker_kill_and_restart)

        def gcs_stopped_15_s() -> None:
            drill.gcs.pause()
            try:
                time.sleep(15.0)  # the length of the outage, not a synchronization
            finally:
                drill.gcs.resume()

        drill.fault("fake-gcs-server stopped 15 s", gcs_stopped_15_s)

        def gcs_kill_and_restart() -> None:
            drill.gcs.kill()
            drill.gcs.start()

        drill.fault("fake-gcs-server kill -9 and restart", gcs_kill_and_restart)

        restarts_before_input = drill.restarts()
        dead_before = max(
            (int(e.get("rollout/dead_lettered") or 0) for e in timeline.of("progress", "trainer")),
            default=0,
        )
        drill.fault("1,000 hostile records per topic", lambda: inject_hostile_records(drill))
        drill.fault("forged PolicyVersion (wrong sha256)", lambda: forge_next_version(drill))
        assert drill.restarts() == restarts_before_input, "hostile input restarted a task"
        timeline.wait(
            "the trainer dead-lettering the hostile experience records",
            lambda: max(
                int(e.get("rollout/dead_lettered") or 0) for e in timeline.of("progress", "trainer")
            ) >= dead_before + HOSTILE_RECORDS,
            timeout_s=60,
        )  # fmt: skip

        def stopped_and_resumed_by_hand() -> None:
            drill.release_evaluator()  # a SIGSTOPped process would sit out SIGTERM's grace
            drill.orchestrator.stop(drill.run_id)  # every task ends: a reboot, a bad deploy
            drill.orchestrator.resume(drill.run_id)  # `coach-stream resume RUN`
            drill.hold_evaluator()

        drill.fault("whole run stopped, then resumed by hand", stopped_and_resumed_by_hand)

    assert_promises_kept(drill)


def assert_promises_kept(drill: Drill) -> None:
    """The run solves; every drill recovered in time; nothing acknowledged was lost and
    nothing was trained twice."""
    outcome = follow(drill.orchestrator, drill.run_id, timeout_s=600)
    timeline = drill.timeline
    timeline.poll()
    assert outcome.solved, timeline.tail()
    assert drill.status()["trainer"].state is TaskState.COMPLETE
    for result in drill.results:
        assert result["recovery_s"] <= RECOVERY_TARGET_S, result

    finished = outcome.finished
    assert finished is not None
    assert finished["duplicate_chunks"] == 0, "the trainer trained a chunk twice"
    assert finished["chunk_gaps"] == 0, "the trainer missed chunks"

    in_log = experience_by_key(drill)
    acked = acknowledged_by_key(drill)
    assert acked and set(acked) <= set(in_log)
    for key, seqs in in_log.items():
        assert seqs == list(range(len(seqs))), f"{key}: gaps or repeats in the log"
        assert acked.get(key, -1) < len(seqs), f"{key}: acknowledged chunks missing"


def test_a_broker_whose_disk_fills_stops_and_the_run_recovers_once_it_has_room(
    disk_drill: Drill,
) -> None:
    drill = disk_drill

    def disk_full() -> None:
        filler = fill_disk(drill.broker.layout.data, leave_bytes=2 * 1024 * 1024)
        try:
            assert drill.broker.wait_exit(180), (
                "the broker kept running on a full disk\n" + processes.tail(drill.broker.layout.log)
            )
            assert "No space left on device" in drill.broker.layout.log.read_text()
        finally:
            filler.unlink()  # the operator makes room ...
        drill.broker.start()  # ... and starts the broker again

    with evaluator_held(drill):
        drill.fault("broker disk full", disk_full)
    assert_promises_kept(drill)


def test_data_parallel_ranks_restart_together_when_one_dies_and_keep_their_promises(
    rank_drill: Drill,
) -> None:
    """Two trainer ranks: ``kill -9`` of either makes the other fail fast (not hang), both
    come back from the newest trainer state, and nothing is lost or learned twice."""
    drill = rank_drill
    with evaluator_held(drill):
        for victim, survivor in (("trainer-1", "trainer"), ("trainer", "trainer-1")):
            pid = drill.pid(victim)
            drill.fault(f"{victim} kill -9", lambda pid=pid: os.kill(pid, signal.SIGKILL))
            assert drill.results[-1]["restarts"].get(survivor, 0) >= 1, drill.results[-1]
            assert drill.timeline.logged(survivor, "lost its group"), drill.timeline.tail()
    assert_promises_kept(drill)
    other = drill.timeline.of("finished", "trainer-1")
    assert other, drill.timeline.tail()
    assert other[-1]["duplicate_chunks"] == other[-1]["chunk_gaps"] == 0, other[-1]
