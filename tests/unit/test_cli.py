from __future__ import annotations

import pytest

from coach_stream import __version__
from coach_stream.cli.main import main


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"coach-stream {__version__}"


def test_help_lists_the_stack(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    assert "stack" in capsys.readouterr().out


def test_env_before_any_up_is_one_clear_error(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["stack", "env", "--cache-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "coach-stream stack up" in err
    assert "Traceback" not in err
