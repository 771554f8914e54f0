"""Create a run's topics idempotently with explicit configs, and check the broker answers.

Topic settings are part of the design (per-env order needs keys and fixed partitions, the
control topic must keep every version forever, records may be megabytes), so they are set
here explicitly instead of inheriting whatever defaults a broker has.
"""

from __future__ import annotations

import socket
import ssl
import time
from collections.abc import Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass

from confluent_kafka import Consumer, KafkaError, KafkaException
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin._metadata import ClusterMetadata, TopicMetadata
from confluent_kafka.cimpl import NewTopic

from coach_stream.errors import ConfigError, ServiceUnavailableError
from coach_stream.transport import clients
from coach_stream.transport.settings import KafkaSettings, RunTopics, broker_address

FOREVER = "-1"
FIRST_CONTACT_S = 5.0
"""How long ``ensure_run_topics`` waits for a first answer before calling Kafka unreachable."""
_LEADER_POLL_S = 0.05
PROBE_S = 2.0
"""How long ``protocol_mismatch`` waits for the connection and for the TLS handshake."""


@dataclass(frozen=True)
class TopicPlan:
    """One topic to create: partitions and its explicit configs."""

    name: str
    partitions: int
    config: dict[str, str]


def unreachable(
    settings: KafkaSettings, timeout: float, cause: object
) -> ServiceUnavailableError | ConfigError:
    """The one sentence for a broker that did not answer; ``cause`` is librdkafka's reason.

    A broker whose listener speaks another protocol than the client's (TLS against a
    PLAINTEXT listener, or the reverse) never answers librdkafka either, but no retry can
    fix that: when a direct look at the first bootstrap address shows it, the sentence
    names the likely mismatch and is a ``ConfigError`` (exit 2, not 3).
    """
    if isinstance(cause, KafkaError):
        cause = cause.str()
    mismatch = protocol_mismatch(settings)
    if mismatch is not None:
        return ConfigError(mismatch)
    return ServiceUnavailableError(
        f"Kafka at {settings.bootstrap_servers} did not answer within {timeout:g}s ({cause}); "
        "start it with `coach-stream stack up` or set KAFKA_BOOTSTRAP_SERVERS to a running broker."
    )


@contextmanager
def closed_on_failure(
    consumer: Consumer, settings: KafkaSettings, timeout: float
) -> Iterator[Consumer]:
    """``consumer`` for a set-up block (metadata, offsets): closed if the block fails, and a
    ``KafkaException`` raised as ``unreachable``'s sentence."""
    try:
        yield consumer
    except KafkaException as exc:
        consumer.close()
        raise unreachable(settings, timeout, exc.args[0]) from exc
    except BaseException:
        consumer.close()
        raise


def protocol_mismatch(settings: KafkaSettings, timeout: float = PROBE_S) -> str | None:
    """Why the broker's listener likely expects another security protocol, or None.

    One TCP connection to the first bootstrap address and a TLS handshake on it (nothing
    verified, nothing sent after it): a PLAINTEXT Kafka listener reads the TLS hello as an
    oversized request and closes the connection at once; a TLS listener answers the hello.
    None when nothing listens (a broker that is down), or the answer says neither.
    """
    address = broker_address(settings.bootstrap_servers.split(",")[0])
    if address is None:
        return None
    host, port = address
    try:
        connection = socket.create_connection((host, port), timeout=timeout)
    except OSError:
        return None
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    try:
        with context.wrap_socket(connection, server_hostname=host):
            speaks_tls = True
    except (ssl.SSLEOFError, ssl.SSLZeroReturnError, ConnectionResetError, BrokenPipeError):
        speaks_tls = False  # closed on the hello: not a TLS listener
    except ssl.SSLError as error:
        speaks_tls = error.reason != "WRONG_VERSION_NUMBER"  # a TLS alert: it speaks TLS
    except OSError:
        return None  # a timeout: cannot tell
    finally:
        connection.close()
    protocol = settings.security.protocol
    variable = "COACH_STREAM_KAFKA_SECURITY_PROTOCOL"
    where = settings.bootstrap_servers
    if settings.security.tls and not speaks_tls:
        return (
            f"Kafka at {where} does not speak TLS, but {variable} is {protocol}: the listener "
            f"is likely PLAINTEXT or SASL_PLAINTEXT; set {variable} to the protocol it "
            "expects, or --kafka to the broker's TLS listener (see docs/security.md)."
        )
    if not settings.security.tls and speaks_tls:
        return (
            f"Kafka at {where} expects TLS, but {variable} is {protocol}: the listener is "
            f"likely SSL or SASL_SSL; set {variable} to the protocol it expects (with "
            "COACH_STREAM_KAFKA_SSL_CA_LOCATION), or --kafka to the broker's plaintext "
            "listener (see docs/security.md)."
        )
    return None


