"""Hostile inputs against a run on Nomad (issue 27), through the Nomad API double: a run
id Nomad has no job for (never submitted, or purged) is one line and a non-zero exit for
`stop` and `logs`, never a silent success, and `status` does not call it running."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from cli_helpers import Services, Workspace, refused
from nomad_double import NomadDouble

from coach_stream.orchestrators.nomad_job import job_id


@pytest.fixture
def on_nomad(ws: Workspace, nomad_double: NomadDouble) -> Workspace:
    """``ws`` with NOMAD_ADDR/NOMAD_TOKEN naming the double."""
    ws.env.update(NOMAD_ADDR=nomad_double.address)
    if nomad_double.token:
        ws.env["NOMAD_TOKEN"] = nomad_double.token
    return ws


@pytest.mark.parametrize(
    "command",
    [["stop"], ["stop", "--purge"], ["logs"], ["logs", "--task", "trainer", "--follow"],
     ["status", "--json"]],
    ids=["stop", "stop-purge", "logs", "logs-follow", "status-json"],
)  # fmt: skip
def test_a_nomad_job_that_never_existed_is_refused(
    on_nomad: Workspace, nomad_double: NomadDouble, run_id: str, command: list[str]
) -> None:
    result = on_nomad.run(
        command[0], run_id, *command[1:], "--orchestrator", "nomad",
        "--state-dir", str(on_nomad.state_dir),
    )  # fmt: skip
    refused(result, says=f"has no job {job_id(run_id)} in namespace default")
    assert result.stdout == ""
    assert nomad_double.jobs == {}


@pytest.fixture
def reporting_run(services: Services, run_id: str) -> Iterator[str]:
    """A run id whose telemetry topic holds a trainer's progress event of a moment ago (as
    a run's whose Nomad job was just purged), and no Nomad job."""
    from coach_stream.transport.admin import delete_run_topics, ensure_run_topics
    from coach_stream.transport.settings import KafkaSettings, RunTopics
    from coach_stream.transport.telemetry import TelemetrySink

    settings = KafkaSettings(bootstrap_servers=services.kafka)
    topics = RunTopics.for_run(run_id)
    ensure_run_topics(settings, topics, 1)
    with TelemetrySink(settings, topics, run_id, "trainer") as sink:
        sink("progress", {"time": time.time(), "time/env_steps": 1024, "time/policy_version": 3})
    yield run_id
    delete_run_topics(settings, topics)


@pytest.mark.integration
def test_status_of_a_purged_nomad_job_says_it_is_gone(
    on_nomad: Workspace, services: Services, reporting_run: str
) -> None:
    args = ["status", reporting_run, "--kafka", services.kafka,
            "--state-dir", str(on_nomad.state_dir)]  # fmt: skip
    for extra in (["--orchestrator", "nomad"], []):  # NOMAD_ADDR alone names Nomad too
        result = on_nomad.run(*args, *extra)
        assert result.code == 0, result.stderr
        assert f"run {reporting_run} — gone: Nomad has no job {job_id(reporting_run)}" in (
            " ".join(result.stdout.split())
        ), result.stdout
        assert "running" not in result.stdout and "runn…" not in result.stdout  # task rows too
