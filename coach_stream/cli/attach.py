"""``coach-stream attach``: a shadow learner on another run's experience.

An extra off-policy learner (DQN, SAC, IMPALA) reads a run's experience topic, live or
stored, in a consumer group of its own, so the run it reads is not disturbed: the broker
serves the same records to each group. It is a run of its own (its run id, control,
telemetry and dead-letter topics, checkpoints and evaluator) with no rollout workers, on
this machine or as a Nomad job. Several shadows with different settings learn from one
rollout fleet at no extra environment cost: a hyperparameter comparison that costs no
simulation. A shadow ends at its target, its budget, or once the source run has ended and
its experience was read to the end.
"""

from __future__ import annotations

import dataclasses

import typer

from coach_stream.algorithms import BUILDERS
from coach_stream.cli import nomad as nomad_cli
from coach_stream.cli.launch import plan_launch, submit
from coach_stream.cli.option_groups import RunFlags, with_run_flags
from coach_stream.config import Preset
from coach_stream.errors import ConfigError, ServiceUnavailableError
from coach_stream.orchestrators.plan import LaunchPlan
from coach_stream.runids import check_run_id
from coach_stream.transport.settings import KafkaSettings, RunTopics

_READ_SOURCE_S = 10.0


@nomad_cli.with_nomad_flags
@with_run_flags("shadow")
def attach(
    source: str = typer.Argument(..., help="The run to learn from: live, or finished and stored."),
    preset: str = typer.Option(
        ..., "--preset", help="An off-policy preset (dqn, sac, impala) for the source's env."
    ),
    run_id: str | None = typer.Option(
        None, "--run-id", help="The shadow's own run id. Default: <preset>-<time>-<hex>."
    ),
    *,
    flags: RunFlags,
    nomad: nomad_cli.NomadFlags,
) -> None:
    """Learn from another run's experience with an extra off-policy learner of its own.

    The shadow reads SOURCE's experience topic in its own consumer group (SOURCE is not
    disturbed), and announces, checkpoints and is evaluated as a run of its own, with no
    rollout workers, on this machine or as a Nomad job (trainer and evaluator groups). It
    ends at its target return or env-step budget, or once SOURCE has ended and its
    experience was read to the end. Exit codes as for launch: 0 solved, 1 ended without its
    target, 2 bad input (nothing is created), 130 interrupted.
    """
    submit(flags, nomad, lambda: _plan(source, preset, run_id, flags))


def _plan(source: str, preset: str, run_id: str | None, flags: RunFlags) -> LaunchPlan:
    """The shadow's launch plan, checked against the source on the broker; its ``workers``
    are the source topic's partitions (what the learner sizes its share of the stream by)."""
    check_run_id(source)
    plan = plan_launch(preset, 1, run_id, flags, experience_from=source)
    _check_off_policy(plan.preset, source)
    if plan.settings.run_id == source:
        raise ConfigError(f"--run-id {source!r} is the source run's; give the shadow its own.")
    kafka_settings = plan.settings.kafka_settings()
    partitions = source_partitions(kafka_settings, source)
    check_source_fits(kafka_settings, source, plan.preset)
    return dataclasses.replace(
        plan, settings=dataclasses.replace(plan.settings, workers=partitions)
    )


def _check_off_policy(preset: Preset, source: str) -> None:
    builder = BUILDERS[preset.algorithm]
    if not builder.learns_from_any_policy:
        choices = ", ".join(name for name, b in BUILDERS.items() if b.learns_from_any_policy)
        raise ConfigError(
            f"Preset {preset.name!r} learns with {preset.algorithm}, which needs experience "
            f"acted by its own policy; to learn from the experience of run {source!r}, use an "
            f"off-policy preset ({choices})."
        )


def source_partitions(kafka: KafkaSettings, source: str) -> int:
    """The source run's experience partitions; a ``ConfigError`` when it has no such topic."""
    from coach_stream.transport.admin import check_broker

    topic = RunTopics.for_run(source).experience
    try:
        metadata = check_broker(kafka, _READ_SOURCE_S)
    except ServiceUnavailableError as error:
        raise ConfigError(str(error)) from None
    found = metadata.topics.get(topic)
    if found is None or found.error is not None or not found.partitions:
        raise ConfigError(
            f"No run {source!r} on the broker at {kafka.bootstrap_servers}: it has no "
            f"experience topic {topic}; check the run id (`coach-stream status {source}`)."
        )
    return len(found.partitions)


def check_source_fits(kafka: KafkaSettings, source: str, preset: Preset) -> None:
    """The source's chunks fit the shadow, as its trainer published its preset: the same env
    (and wrappers), and behaviour log-probs when the shadow weighs by them (IMPALA). Refused
    here rather than dead-lettered or dropped chunk by chunk. A source that did not publish
    its preset is not checked; the shadow's trainer still dead-letters chunks that do not
    fit its env."""
    from coach_stream.control.history import read_history

    published = read_history(kafka, source).preset_config
    if published is None:
        return
    env_id, wrappers = published.get("env_id"), list(published.get("env_wrappers") or ())
    ours = list(preset.env_wrappers)
    if env_id != preset.env_id or wrappers != ours:
        raise ConfigError(
            f"Run {source!r} acts on {env_id} (wrappers {wrappers}) and preset "
            f"{preset.name!r} on {preset.env_id} (wrappers {ours}); attach a preset for "
            f"{env_id}."
        )
    acting = BUILDERS.get(str(published.get("algorithm")))
    if BUILDERS[preset.algorithm].behaviour and acting is not None and not acting.behaviour:
        writers = ", ".join(name for name, b in BUILDERS.items() if b.behaviour)
        raise ConfigError(
            f"{preset.algorithm} weighs each step by the behaviour policy's log-probabilities, "
            f"and run {source!r}'s {published.get('algorithm')} workers write none; attach it "
            f"to a run of {writers}, or attach a replay learner to this one."
        )


def register(app: typer.Typer) -> None:
    app.command("attach")(attach)
