"""The Nomad double refusing as Nomad refuses, checking itself, and the test helpers."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import requests
from nomad.api import exceptions as nomad_errors

import nomad
from nomad_double import NomadDouble, check_job
from nomad_double import views as double_views
from nomad_double.__main__ import main as run_by_hand
from nomad_double.apicheck import ApiCheckUnavailableError
from nomad_double.apicheck import build as build_checker
from nomad_double.contract import load_contract
from nomad_double.fixtures import MakeDouble, contract_or_skip
from nomad_double.jobspecs import (
    auth,
    client,
    group,
    job,
    running,
    task,
)
from nomad_double.protocol import _snake
from nomad_double.server import Routes


@pytest.mark.parametrize(
    ("body", "status", "text"),
    [
        ({"Count": 2}, 400, "missing task group name for scaling action"),
        ({"Count": -1, "Target": {"Group": "g"}}, 400, "scaling action count can't be negative"),
        (
            {"Count": 2, "Target": {"Group": "nope"}},
            400,
            'task group "nope" specified for scaling does not exist',
        ),
    ],
)
def test_scale_refusals(
    nomad_double: NomadDouble, body: dict[str, Any], status: int, text: str
) -> None:
    client(nomad_double).job.register_job("x", job("x", group("g", 0, task("t", "pass"))))
    answer = requests.post(
        f"{nomad_double.address}/v1/job/x/scale",
        json=body,
        headers=auth(nomad_double),
    )
    assert (answer.status_code, answer.text) == (status, text)


def test_deregister_with_purge_leaves_no_process_and_no_job(nomad_double: NomadDouble) -> None:
    api = client(nomad_double)
    # The task starts a grandchild in its process group: it must die too.
    spawner = (
        "import subprocess, sys, time\n"
        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        "time.sleep(60)\n"
    )
    api.job.register_job("p", job("p", group("g", 2, task("t", spawner))))
    nomad_double.wait_until(lambda: running(nomad_double, "p", 2), what="running")
    groups = [
        r.process.pid for a in nomad_double.allocations for r in a.tasks.values() if r.process
    ]

    def family(pgid: int) -> list[int]:
        members = []
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == pgid and fields[0] != "Z":
                members.append(int(stat.parent.name))
        return members

    nomad_double.wait_until(
        lambda: all(len(family(g)) == 2 for g in groups), what="grandchildren started"
    )
    answer = api.job.deregister_job("p", purge=True)
    assert answer["EvalID"]
    nomad_double.wait_until(
        lambda: all(a.terminal() for a in nomad_double.allocations), what="stopped"
    )
    assert all(family(g) == [] for g in groups)
    assert nomad_double.pids() == []
    with pytest.raises(nomad_errors.URLNotFoundNomadException) as missing:
        api.job.get_job("p")
    assert missing.value.nomad_resp.text == "job not found"
    assert api.jobs.get_jobs() == []
    nomad_double.assert_no_violations()


def test_deregister_without_purge_keeps_a_dead_job(nomad_double: NomadDouble) -> None:
    api = client(nomad_double)
    api.job.register_job(
        "k", job("k", group("g", 1, task("t", "import time; time.sleep(60)")), job_type="service")
    )
    nomad_double.wait_until(lambda: running(nomad_double, "k", 1), what="running")
    api.job.deregister_job("k")
    nomad_double.wait_until(
        lambda: all(a.terminal() for a in nomad_double.allocations), what="stopped"
    )
    stopped = api.job.get_job("k")
    assert (stopped["Stop"], stopped["Status"]) == (True, "dead")


def test_acl_token_missing_or_wrong_is_403(nomad_double: NomadDouble) -> None:
    with pytest.raises(nomad_errors.URLNotAuthorizedNomadException) as no_token:
        client(nomad_double, token=None).jobs.get_jobs()
    assert no_token.value.nomad_resp.text == "Permission denied"
    with pytest.raises(nomad_errors.URLNotAuthorizedNomadException) as wrong:
        client(nomad_double, token="not-the-token").job.register_job(
            "x", job("x", group("g", 1, task("t", "pass")))
        )
    assert wrong.value.nomad_resp.text == "Permission denied"
    assert nomad_double.jobs == {}
    assert client(nomad_double, token=None).status.leader.get_leader() == "127.0.0.1:4647"


def test_acls_off_without_a_token(nomad_double_factory: MakeDouble) -> None:
    double = nomad_double_factory(token=None)
    assert nomad.Nomad(address=double.address).jobs.get_jobs() == []


def _no_id() -> dict[str, Any]:
    body = job("x", group("g", 1, task("t", "pass")))
    del body["Job"]["ID"]
    return body


def _driverless() -> dict[str, Any]:
    body = job("x", group("g", 1, task("t", "pass")))
    del body["Job"]["TaskGroups"][0]["Tasks"][0]["Driver"]
    return body


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (_no_id(), "Missing job ID"),
        (job("x"), "Missing job task groups"),
        (
            _driverless(),
            "Task group g validation failed: Task t validation failed: Missing task driver",
        ),
        (job("x", group("g", -1, task("t", "pass"))), "Task group count can't be negative"),
        (
            job("x", group("g", 1, {**task("t", "pass"), "Driver": "nope"})),
            'Unknown task driver "nope"',
        ),
        (
            job("x", group("g", 1, task("t", "pass"), RestartPolicy={"Mode": "never"})),
            "Unsupported restart mode: 'never'",
        ),
    ],
)
def test_a_job_nomad_refuses_is_500_as_in_nomad_and_registers_nothing(
    nomad_double: NomadDouble, body: dict[str, Any], message: str
) -> None:
    # Nomad's HTTP layer answers its job validation errors (uncoded RPC errors) with 500.
    with pytest.raises(nomad_errors.BaseNomadException) as refused:
        client(nomad_double).jobs.register_job(body)
    assert refused.value.nomad_resp.status_code == 500
    text = refused.value.nomad_resp.text
    assert message in text and text.startswith(("1 error occurred:", "2 errors occurred:"))
    assert nomad_double.jobs == {} and nomad_double.allocations == []
    assert nomad_double.violations, "an invalid request must be recorded"


def test_invalid_job_status_can_be_400(nomad_double_factory: MakeDouble) -> None:
    double = nomad_double_factory(invalid_job_status=400)
    with pytest.raises(nomad_errors.BadRequestNomadException) as refused:
        client(double).jobs.register_job(job("x"))
    assert "Missing job task groups" in refused.value.nomad_resp.text


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            job("x", group("g", "2", task("t", "pass"))),  # type: ignore[arg-type]
            '$.Job.TaskGroups[0].Count: "2" is not a number (int)',
        ),
        (
            job("x", group("g", 1, task("t", "pass"), Restart={"Attempts": 1})),
            'TaskGroup has no field "Restart"',
        ),
        (job("x", group("g", 1, task("t", "pass")), Typo="batch"), 'Job has no field "Typo"'),
        ({"Jobs": job("x", group("g", 1, task("t", "pass")))["Job"]}, 'has no field "Jobs"'),
        ({"Job": []}, "$.Job: an array is not an object (Job)"),
    ],
)
def test_a_body_outside_nomads_api_types_is_400_and_registers_nothing(
    nomad_double: NomadDouble, body: dict[str, Any], message: str
) -> None:
    with pytest.raises(nomad_errors.BadRequestNomadException) as refused:
        client(nomad_double).jobs.register_job(body)
    assert message in refused.value.nomad_resp.text
    assert nomad_double.jobs == {} and nomad_double.allocations == []
    assert nomad_double.violations, "an invalid request must be recorded"


def test_register_refusals_of_the_http_layer(nomad_double: NomadDouble) -> None:
    api = client(nomad_double)
    with pytest.raises(nomad_errors.BadRequestNomadException) as mismatch:
        api.job.register_job("other", job("x", group("g", 1, task("t", "pass"))))
    assert mismatch.value.nomad_resp.text == "Job ID does not match name"
    with pytest.raises(nomad_errors.BadRequestNomadException) as empty:
        api.jobs.register_job({})
    assert empty.value.nomad_resp.text == "Job must be specified"
    garbage = requests.post(
        f"{nomad_double.address}/v1/jobs", data=b"{", headers=auth(nomad_double)
    )
    assert garbage.status_code == 400 and garbage.text.startswith("Request decode failed")


def test_unknown_keys_can_be_recorded_instead_of_refused(nomad_double_factory: MakeDouble) -> None:
    double = nomad_double_factory(unknown_keys="record")
    body = job("x", group("g", 0, task("t", "pass"), Restart={"Attempts": 1}))
    client(double).job.register_job("x", body)  # accepted, as Nomad would (silently ignoring it)
    # one violation per layer: Nomad's Go types, and the OpenAPI one when it is on
    assert {v.kind for v in double.violations} == {"unknown-key"}
    assert 'has no field "Restart"' in double.violations[0].detail
    with pytest.raises(AssertionError, match="Restart"):
        double.assert_no_violations()


def test_unknown_job_allocation_and_variable_are_404(nomad_double: NomadDouble) -> None:
    api = client(nomad_double)
    calls: list[Callable[[], object]] = [
        lambda: api.job.get_job("nope"),
        lambda: api.job.get_summary("nope"),
        lambda: api.job.deregister_job("nope", purge=True),
        lambda: api.allocation.get_allocation("nope"),
        lambda: api.variable.get_variable("nomad/jobs/nope"),
    ]
    for call in calls:
        with pytest.raises(nomad_errors.URLNotFoundNomadException):
            call()
    assert api.job.get_allocations("nope") == []  # Nomad lists by job ID without a lookup


def test_validate_endpoint_lists_errors_without_registering(nomad_double: NomadDouble) -> None:
    api = client(nomad_double)
    bad = api.validate.validate_job(job("x", group("g", 1, {**task("t", "pass"), "Driver": ""})))
    assert bad.status_code == 200
    assert bad.json()["ValidationErrors"] == [
        "Task group g validation failed: Task t validation failed: Missing task driver"
    ]
    assert (
        api.validate.validate_job(job("x", group("g", 1, task("t", "pass")))).json()[
            "ValidationErrors"
        ]
        == []
    )
    assert nomad_double.jobs == {}


def test_a_driver_the_node_lacks_is_not_placed(nomad_double: NomadDouble) -> None:
    """As on a cluster without the driver: the job registers, nothing is placed, and the
    evaluation says why (the node has raw_exec only unless the double has a Docker engine)."""
    docker = {"Name": "t", "Driver": "docker", "Config": {"image": "coach-stream:latest"}}
    registered = client(nomad_double).job.register_job("dk", job("dk", group("g", 1, docker)))
    assert nomad_double.job_allocations("dk") == []
    evaluation = client(nomad_double).evaluation.get_evaluation(registered["EvalID"])
    assert evaluation["FailedTGAllocs"]["g"]["ConstraintFiltered"] == {"missing drivers": 1}


@pytest.mark.parametrize(
    ("params", "text"),
    [
        ({"type": "stdout"}, "must provide task name"),
        ({"task": "t", "type": "both"}, "must provide log type (stdout/stderr)"),
        (
            {"task": "t", "type": "stdout", "follow": "yes"},
            "query parameter follow='yes' is not a valid boolean",
        ),
    ],
)
def test_logs_refusals(nomad_double: NomadDouble, params: dict[str, str], text: str) -> None:
    client(nomad_double).job.register_job("l", job("l", group("g", 1, task("t", "pass"))))
    alloc = nomad_double.job_allocations("l")[0]
    answer = requests.get(
        f"{nomad_double.address}/v1/client/fs/logs/{alloc.id}",
        params=params,
        headers=auth(nomad_double),
    )
    assert answer.status_code == 400 and text in answer.text


def test_blocking_query_returns_when_the_index_moves(nomad_double: NomadDouble) -> None:
    api = client(nomad_double)
    api.job.register_job("bq", job("bq", group("g", 1, task("t", "import time; time.sleep(0.3)"))))
    first = requests.get(
        f"{nomad_double.address}/v1/job/bq/allocations",
        headers=auth(nomad_double),
    )
    index = int(first.headers["X-Nomad-Index"])
    later = requests.get(
        f"{nomad_double.address}/v1/job/bq/allocations",
        params={"index": str(index), "wait": "5s"},
        headers=auth(nomad_double),
        timeout=10,
    )
    assert int(later.headers["X-Nomad-Index"]) > index
    nomad_double.assert_no_violations()


def test_a_response_outside_nomads_api_types_is_caught(
    nomad_double: NomadDouble, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = double_views.job_view
    monkeypatch.setattr(
        double_views, "job_view", lambda cluster, record: {**real(cluster, record), "Bogus": 1}
    )
    api = client(nomad_double)
    api.job.register_job("r", job("r", group("g", 0, task("t", "pass"))))
    api.job.get_job("r")
    caught = nomad_double.response_violations
    assert caught and 'Job has no field "Bogus"' in caught[0].detail
    nomad_double.violations.clear()  # the teardown would (rightly) fail this test otherwise


def test_an_unimplemented_endpoint_is_501_and_recorded(nomad_double: NomadDouble) -> None:
    with pytest.raises(nomad_errors.BaseNomadException):
        client(nomad_double).nodes.get_nodes()
    assert [v.kind for v in nomad_double.violations] == ["unimplemented"]


def test_a_named_openapi_description_that_is_missing_is_one_clear_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("NOMAD_OPENAPI_SPEC", str(tmp_path / "absent.yaml"))
    with pytest.raises(FileNotFoundError, match=r"NOMAD_OPENAPI_SPEC names .*absent\.yaml"):
        load_contract()


def test_injected_faults_answer_instead_of_the_double(nomad_double: NomadDouble) -> None:
    api = client(nomad_double)
    fault = nomad_double.inject_fault(method="POST", path="/v1/job", status=500, text="boom")
    with pytest.raises(nomad_errors.BaseNomadException) as failed:
        api.job.register_job("f", job("f", group("g", 0, task("t", "pass"))))
    assert (failed.value.nomad_resp.status_code, failed.value.nomad_resp.text) == (500, "boom")
    assert fault.hits == 1 and nomad_double.jobs == {}  # the request was not executed
    api.job.register_job("f", job("f", group("g", 0, task("t", "pass"))))  # times=1: spent
    assert list(nomad_double.jobs) == ["f"]

    nomad_double.inject_fault(path="/v1/jobs", drop=True)
    with pytest.raises(nomad_errors.BaseNomadException) as dropped:
        api.jobs.get_jobs()
    assert isinstance(dropped.value.nomad_resp, requests.exceptions.ConnectionError)


def test_check_job_names_every_problem_of_a_job() -> None:
    good = job("coach-stream-r1", group("trainer", 1, task("trainer", "pass")))["Job"]
    assert check_job(good) == []
    typo = job("x", group("g", 1, task("t", "pass", Resources={"CPU": 100, "Memory": 256})))["Job"]
    assert check_job(typo) == [
        '$.TaskGroups[0].Tasks[0].Resources.Memory: unknown field: Resources has no field "Memory"'
        " (Nomad would silently ignore it)"
    ]
    assert check_job({"ID": "x", "TaskGroups": []}) == ["Missing job task groups"]
    # Go's decoder matches keys case-insensitively, as Nomad's does: "type" sets Type.
    assert check_job({**good, "type": "batch"}) == []
    assert check_job({"ID": 3, "Meta": {"a": 1}, "Priority": 1e3}) == [
        "$.ID: 3 is not a string",
        '$.Meta["a"]: 1 is not a string',
        "$.Priority: 1000.0 does not fit a int",
    ]


def test_a_checker_that_cannot_be_built_skips_or_fails_when_services_are_required(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def unavailable() -> None:
        raise ApiCheckUnavailableError("Go was not found on PATH")

    monkeypatch.setattr("nomad_double.fixtures.shared_contract", unavailable)
    monkeypatch.delenv("COACH_STREAM_REQUIRE_SERVICES", raising=False)
    with pytest.raises(pytest.skip.Exception, match="Go was not found"):
        contract_or_skip()
    monkeypatch.setenv("COACH_STREAM_REQUIRE_SERVICES", "1")
    with pytest.raises(pytest.fail.Exception, match="COACH_STREAM_REQUIRE_SERVICES=1"):
        contract_or_skip()


def test_scaling_beyond_the_scaling_block_is_refused(nomad_double: NomadDouble) -> None:
    rollout = group("rollout", 1, task("t", "pass"), Scaling={"Min": 1, "Max": 2, "Enabled": False})
    client(nomad_double).job.register_job("m", job("m", rollout))
    for count, text in ((3, "greater than scaling policy maximum: 3 > 2"), (0, "less than")):
        answer = requests.post(
            f"{nomad_double.address}/v1/job/m/scale",
            json={"Count": count, "Target": {"Group": "rollout"}},
            headers=auth(nomad_double),
        )
        assert answer.status_code == 400 and text in answer.text


def test_the_by_hand_runner_prints_its_address_and_token(
    capsys: pytest.CaptureFixture[str],
) -> None:
    stop, ready = threading.Event(), threading.Event()
    outcome: list[int] = []
    runner = threading.Thread(
        target=lambda: outcome.append(run_by_hand(["--token", "t0"], stop, lambda _: ready.set()))
    )
    runner.start()
    try:
        assert ready.wait(10), "the runner never started"
        address = capsys.readouterr().out.split("NOMAD_ADDR=")[1].split()[0]
        assert nomad.Nomad(address=address, token="t0").jobs.get_jobs() == []
    finally:
        stop.set()
        runner.join(10)
    assert outcome == [0]


def test_every_handler_is_reachable_and_its_body_types_are_known_to_the_checker() -> None:
    contract = load_contract()
    routed = {f"op_{_snake(route.operation_id)}": route for route in contract.routes}
    handlers = {name for name in dir(Routes) if name.startswith("op_")}
    assert handlers and handlers <= set(routed), handlers - set(routed)
    for name in handlers:
        for type_name in (routed[name].request, routed[name].response):
            if type_name is not None:  # an unknown type name raises ValueError
                assert contract.check(type_name, None) == type(contract.check("string", None))()


def test_without_go_the_checker_build_fails_in_one_line(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no go here
    with pytest.raises(ApiCheckUnavailableError, match=r"^Go was not found on PATH") as failed:
        build_checker(tmp_path / "cache")
    assert "\n" not in str(failed.value)
    assert not (tmp_path / "cache").exists()  # nothing half-built left behind
