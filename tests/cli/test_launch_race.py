"""Ten `launch --detach` of one run id at the same moment: exactly one run exists after,
intact (its topics, run directory, checkpoints and trainer); every loser exits 2 with one
line and touched nothing of the winner's (issue 27: a loser's undo deleted the winner's)."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from cli_helpers import CLI, Services, Workspace, processes_mentioning

pytestmark = pytest.mark.integration

LAUNCHES = 10
TAKEN = ("already used in", "was taken by another launch", "already exists in")


def _launch(ws: Workspace, services: Services, run_id: str, ckpt: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            str(CLI), "launch", "cartpole-ppo", "--run-id", run_id, "--workers", "1",
            "--detach", "--kafka", services.kafka, "--state-dir", str(ws.state_dir),
            "--checkpoints", str(ckpt), "--set", "target_return=501",
        ],
        cwd=ws.cwd, env=ws.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def _wait_for_file(pattern: str, under: Path, timeout_s: float = 120.0) -> list[Path]:
    deadline = time.monotonic() + timeout_s
    while not (found := sorted(under.glob(pattern))):
        assert time.monotonic() < deadline, f"no {pattern} under {under}"
        time.sleep(0.2)
    return found


def test_concurrent_launches_of_one_run_id_leave_exactly_one_intact_run(
    ws: Workspace, services: Services, run_id: str, run_topics: Callable[[str], list[str]]
) -> None:
    from coach_stream.transport.admin import delete_run_topics
    from coach_stream.transport.settings import KafkaSettings, RunTopics

    ckpt = ws.cwd / "ckpt"
    launchers = [_launch(ws, services, run_id, ckpt) for _ in range(LAUNCHES)]
    try:
        results = [(p, *p.communicate(timeout=600)) for p in launchers]
        winners = [(out, err) for p, out, err in results if p.returncode == 0]
        losers = [(p.returncode, err) for p, _out, err in results if p.returncode != 0]
        assert len(winners) == 1, [err for _out, err in winners]
        assert winners[0][0].strip() == run_id
        for code, err in losers:
            lines = err.strip().splitlines()
            assert code == 2 and len(lines) == 1, (code, err)
            assert any(taken in lines[0] for taken in TAKEN), lines[0]
        # The winner's run is intact: every topic, its run dir, its checkpoints, its trainer.
        assert len(run_topics(run_id)) == 4
        assert ws.run_dirs() == [run_id]
        _wait_for_file(f"runs/{run_id}/policies/*", ckpt)
        shown = ws.run("status", run_id, "--json", "--state-dir", str(ws.state_dir))
        tasks = {t["name"]: t for t in json.loads(shown.stdout)["tasks"]}
        assert tasks["trainer"]["state"] in ("running", "starting"), tasks["trainer"]
    finally:
        for p in launchers:
            if p.poll() is None:
                p.kill()
        stopped = ws.run("stop", run_id, "--state-dir", str(ws.state_dir))
        kafka = KafkaSettings(bootstrap_servers=services.kafka)
        delete_run_topics(kafka, RunTopics.for_run(run_id))
    assert stopped.code == 0, stopped.stderr
    assert processes_mentioning(run_id) == []
