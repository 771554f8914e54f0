"""IMPALA: V-trace against hand-computed cases, and cartpole-impala solving in process."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
import torch

from coach_stream.config import load_preset
from coach_stream.envs import probe_shape
from coach_stream.policies.networks import ActorCritic
from coach_stream.testing.chunks import make_chunk
from coach_stream.trainer.impala import IMPALA, IMPALAConfig, vtrace


def test_vtrace_matches_a_hand_computed_case() -> None:
    # chunk A: 2 steps, V = (1, 2), V(bootstrap) = 3, rho = (2 -> truncated to 1, 0.5)
    # chunk B: 1 terminated step, V = 5, V(bootstrap) = 7 (ignored: terminated)
    gamma = 0.9
    vs, adv = vtrace(
        log_rhos=torch.tensor([math.log(2.0), math.log(0.5), 0.0]),
        rewards=torch.tensor([1.0, 0.0, 1.0]),
        values=torch.tensor([1.0, 2.0, 5.0]),
        next_values=torch.tensor([2.0, 3.0, 7.0]),
        discounts=torch.tensor([gamma, gamma, 0.0]),
        chunk_end=torch.tensor([False, True, True]),
        rho_bar=1.0,
        c_bar=1.0,
        pg_rho_bar=1.0,
    )
    # delta_1 = 0.5 * (0 + 0.9 * 3 - 2) = 0.35          -> v_1 = 2 + 0.35 = 2.35
    # delta_0 = 1 * (1 + 0.9 * 2 - 1) = 1.8; c_0 = 1     -> v_0 = 1 + 1.8 + 0.9 * 0.35 = 3.115
    # chunk B: v = 1 (terminated: no bootstrap)
    torch.testing.assert_close(vs, torch.tensor([3.115, 2.35, 1.0]))
    # A_0 = 1 * (1 + 0.9 * v_1 - 1) = 2.115; A_1 = 0.5 * (0 + 0.9 * 3 - 2) = 0.35; A_B = 1 - 5
    torch.testing.assert_close(adv, torch.tensor([2.115, 0.35, -4.0]))


def test_vtrace_on_policy_is_the_n_step_return() -> None:
    rewards = torch.tensor([1.0, 2.0, 3.0])
    values = torch.tensor([0.5, -1.0, 4.0])
    bootstrap, gamma = 10.0, 0.5
    vs, _ = vtrace(
        torch.zeros(3),
        rewards,
        values,
        torch.tensor([-1.0, 4.0, bootstrap]),
        torch.full((3,), gamma),
        torch.tensor([False, False, True]),
        1.0,
        1.0,
        1.0,
    )
    expected_v0 = 1.0 + gamma * 2.0 + gamma**2 * 3.0 + gamma**3 * bootstrap
    assert vs[0].item() == pytest.approx(expected_v0)
    assert vs[2].item() == pytest.approx(3.0 + gamma * bootstrap)


def _vtrace_step_by_step(
    log_rhos: torch.Tensor,
    rewards: torch.Tensor,
    values: torch.Tensor,
    next_values: torch.Tensor,
    discounts: torch.Tensor,
    chunk_end: torch.Tensor,
    rho_bar: float,
    c_bar: float,
) -> torch.Tensor:
    """The recursion as the paper writes it, one step at a time (the reference)."""
    rhos = log_rhos.exp()
    deltas = rhos.clamp(max=rho_bar) * (rewards + discounts * next_values - values)
    vs = torch.zeros_like(values)
    carry = 0.0
    for t in range(len(values) - 1, -1, -1):
        if chunk_end[t]:
            carry = 0.0
        carry = float(deltas[t] + discounts[t] * rhos[t].clamp(max=c_bar) * carry)
        vs[t] = values[t] + carry
    return vs


def test_vtrace_over_chunks_of_mixed_lengths_matches_the_step_by_step_recursion() -> None:
    generator = torch.Generator().manual_seed(5)
    lengths = [7, 1, 32, 3, 32, 12]
    n = sum(lengths)
    chunk_end = torch.zeros(n, dtype=torch.bool)
    chunk_end[torch.tensor(lengths).cumsum(0) - 1] = True
    args = dict(
        log_rhos=torch.randn(n, generator=generator, dtype=torch.float64),
        rewards=torch.randn(n, generator=generator, dtype=torch.float64),
        values=torch.randn(n, generator=generator, dtype=torch.float64),
        next_values=torch.randn(n, generator=generator, dtype=torch.float64),
        discounts=0.9 * (torch.rand(n, generator=generator) > 0.1).double(),
        chunk_end=chunk_end,
    )
    vs, _ = vtrace(**args, rho_bar=1.2, c_bar=0.8, pg_rho_bar=1.0)
    torch.testing.assert_close(vs, _vtrace_step_by_step(**args, rho_bar=1.2, c_bar=0.8))


def test_vtrace_refuses_steps_after_the_last_chunk_end() -> None:
    ones = torch.ones(3)
    with pytest.raises(ValueError, match="last step"):
        vtrace(ones, ones, ones, ones, ones, torch.tensor([True, False, False]), 1, 1, 1)


def test_a_backlog_is_learned_one_batch_per_step_and_published_every_k_steps() -> None:
    config = IMPALAConfig(batch_steps=20, publish_every=2)
    net = ActorCritic(probe_shape("CartPole-v1"), load_preset("cartpole-impala").network)
    learner = IMPALA(net, config, torch.Generator().manual_seed(0))
    chunks = [make_chunk(8, seed=i) for i in range(7)]  # 56 steps, 2 actions would do
    for chunk in chunks:
        chunk.actions[:] = np.clip(chunk.actions, 0, 1)
    learner.ingest([c for c in chunks], version=chunk.policy_version)
    sizes, published = [], []
    while learner.ready():
        metrics, publish = learner.learn(env_steps=0)
        sizes.append(metrics["batch_steps"])
        published.append(publish)
    # whole chunks, oldest first, at most batch_steps: 16, 16, 16; 8 steps stay pending
    assert sizes == [16.0, 16.0, 16.0]
    assert published == [False, True, False]
    assert learner.updates == 3 and not learner.ready()


def _learner(**config: Any) -> IMPALA:
    net = ActorCritic(probe_shape("CartPole-v1"), load_preset("cartpole-impala").network)
    return IMPALA(
        net,
        IMPALAConfig(batch_steps=16, **config),
        torch.Generator().manual_seed(0),
        anneal_steps=100,
    )


def _two_action_chunks(count: int) -> list[Any]:
    chunks = [make_chunk(8, seed=i) for i in range(count)]
    for chunk in chunks:
        chunk.actions[:] = np.clip(chunk.actions, 0, 1)
    return chunks


def test_the_learning_rate_anneals_linearly_to_a_floor_and_reaches_adam() -> None:
    learner = _learner(learning_rate=1e-3, anneal_lr=True)
    assert [learner.learning_rate(s) for s in (0, 50, 100, 1000)] == pytest.approx(
        [1e-3, 5e-4, 5e-5, 5e-5]
    )
    chunks = _two_action_chunks(2)
    learner.ingest(chunks, version=chunks[-1].policy_version)
    metrics, _ = learner.learn(env_steps=50)
    assert metrics["learning_rate"] == pytest.approx(5e-4)
    assert learner.optimizer.param_groups[0]["lr"] == pytest.approx(5e-4)
    assert _learner(learning_rate=1e-3).learning_rate(1000) == 1e-3  # anneal_lr off


def test_normalised_advantages_change_the_step_and_stay_finite() -> None:
    chunks = _two_action_chunks(2)
    steps = {}
    for norm_adv in (False, True):
        learner = _learner(norm_adv=norm_adv)
        before = [p.detach().clone() for p in learner.net.parameters()]
        learner.ingest(chunks, version=chunks[-1].policy_version)
        metrics, _ = learner.learn(env_steps=0)
        assert all(math.isfinite(v) for v in metrics.values())
        after = list(learner.net.parameters())
        steps[norm_adv] = torch.cat([(a - b).flatten() for a, b in zip(after, before, strict=True)])
    assert not torch.allclose(steps[False], steps[True])


def test_impala_drops_chunks_beyond_max_lag(in_process_run: Any) -> None:
    run = in_process_run(
        load_preset(
            "cartpole-impala",
            ["impala.max_lag=0", "impala.batch_steps=256", "impala.publish_every=1"],
        ),
        workers=2,
        evaluator=False,
    )
    run.start()
    slow = run.rollouts[1]
    slow.act_share()  # version 0, read after the trainer has moved to version 1
    run.rollouts[0].act_share()
    for _ in range(1000):  # bounded: a trainer that never publishes fails, not hangs
        if run.trainer.version > 0:
            break
        run.trainer.iterate()
    assert run.trainer.version == 1
    while not run.trainer.reader.at_end():
        run.trainer.iterate()
    slow.act_share()  # still version 0: lag 1 > max_lag 0
    while not run.trainer.reader.at_end():
        run.trainer.iterate()
    # an ASYNC share leaves open chunks unwritten: what was written of it is all stale
    share = slow.settings.share_steps * slow.envs.num_envs
    assert slow.actor.version == 0 and 0 < run.trainer.dropped_stale_steps <= share


@pytest.mark.slow
def test_impala_async_solves_cartpole(in_process_run: Any) -> None:
    """cartpole-impala reaches 475 in process (its lr, batch and publish cadence as shipped)."""
    run = in_process_run(load_preset("cartpole-impala"), workers=2, eval_every=2)
    run.start()
    finished = run.run(max_steps=400)
    assert finished is not None and finished.reason == "target_reached"
    progress = run.trainer_events.of("progress")
    assert any("train/vtrace/lag_0" in p or "vtrace/lag_0" in str(p) for p in progress)


def test_the_policy_lag_is_taken_when_a_chunk_is_learned_from_not_when_it_arrives() -> None:
    """A backlog read at version v ages while the learner publishes v+1, v+2 from it."""
    learner = _learner(publish_every=1)  # batch_steps 16: two 8-step chunks per step
    chunks = _two_action_chunks(6)  # all acted with version 11
    acted = chunks[0].policy_version
    learner.ingest(chunks, version=acted)  # lag 0 on arrival, for all of them
    lag_means, histograms = [], []
    while learner.ready():
        metrics, publish = learner.learn(env_steps=0)
        assert publish
        lag_means.append(metrics["vtrace/lag_mean"])
        histograms.append([metrics[f"vtrace/lag_{b}"] for b in ("0", "1", "2", "3", "4+")])
    assert lag_means == [0.0, 1.0, 2.0]
    assert histograms == [[16, 0, 0, 0, 0], [0, 16, 0, 0, 0], [0, 0, 16, 0, 0]]
    # the trainer's version comes with every read again: the lag follows it
    more = _two_action_chunks(2)
    learner.ingest(more, version=acted + 7)
    metrics, _ = learner.learn(env_steps=0)
    assert metrics["vtrace/lag_mean"] == 7.0 and metrics["vtrace/lag_4+"] == 16.0
