"""The one rule for run ids: they name Kafka topics, checkpoint keys and state directories.

A run id appears in ``<prefix>.<run_id>.experience`` (Kafka: letters, digits, ``.``,
``_`` and ``-``, at most 249 characters, and ``.`` and ``_`` collide in its metric
names), in ``runs/<run_id>/…`` object keys and in ``<state-dir>/runs/<run_id>/``. One
rule that fits all three lives here, so no layer accepts an id another refuses.
"""

from __future__ import annotations

import re

from coach_stream.errors import CoachStreamError, ConfigError

MAX_RUN_ID = 100
_RUN_ID = re.compile(rf"[A-Za-z0-9][A-Za-z0-9_-]{{0,{MAX_RUN_ID - 1}}}")


def check_run_id(run_id: str, error: type[CoachStreamError] = ConfigError) -> str:
    """``run_id`` when it is valid, else ``error`` (a ``ConfigError`` by default) saying why."""
    if not isinstance(run_id, str) or not _RUN_ID.fullmatch(run_id):
        raise error(
            f"Run id {run_id!r} is not valid; use 1 to {MAX_RUN_ID} letters, digits, '_' or "
            "'-', starting with a letter or digit."
        )
    return run_id
