"""``coach-stream rollout``: one rollout worker (or, with ``--evaluator``, the evaluator).

Builds the vector env, the actor, the Kafka writer and the checkpoint-backed policy
source, then hands them to ``RolloutWorker`` / ``Evaluator``. Exits 0 once the trainer's
``RunFinished`` has been read.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass

import typer
from gymnasium.vector import VectorEnv

from coach_stream.algorithms import builder_for
from coach_stream.checkpoints import open_store
from coach_stream.cli.kafka_env import kafka_settings
from coach_stream.cli.options import (
    CheckpointsOption,
    GcsEmulatorOption,
    KafkaOption,
    PresetOption,
    RunIdOption,
    SeedOption,
    SetOption,
    checkpoint_url,
    load_run_preset,
)
from coach_stream.cli.train import setup_process
from coach_stream.config import Preset
from coach_stream.control.policy_source import CheckpointPolicySource
from coach_stream.core import Actor, EventSink, Mode, PolicySource, RunFinished
from coach_stream.envs import SeedRole, env_seeds, env_shape, make_vector_env, process_seed
from coach_stream.errors import ServiceUnavailableError
from coach_stream.events import JsonLines
from coach_stream.observability.prometheus import metrics_endpoint
from coach_stream.rollout.evaluator import Evaluator
from coach_stream.rollout.priority import yield_cpu
from coach_stream.rollout.worker import RolloutWorker, WorkerSettings
from coach_stream.transport.admin import check_broker
from coach_stream.transport.backlog import KafkaExperienceBacklog
from coach_stream.transport.control import KafkaControlPublisher, KafkaControlSubscriber
from coach_stream.transport.names import trainer_group
from coach_stream.transport.settings import KafkaSettings, RunTopics
from coach_stream.transport.telemetry import STARTED, TelemetrySink, fan_out
from coach_stream.transport.writer import KafkaExperienceWriter


def wait_for_topics(settings: KafkaSettings, topics: RunTopics, timeout: float) -> None:
    """Workers may start before the trainer has created the run's topics: wait (bounded)."""
    deadline = time.monotonic() + timeout
    while True:
        metadata = check_broker(settings, timeout=min(10.0, timeout), wait_for_start=True)
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
    yield_cpu(config.rollout.niceness)
    settings = kafka_settings(kafka)
    topics = RunTopics.for_run(run_id)
    process = RolloutProcess(
        config,
        run_id,
        worker_id,
        evaluator,
        settings,
        topics,
        checkpoint_url(checkpoints),
        gcs_emulator,
    )
    # The output's producer first. An idempotent producer asks for its producer id when a
    # broker connection is up, and when its first look finds none, librdkafka looks again
    # only after a fixed 500 ms: a third of fresh producers here sent their first record
    # half a second late. Created before the rest of the start-up, that wait overlaps it
    # instead of holding back the first chunk (or the evaluator's first report).
    with (
        process.output() as output,
        TelemetrySink(settings, topics, run_id, process.task) as telemetry,
        metrics_endpoint(config.metrics_port, run_id, process.task) as endpoint,
    ):
        # stdout for the local orchestrator's logs, the telemetry topic for launch/status,
        # and /metrics when the preset asks for it.
        sinks: list[EventSink] = [JsonLines(sys.stdout, process.task), telemetry]
        if endpoint is not None:
            sinks.append(endpoint.exporter)
        events = fan_out(*sinks)
        telemetry(STARTED, {"worker_id": worker_id})
        if endpoint is not None:
            events("metrics", endpoint.announcement())
        wait_for_topics(settings, topics, config.rollout.policy_wait_s)
        # Metadata and the producer id now, while version 0 is not there yet anyway.
        if isinstance(output, KafkaControlPublisher):
            output.open()
        else:
            output.connect(30.0)
        finished = process.run(events, output)
        events("exit", {"reason": finished.reason, "final_version": finished.final_version})


