"""Every task's process set-up: one torch thread and one BLAS thread (cli/train.setup_process)."""

from __future__ import annotations

import subprocess
import sys

SCRIPT = """
import numpy, torch
from threadpoolctl import threadpool_info
from coach_stream.cli.train import setup_process
before = max(i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas")
setup_process()
after = [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"]
print(before, max(after), torch.get_num_threads())
"""


def test_a_task_computes_on_one_torch_thread_and_one_blas_thread() -> None:
    # a fresh interpreter with two cores' worth of BLAS threads, as a task starts
    env = {"OPENBLAS_NUM_THREADS": "2", "PATH": "/usr/bin:/bin"}
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env, check=True
    ).stdout.split()
    assert out == ["2", "1", "1"], out
