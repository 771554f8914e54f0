"""A shadow learner (``coach-stream attach``): a second trainer reading another run's log.

It learns from every chunk the source run's workers wrote, announces on its own control
log, and ends once the source has finished and it has read the log to the end; the source
run, which reads the same log with a reader of its own, is not disturbed.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import torch

from coach_stream.algorithms import builder_for
from coach_stream.config import Preset, load_preset
from coach_stream.core import PolicyVersion
from coach_stream.envs import probe_shape
from coach_stream.events import EventList
from coach_stream.testing.memory_control import (
    MemoryControlLog,
    MemoryControlPublisher,
    MemoryControlSubscriber,
)
from coach_stream.testing.memory_log import MemoryExperienceReader, MemoryLog
from coach_stream.testing.memory_store import MemoryCheckpointStore
from coach_stream.trainer.loop import Trainer

OVERRIDES = [
    "env_step_budget=3072",
    "dqn.learning_starts=256",
    "dqn.samples_per_insert=2",
    "dqn.publish_every=16",
]


class SourceOf:
    """``SourceRun`` over an in-process run: finished once its trainer has ended."""

    def __init__(self, finished: list[bool], reader: MemoryExperienceReader) -> None:
        self.finished, self.reader = finished, reader

    def exhausted(self) -> bool:
        return bool(self.finished) and self.reader.at_end()


def shadow_trainer(
    log: MemoryLog, finished: list[bool], preset: Preset, run_id: str = "shadow-run"
) -> tuple[Trainer, MemoryControlLog]:
    """A trainer of ``preset`` reading ``log`` as a shadow, announcing on its own log."""
    builder = builder_for(preset)
    generator = torch.Generator().manual_seed(5)
    reader = MemoryExperienceReader(log)
    control = MemoryControlLog()
    settings = replace(builder.make_trainer_settings(run_id), control_poll_s=0.0)
    trainer = Trainer(
        builder.make_learner(probe_shape(preset.env_id), 2, generator),
        reader,
        MemoryControlSubscriber(control),
        MemoryControlPublisher(control),
        MemoryCheckpointStore(),
        settings,
        EventList(),
        generator,
        source=SourceOf(finished, reader),
    )
    return trainer, control


def test_a_shadow_learns_every_chunk_of_the_source_and_ends_after_it(in_process_run: Any) -> None:
    source = in_process_run(load_preset("cartpole-dqn", OVERRIDES), workers=2, evaluator=False)
    finished: list[bool] = []
    preset = load_preset("cartpole-dqn", [*OVERRIDES, "env_step_budget=1000000"])
    shadow, shadow_control = shadow_trainer(source.log, finished, preset)
    source.start()
    assert shadow.start() is None
    ended = None
    for _ in range(200):  # the shadow learns while the source runs (a live topic)
        ended = source.step()
        assert shadow.iterate() is None  # the source has not finished: the shadow goes on
        if ended is not None:
            break
    assert ended is not None and ended.reason == "budget_exhausted"
    source_steps, source_positions = source.trainer.env_steps, source.trainer.reader.positions()

    finished.append(True)
    done = None
    for _ in range(10_000):
        done = shadow.iterate()
        if done is not None:
            break
    assert done is not None and done.reason == "source_exhausted"
    assert done.run_id == "shadow-run"
    written = sum(chunk.num_steps for chunk in source.log.chunks)
    assert shadow.env_steps == written >= source_steps  # every chunk, and nothing twice
    assert (shadow.ledger.duplicates, shadow.ledger.gaps) == (0, 0)
    announced = [m for m in shadow_control.messages if isinstance(m, PolicyVersion)]
    assert announced and {m.run_id for m in announced} == {"shadow-run"}
    assert all(m.run_id == "unit-run" for m in source.control.messages)  # none of the shadow's
    assert source.trainer.reader.positions() == source_positions  # the source was not moved


def test_an_impala_shadow_weighs_another_runs_ppo_experience_by_its_behaviour(
    in_process_run: Any,
) -> None:
    """V-trace needs the behaviour log-probs the PPO workers wrote; no chunk is dropped as
    stale by version (the source's versions say nothing of the shadow's policy), however
    far behind the source the shadow reads."""
    overrides = ["env_step_budget=4096", "ppo.num_steps=64", "rollout.num_envs=4"]
    source = in_process_run(load_preset("cartpole-ppo", overrides), workers=2, evaluator=False)
    preset = load_preset("cartpole-impala", ["impala.batch_steps=256", "impala.max_lag=2"])
    finished: list[bool] = []
    shadow, _ = shadow_trainer(source.log, finished, preset, "impala-shadow")
    source.start()
    assert shadow.start() is None
    for _ in range(200):
        ended = source.step()
        assert shadow.iterate() is None
        if ended is not None:
            break
    finished.append(True)
    done = None
    for _ in range(10_000):
        if (done := shadow.iterate()) is not None:
            break
    assert done is not None and done.reason == "source_exhausted"
    written = sum(chunk.num_steps for chunk in source.log.chunks)
    assert (shadow.dropped_stale, shadow.env_steps) == (0, written)
    assert shadow.learner.updates > 0 and shadow.version > 0
