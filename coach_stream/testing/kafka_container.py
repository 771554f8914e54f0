"""Throwaway Kafka 4 brokers in Docker containers, for tests (testcontainers).

``KafkaCluster(image, size=1)`` starts ``size`` KRaft nodes, each broker and controller at
once, configured only through the environment variables of the official ``apache/kafka``
image (``KAFKA_NODE_ID``, ``KAFKA_PROCESS_ROLES``, ``KAFKA_LISTENERS``, ...), so it runs that
image or the offline-built ``coach-stream/kafka`` one alike (``scripts/build-kafka-image.sh``).

Host networking only: every container shares the host's network namespace and listens on
127.0.0.1 at free ports, so no bridge network, port mapping or private-range address is ever
involved (the project's engine runs with ``--bridge=none``). Ready means the cluster answered
an AdminClient metadata request listing every broker, never a log line or a sleep.

Clean-up does not depend on the Ryuk reaper: ``stop()`` removes every container it created,
an ``atexit`` hook does the same for a process that ends without calling it, and
``remove_orphans()`` removes containers left by an earlier process that was killed.
Needs the ``testcontainers`` package (a dev dependency); it is imported when a cluster starts.
"""

from __future__ import annotations

import atexit
import base64
import logging
import os
import socket
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING

from confluent_kafka import KafkaException

from coach_stream.transport import clients
from coach_stream.transport.settings import KafkaSettings

if TYPE_CHECKING:
    from testcontainers.core.container import DockerContainer

# What a user with Docker and a registry gets; CI sets COACH_STREAM_KAFKA_IMAGE to the local one.
DEFAULT_IMAGE = "apache/kafka:4.4.0"
LOCAL_IMAGE = "coach-stream/kafka:4.4.0"
# Labels on every container this module starts: what it is, and which process owns it.
LABEL = "io.coachstream.testcontainers"
OWNER_LABEL = "io.coachstream.owner"

log = logging.getLogger(__name__)


class KafkaContainerError(RuntimeError):
    """The containers could not be started or did not become ready (the message says why)."""


def free_ports(count: int) -> list[int]:
    """``count`` distinct TCP ports on 127.0.0.1 that nothing listens on now (kernel-picked).

    All are held open until every one is picked, so the kernel cannot hand one out twice.
    """
    held: list[socket.socket] = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            held.append(sock)
            sock.bind(("127.0.0.1", 0))
        return [int(sock.getsockname()[1]) for sock in held]
    finally:
        for sock in held:
            sock.close()


