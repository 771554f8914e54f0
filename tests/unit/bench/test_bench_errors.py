"""A bench given a bad preset, override or address ends in one line and exit status 2."""

from __future__ import annotations

import importlib.util
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


def test_rollout_bench_with_an_unknown_preset(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The script's own ``main`` under ``jsonl.run``, as its ``__main__`` block runs it (in
    this process: a new interpreter spent 4-6 s importing torch to print one line)."""
    monkeypatch.syspath_prepend(str(BENCH))  # the script imports its siblings by name
    monkeypatch.setattr(sys, "argv", ["rollout.py", "--quick", "--preset", "nope"])
    spec = importlib.util.spec_from_file_location("bench_rollout", BENCH / "rollout.py")
    assert spec is not None and spec.loader is not None
    rollout = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(rollout)
    assert "jsonl.run(main)" in (BENCH / "rollout.py").read_text()  # what __main__ does
    assert load_jsonl().run(rollout.main) == 2
    out, err = capsys.readouterr()
    assert err.startswith("error: Unknown preset 'nope'")
    assert len(err.splitlines()) == 1 and out == ""
