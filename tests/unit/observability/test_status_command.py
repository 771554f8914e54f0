"""``coach-stream status RUN``: Kafka first, Ctrl-C exits 130, --watch needs the topic."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from coach_stream.cli import status as status_cli
from coach_stream.cli.main import main


def test_ctrl_c_while_watching_exits_130(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    watched: list[dict[str, Any]] = []

    def interrupted(settings: Any, run_id: str, **options: Any) -> None:
        watched.append({"run_id": run_id, "kafka": settings.bootstrap_servers, **options})
        raise KeyboardInterrupt

    monkeypatch.setattr(status_cli, "telemetry_exists", lambda settings, run_id: True)
    monkeypatch.setattr(status_cli, "show_status", interrupted)
    assert main(["status", "r1", "--watch", "--interval", "0.5", "--kafka", "k:9092"]) == 130
    assert watched == [
        {"run_id": "r1", "kafka": "k:9092", "watch": True, "interval_s": 0.5, "tensorboard": None,
         "ended": None}
    ]  # fmt: skip
    assert "Traceback" not in capsys.readouterr().err


def test_watching_a_run_no_broker_has_is_one_clear_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    monkeypatch.setattr(status_cli, "telemetry_exists", lambda settings, run_id: False)
    code = main(["status", "r9", "--watch", "--kafka", "k:9092", "--state-dir", str(tmp_path)])
    assert code == 2
    err = capsys.readouterr().err
    assert "no broker at k:9092 has run 'r9'" in err and len(err.strip().splitlines()) == 1
