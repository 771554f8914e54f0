"""``coach-stream train``: the trainer process of one run, wired to Kafka and the store.

This is an entry point, so it is where the environment is read (``--kafka`` defaults to
``KAFKA_BOOTSTRAP_SERVERS``, ``--gcs-emulator`` to ``STORAGE_EMULATOR_HOST``, Kafka's
security from ``COACH_STREAM_KAFKA_*`` by ``cli.kafka_env``) and where
Kafka and GCS clients are built; the loop below it only sees the core protocols.
Progress goes to stdout as JSON lines, human logging to stderr.
"""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import Iterator, Mapping

import torch
import typer
from threadpoolctl import threadpool_limits

from coach_stream.addresses import Address, parse_address
from coach_stream.algorithms import builder_for, chunk_spec
from coach_stream.checkpoints import open_store
from coach_stream.cli import options as opt
from coach_stream.cli.kafka_env import kafka_settings
from coach_stream.config import Preset
from coach_stream.core import Collective, EventSink, Rendezvous
from coach_stream.envs import SeedRole, probe_shape, process_seed
from coach_stream.errors import ConfigError
from coach_stream.events import JsonLines
from coach_stream.observability.prometheus import MetricsEndpoint, metrics_endpoint
from coach_stream.trainer.collective import SOLO, TorchCollective
from coach_stream.trainer.device import resolve_device
from coach_stream.trainer.loop import Trainer
from coach_stream.trainer.rendezvous import AnnouncedRendezvous, FixedRendezvous
from coach_stream.transport.admin import ensure_run_topics
from coach_stream.transport.control import KafkaControlPublisher, KafkaControlSubscriber
from coach_stream.transport.names import trainer_group
from coach_stream.transport.reader import KafkaExperienceReader
from coach_stream.transport.retention import parse_retention
from coach_stream.transport.settings import KafkaSettings, RunTopics
from coach_stream.transport.source import KafkaSourceRun
from coach_stream.transport.telemetry import STARTED, TelemetrySink, fan_out


def setup_process() -> None:
    """One torch thread and one BLAS thread per process (N workers share few cores); logs
    to stderr.

    numpy's OpenBLAS starts a thread per core and spreads a matrix product over them once
    it is large enough: a rollout worker's numpy policy on 32 envs then spun its threads
    against the other tasks' and moved 3,900 env steps per CPU-second instead of 42,000
    (``bench/rollout.py --set rollout.num_envs=32`` beside two busy loops). The limit is
    set at run time because a warm-forked task's numpy was loaded before its environment
    was read.
    """
    torch.set_num_threads(1)
    threadpool_limits(limits=1, user_api="blas")
    logging.basicConfig(
        stream=sys.stderr, level=logging.INFO, format="%(asctime)s %(name)s %(message)s"
    )


WorkersOption = typer.Option(2, "--workers", min=1, help="Rollout workers of the run.")
DeviceOption = typer.Option(
    None,
    "--device",
    help="Where the trainer learns: auto (a GPU when there is one), cpu or cuda. "
    "Default: the preset's trainer.device (cpu). Workers always act on the CPU.",
)
RankOption = typer.Option(
    0,
    "--rank",
    min=0,
    help="This process's rank among the preset's trainer.count data-parallel trainers "
    "(0 stores checkpoints and announces versions). On Nomad: ${NOMAD_ALLOC_INDEX}.",
)
RendezvousOption = typer.Option(
    None,
    "--rendezvous",
    help="HOST:PORT where rank 0 listens for the other trainer ranks (needed when "
    "trainer.count > 1; `launch` picks one).",
)
AnnounceRendezvousOption = typer.Option(
    False,
    "--announce-rendezvous",
    help="Rank 0 announces its --rendezvous on the run's control topic and the other "
    "ranks join the address it announced (their own --rendezvous is unused): ranks on "
    "nodes picked at run time. The Nomad job passes ${NOMAD_ADDR_rendezvous}.",
)
ExperienceFromOption = typer.Option(
    None,
    "--experience-from",
    help="Learn from this run's experience topic instead of the run's own: a shadow "
    "learner (what `coach-stream attach` starts). It ends when that run has ended and "
    "its experience was read to the end.",
)


