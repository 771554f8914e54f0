"""The benches' one output format: a JSON line per figure, with the baseline measured in the
same run and their ratio (machines here are noisy; ratios travel, absolute times do not)."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any

from coach_stream.errors import CoachStreamError


def emit(
    bench: str,
    metric: str,
    value: float | None,
    unit: str,
    baseline: str | None,
    baseline_value: float | None,
    *,
    digits: int = 3,
    ratio_digits: int = 4,
    **extra: Any,
) -> None:
    """Print one figure; ``ratio`` is ``value / baseline_value`` (None without both)."""
    ratio = None if value is None or not baseline_value else value / baseline_value
    print(
        json.dumps(
            {
                "bench": bench,
                "metric": metric,
                "value": None if value is None else round(value, digits),
                "unit": unit,
                "baseline": baseline,
                "baseline_value": None if baseline_value is None else round(baseline_value, digits),
                "ratio": None if ratio is None else round(ratio, ratio_digits),
                **extra,
            }
        ),
        flush=True,
    )


def run(main: Callable[[], int]) -> int:
    """``main()``, with a user's error (an unknown preset, a bad override, a broker that is
    not there) as one line on stderr and exit status 2 instead of a traceback."""
    try:
        return main()
    except CoachStreamError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
