"""``replay train`` end to end: dataset -> training -> store + announcements -> evaluation."""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

import torch

from coach_stream.checkpoints import open_store, policy_to_bytes
from coach_stream.control.announcer import Announcer
from coach_stream.control.policy_source import CheckpointPolicySource
from coach_stream.core import Actor, EvaluationReport
from coach_stream.envs import EnvShape, make_vector_env, probe_shape
from coach_stream.events import JsonLines
from coach_stream.replay.offline import OfflineConfig
from coach_stream.replay.offline.train import Dataset, train_offline
from coach_stream.rollout.evaluator import Evaluator
from coach_stream.trainer.dqn import DQNConfig
from coach_stream.transport.admin import ensure_run_topics
from coach_stream.transport.control import KafkaControlPublisher, KafkaControlSubscriber
from coach_stream.transport.settings import KafkaSettings, RunTopics


def make_eval_actor(kind: str, shape: EnvShape, config: OfflineConfig, seed: int) -> Actor:
    """The greedy actor that loads an offline policy (the evaluator's own actor classes)."""
    from coach_stream.policies.actors import DQNActor, PPOActor
    from coach_stream.policies.networks import ActorCritic, QNetwork
    from coach_stream.policies.normalization import NormalizingActor

    actor: Actor
    if kind == "ppo":
        actor = PPOActor(ActorCritic(shape, config.network), greedy=True, seed=seed)
    else:
        actor = DQNActor(QNetwork(shape, config.network), DQNConfig(), greedy=True, seed=seed)
    return NormalizingActor(actor) if config.normalize_observations else actor


def run_offline(
    data: Dataset,
    *,
    settings: KafkaSettings,
    run_id: str,
    checkpoints: str,
    gcs_emulator: str | None,
    env_id: str,
    algo: str,
    config: OfflineConfig,
    seed: int,
    publish_every: int,
    eval_episodes: int,
    on_step: Callable[[int], None] | None = None,
) -> dict[str, Any]:
    """Train, announce and evaluate; ``on_step(1)`` after each gradient step."""
    shape = probe_shape(env_id)
    topics = RunTopics.for_run(run_id)
    ensure_run_topics(settings, topics, 1)
    store = open_store(checkpoints, gcs_emulator_host=gcs_emulator)
    events = JsonLines(sys.stderr, "replay-train")
    with store, KafkaControlPublisher(settings, topics) as publisher:
        announcer = Announcer(store, publisher, run_id)

        def publish(step: int, policy_state: dict[str, torch.Tensor]) -> None:
            version = announcer.publish_policy(
                policy_to_bytes(policy_state), trainer_step=step, env_steps=len(data)
            )
            events("policy", {"version": version.version, "step": step, "uri": version.uri})

        algorithm, result = train_offline(
            data, algo, shape, config, seed, publish_every, publish, on_step
        )
        report = evaluate(
            settings,
            topics,
            store,
            run_id,
            env_id,
            algorithm.policy_kind,
            shape,
            config,
            eval_episodes,
            seed,
        )
        announcer.finish("offline_trained")
    last = announcer.last_announced
    return {
        "run_id": run_id,
        "algo": algo,
        **asdict(result),
        "policy_version": last.version if last else None,
        "policy_uri": last.uri if last else None,
        "eval_returns": list(report.returns),
        "mean_return": report.mean_return,
    }


def evaluate(
    settings: KafkaSettings,
    topics: RunTopics,
    store: Any,
    run_id: str,
    env_id: str,
    kind: str,
    shape: EnvShape,
    config: OfflineConfig,
    episodes: int,
    seed: int,
) -> EvaluationReport:
    """Greedy episodes of the newest announced version, reported on the control topic."""
    envs = make_vector_env(env_id, episodes)
    try:
        actor = make_eval_actor(kind, shape, config, seed)
        with (
            KafkaControlSubscriber(settings, topics) as control,
            CheckpointPolicySource(control, store, run_id=run_id) as source,
            KafkaControlPublisher(settings, topics) as publisher,
        ):
            evaluator = Evaluator(
                envs,
                actor,
                source,
                publisher,
                run_id,
                [seed * 1000 + i for i in range(episodes)],
                JsonLines(sys.stderr, "replay-eval"),
                policy_wait_s=30.0,
            )
            evaluator.start()
            return evaluator.evaluate()
    finally:
        envs.close()
