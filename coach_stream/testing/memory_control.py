"""An in-memory control topic: one ordered log, any number of publishers and subscribers.

Mirrors the Kafka control topic's semantics that the announcer and policy source rely
on: one ordered partition, every message kept, each subscriber reading from the start
at its own pace, and ``read_to_end`` returning everything published before the call.
"""

from __future__ import annotations

import threading
import time

from coach_stream.core import ClosingContext, ControlMessage
from coach_stream.errors import DeliveryError


class MemoryControlLog:
    """The topic: an append-only list guarded by a condition variable."""

    def __init__(self) -> None:
        self._messages: list[ControlMessage] = []
        self._changed = threading.Condition()
        self.unavailable = False  # fault injection: publishes fail like an unreachable broker

    @property
    def messages(self) -> list[ControlMessage]:
        with self._changed:
            return list(self._messages)

    def append(self, message: ControlMessage) -> None:
        if self.unavailable:
            raise DeliveryError("the in-memory control topic is unavailable.")
        with self._changed:
            self._messages.append(message)
            self._changed.notify_all()

    def read(self, start: int, timeout: float) -> list[ControlMessage]:
        """Messages from index ``start`` on, waiting up to ``timeout`` s if there are none."""
        deadline = time.monotonic() + max(timeout, 0.0)
        with self._changed:
            while len(self._messages) <= start:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return []
                self._changed.wait(remaining)
            return self._messages[start:]


class MemoryControlPublisher(ClosingContext):
    """``ControlPublisher`` on a ``MemoryControlLog``."""

    def __init__(self, log: MemoryControlLog) -> None:
        self._log = log

    def publish(self, message: ControlMessage) -> None:
        self._log.append(message)

    def close(self) -> None:
        pass


class MemoryControlSubscriber(ClosingContext):
    """``ControlSubscriber`` on a ``MemoryControlLog``, reading from the beginning."""

    def __init__(self, log: MemoryControlLog) -> None:
        self._log = log
        self._position = 0

    def poll(self, timeout: float) -> list[ControlMessage]:
        messages = self._log.read(self._position, timeout)
        self._position += len(messages)
        return messages

    def read_to_end(self, timeout: float) -> list[ControlMessage]:
        return self.poll(0.0)

    def close(self) -> None:
        pass
