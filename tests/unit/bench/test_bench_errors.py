"""A bench given a bad preset, override or address ends in one line and exit status 2."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from coach_stream.errors import ConfigError

BENCH = Path(__file__).resolve().parents[3] / "bench"


def load_jsonl() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_jsonl", BENCH / "jsonl.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_users_error_is_one_line_and_exit_status_2(capsys: pytest.CaptureFixture[str]) -> None:
    def main() -> int:
        raise ConfigError("Unknown preset 'nope'; use one of cartpole-ppo.")

    assert load_jsonl().run(main) == 2
    assert capsys.readouterr().err == "error: Unknown preset 'nope'; use one of cartpole-ppo.\n"


def test_a_bug_is_not_hidden() -> None:
    def main() -> int:
        raise ZeroDivisionError

    with pytest.raises(ZeroDivisionError):
        load_jsonl().run(main)


def test_rollout_bench_with_an_unknown_preset() -> None:
    done = subprocess.run(
        [sys.executable, "rollout.py", "--quick", "--preset", "nope"],
        cwd=BENCH,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    assert done.stderr.startswith("error: Unknown preset 'nope'")
    assert len(done.stderr.splitlines()) == 1 and done.stdout == ""
