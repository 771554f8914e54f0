"""Normal draws taken in blocks are the draws one call per act would have made, in order."""

from __future__ import annotations

import numpy as np
import pytest

from coach_stream.policies.draws import NormalDraws


@pytest.mark.parametrize("width", [6, 1, 17])
def test_blocks_hand_out_the_one_call_per_act_sequence(width: int) -> None:
    draws = NormalDraws(np.random.default_rng(7), width)
    one_by_one = np.random.default_rng(7)
    sizes = [1, 8, 3, 5000, 2, 700, 1, 4096]  # across block boundaries, and one over a block
    for n in sizes:
        expected = one_by_one.standard_normal((n, width), dtype=np.float32)
        got = draws.take(n)
        assert got.shape == (n, width)
        assert got.dtype == np.float32 and got.flags.c_contiguous and got.flags.writeable
        np.testing.assert_array_equal(got, expected)


def test_rows_handed_out_stay_valid_after_later_takes() -> None:
    draws = NormalDraws(np.random.default_rng(0), 2)
    first = draws.take(3)
    kept = first.copy()
    for _ in range(5000):
        draws.take(4)
    np.testing.assert_array_equal(first, kept)
