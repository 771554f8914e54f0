"""``rollout.niceness``: a rollout process gives up CPU priority to the trainer.

With Linux's autogroup scheduling every session is one scheduling group, and nice orders
only the processes inside a group; the local orchestrator starts each task in its own
session, so that session's group is lowered too. A process that shares its session
(``coach-stream rollout`` typed in a shell) leaves the group alone: lowering it would
slow the whole shell session down. Where a task is in no autogroup (the kernel shows an
empty ``/proc/self/autogroup``) there is no group to lower, and nice alone orders it.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path


def yield_cpu(niceness: int, autogroup: Path = Path("/proc/self/autogroup")) -> None:
    """Lower this process's CPU priority by ``niceness``, so that the trainer keeps its
    share of the cores when CPU-bound workers outnumber them."""
    if niceness <= 0:
        return
    os.nice(niceness)
    if os.getsid(0) == os.getpid():
        with contextlib.suppress(OSError):  # no autogroup scheduling on this kernel
            autogroup.write_text(str(niceness))
