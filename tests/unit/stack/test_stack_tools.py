"""What the stack needs from the machine: a cache dir, and tools named when missing."""

from __future__ import annotations

from pathlib import Path

import pytest

from coach_stream.errors import ServiceUnavailableError
from coach_stream.stack import default_cache_dir


def test_cache_dir_precedence(tmp_path: Path) -> None:
    assert default_cache_dir({"COACH_STREAM_CACHE": str(tmp_path)}) == tmp_path
    assert default_cache_dir({"XDG_CACHE_HOME": "/x"}) == Path("/x/coach-stream")


def test_missing_tools_are_named(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from coach_stream.stack import gcs, kafka

    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ServiceUnavailableError, match="Java was not found"):
        kafka.find_java()
    with pytest.raises(ServiceUnavailableError, match="Maven"):
        kafka.provision(tmp_path / "libs", tmp_path / "log")
    with pytest.raises(ServiceUnavailableError, match="Go was not found"):
        gcs.provision(tmp_path / "bin", tmp_path / "log")
