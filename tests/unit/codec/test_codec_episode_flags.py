"""The one-episode-per-chunk check: flags may be set on the last step only, in either column."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from coach_stream.codec import decode_chunk, encode_chunk
from coach_stream.errors import EncodeError
from coach_stream.testing.chunks import make_chunk

EARLY_FLAGS = [
    ("terminated", [0, 1, 0, 0, 1]),  # an earlier flag besides the last one
    ("truncated", [0, 0, 1, 0, 0]),
    ("truncated", [1, 0, 0, 0, 1]),
]


@pytest.mark.parametrize(("column", "flags"), EARLY_FLAGS)
def test_a_flag_before_the_last_step_is_refused(column: str, flags: list[int]) -> None:
    chunk = make_chunk(5)
    if column == "terminated":
        chunk = replace(chunk, terminated=np.array(flags, bool))
    else:
        chunk = replace(chunk, truncated=np.array(flags, bool))
    with pytest.raises(EncodeError, match="before the last step"):
        encode_chunk(chunk)


def test_flags_on_the_last_step_only_round_trip() -> None:
    chunk = replace(make_chunk(5), truncated=np.array([0, 0, 0, 0, 1], bool))
    decoded = decode_chunk(encode_chunk(chunk))  # terminated and truncated both on the last
    assert decoded.terminated[-1] and decoded.truncated[-1]
    assert not decoded.terminated[:-1].any() and not decoded.truncated[:-1].any()
