"""Draws taken in blocks are the draws one call per act would have made, in order."""

from __future__ import annotations

import numpy as np
import pytest

from coach_stream.policies.draws import Draws


@pytest.mark.parametrize(("kind", "width"), [("uniform", 0), ("normal", 6), ("normal", 1)])
def test_blocks_hand_out_the_one_call_per_act_sequence(kind: str, width: int) -> None:
    draws = Draws(np.random.default_rng(7), kind, width)  # type: ignore[arg-type]
    one_by_one = np.random.default_rng(7)
    sizes = [1, 8, 3, 5000, 2, 700, 1, 4096]  # across block boundaries, and one over a block
    for n in sizes:
        shape = (n, width) if width else (n,)
        if kind == "normal":
            expected = one_by_one.standard_normal(shape, dtype=np.float32)
        else:
            expected = one_by_one.random(shape, dtype=np.float32)
        got = draws.take(n)
        assert got.shape == shape
        assert got.dtype == np.float32 and got.flags.c_contiguous and got.flags.writeable
        np.testing.assert_array_equal(got, expected)


def test_rows_handed_out_stay_valid_after_later_takes() -> None:
    draws = Draws(np.random.default_rng(0), "normal", 2)
    first = draws.take(3)
    kept = first.copy()
    for _ in range(5000):
        draws.take(4)
    np.testing.assert_array_equal(first, kept)
