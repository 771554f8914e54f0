"""From a preset to a ``RunSpec``: one trainer, N rollout workers and an evaluator.

The orchestrators (local processes, Nomad) only start argv lists; what those
argv lists are is decided here, once, so every orchestrator runs the same commands.
The tasks find each other only through the run's Kafka topics and checkpoint store,
which is why every task gets the same ``--kafka`` / ``--checkpoints`` / ``--set``.
"""

from __future__ import annotations

import sys
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from coach_stream.errors import ConfigError
from coach_stream.orchestrators.plan import RunSpec, TaskSpec
from coach_stream.orchestrators.state import SupervisorConfig
from coach_stream.orchestrators.zygote_client import DEFAULT_IDLE_S, ZygoteClient
from coach_stream.processes import free_port
from coach_stream.runids import check_run_id
from coach_stream.transport.environment import check_kafka_addresses
from coach_stream.transport.settings import KafkaSecurity, KafkaSettings

CLI_MODULE = "coach_stream.cli.main"
"""Every task runs ``<python> -m coach_stream.cli.main <command>``."""

TASK_MODULES = (CLI_MODULE, "coach_stream.cli.train", "coach_stream.cli.rollout")
"""What a warm supervisor imports once: the CLI loads command groups lazily, so the heavy
ones the tasks run (torch, gymnasium, the Kafka and GCS clients) are named here."""

ZYGOTE_MODULES = (
    *TASK_MODULES,
    "torch._dynamo",
    "torch.utils.serialization",
    "gymnasium.envs.classic_control",
    "coach_stream.policies.compiled",
    "coach_stream.rollout.compiled",
)
"""What a zygote that outlives launches imports besides: the trainer's first optimizer
imports ``torch._dynamo`` (885 modules, ~2 s), which in a per-launch supervisor would only
move that wait from the trainer to the supervisor, but in the zygote is paid once; and
what every task of a CartPole-class run still imported after its fork (``torch.save``'s
config, the classic-control envs ``gymnasium.make`` loads by name, numba for the compiled
act and chunker step, ~0.4 s)."""

# Rollout workers run a small network on a batch of a few observations: one thread each
# is fastest, and N workers each spawning one thread per core only fight over the cores.
_WORKER_ENV: Mapping[str, str] = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


@dataclass(frozen=True)
class LaunchSettings:
    """Everything a run's command lines need; validated once by the launcher."""

    preset: str
    """A built-in preset name or a YAML path (made absolute: tasks may run elsewhere)."""
    run_id: str
    workers: int
    kafka_bootstrap: str
    checkpoints: str
    """``file:///dir`` or ``gs://bucket/prefix``."""
    gcs_emulator: str | None = None
    seed: int | None = None
    overrides: tuple[str, ...] = ()
    evaluator: bool = True
    restart_workers: bool = True
    """False leaves a crashed worker dead (a test of SYNC runs that lose a worker)."""
    python: str = sys.executable
    extra_env: Mapping[str, str] = field(default_factory=dict)
    kafka_security: KafkaSecurity = field(default_factory=KafkaSecurity)
    """How the launcher reaches Kafka (TLS, SASL). Never on a command line: the tasks read
    the same ``COACH_STREAM_KAFKA_*`` environment (inherited, or a Nomad Variable)."""
    experience_from: str | None = None
    """A shadow learner's source run (``coach-stream attach``): the trainer reads that run's
    experience and the run has no rollout workers; ``workers`` is then the source topic's
    partition count, which the learner sizes its share of the stream by."""
    trainers: int = 1
    """Data-parallel trainer ranks (the preset's ``trainer.count``): one task each."""
    rendezvous_host: str = "127.0.0.1"
    """Where rank 0 listens for the other ranks (a local run: this machine)."""

    def __post_init__(self) -> None:
        check_run_id(self.run_id)
        if self.experience_from is not None:
            check_run_id(self.experience_from)
        if not 1 <= self.workers <= 256:
            raise ConfigError(f"--workers {self.workers} is out of range; use 1 to 256.")
        if self.trainers > 1 and self.experience_from is not None:
            raise ConfigError(
                f"A shadow learner runs one trainer, not {self.trainers}; set trainer.count "
                "to 1 for `coach-stream attach`."
            )
        if self.trainers > self.workers and self.experience_from is None:
            raise ConfigError(
                f"--trainers {self.trainers} is more than the {self.workers} experience "
                f"partitions (one per worker): a rank would read nothing; use --trainers "
                f"{self.workers} or fewer, or more --workers."
            )
        if not self.kafka_bootstrap:
            raise ConfigError(
                "No Kafka bootstrap servers given; pass --kafka HOST:PORT, set "
                "KAFKA_BOOTSTRAP_SERVERS, or start the local stack with `coach-stream stack up`."
            )
        check_kafka_addresses(self.kafka_bootstrap)
        if not self.checkpoints.startswith(("file://", "gs://")):
            raise ConfigError(
                f"Checkpoint location {self.checkpoints!r} is not a file:// or gs:// URL; "
                f"fix --checkpoints."
            )

    def kafka_settings(self) -> KafkaSettings:
        """The launcher's own Kafka settings (topics, preflight checks, telemetry)."""
        return KafkaSettings(bootstrap_servers=self.kafka_bootstrap, security=self.kafka_security)


