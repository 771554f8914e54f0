"""A run's announced policy versions, read back from its topics after (or during) training.

The control topic holds every ``PolicyVersion`` (URI, sha256, env steps), every greedy
``EvaluationReport`` and the ``RunFinished``; the telemetry topic holds the trainer's
``started`` event with the whole validated preset. Together they are all ``play``,
``export-policy`` and ``versions`` need: which versions exist, how each did, where its
bytes are, and how to rebuild the network that acts with them, wherever the run was
launched. Retention may have deleted a version's object since it was announced; ``stored``
says so, and loading such a version is refused with the versions still kept.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from coach_stream.checkpoints import open_store, policy_from_bytes
from coach_stream.checkpoints.keys import policies_prefix
from coach_stream.config import Preset, load_preset, preset_from_mapping
from coach_stream.core import (
    CheckpointStore,
    EvaluationReport,
    LoadedPolicy,
    PolicyVersion,
    RunFinished,
)
from coach_stream.errors import CheckpointNotFoundError, ConfigError, IntegrityError

_READ_S = 60.0  # a long run's control and telemetry topics hold many messages


@dataclass
class RunHistory:
    """What a run's topics say about its policies."""

    run_id: str
    versions: list[PolicyVersion] = field(default_factory=list)
    evaluations: dict[int, EvaluationReport] = field(default_factory=dict)  # newest per version
    finished: RunFinished | None = None
    preset_config: dict[str, Any] | None = None
    preset_name: str | None = None

    def version(self, wanted: int | None) -> PolicyVersion:
        """Version ``wanted`` (None: the newest); a ``ConfigError`` naming the choices."""
        if not self.versions:
            raise ConfigError(f"Run {self.run_id!r} has announced no policy version yet.")
        if wanted is None:
            return self.versions[-1]
        for version in self.versions:
            if version.version == wanted:
                return version
        first, last = self.versions[0].version, self.versions[-1].version
        raise ConfigError(
            f"Run {self.run_id!r} announced no version {wanted}; it has versions {first}..{last} "
            "(`coach-stream versions RUN` lists them)."
        )

    def preset(self, name: str | None = None, overrides: tuple[str, ...] = ()) -> Preset:
        """The run's preset: ``name`` (with ``overrides``) when given, else the trainer's own."""
        if name is not None:
            return load_preset(name, overrides)
        if self.preset_config is None:
            raise ConfigError(
                f"Run {self.run_id!r} did not publish its preset (its trainer predates that, or "
                "it was trained offline); pass --preset NAME (and the run's --set overrides)."
            )
        return preset_from_mapping(self.preset_config, f"run {self.run_id}'s trainer")


def read_history(settings: Any, run_id: str) -> RunHistory:
    """Read the run's control and telemetry topics to their ends (``settings``: Kafka)."""
    from coach_stream.transport.control import KafkaControlSubscriber
    from coach_stream.transport.settings import RunTopics
    from coach_stream.transport.telemetry import STARTED, TelemetryReader

    topics = RunTopics.for_run(run_id)
    history = RunHistory(run_id)
    with KafkaControlSubscriber(settings, topics) as control:
        for message in control.read_to_end(_READ_S):
            if isinstance(message, PolicyVersion):
                history.versions.append(message)
            elif isinstance(message, EvaluationReport):
                history.evaluations[message.policy_version] = message
            elif isinstance(message, RunFinished):
                history.finished = message
    history.versions.sort(key=lambda v: v.version)
    with TelemetryReader(settings, topics) as telemetry:
        for task, event in telemetry.read_to_end(_READ_S):
            if task == "trainer" and event.get("event") == STARTED:
                history.preset_name = event.get("preset") or history.preset_name
                raw = event.get("preset_config")
                if isinstance(raw, str):
                    history.preset_config = json.loads(raw)
    return history


def store_of(version: PolicyVersion, gcs_emulator: str | None) -> CheckpointStore:
    """The checkpoint store a version's URI lives in (``…/runs/<run>/policies/<v>.pt``)."""
    marker = "/" + policies_prefix(version.run_id)
    if marker not in version.uri:
        raise IntegrityError(
            f"version {version.version}'s URI {version.uri} is not under a run's policies; it "
            "was not announced by coach-stream."
        )
    base = version.uri[: version.uri.index(marker)]
    return open_store(base or "/", gcs_emulator_host=gcs_emulator)


def stored_versions(history: RunHistory, store: CheckpointStore) -> set[int]:
    """The announced versions whose objects the store still holds (retention deletes old ones)."""
    names = set(store.list(policies_prefix(history.run_id)))
    return {v.version for v in history.versions if _key(v) in names}


def _key(version: PolicyVersion) -> str:
    return version.uri[version.uri.index(policies_prefix(version.run_id)) :]


def load_version(
    history: RunHistory, version: PolicyVersion, store: CheckpointStore
) -> LoadedPolicy:
    """The version's bytes, verified against the announced sha256, as an actor loads them."""
    try:
        blob = store.get(version.uri, expected_sha256=version.sha256)
    except CheckpointNotFoundError:
        kept = sorted(stored_versions(history, store))
        raise ConfigError(
            f"Version {version.version} of run {history.run_id!r} is no longer stored (retention "
            f"keeps the newest trainer.keep_policies); stored versions: "
            f"{', '.join(map(str, kept)) or 'none'}; pass --version with one of them."
        ) from None
    return LoadedPolicy(version, policy_from_bytes(blob))
