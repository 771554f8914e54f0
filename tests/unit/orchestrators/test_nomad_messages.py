"""Nomad's error bodies become one line: the multierror header says nothing by itself."""

from __future__ import annotations

import pytest

from coach_stream.orchestrators.nomad import _first_line


@pytest.mark.parametrize(
    ("body", "line"),
    [
        ("1 error occurred:\n\t* Task group rollout: count -1\n\n", "Task group rollout: count -1"),
        (
            "2 errors occurred:\n\t* Missing job datacenters\n\t* Task trainer: no driver\n\n",
            "Missing job datacenters; Task trainer: no driver",
        ),
        ("Permission denied", "Permission denied"),
        ("", "no message"),
    ],
)
def test_first_line_drops_the_multierror_header_singular_or_plural(body: str, line: str) -> None:
    assert _first_line(body) == line
