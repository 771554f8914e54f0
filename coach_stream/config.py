"""Presets: one validated, frozen description of a training run.

A preset is a YAML file (built-in ones live in ``coach_stream/presets``) validated once at
the edge by these pydantic models and then passed down unchanged. Unknown keys are errors
that name the key, because a misspelt hyperparameter that is silently ignored costs a
whole training run to discover.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from coach_stream.core import Mode
from coach_stream.errors import ConfigError

if TYPE_CHECKING:
    from coach_stream.algorithms.common import Builder


class FrozenModel(BaseModel):
    """A preset section: frozen, unknown keys refused (algorithms' sections derive from it)."""

    # allow_inf_nan: a learning rate of .inf or .nan is accepted by YAML and would only
    # show up as every chunk dead-lettered; no field of a preset means it.
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)


_Frozen = FrozenModel
SectionT = TypeVar("SectionT", bound=FrozenModel)


class NetworkConfig(_Frozen):
    """The torso of the actor-critic and the Q-network: an MLP or, for frames, a CNN."""

    kind: Literal["auto", "mlp", "nature_cnn", "small_cnn"] = "auto"
    """``auto``: a CNN for 3-D uint8 observations (``nature_cnn`` from 36x36 pixels up,
    ``small_cnn`` below), the MLP otherwise. See ``coach_stream.policies.cnn``."""
    hidden_sizes: tuple[int, ...] = Field(default=(64, 64), min_length=1)
    """The MLP's hidden layers (the MLP kind only)."""
    head_sizes: tuple[int, ...] = ()
    """CNN kinds: hidden layers of the policy, value and Q heads on the CNN's features
    (``()``: one linear layer, CleanRL's Atari agent; ``[64]``: rl-starter-files' MiniGrid
    heads)."""
    activation: Literal["tanh", "relu"] = "tanh"
    """The hidden layers' activation function."""
    ortho_init: bool = True
    """MLP layers: orthogonal weights and zero biases (CleanRL's ``layer_init``); false:
    torch's default init (SB3's ``ortho_init=False``, which rl-zoo's MuJoCo PPO uses)."""
    log_std_init: float = 0.0
    """PPO's Gaussian policy: the starting state-independent log-std (rl-zoo's HalfCheetah
    PPO starts at -2, a std of 0.14, instead of 1)."""
    pixels: bool | None = None
    """CNN kinds: whether the uint8 frames are pixels, scaled by 1/255, or small integer
    codes fed as they are (MiniGrid's object, colour and state indices, at most about 10).
    Default: codes when ``env_wrappers`` has ``image`` (MiniGrid's symbolic view), pixels
    otherwise."""

    @field_validator("hidden_sizes", "head_sizes")
    @classmethod
    def _layers_have_units(cls, value: tuple[int, ...]) -> tuple[int, ...]:
        if any(size < 1 for size in value):
            raise ValueError(f"every layer needs at least 1 unit, got {list(value)}")
        return value


