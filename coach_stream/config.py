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
from typing import Any, Literal

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


class _Frozen(BaseModel):
    # allow_inf_nan: a learning rate of .inf or .nan is accepted by YAML and would only
    # show up as every chunk dead-lettered; no field of a preset means it.
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)


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


class PPOConfig(_Frozen):
    """Proximal Policy Optimization (CleanRL names; rl-zoo values for the presets)."""

    num_steps: int = Field(default=32, ge=1)
    """Steps per environment a worker acts with each policy version (its share)."""
    steps_per_update: int | None = Field(default=None, ge=1)
    """SYNC quota of steps of version v; default workers * num_envs * num_steps."""
    learning_rate: float = Field(default=1e-3, gt=0)
    """Adam's learning rate (its start value when ``anneal_lr``)."""
    anneal_lr: bool = True
    """Decay the learning rate linearly over ``anneal_steps`` env steps, down to a floor of
    5 % of ``learning_rate`` (so a run that goes past ``anneal_steps`` still learns)."""
    anneal_steps: int | None = Field(default=None, ge=1)
    """Default: the preset's env_step_budget."""
    gamma: float = Field(default=0.98, gt=0, le=1)
    """Discount factor of the returns."""
    gae_lambda: float = Field(default=0.8, ge=0, le=1)
    """GAE's lambda: the bias/variance trade-off of the advantage estimates."""
    minibatch_size: int = Field(default=256, ge=1)
    """Steps per gradient step; the quota is split into ceil(quota / minibatch_size)."""
    update_epochs: int = Field(default=20, ge=1)
    """Passes over each quota of steps (K epochs of minibatch updates)."""
    norm_adv: bool = True
    """Normalize the advantages within each minibatch."""
    clip_coef: float = Field(default=0.2, gt=0)
    """The surrogate objective's clipping range (epsilon); also the value clip."""
    clip_vloss: bool = False
    """Clip the value loss around the values the batch was acted with."""
    ent_coef: float = Field(default=0.0, ge=0)
    """Weight of the entropy bonus in the loss."""
    vf_coef: float = Field(default=0.5, ge=0)
    """Weight of the value loss in the loss."""
    max_grad_norm: float = Field(default=0.5, gt=0)
    """Gradients are clipped to this global norm."""
    target_kl: float | None = None
    """Stop the update's epochs early once the approximate KL exceeds it (null: never)."""


class DQNConfig(_Frozen):
    """Deep Q-learning with double-Q targets, a replay buffer and a samples-per-insert limit."""

    learning_rate: float = Field(default=2.3e-3, gt=0)
    """Adam's learning rate."""
    buffer_size: int = Field(default=100_000, ge=1)
    """Transitions the replay buffer holds (the oldest are replaced)."""
    batch_size: int = Field(default=64, ge=1)
    """Transitions per gradient step."""
    gamma: float = Field(default=0.99, gt=0, le=1)
    """Discount factor of the targets."""
    learning_starts: int = Field(default=1_000, ge=0)
    """Env steps in the buffer before the first gradient step."""
    samples_per_insert: float = Field(default=32.0, gt=0)
    """Sampled transitions per inserted transition (Reverb's limiter; rl-zoo: 128*64/256)."""
    spi_tolerance: float = Field(default=2_048.0, ge=0)
    """Slack, in samples, before the limiter makes the trainer stop sampling or reading."""
    target_update_every: int = Field(default=128, ge=1)
    """Gradient steps between target-network syncs."""
    tau: float = Field(default=1.0, gt=0, le=1)
    """Polyak factor of each target-network sync (1.0: a copy)."""
    double_q: bool = True
    """Double-Q targets: the online network picks the next action, the target net values it."""
    publish_every: int = Field(default=128, ge=1)
    """Gradient steps between policy versions."""
    exploration_initial_eps: float = Field(default=1.0, ge=0, le=1)
    """Epsilon of the workers' epsilon-greedy policy at the start."""
    exploration_final_eps: float = Field(default=0.04, ge=0, le=1)
    """Epsilon once ``exploration_steps`` env steps have passed."""
    exploration_steps: int = Field(default=8_000, ge=1)
    """Env steps (as counted by the trainer) over which epsilon decays linearly."""
    max_grad_norm: float = Field(default=10.0, gt=0)
    """Gradients are clipped to this global norm."""


