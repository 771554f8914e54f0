"""``replay train --run-id R`` makes R a new run: R must be free, and a failure removes R.

The offline trainer writes policies under ``runs/R/`` and a ``RunFinished`` onto R's
control topic, so an R that already exists (a live or finished run, or the source itself)
would be corrupted. R is taken as ``launch`` takes one (``launcher.claim_run_id``): an
exclusive create of R's control topic, then a check that the store holds nothing of R.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from coach_stream.checkpoints import open_store
from coach_stream.checkpoints.keys import policies_prefix, trainer_prefix
from coach_stream.errors import ConfigError
from coach_stream.runids import check_run_id
from coach_stream.transport.admin import claim_topic, delete_run_topics, plan_run_topics
from coach_stream.transport.settings import KafkaSettings, RunTopics


@contextlib.contextmanager
def claimed_run(
    settings: KafkaSettings, run_id: str, checkpoints: str, gcs_emulator: str | None
) -> Iterator[None]:
    """R is this command's for the block; when the block fails, R's topics and stored
    objects are deleted again (only what this command created)."""
    check_run_id(run_id)
    topics = RunTopics.for_run(run_id)
    control = next(p for p in plan_run_topics(settings, topics, 1) if p.name == topics.control)
    if not claim_topic(settings, control):
        raise ConfigError(
            f"Run id {run_id!r} already exists in Kafka at {settings.bootstrap_servers} (topic "
            f"{topics.control}); give the trained policies a new --run-id."
        )
    owns_store = False
    try:
        with open_store(checkpoints, gcs_emulator_host=gcs_emulator) as store:
            found = [*store.list(policies_prefix(run_id)), *store.list(trainer_prefix(run_id))]
        if found:
            raise ConfigError(
                f"Run id {run_id!r} is already used in the checkpoint store {checkpoints} "
                f"({len(found)} objects, e.g. {found[0]}); give the trained policies a new "
                "--run-id."
            )
        owns_store = True
        yield
    except BaseException:
        _discard(settings, topics, run_id, checkpoints if owns_store else None, gcs_emulator)
        raise


def _discard(
    settings: KafkaSettings,
    topics: RunTopics,
    run_id: str,
    checkpoints: str | None,
    gcs_emulator: str | None,
) -> None:
    """Best effort: the command's own error is the news."""
    with contextlib.suppress(Exception):
        delete_run_topics(settings, topics)
    if checkpoints is None:
        return
    with (
        contextlib.suppress(Exception),
        open_store(checkpoints, gcs_emulator_host=gcs_emulator) as store,
    ):
        for key in [*store.list(policies_prefix(run_id)), *store.list(trainer_prefix(run_id))]:
            store.delete(key)