def _all_refused(bootstrap_servers: str) -> bool:
    """Whether every ``host:port`` of the bootstrap list refuses a TCP connection outright."""
    addresses = [broker_address(part) for part in bootstrap_servers.split(",") if part.strip()]
    if not addresses or None in addresses:
        return False
    for host, port in (address for address in addresses if address is not None):
        try:
            socket.create_connection((host, port), timeout=PROBE_S).close()
            return False
        except ConnectionRefusedError:
            continue
        except OSError:
            return False  # a timeout or a name that does not resolve yet: let the client wait
    return True


def refuse_at_once(settings: KafkaSettings, timeout: float) -> None:
    """Raise ``unreachable``'s sentence now when waiting ``timeout`` could not change it.

    For the commands a person types: every bootstrap address refusing the connection (no
    broker listens there), or a client configured for TLS meeting a listener that does
    not speak it, is the same answer after ten seconds of librdkafka's retries as before
    them. A plaintext client is not probed with a TLS hello here: a healthy PLAINTEXT
    broker logs one as an oversized request, so that mismatch is named only after a wait.
    """
    if _all_refused(settings.bootstrap_servers):
        raise unreachable(settings, timeout, "connection refused")
    if settings.security.tls and (mismatch := protocol_mismatch(settings)) is not None:
        raise ConfigError(mismatch)


def check_broker(
    settings: KafkaSettings, timeout: float = 10.0, *, wait_for_start: bool = False
) -> ClusterMetadata:
    """The cluster metadata, or ServiceUnavailableError if no broker answers within ``timeout``.

    A refused connection fails at once (``refuse_at_once``) unless ``wait_for_start``: a
    task started beside a broker that is itself restarting waits the whole ``timeout``.
    """
    if not wait_for_start:
        refuse_at_once(settings, timeout)
    with clients.admin(settings) as admin:
        try:
            return clients.metadata(admin, timeout)  # a refused login: AuthenticationError
        except KafkaException as exc:
            raise unreachable(settings, timeout, exc.args[0]) from exc


def broker_answers(bootstrap_servers: str, timeout: float) -> bool:
    """Whether a broker answers a metadata request within ``timeout`` (a quiet health probe).

    For ``coach_stream.stack``, which polls its own broker while it starts: refused
    connections are the expected answer there, so they are not logged.
    """
    settings = KafkaSettings(bootstrap_servers=bootstrap_servers)
    with clients.admin(settings, quiet=True) as admin:
        try:
            return bool(admin.list_topics(timeout=timeout).brokers)
        except KafkaException:
            return False


def delete_run_topics(settings: KafkaSettings, topics: RunTopics, timeout: float = 30.0) -> None:
    """Delete a run's three topics; absent ones are not an error (for cleanup and tests)."""
    names = [topics.experience, topics.control, topics.dead_letter, topics.telemetry]
    with clients.admin(settings) as admin:
        try:
            futures = admin.delete_topics(names, operation_timeout=timeout, request_timeout=timeout)
        except KafkaException as exc:
            raise unreachable(settings, timeout, exc.args[0]) from exc
        for future in futures.values():
            try:
                future.result(timeout=timeout)
            except KafkaException as exc:
                error: KafkaError = exc.args[0]
                if error.code() != KafkaError.UNKNOWN_TOPIC_OR_PART:
                    raise unreachable(settings, timeout, error) from exc
            except TimeoutError as exc:
                raise unreachable(settings, timeout, "delete_topics timed out") from exc


def claim_topic(settings: KafkaSettings, plan: TopicPlan, timeout: float = 30.0) -> bool:
    """Create one topic exclusively: True when this call created it, False when it existed.

    Kafka's controller decides concurrent creates of one name atomically, so of any number
    of callers exactly one gets True; ``launch`` uses the control topic as its run-id lock.
    """
    new = NewTopic(plan.name, plan.partitions, -1, config=plan.config)
    with clients.admin(settings) as admin:
        first = min(timeout, FIRST_CONTACT_S)
        try:
            clients.metadata(admin, first)
            futures = admin.create_topics([new], operation_timeout=timeout, request_timeout=timeout)
            future = futures[plan.name]
        except KafkaException as exc:
            raise unreachable(settings, first, exc.args[0]) from exc
        try:
            future.result(timeout=timeout)
        except KafkaException as exc:
            if exc.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS:
                return False
            _created_or_present(settings, plan.name, future, timeout)  # raises its error
        except TimeoutError as exc:
            raise unreachable(settings, timeout, "create_topics timed out") from exc
        _await_leaders(settings, admin, [plan.name], timeout)
    return True


