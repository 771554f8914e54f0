"""A ``RunSpec`` as one Nomad job: groups ``trainer`` (1), ``rollout`` (N), ``evaluator`` (1).

The job is made from the same ``RunSpec`` that the local orchestrator runs (``spec.py``
decides the command lines once), so a run on Nomad executes exactly the commands of a
local run. The only rewrite: the N rollout tasks differ only in ``--worker-id i``, and
become one group of count N whose argument is ``${NOMAD_ALLOC_INDEX}`` (checked here:
any other difference between them is refused, never silently dropped). That is also what
lets ``coach-stream scale`` add worker ``N`` by raising the group's count.

Credentials never appear in the job: with ``secrets_var`` set, each task gets a
``template`` that renders every item of that Nomad Variable into its environment
(``nomadVar``), so ``--dry-run`` and ``nomad job inspect`` show only the variable's path.

``job_hcl`` renders the same job as HCL2 for ``--dry-run --format hcl``; ``nomad/`` holds
the hand-runnable version with ``variable`` blocks (a test keeps the three in agreement).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from coach_stream.errors import ConfigError
from coach_stream.orchestrators.plan import RunSpec, TaskSpec

SECOND_NS = 1_000_000_000
GROUPS = ("trainer", "rollout", "evaluator")
WORKER_INDEX = "${NOMAD_ALLOC_INDEX}"
SECRETS_DEST = "secrets/coach-stream.env"
Driver = Literal["raw_exec", "exec", "docker"]


def job_id(run_id: str) -> str:
    """One Nomad job per run."""
    return f"coach-stream-{run_id}"


@dataclass(frozen=True)
class GroupResources:
    cpu_mhz: int
    memory_mb: int
    gpus: int = 0


@dataclass(frozen=True)
class NomadJobSettings:
    """How a run's tasks are placed and run on Nomad (validated once by the CLI)."""

    driver: Driver = "raw_exec"
    image: str | None = None
    """The worker image for ``docker`` (see the repository's ``Dockerfile``)."""
    datacenters: tuple[str, ...] = ("*",)
    namespace: str | None = None
    region: str | None = None
    priority: int = 50
    env: Mapping[str, str] = field(default_factory=dict)
    """Non-secret settings every task gets (Kafka and GCS addresses as the nodes see them)."""
    secrets_var: str | None = None
    """A Nomad Variable path whose items become every task's environment (credentials)."""
    resources: Mapping[str, GroupResources] = field(
        default_factory=lambda: {
            "trainer": GroupResources(1000, 2048),
            "rollout": GroupResources(500, 1024),
            "evaluator": GroupResources(500, 1024),
        }
    )
    max_workers: int = 256
    restart_attempts: int = 5
    restart_interval_s: int = 600
    restart_delay_s: float = 1.0
    kill_timeout_s: int = 20
    """SIGTERM first: the trainer finishes its checkpoint, workers flush their experience."""

    def __post_init__(self) -> None:
        if self.driver == "docker" and not self.image:
            raise ConfigError("--driver docker needs --image (build one from the Dockerfile).")
        if self.driver != "docker" and self.image:
            raise ConfigError(f"--image is for --driver docker, not {self.driver}; drop --image.")
        if not 1 <= self.priority <= 100:
            raise ConfigError(f"--priority {self.priority} is out of range; use 1 to 100.")
        if self.restart_attempts * self.restart_delay_s > self.restart_interval_s:
            raise ConfigError("restart attempts x delay must fit in the restart interval.")
        if self.secrets_var is not None and not self.secrets_var.strip("/"):
            raise ConfigError("--secrets-var is empty; give a Nomad Variable path.")