def train(
    preset: str = opt.PresetOption,
    run_id: str = opt.RunIdOption,
    kafka: str | None = opt.KafkaOption,
    checkpoints: str | None = opt.CheckpointsOption,
    gcs_emulator: str | None = opt.GcsEmulatorOption,
    workers: int = WorkersOption,
    seed: int | None = opt.SeedOption,
    overrides: list[str] = opt.SetOption,
    device: str | None = DeviceOption,
    rank: int = RankOption,
    rendezvous: str | None = RendezvousOption,
    announce_rendezvous: bool = AnnounceRendezvousOption,
    experience_from: str | None = ExperienceFromOption,
) -> None:
    """Train a preset: read experience, learn, announce policy versions, end the run."""
    setup_process()
    device_override = [] if device is None else [f"trainer.device={device}"]
    config = opt.load_run_preset(preset, seed, [*overrides, *device_override])
    resolve_device(config.trainer.device)  # a missing GPU is reported before anything starts
    ranks = config.trainer.count
    meeting = _rendezvous(ranks, rank, rendezvous, experience_from)
    settings = kafka_settings(kafka)
    topics = RunTopics.for_run(run_id)
    if experience_from is not None:
        topics = topics.reading_experience_of(experience_from)
    # The publisher's client before anything else: its connection to the broker comes up
    # while the topics are ensured and the rest is built, so version 0 (which every worker
    # waits for) goes out without waiting for it, or for a producer id that missed it
    # (librdkafka then asks again only after a fixed 500 ms; see KafkaRecordProducer.connect).
    with KafkaControlPublisher(settings, topics) as publisher:
        _ensure_topics(settings, topics, config, workers)
        store = open_store(opt.checkpoint_url(checkpoints), gcs_emulator_host=gcs_emulator)
        shape = probe_shape(config.env_id, config.env_wrappers)
        # The trainer's door: a chunk that decodes but does not fit this run (another run, env
        # or action space) is dead-lettered with the reason instead of crashing the learner.
        spec = chunk_spec(config, experience_from or run_id, shape)
        name = "trainer" if rank == 0 else f"trainer-{rank}"
        group = trainer_group(run_id)
        with (
            store,
            KafkaExperienceReader(
                settings, topics, group, spec=spec, share=(rank, ranks)
            ) as reader,
            KafkaControlSubscriber(settings, topics) as control,
            TelemetrySink(settings, topics, run_id, name) as telemetry,
            metrics_endpoint(config.metrics_port if rank == 0 else None, run_id, name) as endpoint,
            (
                KafkaSourceRun(settings, experience_from, reader)
                if experience_from is not None
                else contextlib.nullcontext()
            ) as source,
        ):
            events = _announce_start(
                config, workers, reader, telemetry, endpoint, experience_from, name
            )
            # Metadata and producer id now: the client was made before the topics were
            # ensured, so its broker connection is up and this takes milliseconds.
            publisher.open()
            generator = torch.Generator().manual_seed(
                process_seed(config.seed, 0, SeedRole.TRAINER)
            )
            rendezvous_ = _meeting_place(
                meeting, announce_rendezvous, settings, topics, publisher, run_id, ranks
            )
            with _joined(rendezvous_, rank, ranks, config.trainer.collective_timeout_s) as group_:
                builder = builder_for(config)
                learner = builder.make_learner(shape, workers, generator, group_)
                trainer_settings = builder.make_trainer_settings(run_id)
                Trainer(
                    learner, reader, control, publisher, store, trainer_settings, events,
                    generator, source=source, collective=group_,
                ).run()  # fmt: skip


def _rendezvous(
    ranks: int, rank: int, rendezvous: str | None, experience_from: str | None
) -> Address | None:
    """Where the ranks meet (None: one trainer), or a one-line refusal of bad flags."""
    if rank >= ranks:
        raise ConfigError(
            f"--rank {rank} is outside the preset's trainer.count {ranks}; use 0 to {ranks - 1}."
        )
    # a malformed address is refused even where it is unused: the command line has a typo
    meeting = None if rendezvous is None else parse_address(rendezvous)
    if ranks == 1:
        return None
    if experience_from is not None:
        raise ConfigError(
            "A shadow learner (--experience-from) runs one trainer; set trainer.count to 1."
        )
    if meeting is None:
        raise ConfigError(
            f"trainer.count {ranks} needs --rendezvous HOST:PORT (where rank 0 listens); "
            f"`coach-stream launch --trainers {ranks}` sets it."
        )
    return meeting


