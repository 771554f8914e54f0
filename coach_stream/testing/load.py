"""Load for checks that must hold on a busy machine: busy loops spinning on the cores.

A loaded 2-core CI machine runs other work beside the suite; the checks that a test or a
preset does not pass by luck (``scripts/repeat_under_load.py``, ``bench/launches.py``) run
under these.
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
from collections.abc import Iterator


@contextlib.contextmanager
def busy_loops(count: int) -> Iterator[None]:
    """``count`` processes spinning (``yes``) for as long as the block runs.

    A SIGTERM to this process (``kill``, a runner's timeout) ends it through the block's
    exit, so the loops stop with it instead of spinning on.
    """
    loops = [
        subprocess.Popen(["yes"], stdout=subprocess.DEVNULL, start_new_session=True)
        for _ in range(count)
    ]
    previous = signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        yield
    finally:
        for loop in loops:
            loop.kill()
            loop.wait()
        signal.signal(signal.SIGTERM, previous)
