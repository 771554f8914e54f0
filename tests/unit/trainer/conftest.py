"""An in-process run: trainer, rollout workers and evaluator interleaved on in-memory fakes.

No threads and no sleeps: each ``step()`` lets every worker act one share, the trainer
iterate until it has nothing left to read, and the evaluator evaluate a newer version.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

import pytest
import torch

from coach_stream.algorithms import builder_for
from coach_stream.config import Preset
from coach_stream.control.policy_source import CheckpointPolicySource
from coach_stream.core import RunFinished
from coach_stream.envs import (
    SeedRole,
    env_seeds,
    env_shape,
    make_vector_env,
    probe_shape,
    process_seed,
)
from coach_stream.events import EventList
from coach_stream.rollout.evaluator import Evaluator
from coach_stream.rollout.worker import RolloutWorker
from coach_stream.testing.memory_control import (
    MemoryControlLog,
    MemoryControlPublisher,
    MemoryControlSubscriber,
)
from coach_stream.testing.memory_log import (
    MemoryExperienceReader,
    MemoryExperienceWriter,
    MemoryLog,
)
from coach_stream.testing.memory_store import MemoryCheckpointStore
from coach_stream.trainer.loop import Trainer


@dataclass
class InProcessRun:
    preset: Preset
    run_id: str = "unit-run"
    workers: int = 2
    evaluator: bool = True
    eval_every: int = 1
    """The evaluator plays a round on every ``eval_every``-th step only, as a real one, busy
    with a round, skips the versions announced meanwhile."""
    log: MemoryLog = field(default_factory=MemoryLog)
    control: MemoryControlLog = field(default_factory=MemoryControlLog)
    store: MemoryCheckpointStore = field(default_factory=MemoryCheckpointStore)
    trainer_events: EventList = field(default_factory=EventList)
    eval_events: EventList = field(default_factory=EventList)

    def __post_init__(self) -> None:
        torch.set_num_threads(1)
        self.builder = builder_for(self.preset)
        self.trainer = self.new_trainer()
        self.rollouts = [self._worker(i) for i in range(self.workers)]
        self.eval: Evaluator | None = None
        self.steps = 0
        if self.evaluator:
            envs = make_vector_env(
                self.preset.env_id, self.preset.eval_episodes, self.preset.env_wrappers
            )
            actor = self.builder.make_actor(env_shape(envs), greedy=True, seed=0)
            self.eval = Evaluator(
                envs,
                actor,
                self._source(),
                MemoryControlPublisher(self.control),
                self.run_id,
                env_seeds(self.preset.seed, 0, self.preset.eval_episodes, SeedRole.EVALUATOR),
                self.eval_events,
                policy_wait_s=1.0,
            )

    def new_trainer(self) -> Trainer:
        """A trainer process (a fresh one models a restart after kill -9)."""
        self.trainer_events = EventList()
        generator = torch.Generator().manual_seed(
            process_seed(self.preset.seed, 0, SeedRole.TRAINER)
        )
        # check the control topic on every iteration: the test decides when things happen
        settings = replace(self.builder.make_trainer_settings(self.run_id), control_poll_s=0.0)
        return Trainer(
            self.builder.make_learner(
                probe_shape(self.preset.env_id, self.preset.env_wrappers), self.workers, generator
            ),
            MemoryExperienceReader(self.log),
            MemoryControlSubscriber(self.control),
            MemoryControlPublisher(self.control),
            self.store,
            settings,
            self.trainer_events,
            generator,
        )

    def _source(self) -> CheckpointPolicySource:
        return CheckpointPolicySource(MemoryControlSubscriber(self.control), self.store)

    def _worker(self, worker_id: int) -> RolloutWorker:
        p = self.preset
        envs = make_vector_env(p.env_id, p.rollout.num_envs, p.env_wrappers)
        actor = self.builder.make_actor(
            env_shape(envs), greedy=False, seed=process_seed(p.seed, worker_id, SeedRole.ROLLOUT)
        )
        # short waits: every "worker" lives in this thread, so nobody else will move meanwhile
        settings = replace(
            self.builder.make_worker_settings(self.run_id, worker_id),
            sync_wait_s=0.01,
            policy_wait_s=1.0,
        )
        return RolloutWorker(
            envs,
            actor,
            MemoryExperienceWriter(self.log),
            self._source(),
            settings,
            env_seeds(p.seed, worker_id, p.rollout.num_envs, SeedRole.ROLLOUT),
            EventList(),
        )

    def start(self) -> None:
        assert self.trainer.start() is None
        for worker in self.rollouts:
            worker.start()
        if self.eval is not None:
            self.eval.start()
            self.eval.evaluate()

    def step(self, workers: list[RolloutWorker] | None = None) -> RunFinished | None:
        self.steps += 1
        for worker in self.rollouts if workers is None else workers:
            worker.act_share()
        reader = self.trainer.reader
        assert isinstance(reader, MemoryExperienceReader)
        while True:
            done = self.trainer.iterate()
            if done is not None:
                return done
            if reader.at_end() and not self.trainer.learner.ready():
                break
        for worker in self.rollouts if workers is None else workers:
            worker.sync(0.01)
        due = self.steps % self.eval_every == 0
        if self.eval is not None and due and self.eval.next_version(0.01):
            self.eval.evaluate()
        return None

    def run(self, max_steps: int, until: Callable[[], bool] | None = None) -> RunFinished | None:
        """Step until the trainer finishes, ``until()`` holds, or ``max_steps`` steps."""
        for _ in range(max_steps):
            done = self.step()
            if done is not None:
                return done
            if until is not None and until():
                return None
        return None


@pytest.fixture
def in_process_run() -> type[InProcessRun]:
    return InProcessRun
