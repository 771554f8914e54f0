"""Session fixtures for the real services: one Kafka and one GCS emulator per test session.

Which Kafka a session uses is explicit (docs/testing.md):

- ``COACH_STREAM_KAFKA=testcontainers``: a throwaway broker container (testcontainers, host
  networking, a free port on 127.0.0.1), from ``COACH_STREAM_KAFKA_IMAGE`` (default the
  official ``apache/kafka`` image; CI sets the offline-built ``coach-stream/kafka:4.4.0``),
  removed at the end of the session even when it fails;
- ``COACH_STREAM_KAFKA=stack``: the local stack's broker (``coach-stream stack``), started if
  needed and stopped at the end if this session started it;
- neither, with ``KAFKA_BOOTSTRAP_SERVERS`` set: that broker;
- nothing set: testcontainers when a Docker engine answers and has (or can pull) the image,
  else the local stack.

``gcs_endpoint``: ``STORAGE_EMULATOR_HOST`` when set, else the stack's fake-gcs-server.
With ``COACH_STREAM_REQUIRE_SERVICES=1`` (set by ``.ci/run``) a chosen service that cannot
start fails the run instead of being skipped or replaced; otherwise its tests are skipped
with the reason.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from google.auth.credentials import AnonymousCredentials
from google.cloud import storage

from coach_stream.errors import CoachStreamError
from coach_stream.orchestrators import LocalOrchestrator
from coach_stream.stack import LocalStack, default_cache_dir
from coach_stream.testing import kafka_container

KAFKA_CHOICES = ("testcontainers", "stack")


def kafka_choice() -> str:
    """testcontainers, stack, explicit (KAFKA_BOOTSTRAP_SERVERS) or auto."""
    choice = os.environ.get("COACH_STREAM_KAFKA", "").strip().lower()
    if choice:
        return choice
    return "explicit" if os.environ.get("KAFKA_BOOTSTRAP_SERVERS") else "auto"


def pytest_configure(config: pytest.Config) -> None:
    choice = os.environ.get("COACH_STREAM_KAFKA", "").strip().lower()
    if choice and choice not in KAFKA_CHOICES:
        raise pytest.UsageError(
            f"COACH_STREAM_KAFKA={choice!r} is not one of {', '.join(KAFKA_CHOICES)}; "
            "set one of those or unset it"
        )


def pytest_report_header(config: pytest.Config) -> str:
    choice = kafka_choice()
    if choice in ("testcontainers", "auto"):
        return f"kafka: {choice} (image {kafka_container.env_image()})"
    return f"kafka: {choice}"


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


def _testcontainers_ready() -> str | None:
    """None when a Docker engine answers and has, or can pull, the image; else why not."""
    why = kafka_container.docker_answers()
    if why is None:
        why = kafka_container.ensure_image(kafka_container.env_image())
    return why


@dataclass(frozen=True)
class KafkaService:
    """The session's Kafka: where it is, and how this session restarts it (when it can)."""

    bootstrap: str
    restart: Callable[[], None] | None
    cannot_restart: str = ""


def _testcontainers_kafka() -> Iterator[KafkaService]:
    """One broker container for the session; removed at the end, even when the session fails."""
    if why := _testcontainers_ready():
        _unavailable("Kafka (COACH_STREAM_KAFKA=testcontainers)", why)
    if note := kafka_container.configure_reaper():
        print(f"\n{note}")
    kafka_container.remove_orphans()
    cluster = kafka_container.KafkaCluster(kafka_container.env_image())
    try:
        cluster.start()
    except kafka_container.KafkaContainerError as error:
        _unavailable("Kafka (COACH_STREAM_KAFKA=testcontainers)", error)
    try:
        yield KafkaService(cluster.bootstrap_servers, lambda: cluster.restart(0))
    finally:
        cluster.stop()


def _stack_kafka(stack: LocalStack) -> Iterator[KafkaService]:
    try:
        stack.up(kafka_enabled=True, gcs_enabled=False)
    except CoachStreamError as error:
        _unavailable("Kafka (the local stack)", error)
    bootstrap = stack.kafka_bootstrap()
    assert bootstrap is not None

    def restart() -> None:
        stack.stop_kafka()
        assert not any(s.healthy for s in stack.status() if s.name.startswith("kafka"))
        stack.up(kafka_enabled=True, gcs_enabled=False)

    yield KafkaService(bootstrap, restart)


@pytest.fixture(scope="session")
def kafka_service(request: pytest.FixtureRequest) -> Iterator[KafkaService]:
    choice = kafka_choice()
    if choice == "testcontainers" or (choice == "auto" and _testcontainers_ready() is None):
        yield from _testcontainers_kafka()
    elif choice == "explicit":
        explicit = os.environ["KAFKA_BOOTSTRAP_SERVERS"]
        stack: LocalStack = request.getfixturevalue("local_stack")
        if stack.kafka_bootstrap() == explicit:  # the stack's broker, exported by `stack env`
            yield from _stack_kafka(stack)
        else:
            yield KafkaService(
                explicit, None, "the broker at KAFKA_BOOTSTRAP_SERVERS is not this session's"
            )
    else:
        yield from _stack_kafka(request.getfixturevalue("local_stack"))


@pytest.fixture(scope="session")
def kafka_bootstrap(kafka_service: KafkaService) -> str:
    return kafka_service.bootstrap


@pytest.fixture
def restart_kafka(kafka_service: KafkaService) -> Callable[[], None]:
    """Stop the session's broker and start it again on the same address, data kept."""
    if kafka_service.restart is None:
        pytest.skip(kafka_service.cannot_restart)
    return kafka_service.restart


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


@pytest.fixture
def orchestrator(tmp_path: Path) -> Iterator[LocalOrchestrator]:
    """A local orchestrator supervising as ``coach-stream launch`` does; every run it still
    has at the end is stopped, so no test leaves a process behind, even when it fails."""
    from e2e_runs import SUPERVISION

    orchestrator = LocalOrchestrator(tmp_path / "state", config=SUPERVISION)
    yield orchestrator
    for run_id in orchestrator.runs():
        orchestrator.stop(run_id)
