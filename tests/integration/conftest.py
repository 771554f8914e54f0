"""Session fixtures for the real services: one broker and one GCS emulator per test session.

``kafka_bootstrap``: ``KAFKA_BOOTSTRAP_SERVERS`` when set; else a testcontainers
``KafkaContainer`` (KRaft) when a Docker engine answers and already has the image; else the
local stack's broker (``coach-stream stack``), started if needed and stopped at the end if
this session started it. ``gcs_endpoint``: ``STORAGE_EMULATOR_HOST`` when set, else the
stack's fake-gcs-server.

With ``COACH_STREAM_REQUIRE_SERVICES=1`` (set by ``.ci/run``) a service that cannot start
fails the run; otherwise its tests are skipped with the reason.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest
from google.auth.credentials import AnonymousCredentials
from google.cloud import storage

from coach_stream.errors import CoachStreamError
from coach_stream.stack import LocalStack, default_cache_dir

KAFKA_IMAGE = "confluentinc/cp-kafka:7.6.0"


def _unavailable(what: str, why: object) -> None:
    message = f"{what} is not available: {why}"
    if os.environ.get("COACH_STREAM_REQUIRE_SERVICES") == "1":
        pytest.fail(message + " (COACH_STREAM_REQUIRE_SERVICES=1)", pytrace=False)
    pytest.skip(message)


@pytest.fixture(scope="session")
def local_stack() -> Iterator[LocalStack]:
    """The stack under the user's cache dir; stops at the end only what this session started."""
    stack = LocalStack(default_cache_dir())
    already_running = {s.name for s in stack.status() if s.healthy}
    yield stack
    if not already_running:
        stack.down()


def _docker_kafka() -> Iterator[str] | None:
    """A testcontainers broker, only if a Docker engine answers and already has the image."""
    try:
        import docker

        client = docker.from_env(timeout=3)
        client.ping()
        client.images.get(KAFKA_IMAGE)
    except Exception:
        return None
    from testcontainers.kafka import KafkaContainer

    def run() -> Iterator[str]:
        with KafkaContainer(KAFKA_IMAGE).with_kraft() as container:
            yield container.get_bootstrap_server()

    return run()


@pytest.fixture(scope="session")
def kafka_bootstrap(request: pytest.FixtureRequest) -> Iterator[str]:
    if explicit := os.environ.get("KAFKA_BOOTSTRAP_SERVERS"):
        yield explicit
        return
    container = _docker_kafka()
    if container is not None:
        yield from container
        return
    stack: LocalStack = request.getfixturevalue("local_stack")
    try:
        stack.up(kafka_enabled=True, gcs_enabled=False)
    except CoachStreamError as error:
        _unavailable("Kafka", error)
    bootstrap = stack.kafka_bootstrap()
    assert bootstrap is not None
    yield bootstrap


@pytest.fixture(scope="session")
def gcs_endpoint(request: pytest.FixtureRequest) -> Iterator[str]:
    if explicit := os.environ.get("STORAGE_EMULATOR_HOST"):
        yield explicit
        return
    stack: LocalStack = request.getfixturevalue("local_stack")
    try:
        stack.up(kafka_enabled=False, gcs_enabled=True)
    except CoachStreamError as error:
        _unavailable("fake-gcs-server", error)
    endpoint = stack.gcs_endpoint()
    assert endpoint is not None
    yield endpoint


@pytest.fixture
def gcs_client(gcs_endpoint: str) -> Iterator[storage.Client]:
    """The real google-cloud-storage client, pointed at the emulator."""
    client = storage.Client(
        project="coach-stream-test",
        credentials=AnonymousCredentials(),  # type: ignore[no-untyped-call]
        client_options={"api_endpoint": gcs_endpoint},
    )
    yield client
    client.close()


@pytest.fixture
def gcs_bucket_prefix() -> str:
    """How ``gcs_bucket`` names start; a test module may override it."""
    return "test"


@pytest.fixture
def gcs_bucket(gcs_client: storage.Client, gcs_bucket_prefix: str) -> Iterator[str]:
    """A fresh bucket for one test, emptied and deleted afterwards."""
    name = f"{gcs_bucket_prefix}-{uuid.uuid4().hex[:12]}"
    created = gcs_client.create_bucket(name)
    yield name
    for blob in gcs_client.list_blobs(name):
        blob.delete()
    created.delete()


@pytest.fixture
def unique_name() -> str:
    """A short unique suffix for topics, buckets and run ids (the broker is shared)."""
    return uuid.uuid4().hex[:12]