class RolloutConfig(_Frozen):
    """How one rollout worker steps its environments and cuts experience into chunks."""

    num_envs: int = Field(default=8, ge=1, le=1024)
    """Environments per worker, stepped as one gymnasium vector env (batched inference)."""
    chunk_steps: int = Field(default=32, ge=1, le=4096)
    """T: at most this many steps per ExperienceChunk (a chunk also ends with its episode)."""
    policy_wait_s: float = Field(default=120.0, gt=0)
    """How long a worker waits for the trainer's first policy before giving up."""
    sync_wait_s: float = Field(default=2.0, gt=0)
    """SYNC: how long a worker waits for v+1 before acting another share with v (a worker
    that died leaves its share to the others this way)."""
    compression: Literal["none", "lz4", "zstd"] = "none"
    """The experience producer's compression (librdkafka ``compression.type``). Float
    observations do not compress; frames do (image presets: see docs/algorithms.md)."""
    async_max_lead_steps: int | None = Field(default=None, ge=1)
    """ASYNC freshness pacing: after this many steps (per worker) acted with one version and
    no newer one, wait up to ``sync_wait_s`` for it before acting on (then go on anyway).
    None: never wait. It is soft; ``async_max_unread_steps`` is the hard bound."""
    async_max_unread_steps: int | None = Field(default=None, ge=1)
    """ASYNC rate limit (the writer side of Reverb's limiter): every worker waits, with no
    timeout, while the experience log holds more than this many env steps the trainer has
    not read yet (its consumer lag, asked of the broker; counted in whole records of
    ``chunk_steps``, so at least ``chunk_steps``). It keeps the lag, and the age of what the
    trainer learns from, bounded in a run of any length with any number of workers; set it
    to a few times what the trainer reads between two policy versions (smaller: the trainer
    may idle for data). A worker waits on through a trainer restart and exits on
    ``RunFinished``. None: no limit (the lag grows whenever workers outpace the trainer)."""
    niceness: int = Field(default=0, ge=0, le=19)
    """CPU priority the rollout workers and the evaluator give up at start (Unix niceness,
    and, where a task has its own session as the local orchestrator starts them, its Linux
    autogroup's, without which nice orders nothing between sessions). Above 0 the trainer,
    the one process every worker feeds, keeps its share of the cores when CPU-bound workers
    outnumber them: 16 Pong workers on 2 cores left it 0.10 CPU s/s and it learned almost
    nothing; with 10 it had 0.6 and read 955 env steps/s (docs/performance.md, Scale)."""


class NormalizeConfig(_Frozen):
    """Observation and reward normalisation (what SB3's ``VecNormalize`` does in one process),
    kept by the trainer from the experience it reads and shipped inside every policy
    version, so every worker, the evaluator and any later loader act on the same
    statistics (``coach_stream.policies.normalization``). For the on-policy learners
    (``ppo``, ``impala``) and vector observations; image presets scale pixels in the network."""

    observations: bool = False
    """Standardise observations by their running mean and variance, then clip."""
    rewards: bool = False
    """Divide rewards by the running standard deviation of the discounted return, then clip
    (the learner sees scaled rewards; returns reported by workers and the evaluator stay raw)."""
    clip_observations: float = Field(default=10.0, gt=0)
    """Normalised observations are clipped to [-clip, clip]."""
    clip_rewards: float = Field(default=10.0, gt=0)
    """Scaled rewards are clipped to [-clip, clip]."""
    epsilon: float = Field(default=1e-8, gt=0)
    """Added to the variances before the square root."""
    gamma: float | None = Field(default=None, gt=0, le=1)
    """Discount of the return whose variance scales rewards; default: the algorithm's gamma."""

    @property
    def enabled(self) -> bool:
        return self.observations or self.rewards


class TrainerConfig(_Frozen):
    """Trainer-side bookkeeping that is independent of the algorithm."""

    read_batch: int = Field(default=256, ge=1)
    """Chunks per ``ExperienceReader.read`` call."""
    checkpoint_every: int = Field(default=1, ge=1)
    """Policy versions between trainer-state checkpoints (PPO needs 1 for exact resume)."""
    keep_policies: int = Field(default=5, ge=1)
    """Policy checkpoints kept in the store; older ones are deleted (the newest never)."""
    keep_trainer_states: int = Field(default=3, ge=1)
    """Trainer-state checkpoints kept in the store (the same rule: the newest K survive)."""
    refill_idle_s: float = Field(default=30.0, gt=0)
    """A resuming DQN re-reads the log into replay; it stops short after this long idle."""
    log_every_s: float = Field(default=1.0, gt=0)
    """Seconds between the trainer's progress events (the telemetry ``status`` and ``report``
    read)."""
    device: Literal["auto", "cpu", "cuda"] = "cpu"
    """Where the trainer's networks learn (``coach-stream train --device`` overrides it):
    ``auto`` takes a GPU when torch sees one. Workers always act on the CPU. The default
    stays ``cpu``: the built-in MLP presets are faster on one CPU thread than on a GPU."""
    count: int = Field(default=1, ge=1, le=64)
    """Data-parallel trainer ranks (``launch --trainers``): each reads its share of the
    experience partitions and all-reduces its gradients, rank 0 stores and announces (at
    most one rank per partition, i.e. per rollout worker)."""
    collective_timeout_s: float = Field(default=60.0, gt=0)
    """How long a rank waits for the others in a collective before it gives up (a rank that
    died mid all-reduce): the ranks then exit and restart from the newest trainer state."""


