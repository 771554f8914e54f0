"""The installed ``coach-stream`` console script, run as a user would: a subprocess.

``cli(...)`` runs it in a fresh working directory with a fresh ``--state-dir`` and returns
its exit code, output and wall time; ``refused(result)`` asserts what every bad input must
end in: exit code 2, one line on stderr naming the cause, no traceback, within 30 s.
``leftovers(run_id)`` lists what a run id left behind: its run directory, its Kafka topics,
its processes and its checkpoint objects.

Integration cases take the services from ``KAFKA_BOOTSTRAP_SERVERS`` /
``STORAGE_EMULATOR_HOST`` (``scripts/with-stack.sh`` exports them) or else from a healthy
local stack; without either they are skipped (failed under ``COACH_STREAM_REQUIRE_SERVICES=1``).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from cli_helpers import Services, Workspace, workspace


@pytest.fixture
def ws(tmp_path: Path) -> Workspace:
    return workspace(tmp_path)


@pytest.fixture
def run_id() -> str:
    return f"cli-{uuid.uuid4().hex[:10]}"


def _service_address(variable: str, from_stack: Callable[[], str | None]) -> str | None:
    return os.environ.get(variable) or from_stack()


@pytest.fixture(scope="session")
def services() -> Services:
    from coach_stream.stack import LocalStack, default_cache_dir

    stack = LocalStack(default_cache_dir())
    healthy = {s.name.split()[0] for s in stack.status() if s.healthy}
    kafka = _service_address(
        "KAFKA_BOOTSTRAP_SERVERS", lambda: stack.kafka_bootstrap() if "kafka" in healthy else None
    )
    gcs = _service_address(
        "STORAGE_EMULATOR_HOST",
        lambda: stack.gcs_endpoint() if "fake-gcs-server" in healthy else None,
    )
    if not kafka or not gcs:
        message = "Kafka and fake-gcs-server are needed (`coach-stream stack up`)"
        if os.environ.get("COACH_STREAM_REQUIRE_SERVICES") == "1":
            pytest.fail(message + " (COACH_STREAM_REQUIRE_SERVICES=1)", pytrace=False)
        pytest.skip(message)
    return Services(kafka, gcs)


@pytest.fixture
def run_topics(services: Services) -> Callable[[str], list[str]]:
    """The topics on the broker whose name contains a run id."""
    from confluent_kafka.admin import AdminClient

    def topics(run_id: str) -> list[str]:
        admin = AdminClient({"bootstrap.servers": services.kafka})
        return sorted(t for t in admin.list_topics(timeout=10).topics if f".{run_id}." in t)

    return topics


@pytest.fixture
def gcs_client(services: Services) -> Iterator[object]:
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    client = storage.Client(
        project="coach-stream-test",
        credentials=AnonymousCredentials(),  # type: ignore[no-untyped-call]
        client_options={"api_endpoint": services.gcs},
    )
    yield client
    client.close()


@pytest.fixture
def bucket(gcs_client: object) -> Iterator[str]:
    """A fresh, empty bucket, deleted with its objects afterwards."""
    from google.cloud import storage

    assert isinstance(gcs_client, storage.Client)
    name = f"cli-{uuid.uuid4().hex[:12]}"
    created = gcs_client.create_bucket(name)
    yield name
    for blob in gcs_client.list_blobs(name):
        blob.delete()
    created.delete()