def new_run_id(preset_name: str) -> str:
    """``<preset>-<UTC yyyymmdd-hhmmss>-<8 hex>``: sortable, readable and unique.

    32 random bits, not 16: a sweep launching 20 runs in one second repeats an id about once
    in 20 million sweeps, where 4 hex digits repeated one in 340 (a test saw it happen).
    """
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    safe = "".join(c if c.isascii() and (c.isalnum() or c in "_-") else "-" for c in preset_name)
    safe = safe.strip("-_")[:60] or "run"
    return check_run_id(f"{safe}-{stamp}-{uuid.uuid4().hex[:8]}")


def preset_argument(preset: str) -> str:
    """A preset path is made absolute; a built-in name is passed as it is."""
    path = Path(preset)
    if preset.endswith((".yaml", ".yml")) or path.exists():
        return str(path.resolve())
    return preset


def _common(settings: LaunchSettings) -> list[str]:
    argv = [
        "--preset", preset_argument(settings.preset),
        "--run-id", settings.run_id,
        "--kafka", settings.kafka_bootstrap,
        "--checkpoints", settings.checkpoints,
    ]  # fmt: skip
    if settings.gcs_emulator:
        argv += ["--gcs-emulator", settings.gcs_emulator]
    if settings.seed is not None:
        argv += ["--seed", str(settings.seed)]
    for override in settings.overrides:
        argv += ["--set", override]
    return argv


def build_run_spec(settings: LaunchSettings) -> RunSpec:
    """The trainer (primary task), ``workers`` rollout workers and the evaluator; a shadow
    learner (``experience_from``) has no rollout workers."""
    cli = [settings.python, "-m", CLI_MODULE]
    common = _common(settings)
    worker_env = {**_WORKER_ENV, **settings.extra_env}
    shadow = settings.experience_from
    trainer_argv = (*cli, "train", *common, "--workers", str(settings.workers))
    if shadow is not None:
        trainer_argv += ("--experience-from", shadow)
    tasks = trainer_tasks(settings, trainer_argv)
    for worker_id in range(0 if shadow is not None else settings.workers):
        tasks.append(
            TaskSpec(
                name=f"rollout-{worker_id}",
                group="rollout",
                argv=(*cli, "rollout", *common, "--worker-id", str(worker_id)),
                env=worker_env,
                restart=settings.restart_workers,
            )
        )
    if settings.evaluator:
        # The evaluator's id follows the workers' so that its seeds differ from theirs.
        evaluator_id = str(settings.workers)
        tasks.append(
            TaskSpec(
                name="evaluator",
                group="evaluator",
                argv=(*cli, "rollout", *common, "--worker-id", evaluator_id, "--evaluator"),
                env=worker_env,
            )
        )
    return RunSpec(run_id=settings.run_id, tasks=tuple(tasks))


def trainer_tasks(settings: LaunchSettings, argv: tuple[str, ...]) -> list[TaskSpec]:
    """The trainer, or its K data-parallel ranks: ``trainer`` (rank 0), ``trainer-1``, ...

    The ranks meet at a port picked now on ``rendezvous_host``; a restarted rank finds the
    others there again (rank 0 listens on it for the life of the group).
    """
    env = dict(settings.extra_env)
    if settings.trainers == 1:
        return [TaskSpec(name="trainer", group="trainer", argv=argv, env=env)]
    # below the ephemeral range: rank 0 binds it seconds later, after its imports
    meeting = f"{settings.rendezvous_host}:{free_port(settings.rendezvous_host)}"
    # the count too, unless a flag already set it: the ranks must agree on it
    setting = f"trainer.count={settings.trainers}"
    count = () if setting in settings.overrides else ("--set", setting)
    return [
        TaskSpec(
            name="trainer" if rank == 0 else f"trainer-{rank}",
            group="trainer",
            argv=(*argv, *count, "--rank", str(rank), "--rendezvous", meeting),
            env=env,
        )
        for rank in range(settings.trainers)
    ]


def warm_supervisor(config: SupervisorConfig | None = None) -> SupervisorConfig:
    """``config`` (default: the defaults) with the CLI preloaded, so tasks start as warm forks."""
    base = config or SupervisorConfig()
    return replace(base, preload=tuple(dict.fromkeys((*base.preload, *TASK_MODULES))))


def warm_zygote(idle_s: float = DEFAULT_IDLE_S) -> ZygoteClient:
    """The zygote client ``launch`` forks run supervisors from (see ``zygote_server``)."""
    return ZygoteClient(ZYGOTE_MODULES, idle_s=idle_s)