def cluster_id() -> str:
    """A KRaft cluster id: 16 random bytes, URL-safe base64 without padding."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


def _owner() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


@dataclass(frozen=True)
class NodePorts:
    broker: int
    controller: int


def node_environment(
    node_id: int,
    ports: list[NodePorts],
    cluster: str,
    *,
    min_insync_replicas: int = 1,
    heap: str = "-Xmx512m -Xms128m",
) -> dict[str, str]:
    """The official image's variables for node ``node_id`` (1-based) of a combined-mode cluster.

    Internal topics get as many replicas as there are nodes; ``KAFKA_FOO_BAR`` becomes
    ``foo.bar`` in server.properties in both images.
    """
    own = ports[node_id - 1]
    size = len(ports)
    voters = ",".join(f"{i}@127.0.0.1:{p.controller}" for i, p in enumerate(ports, start=1))
    return {
        "CLUSTER_ID": cluster,
        "KAFKA_NODE_ID": str(node_id),
        "KAFKA_PROCESS_ROLES": "broker,controller",
        "KAFKA_LISTENERS": (
            f"PLAINTEXT://127.0.0.1:{own.broker},CONTROLLER://127.0.0.1:{own.controller}"
        ),
        "KAFKA_ADVERTISED_LISTENERS": f"PLAINTEXT://127.0.0.1:{own.broker}",
        "KAFKA_CONTROLLER_LISTENER_NAMES": "CONTROLLER",
        "KAFKA_LISTENER_SECURITY_PROTOCOL_MAP": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        "KAFKA_INTER_BROKER_LISTENER_NAME": "PLAINTEXT",
        "KAFKA_CONTROLLER_QUORUM_VOTERS": voters,
        # Inside the container's own file system: removed with the container.
        "KAFKA_LOG_DIRS": "/tmp/kraft-combined-logs",
        "KAFKA_NUM_PARTITIONS": "1",
        "KAFKA_DEFAULT_REPLICATION_FACTOR": str(size),
        "KAFKA_MIN_INSYNC_REPLICAS": str(min_insync_replicas),
        "KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR": str(size),
        "KAFKA_OFFSETS_TOPIC_NUM_PARTITIONS": "4",
        "KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR": str(size),
        "KAFKA_TRANSACTION_STATE_LOG_MIN_ISR": str(min_insync_replicas),
        "KAFKA_TRANSACTION_STATE_LOG_NUM_PARTITIONS": "4",
        "KAFKA_SHARE_COORDINATOR_STATE_TOPIC_REPLICATION_FACTOR": str(size),
        "KAFKA_SHARE_COORDINATOR_STATE_TOPIC_MIN_ISR": str(min_insync_replicas),
        "KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS": "0",
        # The local stack's broker accepts 16 MiB records; tests expect the same limit.
        "KAFKA_MESSAGE_MAX_BYTES": "16777216",
        # Both images' start scripts read the heap from here (not a broker property).
        "KAFKA_HEAP_OPTS": heap,
    }


_live: dict[str, DockerContainer] = {}


def _remove_live() -> None:
    """At interpreter exit: remove what a session left running (no reaper needed)."""
    for container in list(_live.values()):
        _remove(container)


atexit.register(_remove_live)


def _remove(container: DockerContainer) -> None:
    wrapped = container._container
    if wrapped is None:
        return
    _live.pop(wrapped.id, None)
    try:
        container.stop(force=True, delete_volume=True)
    except Exception as error:  # already gone, or the engine went away: nothing else to do
        log.warning("could not remove Kafka container %s: %s", wrapped.short_id, error)


def _start(container: DockerContainer) -> None:
    container.start()
    wrapped = container._container
    assert wrapped is not None
    _live[wrapped.id] = container


def remove_orphans() -> list[str]:
    """Remove containers of this module whose owning process (on this host) is gone.

    Where the reaper is disabled, a session killed with SIGKILL leaves its containers
    running; the next session removes them here. Returns the removed containers' ids.
    """
    import docker

    client = docker.from_env()
    removed: list[str] = []
    try:
        for found in client.containers.list(all=True, filters={"label": LABEL}):
            owner = found.labels.get(OWNER_LABEL, "")
            host, _, pid = owner.rpartition(":")
            if host != socket.gethostname() or not pid.isdigit() or _alive(int(pid)):
                continue
            found.remove(force=True, v=True)
            removed.append(found.id)
    finally:
        client.close()
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class KafkaCluster:
    """``size`` Kafka containers forming one KRaft cluster on 127.0.0.1 (a context manager)."""

    def __init__(
        self,
        image: str = DEFAULT_IMAGE,
        size: int = 1,
        *,
        min_insync_replicas: int = 1,
        ready_timeout: float = 180.0,
    ) -> None:
        if size < 1:
            raise ValueError("a cluster has at least one node")
        self.image = image
        self.size = size
        self.min_insync_replicas = min_insync_replicas
        self.ready_timeout = ready_timeout
        self.cluster_id = cluster_id()
        self.ports: list[NodePorts] = []
        self.containers: list[DockerContainer] = []

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(f"127.0.0.1:{p.broker}" for p in self.ports)

    def broker_address(self, index: int) -> str:
        return f"127.0.0.1:{self.ports[index].broker}"

    def __enter__(self) -> KafkaCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> KafkaCluster:
        """Create and start every node, then wait until the cluster lists all of them."""
        from testcontainers.core.container import DockerContainer

        picked = free_ports(2 * self.size)
        self.ports = [NodePorts(picked[2 * i], picked[2 * i + 1]) for i in range(self.size)]
        self.containers = [
            DockerContainer(
                self.image,
                env=node_environment(
                    node_id,
                    self.ports,
                    self.cluster_id,
                    min_insync_replicas=self.min_insync_replicas,
                ),
            ).with_kwargs(network_mode="host", labels={LABEL: "kafka", OWNER_LABEL: _owner()})
            for node_id in range(1, self.size + 1)
        ]
        try:
            # In parallel: with the vfs storage driver creating a container copies the whole
            # image, and the nodes of a KRaft quorum wait for each other anyway.
            with ThreadPoolExecutor(max_workers=self.size) as pool:
                list(pool.map(_start, self.containers))  # re-raises a node's failure
            self.wait_ready(self.size, self.ready_timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def wait_ready(self, brokers: int, timeout: float) -> None:
        """Until an AdminClient metadata request lists ``brokers`` brokers; else say why not."""
        deadline = time.monotonic() + timeout
        seen = 0
        settings = KafkaSettings(bootstrap_servers=self.bootstrap_servers)
        with clients.admin(settings, quiet=True) as admin:
            while time.monotonic() < deadline:
                self._check_running()
                try:
                    seen = len(admin.list_topics(timeout=2.0).brokers)
                except KafkaException:
                    seen = 0  # not listening yet: the expected answer while starting
                if seen >= brokers:
                    return
                time.sleep(0.2)  # poll interval between metadata requests, not a readiness guess
        raise KafkaContainerError(
            f"Kafka in {self.image} listed {seen} of {brokers} brokers after {timeout:.0f} s; "
            f"last log lines:\n{self.logs_tail()}"
        )

    def _check_running(self) -> None:
        for container in self.containers:
            wrapped = container._container
            if wrapped is None:
                continue
            wrapped.reload()
            if wrapped.status == "exited" and wrapped.id in _live:
                raise KafkaContainerError(
                    f"Kafka container {wrapped.short_id} ({self.image}) exited during start-up:\n"
                    + self.logs_tail()
                )

    def logs_tail(self, lines: int = 15) -> str:
        out: list[str] = []
        for container in self.containers:
            wrapped = container._container
            if wrapped is None:
                continue
            try:
                text = wrapped.logs(tail=lines).decode(errors="replace")
            except Exception as error:
                text = f"(no logs: {error})"
            out.append(f"--- {wrapped.short_id}\n{text}")
        return "\n".join(out)

    def kill(self, index: int) -> None:
        """SIGKILL node ``index`` (0-based): a broker crash, not a clean shutdown."""
        wrapped = self.containers[index]._container
        assert wrapped is not None
        wrapped.kill(signal="SIGKILL")

    def restart(self, index: int) -> None:
        """Stop node ``index`` cleanly (SIGTERM) and start it again: same ports, data kept.

        The container's file system outlives a stop, and both images' entrypoints keep an
        already formatted log directory. Returns once the cluster lists every broker again.
        """
        wrapped = self.containers[index]._container
        assert wrapped is not None
        wrapped.stop(timeout=60)
        wrapped.reload()
        if wrapped.status == "running":
            raise KafkaContainerError(f"Kafka container {wrapped.short_id} did not stop")
        wrapped.start()
        self.wait_ready(self.size, self.ready_timeout)

    def stop(self) -> None:
        """Remove every container this cluster created, whatever state it is in."""
        for container in self.containers:
            _remove(container)
        self.containers = []

    def container_ids(self) -> list[str]:
        return [c._container.id for c in self.containers if c._container is not None]


def docker_answers(timeout: float = 3.0) -> str | None:
    """None when a Docker engine answers at DOCKER_HOST (or the default socket); else why not."""
    try:
        import docker

        client = docker.from_env(timeout=int(max(1, timeout)))
        try:
            client.ping()
        finally:
            client.close()
    except Exception as error:
        return f"no Docker engine answers ({error.__class__.__name__}: {error})"
    return None


def ensure_image(image: str) -> str | None:
    """None when ``image`` is on the engine or could be pulled now; else why not."""
    import docker

    client = docker.from_env()
    try:
        try:
            client.images.get(image)
            return None
        except docker.errors.ImageNotFound:
            pass
        try:
            client.images.pull(image)
            return None
        except Exception as error:
            hint = ""
            if "kafka" in image:
                hint = (
                    " (build it with scripts/build-kafka-image.sh)"
                    if image == LOCAL_IMAGE
                    else " (no registry reachable? set COACH_STREAM_KAFKA_IMAGE="
                    f"{LOCAL_IMAGE} after scripts/build-kafka-image.sh)"
                )
            return f"the image {image} is not on the engine and cannot be pulled: {error}{hint}"
    finally:
        client.close()


def configure_reaper() -> str | None:
    """Keep testcontainers' Ryuk reaper unless its image cannot be had; say so when disabled.

    An explicit TESTCONTAINERS_RYUK_DISABLED is left as it is. Without the reaper,
    ``KafkaCluster`` removes its own containers (stop, atexit, ``remove_orphans``).
    """
    from testcontainers.core.config import testcontainers_config

    if "TESTCONTAINERS_RYUK_DISABLED" in os.environ:
        return None
    if ensure_image(testcontainers_config.ryuk_image) is None:
        return None
    testcontainers_config.ryuk_disabled = True
    return (
        f"Ryuk reaper disabled: its image {testcontainers_config.ryuk_image} cannot be had; "
        "the Kafka fixture removes its containers itself"
    )


def env_image() -> str:
    """The image the tests run: COACH_STREAM_KAFKA_IMAGE, else the official one."""
    return os.environ.get("COACH_STREAM_KAFKA_IMAGE") or DEFAULT_IMAGE
