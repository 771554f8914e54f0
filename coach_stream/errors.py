"""One exception root. Every error a user can hit says the cause and the fix in one sentence.

The CLI turns any ``CoachStreamError`` into that sentence and a non-zero exit code, never a
bare traceback.
"""

from __future__ import annotations


class CoachStreamError(Exception):
    """Root of every error coach_stream raises on purpose."""


class ConfigError(CoachStreamError):
    """A preset, flag or environment value is invalid."""


class ServiceUnavailableError(CoachStreamError):
    """Kafka, GCS or Nomad could not be reached, or a local service failed to start."""


class DecodeError(CoachStreamError):
    """A record on the wire is not a valid message of a known schema."""


class InvalidChunkError(DecodeError):
    """A chunk decodes but does not fit its run (run id, shapes, dtypes, action range)."""


class DeliveryError(CoachStreamError):
    """The broker did not acknowledge a produced record."""


class CheckpointError(CoachStreamError):
    """A checkpoint could not be written, read or verified."""


class AlreadyExistsError(CheckpointError):
    """A create-only write found the key already present."""


class IntegrityError(CheckpointError):
    """A checkpoint's bytes do not match the announced sha256 or cannot be loaded."""


class OrchestratorError(CoachStreamError):
    """The orchestrator refused or lost a run."""


class RunExistsError(OrchestratorError):
    """A new run's directory exists already: the run id is another run's."""


class EncodeError(CoachStreamError):
    """A value cannot be written on the wire (wrong type, dtype or shape)."""


class CheckpointNotFoundError(CheckpointError):
    """A checkpoint that should exist is missing (deleted by retention, or never written)."""


class StoreUnavailableError(CheckpointError, ServiceUnavailableError):
    """The checkpoint store kept failing with transient errors until the retries ran out."""


class RunEndedError(CoachStreamError):
    """The run finished while a worker was still waiting for a newer policy version."""


class ResumeError(CoachStreamError):
    """A run cannot be resumed as it was (e.g. versions were announced but no state is stored)."""


class AuthenticationError(ConfigError):
    """A service refused this process's credentials or certificate: no retry can fix that."""


class RankLostError(ServiceUnavailableError):
    """A data-parallel trainer rank stopped answering (died, or its host went away): every
    rank exits and the group restarts from the newest trainer state."""
