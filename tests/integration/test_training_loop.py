"""The trainer and rollout loops over the real broker and fake-gcs-server, in one process.

Workers and the trainer are interleaved in one thread (no subprocesses: those are the
end-to-end tests), so each test can look inside: versions, positions, the replay buffer.
A trainer is "killed" by dropping it without any shutdown, then a new one is built with
fresh Kafka clients and the same store, as after ``kill -9``.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any

import pytest
import torch

from coach_stream.algorithms import builder_for
from coach_stream.algorithms.ppo import PPOBuilder
from coach_stream.checkpoints import open_store
from coach_stream.config import Preset, load_preset
from coach_stream.control.policy_source import CheckpointPolicySource
from coach_stream.core import CheckpointStore, Mode
from coach_stream.envs import (
    SeedRole,
    env_seeds,
    env_shape,
    make_vector_env,
    probe_shape,
    process_seed,
)
from coach_stream.events import EventList
from coach_stream.rollout.worker import RolloutWorker
from coach_stream.trainer.dqn import DQN
from coach_stream.trainer.loop import Trainer
from coach_stream.transport.admin import ensure_run_topics
from coach_stream.transport.control import KafkaControlPublisher, KafkaControlSubscriber
from coach_stream.transport.names import trainer_group
from coach_stream.transport.reader import KafkaExperienceReader
from coach_stream.transport.settings import KafkaSettings, RunTopics
from coach_stream.transport.writer import KafkaExperienceWriter


@dataclass
class KafkaRun:
    preset: Preset
    kafka: KafkaSettings
    store: CheckpointStore
    workers: int = 2
    run_id: str = field(default_factory=lambda: f"loop-{uuid.uuid4().hex[:10]}")
    stack: contextlib.ExitStack = field(default_factory=contextlib.ExitStack)

    def __post_init__(self) -> None:
        torch.set_num_threads(1)
        self.builder = builder_for(self.preset)
        self.topics = RunTopics.for_run(self.run_id)
        ensure_run_topics(self.kafka, self.topics, experience_partitions=self.workers)
        self.trainer_events = EventList()
        self.trainer = self.new_trainer()
        self.rollouts = [self._worker(i) for i in range(self.workers)]

    def new_trainer(self) -> Trainer:
        self.trainer_events = EventList()
        generator = torch.Generator().manual_seed(
            process_seed(self.preset.seed, 0, SeedRole.TRAINER)
        )
        group = trainer_group(self.run_id)
        reader = self.stack.enter_context(KafkaExperienceReader(self.kafka, self.topics, group))
        control = self.stack.enter_context(KafkaControlSubscriber(self.kafka, self.topics))
        publisher = self.stack.enter_context(KafkaControlPublisher(self.kafka, self.topics))
        return Trainer(
            self.builder.make_learner(
                probe_shape(self.preset.env_id, self.preset.env_wrappers), self.workers, generator
            ),
            reader,
            control,
            publisher,
            self.store,
            self.builder.make_trainer_settings(self.run_id),
            self.trainer_events,
            generator,
        )

    def _worker(self, worker_id: int) -> RolloutWorker:
        p = self.preset
        envs = make_vector_env(p.env_id, p.rollout.num_envs, p.env_wrappers)
        actor = self.builder.make_actor(
            env_shape(envs), greedy=False, seed=process_seed(p.seed, worker_id, SeedRole.ROLLOUT)
        )
        settings = replace(
            self.builder.make_worker_settings(self.run_id, worker_id), policy_wait_s=30.0
        )
        control = self.stack.enter_context(KafkaControlSubscriber(self.kafka, self.topics))
        writer = self.stack.enter_context(KafkaExperienceWriter(self.kafka, self.topics.experience))
        return RolloutWorker(
            envs,
            actor,
            writer,
            CheckpointPolicySource(control, self.store, run_id=self.run_id),
            settings,
            env_seeds(p.seed, worker_id, p.rollout.num_envs, SeedRole.ROLLOUT),
            EventList(),
        )

    def advance(self, versions: int, deadline_s: float = 90.0) -> None:
        """Workers act and the trainer learns until it has announced ``versions`` more."""
        target, deadline = self.trainer.version + versions, time.monotonic() + deadline_s
        while self.trainer.version < target:
            assert time.monotonic() < deadline, f"stuck at version {self.trainer.version}"
            for worker in self.rollouts:
                worker.act_share()
                worker.writer.flush(10.0)
            version, wait_until = self.trainer.version, time.monotonic() + 5.0
            while self.trainer.version == version and time.monotonic() < wait_until:
                assert self.trainer.iterate() is None
            for worker in self.rollouts:
                worker.sync(2.0 if self.preset.mode is Mode.SYNC else 0.0)


@pytest.fixture
def kafka_run(kafka_bootstrap: str, gcs_endpoint: str, gcs_bucket: str) -> Iterator[type]:
    runs: list[KafkaRun] = []

    def make(preset: Preset, workers: int = 2) -> KafkaRun:
        store = open_store(f"gs://{gcs_bucket}/exp", gcs_emulator_host=gcs_endpoint)
        run = KafkaRun(preset, KafkaSettings(bootstrap_servers=kafka_bootstrap), store, workers)
        runs.append(run)
        return run

    yield make  # type: ignore[misc]
    for run in runs:
        run.stack.close()
        for worker in run.rollouts:
            worker.envs.close()


def test_ppo_sync_versions_flow_and_a_killed_trainer_resumes(kafka_run: Any) -> None:
    run = kafka_run(load_preset("cartpole-ppo"))
    assert run.trainer.start() is None
    for worker in run.rollouts:
        worker.start()
    run.advance(versions=3)
    killed = run.trainer
    stored_version = killed.version
    stored_steps = killed.env_steps
    builder = PPOBuilder(run.preset)
    assert stored_steps >= 3 * builder.steps_per_update(2)
    assert killed.dropped_stale == 0
    keys = run.store.list(f"runs/{run.run_id}/")
    assert f"runs/{run.run_id}/trainer/{stored_version:08d}.pt" in keys
    assert f"runs/{run.run_id}/policies/{stored_version:08d}.pt" in keys

    # kill -9: no shutdown; workers go on acting with the announced version meanwhile
    for worker in run.rollouts:
        worker.act_share()
        worker.writer.flush(10.0)
    run.trainer = run.new_trainer()
    assert run.trainer.start() is None
    resumed = run.trainer_events.of("resumed")[0]
    assert resumed["from_version"] == stored_version == run.trainer.version
    assert run.trainer.env_steps == stored_steps
    assert run.trainer.reader.positions() == {int(p): o for p, o in resumed["positions"].items()}
    run.advance(versions=2)  # the shares acted meanwhile count for the same version
    assert run.trainer.version == stored_version + 2
    # at most the surplus shares of version v (acted during the outage) arrive too late
    share = builder.make_worker_settings(run.run_id, 0).share_steps * run.preset.rollout.num_envs
    assert run.trainer.dropped_stale_steps <= 2 * share


def test_dqn_restart_refills_the_replay_buffer_from_the_log(kafka_run: Any) -> None:
    preset = load_preset(
        "cartpole-dqn",
        [
            "network.hidden_sizes=[32]",
            "dqn.learning_starts=256",
            "dqn.publish_every=8",
            "trainer.checkpoint_every=1",
        ],
    )
    run = kafka_run(preset, workers=1)
    assert run.trainer.start() is None
    run.rollouts[0].start()
    run.advance(versions=3)
    killed = run.trainer
    learner = killed.learner
    assert isinstance(learner, DQN) and learner.buffer.size > 256
    run.trainer = run.new_trainer()
    assert run.trainer.start() is None
    refilled = run.trainer.learner
    assert isinstance(refilled, DQN)
    resumed = run.trainer_events.of("resumed")[0]
    assert resumed["from_version"] <= killed.version
    # everything up to the stored positions is back in the buffer
    assert refilled.buffer.size >= resumed["env_steps"] > 0
    assert refilled.limiter.inserted == resumed["env_steps"]
    run.advance(versions=2)
    assert run.trainer.version >= killed.version + 2
