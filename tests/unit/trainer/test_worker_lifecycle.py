"""Workers and the evaluator: first policy, clean exit on RunFinished, reports, pacing."""

from __future__ import annotations

from typing import Any

import pytest

from coach_stream.config import load_preset
from coach_stream.core import EvaluationReport, RunFinished
from coach_stream.errors import ServiceUnavailableError
from coach_stream.testing.memory_control import MemoryControlPublisher


def test_worker_and_evaluator_exit_cleanly_on_run_finished(in_process_run: Any) -> None:
    run = in_process_run(load_preset("cartpole-ppo"), workers=1)
    run.start()
    run.step()
    MemoryControlPublisher(run.control).publish(
        RunFinished(run.run_id, run.trainer.version, "stopped", 0)
    )
    worker = run.rollouts[0]
    finished = worker.run()  # returns instead of acting on: the run is over
    assert finished.reason == "stopped"
    assert run.eval is not None and run.eval.run().reason == "stopped"
    done = run.trainer.iterate()  # the trainer ends on it too, without publishing another
    assert done is not None and done.reason == "stopped"
    assert run.trainer_events.of("finished")[0]["reason"] == "stopped"


def test_evaluator_reports_greedy_returns_on_the_control_topic(in_process_run: Any) -> None:
    run = in_process_run(load_preset("cartpole-ppo", ["eval_episodes=5"]), workers=1)
    run.start()  # evaluates version 0 once
    reports = [m for m in run.control.messages if isinstance(m, EvaluationReport)]
    assert len(reports) == 1 and len(reports[0].returns) == 5
    assert reports[0].policy_version == 0
    assert all(r >= 8 for r in reports[0].returns)  # CartPole lasts at least 8 steps
    assert run.eval_events.of("evaluation")[0]["episodes"] == 5


def test_worker_without_a_trainer_fails_with_a_clear_error(in_process_run: Any) -> None:
    run = in_process_run(load_preset("cartpole-ppo"), workers=1, evaluator=False)
    with pytest.raises(ServiceUnavailableError, match="start the trainer"):
        run.rollouts[0].start()  # nothing announced: bounded wait, then one clear error


def test_async_pacing_bounds_a_workers_lead(in_process_run: Any) -> None:
    preset = load_preset(
        "cartpole-dqn", ["rollout.async_max_lead_steps=128", "dqn.learning_starts=100000"]
    )
    run = in_process_run(preset, workers=1, evaluator=False)
    run.start()
    worker = run.rollouts[0]
    for _ in range(4):  # no new version will come (learning has not started)
        worker.act_share()
        worker.sync(0.01)
    assert worker.paced_waits == 4  # each share reached the lead and waited (bounded)
    assert worker.actor.version == 0
