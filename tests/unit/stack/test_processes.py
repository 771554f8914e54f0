from __future__ import annotations

import socket
from pathlib import Path

import pytest

from coach_stream.errors import ServiceUnavailableError
from coach_stream import processes
from coach_stream.stack import default_cache_dir


def test_a_reused_pid_is_not_ours() -> None:
    import os

    me = processes.ProcessRecord(pid=os.getpid(), start_time=-1)
    assert not me.is_alive()


def test_a_taken_port_is_one_clear_error() -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        assert not processes.port_is_free(port)
        with pytest.raises(ServiceUnavailableError, match=f"127.0.0.1:{port}.*already taken"):
            processes.require_free_port(port, "the Kafka broker")


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
