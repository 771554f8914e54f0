"""Whole runs in one process on in-memory fakes: the loop, SYNC/ASYNC, resume."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from coach_stream.config import load_preset
from coach_stream.trainer.dqn import DQN


@pytest.mark.slow
def test_ppo_sync_solves_cartpole(in_process_run: Any) -> None:
    run = in_process_run(load_preset("cartpole-ppo"), workers=2, eval_every=2)
    run.start()
    finished = run.run(max_steps=120)
    assert finished is not None and finished.reason == "target_reached"
    progress = run.trainer_events.of("progress")[-1]
    assert progress["rollout/dropped_stale"] == 0
    assert progress["rollout/policy_lag_mean"] in (0.0, None)
    assert run.trainer_events.of("finished")[0]["eval_mean_return"] >= 475


@pytest.mark.slow
def test_dqn_async_learns_cartpole(in_process_run: Any) -> None:
    preset = load_preset(
        "cartpole-dqn", ["network.hidden_sizes=[64, 64]", "dqn.learning_starts=500"]
    )
    run = in_process_run(preset, workers=2)
    run.start()

    def evaluations() -> list[float]:
        return [e["mean_return"] for e in run.eval_events.of("evaluation")]

    # the claim is "learns": it is made the moment one evaluation reaches 150
    finished = run.run(max_steps=400, until=lambda: max(evaluations(), default=0.0) >= 150)
    reached = finished is not None and finished.reason == "target_reached"
    assert reached or max(evaluations()) >= 150


def test_sync_run_goes_on_when_a_worker_stops(in_process_run: Any) -> None:
    run = in_process_run(
        load_preset("cartpole-ppo", ["env_step_budget=6000"]), workers=2, evaluator=False
    )
    run.start()
    alive = run.rollouts[:1]  # worker 1 "dies": only worker 0 fills version v's quota
    for _ in range(40):
        if run.step(alive) is not None:
            break
    assert run.trainer.version >= 5
    assert alive[0].extra_shares >= 5  # it acted again with v instead of waiting forever


def test_sync_drops_and_counts_stale_chunks(in_process_run: Any) -> None:
    run = in_process_run(load_preset("cartpole-ppo"), workers=2, evaluator=False)
    run.start()
    run.rollouts[0].act_share()
    run.rollouts[1].act_share()  # two shares of version 0 fill its quota
    while run.trainer.version == 0:
        run.trainer.iterate()
    assert run.trainer.dropped_stale == 0
    late = run.rollouts[1]
    late.act_share()  # a slow worker still acting with version 0
    while not run.trainer.reader.at_end():
        run.trainer.iterate()
    assert run.trainer.version == 1
    share = late.settings.share_steps * late.envs.num_envs
    assert run.trainer.dropped_stale_steps == share
    assert run.trainer.learner.ready() is False
    # the stale share counts toward neither the budget nor the learning-rate schedule
    assert run.trainer.env_steps == 2 * share
    for worker in run.rollouts:
        worker.sync(0.01)
        worker.act_share()  # version 1's quota
    while run.trainer.version == 1:
        run.trainer.iterate()
    learner = run.trainer.learner
    assert run.trainer.env_steps == 4 * share  # the late share is not among them
    assert run.trainer._metrics["learning_rate"] == learner.learning_rate(4 * share)


def test_steps_dropped_as_stale_do_not_spend_the_budget(in_process_run: Any) -> None:
    preset = load_preset("cartpole-ppo", ["ppo.num_steps=8", "rollout.num_envs=2"])
    share = 8 * 2
    budget = 3 * share  # one quota (2 shares) and one more share
    run = in_process_run(
        preset.model_copy(update={"env_step_budget": budget}), workers=2, evaluator=False
    )
    run.start()
    for worker in run.rollouts:
        worker.act_share()  # version 0's quota
    while run.trainer.version == 0:
        assert run.trainer.iterate() is None
    run.rollouts[1].act_share()  # a late share of version 0: dropped, as it is stale now
    while not run.trainer.reader.at_end():
        assert run.trainer.iterate() is None  # 3 shares read, 2 kept: the budget is not spent
    assert run.trainer.version == 1 and run.trainer.env_steps == 2 * share
    assert run.trainer.dropped_stale_steps == share
    run.rollouts[0].sync(0.01)
    run.rollouts[0].act_share()  # one share of version 1 reaches the budget
    finished = run.trainer.iterate()
    assert finished is not None and finished.reason == "budget_exhausted"
    assert run.trainer.env_steps == budget


def test_trainer_restart_resumes_from_stored_positions(in_process_run: Any) -> None:
    preset = load_preset(
        "cartpole-dqn",
        [
            "network.hidden_sizes=[32]",
            "dqn.learning_starts=300",
            # an eighth of the preset's gradient steps (resuming is the point, not learning):
            # 37 versions in the 40 steps instead of 76
            "dqn.samples_per_insert=4",
            "dqn.publish_every=4",
            "trainer.checkpoint_every=1",
        ],
    )
    run = in_process_run(preset, workers=1, evaluator=False)
    run.start()
    for _ in range(40):
        run.step()
    before = run.trainer
    assert before.version >= 2
    stored_version = before.version
    # kill -9: the trainer object is dropped; experience keeps arriving meanwhile
    run.rollouts[0].act_share()
    run.trainer = run.new_trainer()
    assert run.trainer.start() is None
    resumed = run.trainer_events.of("resumed")[0]
    assert resumed["from_version"] == stored_version
    learner = run.trainer.learner
    assert isinstance(learner, DQN)
    old = before.learner
    assert isinstance(old, DQN)
    assert torch.equal(
        next(iter(learner.q_network.state_dict().values())),
        next(iter(old.q_network.state_dict().values())),
    )
    refilled = run.trainer_events.of("refilled")[0]
    assert refilled["positions"][0] >= resumed["positions"][0] > 0
    assert learner.buffer.size >= old.buffer.size - 64 * 2  # refilled from the log
    assert run.trainer.env_steps == resumed["env_steps"]
    # version v's state was stored before v was announced: nothing to re-announce
    assert run.trainer.version == stored_version
    for _ in range(5):  # and it keeps training and publishing
        run.step()
    assert run.trainer.version > stored_version
