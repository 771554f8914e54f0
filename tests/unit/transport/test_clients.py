"""librdkafka's log through Python logging, rate-limited; a full local queue has a deadline.

No broker: 127.0.0.1:1 refuses every connection, which is exactly the case to test.
"""

from __future__ import annotations

import logging
import subprocess
import sys
import textwrap
import time

import pytest

from coach_stream.errors import DeliveryError
from coach_stream.transport import KafkaRecordProducer, KafkaSettings
from coach_stream.transport.clients import RateLimitedLog


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_the_same_line_is_logged_once_per_interval_with_a_count_of_the_rest(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = _Clock()
    limited = RateLimitedLog(logging.getLogger("test.kafka"), interval_s=30.0, clock=clock)
    caplog.set_level(logging.INFO, "test.kafka")
    refused = "[thrd:main]: 127.0.0.1:1/bootstrap: Connect failed (after {}ms in state CONNECT)"
    for attempt in range(200):  # librdkafka's reconnect loop: the digits change every time
        clock.now = attempt * 0.05
        limited.log(
            logging.ERROR,
            "%s [%s] %s",
            "FAIL",
            f"rdkafka#producer-{attempt}",
            refused.format(attempt),
        )
    limited.log(logging.WARNING, "%s [%s] %s", "REQTMOUT", "rdkafka#consumer-1", "timed out")
    assert [r.getMessage() for r in caplog.records] == [
        "kafka: FAIL 127.0.0.1:1/bootstrap: Connect failed (after 0ms in state CONNECT)",
        "kafka: REQTMOUT timed out",
    ]
    assert limited.suppressed == 199
    clock.now = 40.0  # an interval later the line comes back, saying how many were held
    limited.log(logging.ERROR, "%s [%s] %s", "FAIL", "rdkafka#producer-9", refused.format(3))
    assert caplog.records[-1].getMessage().endswith("(+199 similar in the last 40 s)")
    assert caplog.records[-1].levelno == logging.ERROR


def test_a_queue_that_stays_full_ends_in_a_delivery_error() -> None:
    settings = KafkaSettings(bootstrap_servers="127.0.0.1:1")
    producer = KafkaRecordProducer(settings, "t", {"queue.buffering.max.messages": 1})
    producer.full_queue_s = 0.5
    started = time.monotonic()
    with pytest.raises(DeliveryError, match=r"stayed full for 0\.5 s"):
        for _ in range(3):
            producer.produce(b"k", b"v")
    assert time.monotonic() - started < 5


_UNREACHABLE = textwrap.dedent(
    """
    import logging, sys
    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(name)s %(message)s")
    from coach_stream.errors import CoachStreamError
    from coach_stream.transport import (
        KafkaExperienceReader, KafkaRecordProducer, KafkaSettings, RunTopics, check_broker,
        ensure_run_topics,
    )
    settings = KafkaSettings(bootstrap_servers="127.0.0.1:1")
    for attempt in (
        lambda: check_broker(settings, timeout=1),
        lambda: KafkaExperienceReader(settings, RunTopics.for_run("r"), "g", timeout=1).open(),
        lambda: KafkaRecordProducer(settings, "t").connect(1),
        lambda: ensure_run_topics(settings, RunTopics.for_run("r"), 1),  # asks metadata first
    ):
        try:
            attempt()
        except CoachStreamError as error:
            print(f"error: {error}", file=sys.stderr)
    """
)


def test_an_unreachable_broker_makes_a_handful_of_lines_not_hundreds() -> None:
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", _UNREACHABLE], capture_output=True, text=True, timeout=120
    )
    # 1 + 1 + 1 + 5 s (ensure_run_topics' own default) of waiting for an answer;
    # create_topics alone used to wait 30 s, and destroying its client 30 s more
    assert time.monotonic() - started < 55
    lines = done.stderr.splitlines()
    errors = [line for line in lines if line.startswith("error: ")]
    assert len(errors) == 4, done.stderr
    assert all("127.0.0.1:1 did not answer" in line for line in errors), errors
    # four clients retrying for 8 s in all: librdkafka alone prints a "%3|...|FAIL|" line per try
    assert not any(line.startswith("%") for line in lines), done.stderr
    noise = [line for line in lines if line not in errors]
    assert len(noise) <= 4, done.stderr
