"""The trainer loop's resume rules on in-memory fakes, with a learner that only counts.

What the loop itself decides, independent of PPO or DQN: refusing to start over when the
store lost the run's state, trainer-state retention, and the replay refill's idle limit.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import pytest
import torch

from coach_stream.checkpoints import trainer_prefix
from coach_stream.core import ExperienceChunk, Ingested, PolicyVersion
from coach_stream.errors import ResumeError
from coach_stream.testing.memory_control import (
    MemoryControlLog,
    MemoryControlPublisher,
    MemoryControlSubscriber,
)
from coach_stream.testing.memory_log import MemoryExperienceReader, MemoryLog
from coach_stream.testing.memory_store import MemoryCheckpointStore
from coach_stream.trainer.loop import Trainer
from coach_stream.trainer.settings import TrainerSettings

RUN = "loop-run"


class CountingLearner:
    """The ``Learner`` protocol with no algorithm: it keeps what it is given.

    With ``publish=True`` every ``learn`` asks for a new policy version, so each
    ``iterate`` publishes one.
    """

    def __init__(self, publish: bool = False) -> None:
        self.publish = publish
        self.ingested: list[ExperienceChunk] = []
        self.refilled: list[ExperienceChunk] = []
        self.weights = torch.zeros(2)
        self._updates = 0

    def ingest(self, chunks: Sequence[ExperienceChunk], version: int) -> Ingested:
        self.ingested.extend(chunks)
        return Ingested(used_steps=sum(c.num_steps for c in chunks))

    def refill(self, chunks: Sequence[ExperienceChunk]) -> None:
        self.refilled.extend(chunks)

    def wants_data(self) -> bool:
        return True

    def ready(self) -> bool:
        return self.publish

    def learn(self, env_steps: int) -> tuple[dict[str, float], bool]:
        self._updates += 1
        self.weights = self.weights + 1
        return {}, self.publish

    @property
    def updates(self) -> int:
        return self._updates

    def policy_state_dict(self) -> Mapping[str, torch.Tensor]:
        return {"w": self.weights}

    def state_dict(self) -> dict[str, Any]:
        return {"w": self.weights.clone(), "updates": self._updates}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.weights, self._updates = state["w"], int(state["updates"])


class Events:
    def __init__(self) -> None:
        self.seen: list[tuple[str, Mapping[str, object]]] = []

    def __call__(self, event: str, fields: Mapping[str, object]) -> None:
        self.seen.append((event, fields))

    def of(self, event: str) -> list[Mapping[str, object]]:
        return [fields for name, fields in self.seen if name == event]


class SteppingClock:
    """A clock that moves ``step`` seconds each time it is read: idle limits without sleeps."""

    def __init__(self, step: float) -> None:
        self.now, self.step = 0.0, step

    def __call__(self) -> float:
        self.now += self.step
        return self.now


def chunk(seq: int) -> ExperienceChunk:
    return ExperienceChunk(
        run_id=RUN,
        worker_id=0,
        env_index=0,
        chunk_seq=seq,
        policy_version=0,
        first_step=seq,
        observations=np.zeros((2, 4), np.float32),
        actions=np.zeros(1, np.int64),
        rewards=np.ones(1, np.float32),
        terminated=np.zeros(1, bool),
        truncated=np.zeros(1, bool),
    )


def make_trainer(
    learner: CountingLearner,
    log: MemoryLog,
    control: MemoryControlLog,
    store: MemoryCheckpointStore,
    events: Events | None = None,
    clock: Callable[[], float] | None = None,
    **overrides: Any,
) -> Trainer:
    settings = TrainerSettings(
        run_id=RUN,
        target_return=1e9,
        eval_episodes=1,
        env_step_budget=10**9,
        control_catchup_s=0.0,
        control_poll_s=0.0,
        **overrides,
    )
    return Trainer(
        learner,
        MemoryExperienceReader(log),
        MemoryControlSubscriber(control),
        MemoryControlPublisher(control),
        store,
        settings,
        events or Events(),
        torch.Generator().manual_seed(0),
        **({"clock": clock} if clock is not None else {}),
    )


def announced(control: MemoryControlLog) -> list[int]:
    return [m.version for m in control.messages if isinstance(m, PolicyVersion)]


def test_announced_versions_without_trainer_state_stop_the_trainer() -> None:
    """Issue 8: a store that came back empty must not make the run start over silently."""
    log, control, store = MemoryLog(), MemoryControlLog(), MemoryCheckpointStore()
    first = make_trainer(CountingLearner(publish=True), log, control, store)
    assert first.start() is None
    first.iterate()
    assert announced(control) == [0, 1]
    emptied = MemoryCheckpointStore()  # e.g. an in-memory GCS emulator that restarted
    restarted = make_trainer(CountingLearner(publish=True), log, control, emptied)
    with pytest.raises(ResumeError) as raised:
        restarted.start()
    message = str(raised.value)
    assert f"run {RUN} announced policy versions up to 1" in message
    assert emptied.uri(f"runs/{RUN}/trainer") in message and "\n" not in message
    assert announced(control) == [0, 1]  # nothing announced from scratch
    assert emptied.objects == {}  # and nothing written


def test_a_new_run_and_a_resumed_run_still_start() -> None:
    log, control, store = MemoryLog(), MemoryControlLog(), MemoryCheckpointStore()
    assert make_trainer(CountingLearner(), log, control, store).start() is None
    assert announced(control) == [0]  # no versions and no state: a new run
    events = Events()
    resumed = make_trainer(CountingLearner(), log, control, store, events)
    assert resumed.start() is None
    assert events.of("resumed")[0]["from_version"] == 0
    assert announced(control) == [0]  # the restored version was already announced


def test_trainer_states_kept_follow_the_setting() -> None:
    log, control, store = MemoryLog(), MemoryControlLog(), MemoryCheckpointStore()
    trainer = make_trainer(
        CountingLearner(publish=True), log, control, store, keep_trainer_states=2
    )
    trainer.start()
    for _ in range(4):
        trainer.iterate()
    assert announced(control) == [0, 1, 2, 3, 4]
    states = [k for k in store.objects if k.startswith(trainer_prefix(RUN))]
    assert states == [f"{trainer_prefix(RUN)}{v:08d}.pt" for v in (3, 4)]


def test_refill_stops_after_the_idle_setting_when_the_log_falls_short(
    caplog: pytest.LogCaptureFixture,
) -> None:
    log, control, store = MemoryLog(), MemoryControlLog(), MemoryCheckpointStore()
    log.chunks.extend(chunk(i) for i in range(10))
    first = make_trainer(CountingLearner(), log, control, store, refill=True)
    first.start()
    first.iterate()  # reads all 10 chunks
    first._publish(save_state=True)  # a state whose positions are {0: 10}
    del log.chunks[3:]  # the records behind those positions are gone
    learner, events, clock = CountingLearner(), Events(), SteppingClock(step=1.0)
    second = make_trainer(
        learner, log, control, store, events, clock, refill=True, refill_idle_s=5.0
    )
    with caplog.at_level(logging.WARNING, logger="coach_stream.trainer.loop"):
        assert second.start() is None
    assert len(learner.refilled) == 3
    assert events.of("refilled")[0] == {"chunks": 3, "positions": {0: 3}}
    assert "stopped at {0: 3} short of {0: 10}" in caplog.text
    assert 5.0 < clock.now < 15.0  # the setting, not a fixed 30 s, ended the wait


def test_a_damaged_newest_state_falls_back_to_the_next_older() -> None:
    log, control, store = MemoryLog(), MemoryControlLog(), MemoryCheckpointStore()
    first = make_trainer(CountingLearner(publish=True), log, control, store)
    first.start()
    first.iterate()
    first.iterate()
    newest = f"{trainer_prefix(RUN)}{2:08d}.pt"
    store.replace(newest, b"not a torch file")
    events = Events()
    resumed = make_trainer(CountingLearner(publish=True), log, control, store, events)
    assert resumed.start() is None
    assert events.of("resumed")[0]["from_version"] == 1
    assert announced(control) == [0, 1, 2, 3]  # version 1's weights, announced anew


def test_no_loadable_state_at_all_is_one_clear_error() -> None:
    log, control, store = MemoryLog(), MemoryControlLog(), MemoryCheckpointStore()
    first = make_trainer(CountingLearner(publish=True), log, control, store)
    first.start()
    first.iterate()
    for key in [k for k in store.objects if k.startswith(trainer_prefix(RUN))]:
        store.replace(key, b"junk")
    with pytest.raises(ResumeError, match=r"none of the 2 trainer states .* can be loaded"):
        make_trainer(CountingLearner(), log, control, store).start()


def test_a_resumed_trainer_reports_rates_from_the_resume_not_from_zero() -> None:
    """The first progress event after a resume counted every stored env step as read in
    one interval (a `report` showed ~280,000 env steps/s across a Pong resume)."""
    log, control, store = MemoryLog(), MemoryControlLog(), MemoryCheckpointStore()
    log.chunks.extend(chunk(i) for i in range(10))
    first = make_trainer(CountingLearner(publish=True), log, control, store)
    first.start()
    first.iterate()  # learns from the 10 chunks, publishes and stores a state
    assert first.env_steps == 10
    log.chunks.extend(chunk(i) for i in range(10, 13))  # 3 steps more after the resume
    events, now = Events(), [100.0]
    resumed = make_trainer(
        CountingLearner(), log, control, store, events, lambda: now[0], log_every_s=1000.0
    )
    resumed.start()  # restores env_steps = 10 at t = 100
    now[0] = 101.0
    resumed.iterate()  # reads the 3 new steps
    now[0] = 102.0
    resumed._log_progress()
    progress = events.of("progress")[-1]
    assert progress["time/env_steps"] == 13
    assert progress["time/env_steps_per_s"] == 3 / 2.0  # not 13 / 2: only the new steps
    assert progress["time/updates_per_s"] == 0.0  # this learner never learned after resume