def job_env(kafka_bootstrap: str, gcs_emulator: str | None) -> dict[str, str]:
    """The Kafka and GCS addresses as task environment (what the CLI options also read)."""
    env = {"KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap}
    if gcs_emulator:
        env["STORAGE_EMULATOR_HOST"] = gcs_emulator
    return env


def _flag(argv: Sequence[str], name: str) -> str | None:
    for i, arg in enumerate(argv[:-1]):
        if arg == name:
            return argv[i + 1]
    return None


RENDEZVOUS_PORT = "rendezvous"
"""Each trainer allocation's dynamic port; rank 0 listens on its own and announces it."""


def _trainer_group(trainers: Sequence[TaskSpec], settings: NomadJobSettings) -> dict[str, Any]:
    """The trainer, or its K data-parallel ranks as a group of count K.

    Allocation ``i`` is rank ``${NOMAD_ALLOC_INDEX}``, on whatever node Nomad picks; each
    gets a dynamic ``rendezvous`` port on its node. Rank 0 listens on its own
    (``${NOMAD_ADDR_rendezvous}``) and announces it on the run's control topic; the others
    join the newest announcement (``--announce-rendezvous``; docs/decisions.md). A rank
    that crashes restarts in place; the others fail within ``trainer.collective_timeout_s``
    and restart too, and all resume together from the newest trainer state.
    """
    first = trainers[0]
    if len(trainers) == 1:
        return _group("trainer", 1, _task("trainer", first.argv, first.env, settings), settings)
    template = _indexed_template(
        trainers, "--rank", {"--rendezvous": f"${{NOMAD_ADDR_{RENDEZVOUS_PORT}}}"}
    )
    if "--announce-rendezvous" not in template:
        template.append("--announce-rendezvous")
    task = _task("trainer", template, first.env, settings)
    if settings.driver == "docker":
        # gloo and NCCL connect every pair of ranks on ports they pick: no port mapping can
        # carry that, so the ranks use their node's network
        task["Config"]["network_mode"] = "host"
    group = _group("trainer", len(trainers), task, settings)
    group["Networks"] = [{"DynamicPorts": [{"Label": RENDEZVOUS_PORT}]}]
    return group


def _rollout_argv(tasks: Sequence[TaskSpec]) -> tuple[str, ...]:
    """The rollout tasks' common argv with ``--worker-id ${NOMAD_ALLOC_INDEX}``."""
    for index, task in enumerate(tasks):
        if task.name != f"rollout-{index}":
            raise ConfigError(f"rollout task {task.name} is not rollout-{index} of the group.")
    return tuple(_indexed_template(tasks, "--worker-id"))


def _indexed_template(
    specs: Sequence[TaskSpec], index_flag: str, placeholders: Mapping[str, str] | None = None
) -> list[str]:
    """The argv that task ``i`` of ``specs`` runs with ``index_flag i``, as one group's template.

    ``index_flag``'s value becomes ``${NOMAD_ALLOC_INDEX}`` and each ``placeholders`` flag's
    value its Nomad variable; a task that differs from the first by anything else cannot be
    one allocation of a group, and is refused.
    """
    variables = {index_flag: WORKER_INDEX, **(placeholders or {})}

    def templated(spec: TaskSpec, index: int) -> list[str]:
        argv = list(spec.argv)
        if _flag(argv, index_flag) != str(index):
            raise ConfigError(
                f"task {spec.name} has no {index_flag} {index}; the run spec is malformed."
            )
        for flag, value in variables.items():
            if _flag(argv, flag) is None:
                raise ConfigError(f"task {spec.name} has no {flag}; the run spec is malformed.")
            argv[argv.index(flag) + 1] = value
        return argv

    template = templated(specs[0], 0)
    for index, spec in enumerate(specs):
        if templated(spec, index) != template or spec.env != specs[0].env:
            raise ConfigError(
                f"task {spec.name} differs from {specs[0].name} by more than its {index_flag}; "
                "one Nomad group cannot run it."
            )
    return template


def _duration(seconds: float) -> int:
    return int(seconds * SECOND_NS)


def _task(
    name: str, argv: Sequence[str], env: Mapping[str, str], settings: NomadJobSettings
) -> dict[str, Any]:
    config: dict[str, Any] = {"command": argv[0], "args": list(argv[1:])}
    if settings.driver == "docker":
        config["image"] = settings.image
    res = settings.resources[name]
    resources: dict[str, Any] = {"CPU": res.cpu_mhz, "MemoryMB": res.memory_mb}
    if res.gpus:
        resources["Devices"] = [{"Name": "nvidia/gpu", "Count": res.gpus}]
    task: dict[str, Any] = {
        "Name": name,
        "Driver": settings.driver,
        "Config": config,
        # Python's stdout to a file is block-buffered; logs should arrive as they happen.
        "Env": {**settings.env, **env, "PYTHONUNBUFFERED": "1"},
        "Resources": resources,
        "KillSignal": "SIGTERM",
        "KillTimeout": _duration(settings.kill_timeout_s),
        "LogConfig": {"MaxFiles": 5, "MaxFileSizeMB": 20},
    }
    if settings.secrets_var:
        path = json.dumps(settings.secrets_var.strip("/"))
        task["Templates"] = [
            {
                "EmbeddedTmpl": (
                    f"{{{{ with nomadVar {path} }}}}{{{{ range $k, $v := . }}}}"
                    "{{ $k }}={{ $v }}\n{{ end }}{{ end }}"
                ),
                "DestPath": SECRETS_DEST,
                "Envvars": True,
            }
        ]
    return task


def _group(
    name: str, count: int, task: dict[str, Any], settings: NomadJobSettings
) -> dict[str, Any]:
    group: dict[str, Any] = {
        "Name": name,
        "Count": count,
        "Meta": {"role": name},
        # A crashed task is restarted in place (the trainer resumes from its checkpoint, a
        # worker from the newest policy); past the attempts the allocation fails and is
        # rescheduled, on another node when the node was the problem.
        "RestartPolicy": {
            "Attempts": settings.restart_attempts,
            "Interval": _duration(settings.restart_interval_s),
            "Delay": _duration(settings.restart_delay_s),
            "Mode": "fail",
        },
        "ReschedulePolicy": {
            "Attempts": 3,
            "Interval": _duration(3600),
            "Delay": _duration(5),
            "DelayFunction": "exponential",
            "MaxDelay": _duration(120),
            "Unlimited": False,
        },
        "Tasks": [task],
    }
    if name == "rollout":
        group["Spreads"] = [{"Attribute": "${node.unique.id}", "Weight": 100}]
        group["Scaling"] = {"Min": 1, "Max": settings.max_workers, "Enabled": False}
    return group


def build_job(spec: RunSpec, settings: NomadJobSettings) -> dict[str, Any]:
    """The Nomad ``Job`` object (the API's JSON form) that runs ``spec``."""
    by_group: dict[str, list[TaskSpec]] = {}
    for task in spec.tasks:
        if task.group not in GROUPS:
            raise ConfigError(f"task {task.name} is in group {task.group!r}; Nomad runs {GROUPS}.")
        by_group.setdefault(task.group, []).append(task)
    trainers = by_group.get("trainer", [])
    rollouts = by_group.get("rollout", [])
    shadow = len(trainers) == 1 and _flag(trainers[0].argv, "--experience-from") is not None
    if not trainers or not (rollouts or shadow):
        raise ConfigError("a run needs a trainer and at least one rollout task.")
    groups = [_trainer_group(trainers, settings)]
    if rollouts:  # a shadow learner (`coach-stream attach`) has none: it reads another run's
        rollout_task = _task("rollout", _rollout_argv(rollouts), rollouts[0].env, settings)
        groups.append(_group("rollout", len(rollouts), rollout_task, settings))
    for evaluator in by_group.get("evaluator", []):
        groups.append(
            _group(
                "evaluator",
                1,
                _task("evaluator", evaluator.argv, evaluator.env, settings),
                settings,
            )
        )
    the_id = job_id(spec.run_id)
    job: dict[str, Any] = {
        "ID": the_id,
        "Name": the_id,
        # batch: a run ends; tasks that exit 0 (on RunFinished) are done, not restarted.
        "Type": "batch",
        "Datacenters": list(settings.datacenters),
        "Priority": settings.priority,
        "Meta": {
            "run_id": spec.run_id,
            "preset": _flag(trainers[0].argv, "--preset") or "",
            "managed_by": "coach-stream",
        },
        "TaskGroups": groups,
    }
    if settings.namespace:
        job["Namespace"] = settings.namespace
    if settings.region:
        job["Region"] = settings.region
    return job


# --------------------------------------------------------------------------- HCL2

# JSON keys whose HCL form is a block (one per element for lists), not an attribute.
_BLOCKS = {
    "TaskGroups": "group",
    "Tasks": "task",
    "RestartPolicy": "restart",
    "ReschedulePolicy": "reschedule",
    "Resources": "resources",
    "Devices": "device",
    "Templates": "template",
    "Spreads": "spread",
    "Scaling": "scaling",
    "LogConfig": "logs",
    "Config": "config",
    "Env": "env",
    "Meta": "meta",
    "Networks": "network",
    "DynamicPorts": "port",
}
_LABELLED = {"group", "task", "device"}  # blocks whose Name is their label
_LABEL_KEYS = {"port": "Label"}  # blocks labelled by another key
_RENAMES = {
    "CPU": "cpu",
    "MemoryMB": "memory",
    "MaxFileSizeMB": "max_file_size",
    "EmbeddedTmpl": "data",
    "DestPath": "destination",
    "Envvars": "env",
    "DelayFunction": "delay_function",
    "MaxDelay": "max_delay",
    "KillSignal": "kill_signal",
    "KillTimeout": "kill_timeout",
    "MaxFiles": "max_files",
}
_DURATIONS = {"Interval", "Delay", "MaxDelay", "KillTimeout"}
_VERBATIM = {"Config", "Env", "Meta"}  # user keys inside these stay as written


def _snake(key: str) -> str:
    if key in _RENAMES:
        return _RENAMES[key]
    out = "".join(f"_{c.lower()}" if c.isupper() else c for c in key).lstrip("_")
    return out


def _hcl_value(value: Any, key: str = "") -> str:
    if key in _DURATIONS and isinstance(value, int):
        seconds = value / SECOND_NS
        return json.dumps(f"{seconds:g}s")
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        # HCL interpolates ${...}; Nomad's own ${NOMAD_*} must reach Nomad, so it is kept
        # as is (Nomad's HCL parser leaves unknown variables to the runtime).
        return json.dumps(value).replace("%{", "%%{")
    if isinstance(value, list):
        return "[" + ", ".join(_hcl_value(v) for v in value) + "]"
    return json.dumps(value)


def _hcl_body(obj: Mapping[str, Any], indent: int, verbatim: bool = False) -> list[str]:
    pad = "  " * indent
    lines: list[str] = []
    for key, value in obj.items():
        if verbatim:
            lines.append(
                f"{pad}{json.dumps(key) if not key.isidentifier() else key} = {_hcl_value(value)}"
            )
            continue
        if key in _BLOCKS:
            block = _BLOCKS[key]
            items = value if isinstance(value, list) else [value]
            for item in items:
                item = dict(item)
                label = ""
                if block in _LABELLED:
                    label = " " + json.dumps(item.pop("Name"))
                elif block in _LABEL_KEYS:
                    label = " " + json.dumps(item.pop(_LABEL_KEYS[block]))
                lines.append(f"{pad}{block}{label} {{")
                lines += _hcl_body(item, indent + 1, verbatim=key in _VERBATIM)
                lines.append(f"{pad}}}")
            continue
        if key in {"ID"}:
            continue  # the job's label
        lines.append(f"{pad}{_snake(key)} = {_hcl_value(value, key)}")
    return lines


def job_hcl(job: Mapping[str, Any]) -> str:
    """``job`` as an HCL2 jobspec (``nomad job run`` accepts it as it is)."""
    body = dict(job)
    lines = [f"job {json.dumps(body['ID'])} {{"]
    lines += _hcl_body(body, 1)
    lines.append("}")
    return "\n".join(lines) + "\n"
