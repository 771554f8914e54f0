"""Hostile inputs against the real services (issue 27): each is refused in one line, with
the right exit code, and leaves nothing behind: no topic, no object, no run directory."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from cli_helpers import Result, Services, Workspace, refused

pytestmark = pytest.mark.integration


@pytest.fixture
def existing_run(services: Services, run_id: str) -> Iterator[str]:
    """A run id whose topics exist (empty), as a run's; deleted after the test."""
    from coach_stream.transport.admin import delete_run_topics, ensure_run_topics
    from coach_stream.transport.settings import KafkaSettings, RunTopics

    settings = KafkaSettings(bootstrap_servers=services.kafka)
    ensure_run_topics(settings, RunTopics.for_run(run_id), 1)
    yield run_id
    delete_run_topics(settings, RunTopics.for_run(run_id))


def _train(ws: Workspace, services: Services, source: str, run_id: str, *extra: str) -> Result:
    return ws.run(
        "replay", "train", source, "--run-id", run_id, "--env", "CartPole-v1",
        "--kafka", services.kafka, "--checkpoints", str(ws.cwd / "ckpt"), "--no-progress",
        *extra,
    )  # fmt: skip


def test_replay_train_onto_an_existing_run_id_is_refused(
    ws: Workspace, services: Services, existing_run: str, run_topics: Callable[[str], list[str]]
) -> None:
    before = run_topics(existing_run)
    result = _train(ws, services, existing_run, existing_run)
    refused(result, says=f"Run id {existing_run!r} already exists in Kafka")
    assert run_topics(existing_run) == before  # the run's topics are untouched
    assert not (ws.cwd / "ckpt").exists()


def test_a_failed_replay_train_leaves_no_topics(
    ws: Workspace,
    services: Services,
    existing_run: str,
    run_id: str,
    run_topics: Callable[[str], list[str]],
) -> None:
    new_id = f"{run_id}-offline"
    result = _train(ws, services, existing_run, new_id)  # the source holds no records
    refused(result, says="is empty")
    assert run_topics(new_id) == []
    assert list(ws.cwd.glob("ckpt/**/*.pt")) == []
