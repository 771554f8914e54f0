"""An actor's normal draws, taken from its generator in blocks and handed out in order.

One ``Generator.standard_normal((1, 6), dtype=np.float32)`` cost 8 us of a HalfCheetah
worker's 55 us act, run cold between MuJoCo steps: nearly all of it the call, not the six
numbers. A block of a few thousand costs little more than one call, and numpy fills an
array in order from the bit stream, so the rows handed out are the very draws that one call
per act would have made: the same seed still gives the same actions, compiled or not.
(A categorical act's one uniform per env gained nothing measurable this way: it asks its
generator at every act.)
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

_BLOCK_VALUES = 4096  # ~16 KB of float32 per block


class NormalDraws:
    """Standard normal float32 draws from ``rng``, ``width`` to a row."""

    def __init__(self, rng: np.random.Generator, width: int) -> None:
        self._rng, self._width = rng, width
        self._block_rows = max(1, _BLOCK_VALUES // max(width, 1))
        self._buffer = self._draw(0)
        self._next = 0

    def take(self, n: int) -> npt.NDArray[np.float32]:
        """The next ``n`` rows of draws, (n, width): a C-contiguous view of the block (never
        written again, so it stays valid; writeable, as the compiled acts' one signature
        takes)."""
        start = self._next
        if start + n > len(self._buffer):  # the rest of this block, then a new one
            rest = self._buffer[start:]
            self._buffer = np.concatenate([rest, self._draw(max(self._block_rows, n))])
            start = 0
        self._next = start + n
        return self._buffer[start : start + n]

    def _draw(self, rows: int) -> npt.NDArray[np.float32]:
        return self._rng.standard_normal((rows, self._width), dtype=np.float32)