@dataclass(frozen=True)
class RolloutProcess:
    """One rollout worker or the evaluator, with everything resolved from its flags."""

    config: Preset
    run_id: str
    worker_id: int
    evaluator: bool
    kafka: KafkaSettings
    topics: RunTopics
    checkpoints_url: str
    gcs_emulator: str | None

    @property
    def task(self) -> str:
        return "evaluator" if self.evaluator else f"rollout-{self.worker_id}"

    def output(self) -> KafkaExperienceWriter | KafkaControlPublisher:
        """Where this process writes: experience, or (the evaluator) its reports."""
        if self.evaluator:
            return KafkaControlPublisher(self.kafka, self.topics)
        kafka = experience_producer_settings(self.kafka, self.config)
        return KafkaExperienceWriter(kafka, self.topics.experience)

    def run(
        self, events: EventSink, output: KafkaExperienceWriter | KafkaControlPublisher
    ) -> RunFinished:
        """Build the envs and the actor, then act (or evaluate) until the run is finished."""
        config, builder = self.config, builder_for(self.config)
        role = SeedRole.EVALUATOR if self.evaluator else SeedRole.ROLLOUT
        num_envs = config.eval_episodes if self.evaluator else config.rollout.num_envs
        seeds = env_seeds(config.seed, self.worker_id, num_envs, role)
        envs = make_vector_env(config.env_id, num_envs, config.env_wrappers)
        try:
            seed = process_seed(config.seed, self.worker_id, role)
            actor = builder.make_actor(env_shape(envs), self.evaluator, seed)
            store = open_store(self.checkpoints_url, gcs_emulator_host=self.gcs_emulator)
            # ASYNC workers fetch new weights on a background thread: poll() never stalls
            # the envs. The evaluator waits for each version anyway.
            background = config.mode is Mode.ASYNC and not self.evaluator
            with (
                store,
                KafkaControlSubscriber(self.kafka, self.topics) as control,
                CheckpointPolicySource(
                    control, store, run_id=self.run_id, background=background
                ) as source,
            ):
                if isinstance(output, KafkaControlPublisher):
                    return self._evaluate(envs, actor, source, seeds, events, output)
                settings = builder.make_worker_settings(self.run_id, self.worker_id)
                return self._act(envs, actor, source, settings, seeds, events, output)
        finally:
            envs.close()  # also when the broker, the store or a policy fails

    def _evaluate(
        self,
        envs: VectorEnv,
        actor: Actor,
        source: PolicySource,
        seeds: list[int],
        events: EventSink,
        publisher: KafkaControlPublisher,
    ) -> RunFinished:
        """Greedy rounds with the newest version, each reported on the control topic."""
        return Evaluator(
            envs,
            actor,
            source,
            publisher,
            self.run_id,
            seeds,
            events,
            policy_wait_s=self.config.rollout.policy_wait_s,
        ).run()

    def _act(
        self,
        envs: VectorEnv,
        actor: Actor,
        source: PolicySource,
        settings: WorkerSettings,
        seeds: list[int],
        events: EventSink,
        writer: KafkaExperienceWriter,
    ) -> RunFinished:
        """Act and write experience to the run's experience topic (ASYNC with a rate limit:
        no further ahead of the trainer's reading than the preset allows)."""
        group = trainer_group(self.run_id)
        with KafkaExperienceBacklog(self.kafka, self.topics, group) as backlog:  # lazy: no I/O
            worker = RolloutWorker(
                envs, actor, writer, source, settings, seeds, events, backlog=backlog
            )
            return worker.run()


def experience_producer_settings(kafka: KafkaSettings, preset: Preset) -> KafkaSettings:
    """The run's Kafka settings with the preset's experience compression.

    Frames compress (image presets set ``rollout.compression``); float observations do not.
    """
    return kafka.model_copy(update={"compression": preset.rollout.compression})


def register(app: typer.Typer) -> None:
    app.command("rollout")(rollout)