class Preset(_Frozen):
    """Everything a run needs except where its services are (those come from flags).

    The algorithm's own section (``ppo:``, ``dqn:``, ...) and its mode come from its builder
    (``coach_stream.algorithms``): each builder declares a ``Preset`` subclass with its
    section, and a preset validates as their union, discriminated on ``algorithm``."""

    name: str
    """The preset's name (a built-in preset's file name; a YAML file's stem by default)."""
    env_id: str
    """The gymnasium environment id every worker and the evaluator make."""
    algorithm: str
    """The learner (``ppo``, ``dqn``, ``sac``, ``impala``: ``coach_stream.algorithms.BUILDERS``);
    it needs the section of the same name."""
    mode: Mode
    """``sync``: on-policy, each version's quota is gathered before an update (PPO); ``async``:
    nobody waits (DQN, SAC, IMPALA). Set by the algorithm's builder; a preset may state it,
    and a wrong one is an error."""
    target_return: float
    """The run ends when the mean of the last ``eval_episodes`` greedy returns reaches it."""
    eval_episodes: int = Field(default=20, ge=1)
    """Greedy episodes per evaluation round (the evaluator runs one env per episode)."""
    env_wrappers: tuple[str, ...] = ()
    """Gymnasium wrappers around every env, in order (``coach_stream.envs.wrappers``):
    ``atari`` (AtariPreprocessing, 84x84 grey, frame skip 4, 4 frames stacked),
    ``image`` (MiniGrid's ImgObsWrapper: the uint8 agent view alone), ``delay:<d>``
    (``delay:2ms``: every step sleeps that long first, a latency-bound env), ``limit:<n>``
    (``limit:200``: gymnasium's TimeLimit, episodes truncated after n steps)."""
    env_step_budget: int = Field(ge=1)
    """The run ends (unsolved) after the trainer has consumed this many env steps."""
    seed: int = Field(default=1, ge=0)
    """The run seed; every worker, env and the trainer derive distinct seeds from it."""
    experience_retention: str = "forever"
    """How long the experience topic keeps its data (``launch --experience-retention``):
    ``forever``, a time (``7d``), a size per partition (``50GiB``) or both (``30d,100GiB``).
    Applied when the topic is created; see docs/replay.md for what happens when it runs out."""
    metrics_port: int | None = Field(default=None, ge=0, le=65535)
    """A Prometheus ``/metrics`` endpoint on the trainer (this port) and on rollout worker i
    (this port + 1 + i); ``0``: any free port for each (``status`` shows them); unset: none.
    ``launch --metrics-port``; see docs/observability.md."""
    network: NetworkConfig = Field(default_factory=NetworkConfig)
    rollout: RolloutConfig = Field(default_factory=RolloutConfig)
    trainer: TrainerConfig = Field(default_factory=TrainerConfig)
    normalize: NormalizeConfig = Field(default_factory=NormalizeConfig)

    @model_validator(mode="before")
    @classmethod
    def _mode_from_builder(cls, data: Any) -> Any:
        """No ``mode``: the one the algorithm's builder runs in."""
        if isinstance(data, dict) and "mode" not in data:
            builder = _builder_type(data.get("algorithm"))
            if builder is not None:
                data = {**data, "mode": builder.mode}
        return data

    @model_validator(mode="before")
    @classmethod
    def _pixels_from_wrappers(cls, data: Any) -> Any:
        """``network.pixels`` unset: MiniGrid's ``image`` view holds indices, not pixels."""
        if not isinstance(data, dict) or "image" not in (data.get("env_wrappers") or ()):
            return data
        network = data.get("network")
        if network is None or (isinstance(network, dict) and "pixels" not in network):
            data = {**data, "network": {**(network or {}), "pixels": False}}
        return data

    @field_validator("env_wrappers")
    @classmethod
    def _wrappers_known(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if not value:
            return value  # no gymnasium import for the presets without wrappers
        from coach_stream.envs.wrappers import check_wrappers

        try:
            check_wrappers(value)
        except ConfigError as error:
            raise ValueError(str(error).removesuffix(".")) from None
        return value

    @field_validator("experience_retention")
    @classmethod
    def _retention_parses(cls, value: str) -> str:
        from coach_stream.transport.retention import parse_retention  # no Kafka import up front

        try:
            parse_retention(value)
        except ConfigError as error:
            raise ValueError(str(error).removesuffix(".")) from None
        return value

    @model_validator(mode="after")
    def _fits_the_builder(self) -> Preset:
        builder = _builder_type(self.algorithm)
        if builder is None:
            return self  # only a builder's own subclass validates (``preset_from_mapping``)
        if getattr(self, self.algorithm, None) is None:
            raise ValueError(f"algorithm {self.algorithm!r} needs a '{self.algorithm}:' section")
        if self.mode is not builder.mode:
            raise ValueError(
                f"{self.algorithm.upper()} runs only in mode {builder.mode.value!r}: "
                f"{builder.mode_reason}"
            )
        if self.normalize.enabled and builder.normalize_refusal is not None:
            raise ValueError(
                f"normalize is for the on-policy learners, not {self.algorithm}: "
                f"{builder.normalize_refusal}; remove the normalize section (rl-zoo runs DQN "
                "and SAC without it)"
            )
        if self.trainer.count > 1 and not builder.data_parallel:
            raise ValueError(
                f"trainer.count {self.trainer.count}: {self.algorithm}'s learner does not "
                "all-reduce across trainer ranks; set trainer.count to 1"
            )
        return self

    def check_normalizable(self, obs_shape: tuple[int, ...], obs_dtype: str) -> None:
        """Refuse normalisation where the builder does, and of image observations."""
        builder = _builder_type(self.algorithm)
        refusal = None if builder is None else builder.normalize_refusal
        if self.normalize.enabled and refusal is not None:
            raise ConfigError(
                f"Preset {self.name!r} normalises experience, but {self.algorithm} cannot: "
                f"{refusal}; remove the normalize section."
            )
        if self.normalize.observations and len(obs_shape) == 3 and obs_dtype == "uint8":
            raise ConfigError(
                f"Preset {self.name!r} normalises observations, but {self.env_id} gives "
                f"images {tuple(obs_shape)}; the network scales pixels itself: set "
                "normalize.observations to false."
            )

    def section_of(self, kind: type[SectionT]) -> SectionT:
        """The algorithm's section as the settings model ``kind`` its builder expects."""
        section = self.section
        if not isinstance(section, kind):
            raise ConfigError(
                f"Preset {self.name!r} has no {kind.__name__} section for {self.algorithm}."
            )
        return section

    @property
    def section(self) -> FrozenModel:
        """The algorithm's own section (``ppo:`` for ``algorithm: ppo``)."""
        value = getattr(self, self.algorithm, None)
        if not isinstance(value, FrozenModel):
            raise ConfigError(f"Preset {self.name!r} has no '{self.algorithm}:' section; add one.")
        return value

    @property
    def discount(self) -> float:
        """The algorithm's gamma: what reward normalisation discounts returns with by default."""
        section: Any = self.section
        return float(section.gamma)

    @model_validator(mode="after")
    def _unread_limit_fits(self) -> Preset:
        unread, chunk = self.rollout.async_max_unread_steps, self.rollout.chunk_steps
        if unread is None:
            return self
        if self.mode is not Mode.ASYNC:
            raise ValueError(
                "rollout.async_max_unread_steps limits ASYNC workers only (SYNC workers wait "
                "for each version anyway); remove it or use mode 'async'"
            )
        if unread < chunk:
            raise ValueError(
                f"rollout.async_max_unread_steps ({unread}) is below rollout.chunk_steps "
                f"({chunk}): the backlog is counted in whole records; set it to at least {chunk}"
            )
        return self


def _builder_type(algorithm: object) -> type[Builder] | None:
    """The builder class registered for ``algorithm`` (None: no such algorithm)."""
    from coach_stream.algorithms import BUILDERS  # the registry imports this module

    return BUILDERS.get(algorithm) if isinstance(algorithm, str) else None


def builtin_presets() -> list[str]:
    """Names accepted by ``load_preset`` besides paths."""
    folder = resources.files("coach_stream") / "presets"
    names = (p.name for p in folder.iterdir())
    return sorted(n.removesuffix(".yaml") for n in names if n.endswith(".yaml"))


def _read_preset_file(path: Path) -> str:
    """The text of a preset file, or a ``ConfigError`` naming what the path is instead."""
    if path.is_dir():
        raise ConfigError(
            f"Preset {str(path)!r} is a directory; give a YAML file or a preset name."
        )
    if not path.is_file():
        raise ConfigError(f"Preset file {str(path)!r} does not exist; check the path.")
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ConfigError(
            f"Preset file {str(path)!r} is not UTF-8 text (a binary file?); give a YAML file."
        ) from None
    except OSError as error:
        raise ConfigError(
            f"Preset file {str(path)!r} cannot be read ({error.strerror}); fix its permissions."
        ) from None


def _read_yaml(name_or_path: str) -> tuple[dict[str, Any], str]:
    path = Path(name_or_path)
    if name_or_path.endswith((".yaml", ".yml")) or path.exists():
        text, where = _read_preset_file(path), str(path)
    else:
        resource = resources.files("coach_stream") / "presets" / f"{name_or_path}.yaml"
        if not resource.is_file():
            known = ", ".join(builtin_presets())
            raise ConfigError(
                f"Unknown preset {name_or_path!r}; use one of {known} or a path to a YAML file."
            )
        text, where = resource.read_text(encoding="utf-8"), name_or_path
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise ConfigError(f"Preset {where!r} is not valid YAML ({error}); fix the file.") from error
    if not isinstance(data, dict):
        raise ConfigError(f"Preset {where!r} must be a YAML mapping; fix the file.")
    data.setdefault("name", path.stem if path.suffix else name_or_path)
    return data, where


def apply_override(data: dict[str, Any], override: str) -> None:
    """Set ``a.b=value`` in a nested mapping; the value is parsed as YAML (``3``, ``true``)."""
    key, sep, raw = override.partition("=")
    if not sep or not key.strip():
        raise ConfigError(f"Override {override!r} is not of the form key=value; fix the flag.")
    parts = key.strip().split(".")
    node = data
    for part in parts[:-1]:
        child = node.get(part)
        if child is None:
            child = node[part] = {}
        if not isinstance(child, dict):
            raise ConfigError(f"Override {override!r}: {part!r} is not a section; fix the key.")
        node = child
    try:
        node[parts[-1]] = yaml.safe_load(raw)
    except yaml.YAMLError as error:
        raise ConfigError(f"Override {override!r} has an unparsable value; quote it.") from error


def _describe(error: ValidationError, where: str, algorithm: object) -> ConfigError:
    first = error.errors()[0]
    loc = first["loc"]
    if loc and loc[0] == algorithm:
        loc = loc[1:]  # the union's tag: the algorithm's preset class
    if first["type"] in ("union_tag_invalid", "union_tag_not_found"):
        loc = ("algorithm",)
    key = ".".join(str(part) for part in loc) or "<root>"
    if first["type"] == "extra_forbidden":
        return ConfigError(f"Unknown key {key!r} in preset {where!r}; remove or correct it.")
    return ConfigError(f"Invalid value for {key!r} in preset {where!r}: {first['msg']}; fix it.")


def preset_from_mapping(data: Mapping[str, Any], where: str = "<mapping>") -> Preset:
    """Validate a preset already parsed from YAML (or built in a test) as the preset class
    of its algorithm (``coach_stream.algorithms.presets``: the discriminated union)."""
    from coach_stream.algorithms import BUILDERS, presets

    algorithm = data.get("algorithm")
    # ``ppo: null`` after switching a preset to another algorithm: no section, not a key
    mapping = {k: v for k, v in data.items() if not (v is None and k in BUILDERS)}
    try:
        return presets().validate_python(mapping)
    except ValidationError as error:
        raise _describe(error, where, algorithm) from None


def load_preset(name_or_path: str, overrides: Sequence[str] = ()) -> Preset:
    """A built-in preset by name (``cartpole-ppo``) or a YAML path, with ``a.b=v`` overrides."""
    data, where = _read_yaml(name_or_path)
    for override in overrides:
        apply_override(data, override)
    return preset_from_mapping(data, where)