class SACConfig(_Frozen):
    """Soft Actor-Critic for continuous actions (Haarnoja et al. 2018; CleanRL/SB3 names)."""

    policy_lr: float = Field(default=1e-3, gt=0)
    """Adam's learning rate of the policy."""
    q_lr: float = Field(default=1e-3, gt=0)
    """Adam's learning rate of the two Q-networks and of the temperature (``autotune``)."""
    buffer_size: int = Field(default=1_000_000, ge=1)
    """Transitions the replay buffer holds (the oldest are replaced)."""
    batch_size: int = Field(default=256, ge=1)
    """Transitions per gradient step."""
    gamma: float = Field(default=0.99, gt=0, le=1)
    """Discount factor of the targets."""
    tau: float = Field(default=0.005, gt=0, le=1)
    """Polyak factor of the target Q-networks, applied after every gradient step."""
    learning_starts: int = Field(default=1_000, ge=0)
    """Env steps in the buffer before the first gradient step; until the trainer has
    consumed this many, workers act uniformly at random in the bounds."""
    samples_per_insert: float = Field(default=256.0, gt=0)
    """Sampled transitions per inserted one (256: one gradient step per env step, SB3's)."""
    spi_tolerance: float = Field(default=8_192.0, ge=0)
    """Slack, in samples, before the limiter makes the trainer stop sampling or reading."""
    policy_frequency: int = Field(default=1, ge=1)
    """Gradient steps per policy (and temperature) step (CleanRL uses 2, SB3 1)."""
    alpha: float = Field(default=1.0, gt=0)
    """The entropy temperature (its initial value when ``autotune``)."""
    autotune: bool = True
    """Learn alpha toward ``target_entropy`` (default -|A|, the SAC paper's)."""
    target_entropy: float | None = None
    """The entropy ``autotune`` steers toward (null: -|A|, the action dimension)."""
    publish_every: int = Field(default=64, ge=1)
    """Gradient steps between policy versions."""


class IMPALAConfig(_Frozen):
    """IMPALA's learner with V-trace targets (Espeholt et al. 2018), ASYNC on-policy."""

    learning_rate: float = Field(default=1e-3, gt=0)
    """Adam's learning rate (its start value when ``anneal_lr``)."""
    anneal_lr: bool = False
    """Decay the learning rate linearly over ``anneal_steps`` env steps, down to a floor of
    5 % of ``learning_rate`` (as PPO's)."""
    anneal_steps: int | None = Field(default=None, ge=1)
    """Default: the preset's env_step_budget."""
    norm_adv: bool = False
    """Normalize the policy-gradient advantages within each batch (as PPO's ``norm_adv``)."""
    gamma: float = Field(default=0.99, gt=0, le=1)
    """Discount factor of the V-trace targets."""
    batch_steps: int = Field(default=512, ge=1)
    """Env steps per gradient step: the newest chunks, whatever version acted them."""
    rho_bar: float = Field(default=1.0, gt=0)
    """Truncation of the importance weights in the V-trace targets (rho-bar)."""
    c_bar: float = Field(default=1.0, gt=0)
    """Truncation of the trace-cutting weights (c-bar)."""
    pg_rho_bar: float = Field(default=1.0, gt=0)
    """Truncation of the importance weight in the policy-gradient term."""
    vf_coef: float = Field(default=0.5, ge=0)
    """Weight of the value loss in the loss."""
    ent_coef: float = Field(default=0.01, ge=0)
    """Weight of the entropy bonus in the loss."""
    max_grad_norm: float = Field(default=40.0, gt=0)
    """Gradients are clipped to this global norm."""
    max_lag: int = Field(default=50, ge=0)
    """Chunks acted more than this many versions behind are dropped as stale (counted)."""
    publish_every: int = Field(default=1, ge=1)
    """Gradient steps per published policy version (publishing costs a checkpoint write and
    an announcement; a trainer on a busy machine keeps up by publishing less often)."""


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


