"""Every librdkafka client of coach_stream is built here, with its log and errors in Python.

Left alone, librdkafka writes its own log lines straight to stderr (one per reconnect
attempt: ~200 lines before a single clear error when the broker is down) and reports
errors nowhere. Each client built here gets a ``logger`` (librdkafka's log, served by
``poll``/``flush``/``consume``) and an ``error_cb``, both routed through one process-wide
rate limiter into the ``coach_stream.transport.librdkafka`` logger: the same message (digits
aside, so "after 0ms"/"after 1ms" count as one) at most once per ``INTERVAL_S``, with the
number of lines held back since. The clear error a user acts on is still raised by the
caller (``ServiceUnavailableError``, ``DeliveryError``); these lines only explain it.

Two answers are the same on every retry, so they are not logged but raised, by the error
callback, out of the ``poll``/``flush``/``consume`` that served it (confluent-kafka
re-raises a callback's exception there): a refused SASL login (``_AUTHENTICATION``) and a
TLS certificate that fails verification (``_SSL``). Both become one
``AuthenticationError`` sentence (exit code 2: a task is not restarted), where librdkafka
alone would retry forever and the caller would report a broker that "did not answer".
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin._metadata import ClusterMetadata

from coach_stream.errors import AuthenticationError, ConfigError
from coach_stream.transport.settings import ConfigValue, KafkaSettings

INTERVAL_S = 30.0
"""The same librdkafka line is logged at most once per this many seconds."""
_MAX_KEYS = 1024
_DIGITS = re.compile(r"\d+")
_THREAD = re.compile(r"^\[thrd:[^\]]*\]: ")
# librdkafka logs these itself (facility FAIL/ERROR, with the broker's address), so their
# error callback would only repeat the line: it goes to DEBUG.
_ALSO_LOGGED = {KafkaError._TRANSPORT, KafkaError._RESOLVE}
_SETTLE_BACKOFF_S = 0.1
_SETTLING = {  # a new topic's metadata or leader is not there yet: ask again shortly
    KafkaError.NOT_LEADER_FOR_PARTITION,
    KafkaError.LEADER_NOT_AVAILABLE,
    KafkaError.UNKNOWN_TOPIC_OR_PART,
    KafkaError._UNKNOWN_PARTITION,  # librdkafka's cache has not seen the partition yet
}

_AFTER = re.compile(r"\s*\(after \d+ms in state \w+\)\s*$")
FIRST_OFFSET = 0
"""Where a reader of a whole topic assigns its partition: offset 0, not OFFSET_BEGINNING.
librdkafka resolves a logical offset with a ListOffsets request that waits about 500 ms for
the new consumer's first metadata, so a worker assigned at OFFSET_BEGINNING saw version 0
half a second late; offset 0 is fetched at once. A head removed by retention is out of
range, which ``auto.offset.reset=earliest`` (``KafkaSettings.consumer_config``) resolves to
the beginning, as OFFSET_BEGINNING would."""
_METADATA_SLICE_S = 0.5
DOCS = "docs/security.md"

log = logging.getLogger("coach_stream.transport.librdkafka")


class RateLimitedLog:
    """A logger-like sink that lets each distinct message through once per ``interval_s``.

    librdkafka calls ``log(level, "%s [%s] %s", facility, client_name, text)`` (through
    confluent-kafka's ``logger`` setting); the client name and all digits are left out of
    the key, so N clients retrying the same dead broker still make one line.
    """

    def __init__(
        self,
        target: logging.Logger,
        interval_s: float = INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
        prefix: str = "kafka: ",
    ) -> None:
        self.target, self.interval_s, self.clock = target, interval_s, clock
        self.prefix = prefix
        self._lock = threading.Lock()
        self._seen: dict[tuple[int, str], tuple[float, int]] = {}  # key -> (last shown, held)
        self.suppressed = 0  # lines held back so far, for tests and stats

    def log(self, level: int, msg: str, *args: object) -> None:
        """The ``logging.Logger.log`` signature librdkafka's log callback uses."""
        if len(args) == 3 and msg == "%s [%s] %s":  # (facility, client name, text)
            facility, _client, text = args
            self.emit(level, f"{facility} {_THREAD.sub('', str(text))}")
        else:
            self.emit(level, msg % args if args else msg)

    def emit(self, level: int, text: str, key: str | None = None) -> None:
        """Log ``text`` unless the same ``key`` (default: ``text``, digits aside) was just shown."""
        if not self.target.isEnabledFor(level):
            return
        seen = (level, _DIGITS.sub("#", text if key is None else key))
        now = self.clock()
        with self._lock:
            last, held = self._seen.get(seen, (None, 0))
            if last is not None and now - last < self.interval_s:
                self._seen[seen] = (last, held + 1)
                self.suppressed += 1
                return
            if len(self._seen) >= _MAX_KEYS:
                self._forget(now)
            self._seen[seen] = (now, 0)
        if held:
            text += f" (+{held} similar in the last {now - last:.0f} s)"  # type: ignore[operator]
        self.target.log(level, "%s%s", self.prefix, text)

    def _forget(self, now: float) -> None:
        """Drop keys not shown for an interval; a flood of distinct ones clears everything."""
        stale = [k for k, (t, _) in self._seen.items() if now - t >= self.interval_s]
        for k in stale or list(self._seen):
            del self._seen[k]


LIBRDKAFKA_LOG = RateLimitedLog(log)


def refusal(error: KafkaError) -> AuthenticationError | None:
    """The one sentence for a refused login or certificate; None for any other error."""
    reason = _AFTER.sub("", error.str())
    if error.code() == KafkaError._AUTHENTICATION:
        return AuthenticationError(
            f"Kafka refused this client's login ({reason}); check "
            "COACH_STREAM_KAFKA_SASL_USERNAME, COACH_STREAM_KAFKA_SASL_PASSWORD and "
            f"COACH_STREAM_KAFKA_SASL_MECHANISM (see {DOCS})."
        )
    if error.code() == KafkaError._SSL and "certificate" in reason:
        return AuthenticationError(
            f"The TLS handshake with Kafka failed on a certificate ({reason}); set "
            "COACH_STREAM_KAFKA_SSL_CA_LOCATION to the CA that signed the broker's "
            f"certificate, or check the client certificate (see {DOCS})."
        )
    return None


def on_error(error: KafkaError) -> None:
    """``error_cb`` of every client: "all brokers down" and fatal errors reach logging;
    a refused login or certificate is raised (``refusal``)."""
    refused = refusal(error)
    if refused is not None:
        raise refused
    if error.fatal():
        level = logging.ERROR
    elif error.code() in _ALSO_LOGGED:
        level = logging.DEBUG
    else:
        level = logging.WARNING
    LIBRDKAFKA_LOG.emit(level, f"{error.name()}: {error.str()}", key=error.name())


def _callbacks(quiet: bool = False) -> dict[str, Any]:
    if quiet:  # health probes: failing to connect is the expected answer, not news
        return {"logger": LIBRDKAFKA_LOG, "error_cb": _ignore, "log_level": 0}
    return {"logger": LIBRDKAFKA_LOG, "error_cb": on_error}


def _ignore(_error: KafkaError) -> None:
    return None


def _refused_config(exc: KafkaException) -> ConfigError:
    """librdkafka refused the settings themselves (e.g. a TLS file that is not PEM)."""
    return ConfigError(
        f"The Kafka client settings were refused ({exc.args[0].str()}); fix the "
        f"COACH_STREAM_KAFKA_* variables (see {DOCS})."
    )


def producer(settings: KafkaSettings, **overrides: ConfigValue) -> Producer:
    """An idempotent ``acks=all`` producer (``KafkaSettings.producer_config``)."""
    try:
        return Producer({**settings.producer_config(), **overrides, **_callbacks()})
    except KafkaException as exc:
        raise _refused_config(exc) from None


def consumer(settings: KafkaSettings, group_id: str, **overrides: ConfigValue) -> Consumer:
    """A consumer that commits nothing by itself (``KafkaSettings.consumer_config``)."""
    try:
        return Consumer({**settings.consumer_config(group_id), **overrides, **_callbacks()})
    except KafkaException as exc:
        raise _refused_config(exc) from None


@contextmanager
def admin(settings: KafkaSettings, *, quiet: bool = False) -> Iterator[AdminClient]:
    """An ``AdminClient`` for one ``with`` block: destroyed on exit, its log served first."""
    try:
        client = AdminClient({**settings.admin_config(), **_callbacks(quiet)})
    except KafkaException as exc:
        raise _refused_config(exc) from None
    with client:
        try:
            yield client
        finally:
            # Admin requests run on librdkafka's own threads; its log lines wait on the
            # client's queue until polled, and are lost if it is destroyed first. A
            # refused login is raised here at the latest, as the cause of whatever failed.
            client.poll(0)


def metadata(
    client: AdminClient | Consumer, timeout: float, topic: str | None = None
) -> ClusterMetadata:
    """``list_topics`` asked in short slices, the error callback served between them.

    ``list_topics`` serves no callbacks: with wrong credentials it waits out its whole
    timeout and reports a transport failure, while the refused login waits in the queue.
    Asking in slices surfaces the ``AuthenticationError`` within about one slice. A
    consumer only before it is assigned partitions: its ``poll`` would consume a record.
    """
    deadline = time.monotonic() + timeout
    while True:
        asked = time.monotonic()
        left = max(0.01, min(_METADATA_SLICE_S, deadline - asked))
        try:
            return client.list_topics(topic, timeout=left)
        except KafkaException:
            client.poll(0)  # raises AuthenticationError for a refused login
            if time.monotonic() >= deadline:
                raise
            if time.monotonic() - asked < _METADATA_SLICE_S / 2:
                time.sleep(0.05)  # it failed at once: ask the broker again shortly


def watermarks(consumer: Consumer, partition: TopicPartition, timeout: float) -> tuple[int, int]:
    """(low, high) watermarks of ``partition``, asked of the broker (not cached).

    Right after a topic is created the broker may still be electing its leader: retriable
    errors are asked again until ``timeout``; the last ``KafkaException`` is raised.
    """
    deadline = time.monotonic() + timeout
    while True:
        try:
            low, high = consumer.get_watermark_offsets(partition, timeout=timeout, cached=False)
            return int(low), int(high)
        except KafkaException as exc:
            error: KafkaError = exc.args[0]
            settling = error.retriable() or error.code() in _SETTLING
            if not settling or time.monotonic() + _SETTLE_BACKOFF_S >= deadline:
                raise
            time.sleep(_SETTLE_BACKOFF_S)  # polling the broker's state, nothing to wait on
