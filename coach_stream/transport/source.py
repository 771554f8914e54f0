"""The source run of a shadow learner (``coach-stream attach``), as its Kafka topics show it.

A shadow reads another run's experience topic in its own consumer group. It ends when that
run has ended (a ``RunFinished`` on the source's control topic) and it has read every record
the source's workers wrote: a stored topic is learned from once, to its end, and a live one
for as long as its rollout fleet produces. Records a source worker flushes after the shadow
has found the end are not read; the source's own trainer stopped before them too.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from coach_stream.core import ClosingContext, RunFinished
from coach_stream.transport.control import KafkaControlSubscriber
from coach_stream.transport.reader import KafkaExperienceReader
from coach_stream.transport.settings import KafkaSettings, RunTopics

CHECK_EVERY_S = 1.0
"""How often the source's control topic (and, once it finished, the log's end) is asked."""


class KafkaSourceRun(ClosingContext):
    """``SourceRun`` over the source's control topic and the shadow's own experience reader."""

    def __init__(
        self,
        settings: KafkaSettings,
        source_run_id: str,
        reader: KafkaExperienceReader,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.source_run_id = source_run_id
        self._control = KafkaControlSubscriber(settings, RunTopics.for_run(source_run_id))
        self._reader = reader
        self._clock = clock
        self._next_check = 0.0
        self.finished: RunFinished | None = None

    def exhausted(self) -> bool:
        now = self._clock()
        if now < self._next_check:
            return False
        self._next_check = now + CHECK_EVERY_S
        if self.finished is None:
            for message in self._control.poll(0.0):
                if isinstance(message, RunFinished) and message.run_id == self.source_run_id:
                    self.finished = message
        return self.finished is not None and self._reader.at_end()

    def close(self) -> None:
        self._control.close()
