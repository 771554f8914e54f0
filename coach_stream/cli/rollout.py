"""``coach-stream rollout``: one rollout worker (or, with ``--evaluator``, the evaluator).

Builds the vector env, the actor, the Kafka writer and the checkpoint-backed policy
source, then hands them to ``RolloutWorker`` / ``Evaluator``. Exits 0 once the trainer's
``RunFinished`` has been read.
"""

from __future__ import annotations

import sys
import time

import typer

from coach_stream.checkpoints import open_store
from coach_stream.cli.train import (
    CheckpointsOption,
    GcsEmulatorOption,
    KafkaOption,
    PresetOption,
    RunIdOption,
    SeedOption,
    SetOption,
    checkpoint_url,
    kafka_settings,
    load_run_preset,
    setup_process,
)
from coach_stream.control.policy_source import CheckpointPolicySource
from coach_stream.core import Mode
from coach_stream.envs import SeedRole, env_seeds, env_shape, make_vector_env, process_seed
from coach_stream.errors import ServiceUnavailableError
from coach_stream.policies.actors import build_actor
from coach_stream.rollout.evaluator import Evaluator
from coach_stream.rollout.events import JsonLines
from coach_stream.rollout.worker import RolloutWorker, WorkerSettings
from coach_stream.transport.admin import check_broker
from coach_stream.transport.control import KafkaControlPublisher, KafkaControlSubscriber
from coach_stream.transport.settings import KafkaSettings, RunTopics
from coach_stream.transport.writer import KafkaExperienceWriter


def wait_for_topics(settings: KafkaSettings, topics: RunTopics, timeout: float) -> None:
    """Workers may start before the trainer has created the run's topics: wait (bounded)."""
    deadline = time.monotonic() + timeout
    while True:
        metadata = check_broker(settings, timeout=min(10.0, timeout))
        present = metadata.topics
        if all(t in present and present[t].partitions for t in (topics.control, topics.experience)):
            return
        if time.monotonic() >= deadline:
            raise ServiceUnavailableError(
                f"Topic {topics.control} did not appear within {timeout:.0f} s; start the "
                "trainer for this run (it creates the topics) or check the run id."
            )
        time.sleep(0.5)  # polling the broker's metadata, not synchronizing with a peer


def rollout(
    preset: str = PresetOption,
    run_id: str = RunIdOption,
    worker_id: int = typer.Option(..., "--worker-id", min=0, help="Distinct per process."),
    evaluator: bool = typer.Option(False, "--evaluator", help="Greedy evaluation, no experience."),
    kafka: str | None = KafkaOption,
    checkpoints: str | None = CheckpointsOption,
    gcs_emulator: str | None = GcsEmulatorOption,
    seed: int | None = SeedOption,
    overrides: list[str] = SetOption,
) -> None:
    """Act with the newest policy and write experience (or evaluate it greedily)."""
    setup_process()
    config = load_run_preset(preset, seed, overrides)
    settings = kafka_settings(kafka)
    topics = RunTopics.for_run(run_id, settings.topic_prefix)
    wait_for_topics(settings, topics, config.rollout.policy_wait_s)
    role = SeedRole.EVALUATOR if evaluator else SeedRole.ROLLOUT
    num_envs = config.eval_episodes if evaluator else config.rollout.num_envs
    envs = make_vector_env(config.env_id, num_envs)
    seeds = env_seeds(config.seed, worker_id, num_envs, role)
    actor = build_actor(
        config, env_shape(envs), evaluator, process_seed(config.seed, worker_id, role)
    )
    store = open_store(checkpoint_url(checkpoints), gcs_emulator_host=gcs_emulator)
    task = "evaluator" if evaluator else f"rollout-{worker_id}"
    events = JsonLines(sys.stdout, task)
    # ASYNC workers fetch new weights on a background thread: poll() never stalls the envs.
    background = config.mode is Mode.ASYNC and not evaluator
    with (
        store,
        KafkaControlSubscriber(settings, topics) as control,
        CheckpointPolicySource(control, store, run_id=run_id, background=background) as source,
    ):
        if evaluator:
            with KafkaControlPublisher(settings, topics) as publisher:
                finished = Evaluator(
                    envs,
                    actor,
                    source,
                    publisher,
                    run_id,
                    seeds,
                    events,
                    policy_wait_s=config.rollout.policy_wait_s,
                ).run()
        else:
            share = (
                config.ppo_config.num_steps
                if config.mode is Mode.SYNC
                else (config.rollout.chunk_steps)
            )
            worker_settings = WorkerSettings(
                run_id,
                worker_id,
                config.mode,
                config.rollout.chunk_steps,
                share,
                sync_wait_s=config.rollout.sync_wait_s,
                max_lead_steps=config.rollout.async_max_lead_steps,
                policy_wait_s=config.rollout.policy_wait_s,
                log_every_s=config.trainer.log_every_s,
            )
            with KafkaExperienceWriter(settings, topics.experience) as writer:
                finished = RolloutWorker(
                    envs, actor, writer, source, worker_settings, seeds, events
                ).run()
    envs.close()
    events("exit", {"reason": finished.reason, "final_version": finished.final_version})


def register(app: typer.Typer) -> None:
    app.command("rollout")(rollout)