def plan_run_topics(
    settings: KafkaSettings,
    topics: RunTopics,
    experience_partitions: int,
    experience_retention_ms: int = -1,
    experience_retention_bytes: int = -1,
) -> list[TopicPlan]:
    """The explicit partitions and configs of a run's three topics."""
    if experience_partitions < 1:
        raise ConfigError(
            f"experience_partitions is {experience_partitions}; use at least 1 "
            "(the default is one per rollout worker)."
        )
    record = str(settings.max_message_bytes + 4096)
    common = {
        "cleanup.policy": "delete",
        "max.message.bytes": record,
        "message.timestamp.type": "CreateTime",
    }
    return [
        TopicPlan(
            topics.experience,
            experience_partitions,
            {
                **common,
                "retention.ms": str(experience_retention_ms),
                "retention.bytes": str(experience_retention_bytes),
            },
        ),
        TopicPlan(
            topics.control, 1, {**common, "retention.ms": FOREVER, "retention.bytes": FOREVER}
        ),
        TopicPlan(
            topics.dead_letter, 1, {**common, "retention.ms": FOREVER, "retention.bytes": FOREVER}
        ),
        # One partition: a run's events stay in the order the tasks reported them.
        TopicPlan(
            topics.telemetry, 1, {**common, "retention.ms": FOREVER, "retention.bytes": FOREVER}
        ),
    ]


def ensure_run_topics(
    settings: KafkaSettings,
    topics: RunTopics,
    experience_partitions: int,
    *,
    experience_retention_ms: int = -1,
    experience_retention_bytes: int = -1,
    replication_factor: int = -1,
    timeout: float = 30.0,
) -> None:
    """Create the run's topics if absent (``replication_factor=-1``: the broker default).

    Existing topics are kept as they are, except that a control or dead-letter topic
    with more than one partition is refused: control messages must stay totally ordered.
    """
    plans = plan_run_topics(
        settings, topics, experience_partitions, experience_retention_ms, experience_retention_bytes
    )
    new = [NewTopic(p.name, p.partitions, replication_factor, config=p.config) for p in plans]
    with clients.admin(settings) as admin:
        # Ask for metadata first: a broker that is down fails this in FIRST_CONTACT_S with
        # librdkafka's reason, where a create request would wait out its whole timeout
        # (and destroying the client then waits for it again).
        first = min(timeout, FIRST_CONTACT_S)
        try:
            metadata = clients.metadata(admin, first)
        except KafkaException as exc:
            raise unreachable(settings, first, exc.args[0]) from exc
        # All there (a launched run's trainer finds them made by the launcher): nothing to
        # create, and no create round trip on the way to version 0.
        if not all(_has_leaders(metadata.topics.get(p.name)) for p in plans):
            try:
                futures = admin.create_topics(
                    new, operation_timeout=timeout, request_timeout=timeout
                )
            except KafkaException as exc:
                raise unreachable(settings, timeout, exc.args[0]) from exc
            for name, future in futures.items():
                _created_or_present(settings, name, future, timeout)
            metadata = _await_leaders(settings, admin, [p.name for p in plans], timeout)
    for single in (topics.control, topics.dead_letter, topics.telemetry):
        found = metadata.topics.get(single)
        if found is not None and len(found.partitions) != 1:
            raise ConfigError(
                f"Topic {single} exists with {len(found.partitions)} partitions; it must have "
                "exactly 1 (total order). Delete it or use a new run id."
            )


def _await_leaders(
    settings: KafkaSettings, admin: AdminClient, names: list[str], timeout: float
) -> ClusterMetadata:
    """Metadata once every partition of ``names`` has a leader.

    A create request returns when the controller has recorded the topic; the brokers
    learn of it (and elect leaders) a little later. Clients that ask in between get
    "unknown partition", so the run is not handed over until its topics can be used.
    """
    deadline = time.monotonic() + timeout
    while True:
        try:
            metadata = admin.list_topics(timeout=max(0.1, deadline - time.monotonic()))
        except KafkaException as exc:
            raise unreachable(settings, timeout, exc.args[0]) from exc
        if all(_has_leaders(metadata.topics.get(name)) for name in names):
            return metadata
        if time.monotonic() >= deadline:
            raise unreachable(settings, timeout, f"no leader for the partitions of {names}")
        time.sleep(_LEADER_POLL_S)  # polling the cluster's state, nothing to wait on


def _has_leaders(topic: TopicMetadata | None) -> bool:
    return (
        topic is not None
        and topic.error is None
        and bool(topic.partitions)
        and all(p.error is None and p.leader >= 0 for p in topic.partitions.values())
    )


def _created_or_present(
    settings: KafkaSettings, name: str, future: Future[None], timeout: float
) -> None:
    """Wait for one topic's creation; an existing topic is fine, anything else is raised."""
    try:
        future.result(timeout=timeout)
    except KafkaException as exc:
        error: KafkaError = exc.args[0]
        if error.code() == KafkaError.TOPIC_ALREADY_EXISTS:
            return
        if error.code() in (
            KafkaError._TRANSPORT,
            KafkaError._TIMED_OUT,
            KafkaError._ALL_BROKERS_DOWN,
        ):
            raise unreachable(settings, timeout, error) from exc
        raise ConfigError(
            f"Kafka refused to create topic {name} ({error.str()}); check the broker's "
            "limits (message.max.bytes, replication) or the KafkaSettings."
        ) from exc
    except TimeoutError as exc:
        raise unreachable(settings, timeout, "create_topics timed out") from exc
