"""The trainer reads the control topic as anyone may have written to it."""

from __future__ import annotations

import dataclasses

from test_loop_resume import RUN, CountingLearner, make_trainer

from coach_stream.core import EvaluationReport, RunFinished
from coach_stream.testing.memory_control import MemoryControlLog
from coach_stream.testing.memory_log import MemoryLog
from coach_stream.testing.memory_store import MemoryCheckpointStore


def test_another_runs_end_and_evaluations_and_non_finite_returns_are_ignored() -> None:
    log, control, store = MemoryLog(), MemoryControlLog(), MemoryCheckpointStore()
    trainer = make_trainer(CountingLearner(), log, control, store)
    trainer.settings = dataclasses.replace(trainer.settings, target_return=400.0)
    assert trainer.start() is None
    for hostile in [
        RunFinished(run_id="another-run", final_version=9, reason="stopped", created_at_ms=0),
        EvaluationReport("another-run", 0, 0, returns=(500.0,), created_at_ms=0),
        EvaluationReport(RUN, 0, 0, returns=(float("nan"),), created_at_ms=0),
        EvaluationReport(RUN, 0, 0, returns=(float("inf"),), created_at_ms=0),
    ]:
        control.append(hostile)
    assert trainer.iterate() is None  # neither finished nor solved by any of them
    assert trainer.finished is None and list(trainer.progress.eval_returns) == []

    control.append(EvaluationReport(RUN, 0, 0, returns=(450.0,), created_at_ms=0))
    finished = trainer.iterate()
    assert finished is not None and finished.reason == "target_reached"