class Preset(_Frozen):
    """Everything a run needs except where its services are (those come from flags)."""

    name: str
    """The preset's name (a built-in preset's file name; a YAML file's stem by default)."""
    env_id: str
    """The gymnasium environment id every worker and the evaluator make."""
    algorithm: Literal["ppo", "dqn", "sac", "impala"]
    """The learner; it needs the section of the same name."""
    mode: Mode
    """``sync``: on-policy, each version's quota is gathered before an update (PPO); ``async``:
    nobody waits (DQN, SAC, IMPALA)."""
    target_return: float
    """The run ends when the mean of the last ``eval_episodes`` greedy returns reaches it."""
    eval_episodes: int = Field(default=20, ge=1)
    """Greedy episodes per evaluation round (the evaluator runs one env per episode)."""
    env_wrappers: tuple[str, ...] = ()
    """Gymnasium wrappers around every env, in order (``coach_stream.envs.wrappers``):
    ``atari`` (AtariPreprocessing, 84x84 grey, frame skip 4, 4 frames stacked),
    ``image`` (MiniGrid's ImgObsWrapper: the uint8 agent view alone), ``delay:<d>``
    (``delay:2ms``: every step sleeps that long first, a latency-bound env)."""
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
    ppo: PPOConfig | None = None
    dqn: DQNConfig | None = None
    sac: SACConfig | None = None
    impala: IMPALAConfig | None = None

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
        from coach_stream.replay.retention import parse_retention  # no Kafka import up front

        try:
            parse_retention(value)
        except ConfigError as error:
            raise ValueError(str(error).removesuffix(".")) from None
        return value

    @model_validator(mode="after")
    def _algorithm_matches(self) -> Preset:
        if self.algorithm == "ppo" and self.ppo is None:
            raise ValueError("algorithm 'ppo' needs a 'ppo:' section")
        if self.algorithm == "dqn" and self.dqn is None:
            raise ValueError("algorithm 'dqn' needs a 'dqn:' section")
        if self.algorithm == "ppo" and self.mode is not Mode.SYNC:
            raise ValueError("PPO is on-policy and runs only in mode 'sync'")
        for name in ("sac", "impala"):
            if self.algorithm == name and getattr(self, name) is None:
                raise ValueError(f"algorithm {name!r} needs a '{name}:' section")
            if self.algorithm == name and self.mode is not Mode.ASYNC:
                raise ValueError(
                    f"{name.upper()} learns from workers that never wait: mode 'async'"
                )
        return self

    @model_validator(mode="after")
    def _normalize_fits(self) -> Preset:
        if self.normalize.enabled and self.algorithm in ("dqn", "sac"):
            raise ValueError(
                f"normalize is for the on-policy learners (ppo, impala): {self.algorithm}'s "
                "replay buffer would mix experience normalised with different statistics; "
                "remove the normalize section (rl-zoo runs DQN and SAC without it)"
            )
        return self

    def check_normalizable(self, obs_shape: tuple[int, ...], obs_dtype: str) -> None:
        """Refuse observation normalisation of image observations (3-D uint8 frames)."""
        if self.normalize.observations and len(obs_shape) == 3 and obs_dtype == "uint8":
            raise ConfigError(
                f"Preset {self.name!r} normalises observations, but {self.env_id} gives "
                f"images {tuple(obs_shape)}; the network scales pixels itself: set "
                "normalize.observations to false."
            )

    @property
    def discount(self) -> float:
        """The algorithm's gamma: what reward normalisation discounts returns with by default."""
        section = getattr(self, self.algorithm)
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

    @property
    def ppo_config(self) -> PPOConfig:
        if self.ppo is None:
            raise ConfigError(f"Preset {self.name!r} has no 'ppo:' section; add one.")
        return self.ppo

    @property
    def sac_config(self) -> SACConfig:
        if self.sac is None:
            raise ConfigError(f"Preset {self.name!r} has no 'sac:' section; add one.")
        return self.sac

    @property
    def impala_config(self) -> IMPALAConfig:
        if self.impala is None:
            raise ConfigError(f"Preset {self.name!r} has no 'impala:' section; add one.")
        return self.impala

    @property
    def dqn_config(self) -> DQNConfig:
        if self.dqn is None:
            raise ConfigError(f"Preset {self.name!r} has no 'dqn:' section; add one.")
        return self.dqn


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


def _describe(error: ValidationError, where: str) -> ConfigError:
    first = error.errors()[0]
    key = ".".join(str(part) for part in first["loc"]) or "<root>"
    if first["type"] == "extra_forbidden":
        return ConfigError(f"Unknown key {key!r} in preset {where!r}; remove or correct it.")
    return ConfigError(f"Invalid value for {key!r} in preset {where!r}: {first['msg']}; fix it.")


def preset_from_mapping(data: Mapping[str, Any], where: str = "<mapping>") -> Preset:
    """Validate a preset already parsed from YAML (or built in a test)."""
    try:
        return Preset.model_validate(dict(data))
    except ValidationError as error:
        raise _describe(error, where) from None


def load_preset(name_or_path: str, overrides: Sequence[str] = ()) -> Preset:
    """A built-in preset by name (``cartpole-ppo``) or a YAML path, with ``a.b=v`` overrides."""
    data, where = _read_yaml(name_or_path)
    for override in overrides:
        apply_override(data, override)
    return preset_from_mapping(data, where)