@contextlib.contextmanager
def _meeting_place(
    meeting: Address | None,
    announced: bool,
    settings: KafkaSettings,
    topics: RunTopics,
    publisher: KafkaControlPublisher,
    run_id: str,
    ranks: int,
) -> Iterator[Rendezvous | None]:
    """How this rank finds the others: the address every rank was given, or (announced) the
    one rank 0 puts on the control topic, read with a subscriber of its own."""
    if meeting is None or not announced:
        yield None if meeting is None else FixedRendezvous(meeting)
        return
    with KafkaControlSubscriber(settings, topics) as subscriber:
        yield AnnouncedRendezvous(
            meeting, run_id, ranks, publish=publisher.publish, subscriber=subscriber
        )


@contextlib.contextmanager
def _joined(
    rendezvous: contextlib.AbstractContextManager[Rendezvous | None],
    rank: int,
    ranks: int,
    timeout_s: float,
) -> Iterator[Collective]:
    """The group of trainer ranks, joined for the ``with`` (``SOLO`` for one trainer)."""
    with rendezvous as meeting:
        if meeting is None:
            group = None
        else:
            group = TorchCollective(rank, ranks, meeting, timeout_s=timeout_s)
    if group is None:
        yield SOLO
        return
    try:
        yield group
    finally:
        group.close()


def _ensure_topics(
    settings: KafkaSettings, topics: RunTopics, config: Preset, workers: int
) -> None:
    """The run's topics, one experience partition per worker, with the preset's retention."""
    retention = parse_retention(config.experience_retention)
    ensure_run_topics(
        settings,
        topics,
        experience_partitions=workers,
        experience_retention_ms=retention.ms,
        experience_retention_bytes=retention.bytes,
    )


def _announce_start(
    config: Preset,
    workers: int,
    reader: KafkaExperienceReader,
    telemetry: TelemetrySink,
    endpoint: MetricsEndpoint | None,
    experience_from: str | None = None,
    name: str = "trainer",
) -> EventSink:
    """The trainer's event sink, after telling it the run has started.

    Events go on stdout (the local orchestrator's logs), on the telemetry topic (what
    launch/status read, wherever this process runs) and, if asked for, on /metrics.
    """
    sinks: list[EventSink] = [JsonLines(sys.stdout, name), telemetry]
    if endpoint is not None:
        sinks.append(endpoint.exporter)
    events = with_read_positions(fan_out(*sinks), reader)
    telemetry(
        STARTED,
        {
            "workers": workers,
            "preset": config.name,
            "env_id": config.env_id,
            "algorithm": config.algorithm,
            "mode": config.mode.value,
            "target_return": config.target_return,
            "env_step_budget": config.env_step_budget,
            **({"experience_from": experience_from} if experience_from else {}),
            # the whole validated preset: `play` and `export-policy` rebuild the
            # run's networks and wrappers from it, wherever the run was launched
            "preset_config": config.model_dump(mode="json"),
        },
    )
    if endpoint is not None:
        events("metrics", endpoint.announcement())
    return events


def with_read_positions(sink: EventSink, reader: KafkaExperienceReader) -> EventSink:
    """``sink`` with the trainer's read positions and consumer lag added to each progress
    event (``status`` measures lag from them, ``/metrics`` shows it): the loop knows only
    the ``ExperienceReader`` protocol, this process knows it reads Kafka."""

    def enriched(event: str, fields: Mapping[str, object]) -> None:
        if event == "progress":
            fields = {
                **fields,
                "rollout/positions": reader.positions(),
                "rollout/consumer_lag": reader.cached_lag(),
            }
        sink(event, fields)

    return enriched


def register(app: typer.Typer) -> None:
    app.command("train")(train)
