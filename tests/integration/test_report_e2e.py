"""``coach-stream report`` on a real run: a short cartpole-ppo run on the broker, then the
report from its topics alone (the run's directory and logs are deleted first), and the
one-line refusals for a run it cannot report."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from PIL import Image

from coach_stream.cli.main import main
from coach_stream.observability.report_figure import DPI, SIZE_IN
from coach_stream.orchestrators import LaunchSettings, LocalOrchestrator, build_run_spec
from coach_stream.orchestrators.launcher import follow, prepare_topics
from coach_stream.transport.settings import RunTopics

RUN_TIMEOUT_S = 300.0  # cartpole-ppo solves in ~15 s alone; the machine is small and shared


def _panel_colour(path: Path) -> list[float]:
    """The share of clearly coloured pixels (lines, bars, the verdict) in each of the 3x2
    grid cells of the PNG: a panel with nothing drawn has none."""
    with Image.open(path) as image:
        assert image.format == "PNG"
        assert image.size == (int(SIZE_IN[0] * DPI), int(SIZE_IN[1] * DPI))
        pixels = np.asarray(image.convert("RGB"), dtype=np.int16)
    coloured = (pixels.max(axis=2) - pixels.min(axis=2)) > 60
    rows = np.array_split(coloured[40:], 3)  # below the title
    return [float(cell.mean()) for row in rows for cell in np.array_split(row, 2, axis=1)]


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_report_of_a_finished_run_from_its_topics_alone(
    orchestrator: LocalOrchestrator,
    kafka_bootstrap: str,
    unique_name: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    run_id = f"report-{unique_name}"
    settings = LaunchSettings(
        preset="cartpole-ppo",
        run_id=run_id,
        workers=2,
        kafka_bootstrap=kafka_bootstrap,
        checkpoints=(tmp_path / "checkpoints").as_uri(),
    )
    prepare_topics(settings)
    orchestrator.submit(build_run_spec(settings))
    outcome = follow(orchestrator, run_id, timeout_s=RUN_TIMEOUT_S)
    assert outcome.finished is not None, list(orchestrator.logs(run_id))[-40:]
    # Nothing of the run is left on this machine but its topics on the broker.
    shutil.rmtree(orchestrator.state_dir)
    capsys.readouterr()

    png = tmp_path / "out" / "report.png"
    code = main(["report", run_id, "--kafka", kafka_bootstrap, "--out", str(png), "--no-progress"])

    out = capsys.readouterr().out
    assert code == 0, out
    lines = out.splitlines()
    verdict = "SOLVED" if outcome.solved else "not solved"
    assert lines[1].startswith(f"result: {verdict} ({outcome.finished['reason']})")
    assert f"env steps: {outcome.finished['env_steps']:,}" in lines
    assert "workers: 2;" in out
    assert "dead letters: 0" in lines
    assert "versions when read (" in out  # the trainer's counts per lag, not an estimate
    assert lines[-1] == f"report: {png}"
    assert png.stat().st_size > 50_000
    shares = _panel_colour(png)
    assert all(share > 0.001 for share in shares), shares  # all six panels have data


def test_report_refuses_an_unknown_run_in_one_line(
    kafka_bootstrap: str, unique_name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["report", f"nope-{unique_name}", "--kafka", kafka_bootstrap])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert err.startswith("error: No run ") and "check the run id" in err
    assert "\n" not in err and "Traceback" not in err


def test_report_refuses_a_run_without_telemetry(
    kafka_bootstrap: str, unique_name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    run_id = f"notel-{unique_name}"
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    control = RunTopics.for_run(run_id).control
    for future in admin.create_topics([NewTopic(control, 1, 1)]).values():
        future.result(30)
    try:
        code = main(["report", run_id, "--kafka", kafka_bootstrap])
        err = capsys.readouterr().err.strip()
        assert code == 2
        assert "has no telemetry topic" in err and "\n" not in err
    finally:
        for future in admin.delete_topics([control]).values():
            future.result(30)


def test_report_without_a_broker_is_one_line_and_exit_3(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code = main(["report", "any-run", "--kafka", "127.0.0.1:1"])
    err = capsys.readouterr().err.strip()
    assert code == 3
    assert err.startswith("error: Kafka at 127.0.0.1:1 did not answer") and "\n" not in err
