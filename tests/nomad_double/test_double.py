"""The Nomad double, driven through python-nomad over HTTP: jobs, tasks, restarts, scale."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
import requests
from nomad.api import exceptions as nomad_errors

import nomad
from nomad_double import NomadDouble, check_job
from nomad_double.fixtures import MakeDouble
from nomad_double.jobspecs import (
    FAST_RESTART,
    SECOND,
    alive,
    auth,
    client,
    group,
    job,
    running,
    task,
    two_group_job,
)
from nomad_double.scheduling import next_reschedule_delay, reschedule_eligible

# -- the happy path -------------------------------------------------------------------------------


def test_two_group_job_runs_with_env_templates_and_logs(nomad_double: NomadDouble) -> None:
    api = client(nomad_double)
    api.variable.create_variable(
        "nomad/jobs/coach-stream-r1", {"Items": {"kafka_password": "pw-1"}}
    )
    answer = api.job.register_job("coach-stream-r1", two_group_job())
    assert answer["EvalID"] and answer["JobModifyIndex"] > 0

    nomad_double.wait_until(
        lambda: running(nomad_double, "coach-stream-r1", 3), what="3 allocations running"
    )
    allocs = api.job.get_allocations("coach-stream-r1")
    assert sorted(a["Name"] for a in allocs) == [
        "coach-stream-r1.rollout[0]",
        "coach-stream-r1.rollout[1]",
        "coach-stream-r1.trainer[0]",
    ]
    assert {a["ClientStatus"] for a in allocs} == {"running"}
    trainer = next(a for a in allocs if a["TaskGroup"] == "trainer")
    full = api.allocation.get_allocation(trainer["ID"])
    assert full["TaskStates"]["trainer"]["State"] == "running"
    assert [e["Type"] for e in full["TaskStates"]["trainer"]["Events"]] == [
        "Received",
        "Task Setup",
        "Started",
    ]
    assert full["Job"]["TaskGroups"][0]["RestartPolicy"] == FAST_RESTART

    nomad_double.wait_until(
        lambda: "index" in nomad_double.logs(trainer["ID"], "trainer"), what="trainer output"
    )
    stdout = api.client.stream_logs.stream(trainer["ID"], "trainer", "stdout", plain=True)
    assert stdout == "index 0 group trainer run r1 arg ['r1', 'dc1']\n"
    nomad_double.wait_until(
        lambda: nomad_double.logs(trainer["ID"], "trainer", "stderr"), what="stderr"
    )
    framed = api.client.stream_logs.stream(trainer["ID"], "trainer", "stderr")
    frame = json.loads(framed)
    assert base64.b64decode(frame["Data"]).decode() == "secret pw-1\n"
    assert frame["File"] == "alloc/logs/trainer.stderr.0"

    rollout_1 = nomad_double.allocation("coach-stream-r1", "rollout", 1)
    nomad_double.wait_until(
        lambda: "index" in nomad_double.logs(rollout_1.id, "rollout"), what="rollout output"
    )
    assert "arg ['worker-1']" in api.client.stream_logs.stream(
        rollout_1.id, "rollout", "stdout", plain=True
    )

    summary = api.job.get_summary("coach-stream-r1")["Summary"]
    assert summary["rollout"]["Running"] == 2 and summary["trainer"]["Running"] == 1
    assert api.job.get_job("coach-stream-r1")["Status"] == "running"
    assert [j["ID"] for j in api.jobs.get_jobs(prefix="coach-stream-")] == ["coach-stream-r1"]
    assert api.jobs.get_jobs(prefix="other") == []
    nomad_double.assert_no_violations()


def test_kill_9_is_restarted_per_policy_then_fails_the_allocation(
    nomad_double: NomadDouble,
) -> None:
    api = client(nomad_double)
    api.job.register_job(
        "j", job("j", group("rollout", 1, task("rollout", "import time; time.sleep(60)")))
    )
    nomad_double.wait_until(lambda: running(nomad_double, "j", 1), what="running")
    alloc = nomad_double.allocation("j", "rollout", 0)
    first = nomad_double.kill_task(alloc.id, "rollout")

    def restarted() -> bool:
        state = alloc.tasks["rollout"].state
        return bool(state["Restarts"] == 1 and state["State"] == "running")

    nomad_double.wait_until(restarted, what="one restart")
    second = alloc.tasks["rollout"].process
    assert second is not None and second.pid != first and not alive(first)
    view = api.allocation.get_allocation(alloc.id)["TaskStates"]["rollout"]
    terminated = next(e for e in view["Events"] if e["Type"] == "Terminated")
    assert (terminated["ExitCode"], terminated["Signal"]) == (137, 9)
    assert (
        next(e for e in view["Events"] if e["Type"] == "Restarting")["RestartReason"]
        == "Restart within policy"
    )

    nomad_double.kill_task(
        alloc.id, "rollout"
    )  # a second crash in the interval: attempts (1) exhausted
    nomad_double.wait_until(lambda: alloc.terminal(), what="allocation failed")
    view = api.allocation.get_allocation(alloc.id)
    assert view["ClientStatus"] == "failed"
    state = view["TaskStates"]["rollout"]
    assert state["State"] == "dead" and state["Failed"] and state["Restarts"] == 1
    assert state["Events"][-1]["Type"] == "Not Restarting"
    assert (
        state["Events"][-1]["RestartReason"]
        == 'Exceeded allowed attempts 1 in interval 10s and mode is "fail"'
    )
    assert api.job.get_summary("j")["Summary"]["rollout"]["Failed"] == 1
    nomad_double.assert_no_violations()


def test_mode_delay_waits_out_the_interval_instead_of_failing(nomad_double: NomadDouble) -> None:
    policy = {"Attempts": 1, "Interval": 5 * SECOND, "Delay": 50_000_000, "Mode": "delay"}
    crashing = group("g", 1, task("t", "raise SystemExit(3)"), RestartPolicy=policy)
    client(nomad_double).job.register_job("d", job("d", crashing))
    runner = nomad_double.job_allocations("d")[0].tasks["t"]

    def delayed() -> dict[str, Any] | None:
        restarts = [e for e in runner.state["Events"] if e["Type"] == "Restarting"]
        return restarts[1] if len(restarts) >= 2 else None

    event = nomad_double.wait_until(delayed, what="a second restart")
    assert event["RestartReason"] == "Exceeded allowed attempts, applying a delay"
    # The rest of the 5 s interval: longer than any within-policy delay (50 ms + 25 % jitter),
    # however slowly the two runs started on a loaded machine.
    assert 62_500_000 < event["StartDelay"] <= 5 * SECOND
    assert not runner.state["Failed"] and runner.state["State"] == "pending"
    exits = [e["ExitCode"] for e in runner.state["Events"] if e["Type"] == "Terminated"]
    assert exits == [3, 3]


def test_exit_0_completes_a_batch_task_but_restarts_a_service_task(
    nomad_double: NomadDouble,
) -> None:
    api = client(nomad_double)
    api.job.register_job("b", job("b", group("g", 1, task("t", "print('done')"))))
    api.job.register_job(
        "s", job("s", group("g", 1, task("t", "print('done')")), job_type="service")
    )
    batch = nomad_double.job_allocations("b")[0]
    service = nomad_double.job_allocations("s")[0]
    nomad_double.wait_until(batch.terminal, what="batch allocation complete")
    assert batch.client_status()[0] == "complete"
    assert batch.tasks["t"].state["Restarts"] == 0 and not batch.tasks["t"].state["Failed"]
    assert api.job.get_job("b")["Status"] == "dead"

    # Nomad restarts service tasks on success too; attempts run out and the allocation fails.
    nomad_double.wait_until(service.terminal, what="service allocation out of attempts")
    assert service.client_status()[0] == "failed"
    assert service.tasks["t"].state["Restarts"] == 1


def test_a_failed_allocation_is_rescheduled_per_policy(nomad_double: NomadDouble) -> None:
    no_restart = {"Attempts": 0, "Interval": 10 * SECOND, "Delay": 0, "Mode": "fail"}
    reschedule = {"Attempts": 1, "Interval": 3600 * SECOND, "Delay": 50_000_000, "Unlimited": False}
    crashing = group(
        "g",
        1,
        task("t", "raise SystemExit(1)"),
        RestartPolicy=no_restart,
        ReschedulePolicy=reschedule,
    )
    api = client(nomad_double)
    api.job.register_job("rs", job("rs", crashing, job_type="service"))

    def two_failed() -> bool:
        allocs = nomad_double.job_allocations("rs")
        return len(allocs) == 2 and all(a.client_status()[0] == "failed" for a in allocs)

    nomad_double.wait_until(two_failed, what="the first allocation and its one replacement failed")
    first, second = (
        api.allocation.get_allocation(a.id) for a in nomad_double.job_allocations("rs")
    )
    assert first["NextAllocation"] == second["ID"] and second["PreviousAllocation"] == first["ID"]
    assert first["FollowupEvalID"]
    assert second["Name"] == first["Name"] == "rs.g[0]"
    assert [e["PrevAllocID"] for e in second["RescheduleTracker"]["Events"]] == [first["ID"]]
    assert second["FollowupEvalID"] == ""  # one attempt in the interval, used: no more
    nomad_double.assert_no_violations()


def test_reschedule_delay_functions() -> None:
    policy = {"Delay": 5, "MaxDelay": 30, "DelayFunction": "exponential"}
    events: list[dict[str, Any]] = []
    delays = []
    for _ in range(5):
        delay = next_reschedule_delay(policy, events)
        delays.append(delay)
        events.append({"Delay": delay, "RescheduleTime": 0})
    assert delays == [5, 10, 20, 30, 30]
    fib: list[dict[str, Any]] = []
    for _ in range(5):
        fib.append({"Delay": next_reschedule_delay({**policy, "DelayFunction": "fibonacci"}, fib)})
    assert [e["Delay"] for e in fib] == [5, 5, 10, 15, 25]
    assert not reschedule_eligible(
        {"Attempts": 1, "Interval": 100}, [{"RescheduleTime": 50}], now=120
    )
    assert reschedule_eligible({"Attempts": 1, "Interval": 100}, [{"RescheduleTime": 10}], now=120)
    assert reschedule_eligible({"Unlimited": True}, [{"RescheduleTime": 10}] * 9, now=20)


def test_stopping_an_allocation_places_a_replacement(nomad_double: NomadDouble) -> None:
    api = client(nomad_double)
    api.job.register_job("st", job("st", group("g", 1, task("t", "import time; time.sleep(60)"))))
    nomad_double.wait_until(lambda: running(nomad_double, "st", 1), what="running")
    old = nomad_double.allocation("st", "g", 0)
    assert api.allocation.stop_allocation(old.id)["EvalID"]
    nomad_double.wait_until(
        lambda: running(nomad_double, "st", 1) and old.terminal(), what="replaced"
    )
    new = nomad_double.allocation("st", "g", 0)
    assert new.id != old.id and new.previous_allocation == old.id
    assert (old.desired_status, old.client_status()[0]) == ("stop", "complete")
    nomad_double.assert_no_violations()


# -- scale, deregister ---------------------------------------------------------------------------


def test_scale_up_and_down_through_the_scale_endpoint(nomad_double: NomadDouble) -> None:
    api = client(nomad_double)
    rollout = group("rollout", 2, task("rollout", "import time; time.sleep(60)"))
    api.job.register_job("sc", job("sc", rollout, job_type="service"))
    nomad_double.wait_until(lambda: running(nomad_double, "sc", 2), what="2 running")

    # python-nomad 2.1.0 has no scale method: the orchestrator posts the ScalingRequest itself.
    scaled = api.job.request(
        "sc", "scale", json={"Count": 3, "Target": {"Group": "rollout"}}, method="post"
    )
    assert scaled.json()["EvalID"]
    nomad_double.wait_until(lambda: running(nomad_double, "sc", 3), what="3 running")
    assert sorted(a.index for a in nomad_double.job_allocations("sc")) == [0, 1, 2]
    status = api.job.request("sc", "scale", method="get").json()
    assert (
        status["TaskGroups"]["rollout"]["Desired"] == 3
        and status["TaskGroups"]["rollout"]["Running"] == 3
    )

    highest = [
        r.process.pid
        for a in nomad_double.job_allocations("sc")
        if a.index > 0
        for r in a.tasks.values()
        if r.process is not None
    ]
    api.job.request("sc", "scale", json={"Count": 1, "Target": {"Group": "rollout"}}, method="post")
    nomad_double.wait_until(lambda: running(nomad_double, "sc", 1), what="1 running")
    stopped = [a for a in nomad_double.job_allocations("sc") if a.desired_status == "stop"]
    assert sorted(a.index for a in stopped) == [1, 2]
    nomad_double.wait_until(
        lambda: all(a.terminal() for a in stopped), what="scaled-down allocations stopped"
    )
    assert all(a.client_status()[0] == "complete" for a in stopped)
    assert [e["Type"] for e in stopped[0].tasks["rollout"].state["Events"]][-2:] == [
        "Killing",
        "Killed",
    ]
    assert len(highest) == 2 and not any(alive(pid) for pid in highest)
    assert api.job.get_job("sc")["TaskGroups"][0]["Count"] == 1
    nomad_double.assert_no_violations()


# -- variables, templates -------------------------------------------------------------------------


def test_variables_put_get_list_delete_and_cas(nomad_double: NomadDouble) -> None:
    api = client(nomad_double)
    put = api.variable.create_variable("nomad/jobs/a", {"Items": {"k": "v"}})
    assert put["Items"] == {"k": "v"} and put["Path"] == "nomad/jobs/a"
    assert api.variable.get_variable("nomad/jobs/a")["Items"] == {"k": "v"}
    assert [v["Path"] for v in api.variables.get_variables(prefix="nomad/")] == ["nomad/jobs/a"]
    with pytest.raises(nomad_errors.VariableConflict):
        api.variable.create_variable(
            "nomad/jobs/a", {"Items": {"k": "w"}}, cas=put["ModifyIndex"] + 100
        )
    api.variable.create_variable("nomad/jobs/a", {"Items": {"k": "w"}}, cas=put["ModifyIndex"])
    assert nomad_double.variable("nomad/jobs/a") == {"k": "w"}
    api.variable.delete_variable("nomad/jobs/a")
    assert nomad_double.variable("nomad/jobs/a") is None
    nomad_double.assert_no_violations()


def test_template_blocks_the_task_until_its_variable_exists(nomad_double: NomadDouble) -> None:
    tmpl = {
        "EmbeddedTmpl": '{{ range $k, $v := nomadVar "nomad/jobs/v" }}{{ $k }}={{ $v }}\n{{ end }}',
        "DestPath": "secrets/env",
        "Envvars": True,
    }
    code = "import os, time; print(os.environ['A'], os.environ['B'], flush=True); time.sleep(60)"
    client(nomad_double).job.register_job(
        "v", job("v", group("g", 1, task("t", code, Templates=[tmpl])))
    )
    runner = nomad_double.job_allocations("v")[0].tasks["t"]
    nomad_double.wait_until(
        lambda: any(e["Type"] == "Template" for e in runner.state["Events"]), what="blocked"
    )
    assert runner.state["State"] == "pending"
    assert (
        runner.state["Events"][-1]["DisplayMessage"]
        == "Missing: nomad.var.block(nomad/jobs/v@default.global)"
    )
    nomad_double.set_variable("nomad/jobs/v", {"A": "1", "B": "two"})
    alloc_id = nomad_double.job_allocations("v")[0].id
    nomad_double.wait_until(
        lambda: "1 two" in nomad_double.logs(alloc_id, "t"), what="rendered env"
    )


def test_a_variable_outside_the_jobs_paths_is_denied_with_acls_on(
    nomad_double: NomadDouble,
) -> None:
    tmpl = {
        "EmbeddedTmpl": '{{ with nomadVar "shared/creds" }}X={{ .x }}{{ end }}',
        "DestPath": "local/x",
        "Envvars": True,
    }
    nomad_double.set_variable("shared/creds", {"x": "1"})
    client(nomad_double).job.register_job(
        "w", job("w", group("g", 1, task("t", "pass", Templates=[tmpl])))
    )
    alloc = nomad_double.job_allocations("w")[0]
    nomad_double.wait_until(alloc.terminal, what="template failure")
    assert "Permission denied" in alloc.tasks["t"].state["Events"][-1]["DisplayMessage"]


# -- logs, blocking queries ----------------------------------------------------------------------


def test_follow_logs_stream_until_the_task_ends(nomad_double: NomadDouble) -> None:
    code = (
        "import sys, time\nfor i in range(3):\n    print('line', i, flush=True); time.sleep(0.1)\n"
    )
    client(nomad_double).job.register_job("f", job("f", group("g", 1, task("t", code))))
    alloc = nomad_double.job_allocations("f")[0]
    answer = requests.get(
        f"{nomad_double.address}/v1/client/fs/logs/{alloc.id}",
        params={"task": "t", "type": "stdout", "follow": "true", "plain": "true"},
        headers=auth(nomad_double),
        stream=True,
        timeout=10,
    )
    assert b"".join(answer.iter_content(None)) == b"line 0\nline 1\nline 2\n"
    assert alloc.client_status()[0] == "complete"
    tail = requests.get(
        f"{nomad_double.address}/v1/client/fs/logs/{alloc.id}",
        params={"task": "t", "type": "stdout", "origin": "end", "offset": "7", "plain": "true"},
        headers=auth(nomad_double),
    )
    assert tail.text == "line 2\n"


def test_wait_until_may_call_the_double_over_http(nomad_double: NomadDouble) -> None:
    api = client(nomad_double)
    api.job.register_job("h", job("h", group("g", 1, task("t", "import time; time.sleep(60)"))))
    status = nomad_double.wait_until(
        lambda: api.job.get_job("h")["Status"] == "running" and "running", what="running via API"
    )
    assert status == "running"


def test_a_coach_stream_shaped_job_is_accepted_and_runs(nomad_double_factory: MakeDouble) -> None:
    """The blocks issue 10 asks the orchestrator for: all valid, all kept, tasks run."""
    nomad_double = nomad_double_factory(node_devices={"nvidia/gpu/H100": 1})
    creds = {
        "EmbeddedTmpl": (
            '{{ with nomadVar "nomad/jobs/coach-stream-full" }}'
            "KAFKA_SASL_PASSWORD={{ .kafka_password }}\n{{ end }}"
        ),
        "DestPath": "secrets/creds.env",
        "Envvars": True,
        "ChangeMode": "restart",
    }
    restart = {"Attempts": 2, "Interval": 300 * SECOND, "Delay": 100_000_000, "Mode": "fail"}
    reschedule = {
        "Attempts": 3,
        "Interval": 3600 * SECOND,
        "Delay": SECOND,
        "DelayFunction": "exponential",
        "MaxDelay": 60 * SECOND,
        "Unlimited": False,
    }

    def role(name: str, count: int, resources: dict[str, Any], **extra: Any) -> dict[str, Any]:
        code = "import os, time; print(os.environ['KAFKA_BOOTSTRAP'], flush=True); time.sleep(60)"
        the_task = task(
            name,
            code,
            Env={"KAFKA_BOOTSTRAP": "kafka:9092", "COACH_STREAM_WORKER": "${NOMAD_ALLOC_INDEX}"},
            Resources=resources,
            Templates=[creds],
            KillSignal="SIGTERM",
            KillTimeout=2 * SECOND,
            LogConfig={"MaxFiles": 3, "MaxFileSizeMB": 5},
        )
        return group(
            name,
            count,
            the_task,
            RestartPolicy=restart,
            ReschedulePolicy=reschedule,
            Meta={"role": name},
            **extra,
        )

    body = job(
        "coach-stream-full",
        role(
            "trainer",
            1,
            {"CPU": 2000, "MemoryMB": 4096, "Devices": [{"Name": "nvidia/gpu", "Count": 1}]},
        ),
        role(
            "rollout",
            2,
            {"CPU": 500, "MemoryMB": 512},
            Spreads=[{"Attribute": "${node.unique.id}", "Weight": 100}],
            Scaling={"Min": 1, "Max": 16, "Enabled": False},
        ),
        role("evaluator", 1, {"CPU": 500, "MemoryMB": 512}),
        job_type="batch",
        Name="coach-stream-full",
        Meta={"run_id": "full", "preset": "cartpole-ppo"},
        Priority=60,
    )
    assert check_job(body["Job"]) == []
    api = client(nomad_double)
    api.variable.create_variable(
        "nomad/jobs/coach-stream-full", {"Items": {"kafka_password": "s3cr3t-pw"}}
    )
    api.job.register_job("coach-stream-full", body)
    nomad_double.wait_until(lambda: running(nomad_double, "coach-stream-full", 4), what="4 running")
    assert nomad_double.secrets_in_jobs("s3cr3t-pw") == []  # the password stayed in the Variable
    trainer_alloc = nomad_double.allocation("coach-stream-full", "trainer", 0)
    rendered = trainer_alloc.alloc_dir / "trainer" / "secrets" / "creds.env"
    assert rendered.read_text() == "KAFKA_SASL_PASSWORD=s3cr3t-pw\n"  # but reached the task
    assert nomad_double.secrets_in_jobs("kafka:9092") != []  # (the scan does find things)
    stored = api.job.get_job("coach-stream-full")
    trainer = next(g for g in stored["TaskGroups"] if g["Name"] == "trainer")
    assert trainer["Tasks"][0]["Resources"]["Devices"] == [{"Name": "nvidia/gpu", "Count": 1}]
    assert trainer["ReschedulePolicy"] == reschedule and trainer["RestartPolicy"] == restart
    over_max = {"Count": 17, "Target": {"Group": "rollout"}}
    with pytest.raises(nomad_errors.BadRequestNomadException):
        api.job.request("coach-stream-full", "scale", json=over_max, method="post")
    nomad_double.assert_no_violations()


def test_small_read_endpoints(nomad_double_factory: MakeDouble) -> None:
    double = nomad_double_factory(namespaces=("default", "rl"))
    api = client(double)
    assert [n["Name"] for n in api.namespaces.get_namespaces()] == ["default", "rl"]
    assert api.namespace.get_namespace("rl")["Name"] == "rl"
    assert api.regions.get_regions() == ["global"]
    assert api.status.peers.get_peers() == ["127.0.0.1:4647"]
    assert api.agent.get_agent()["config"]["ACL"]["Enabled"] is True
    in_rl = nomad.Nomad(address=double.address, token=double.token, namespace="rl")
    in_rl.job.register_job("n", job("n", group("g", 0, task("t", "pass"))))
    evaluations = in_rl.job.get_evaluations("n")
    assert [e["TriggeredBy"] for e in evaluations] == ["job-register"]
    assert [j["Namespace"] for j in api.jobs.get_jobs(namespace="*")] == ["rl"]
    assert api.jobs.get_jobs() == []  # the default namespace has none
    double.assert_no_violations()


def test_an_unplaceable_group_leaves_a_blocked_evaluation(nomad_double: NomadDouble) -> None:
    api = client(nomad_double)
    gpu = task(
        "t", "pass", Resources={"CPU": 100, "MemoryMB": 64, "Devices": [{"Name": "nvidia/gpu"}]}
    )
    answer = api.job.register_job("gpu", job("gpu", group("trainer", 1, gpu)))
    evaluation = api.evaluation.get_evaluation(answer["EvalID"])
    assert evaluation["FailedTGAllocs"]["trainer"]["ConstraintFiltered"] == {"missing devices": 1}
    assert api.evaluation.get_evaluation(evaluation["BlockedEval"])["Status"] == "blocked"
    assert api.job.get_summary("gpu")["Summary"]["trainer"]["Queued"] == 1
    assert api.job.get_allocations("gpu") == [] and api.job.get_job("gpu")["Status"] == "pending"

    elsewhere = job("dc2", group("g", 2, task("t", "pass")))
    elsewhere["Job"]["Datacenters"] = ["dc2"]
    answer = api.job.register_job("dc2", elsewhere)
    metric = api.evaluation.get_evaluation(answer["EvalID"])["FailedTGAllocs"]["g"]
    assert (
        metric["NodesEvaluated"] == 0 and api.job.get_summary("dc2")["Summary"]["g"]["Queued"] == 2
    )
    nomad_double.assert_no_violations()


def test_reregister_versions_preserve_counts_and_check_index(nomad_double: NomadDouble) -> None:
    api = client(nomad_double)
    body = job("v", group("g", 1, task("t", "import time; time.sleep(60)")), job_type="service")
    first = api.job.register_job("v", body)
    nomad_double.wait_until(lambda: running(nomad_double, "v", 1), what="running")
    alloc = nomad_double.allocation("v", "g", 0)
    same = api.job.register_job("v", body)  # unchanged: no new version, allocation kept
    assert same["JobModifyIndex"] == first["JobModifyIndex"]
    assert api.job.get_job("v")["Version"] == 0 and alloc.desired_status == "run"

    api.job.request("v", "scale", json={"Count": 2, "Target": {"Group": "g"}}, method="post")
    api.job.register_job("v", {**body, "PreserveCounts": True})
    assert api.job.get_job("v")["TaskGroups"][0]["Count"] == 2

    stale = {**body, "EnforceIndex": True, "JobModifyIndex": first["JobModifyIndex"]}
    with pytest.raises(nomad_errors.BaseNomadException) as conflict:
        api.job.register_job("v", stale)
    assert conflict.value.nomad_resp.status_code == 500
    assert "job exists with conflicting job modify index" in conflict.value.nomad_resp.text
    with pytest.raises(nomad_errors.BaseNomadException, match="job already exists"):
        api.job.register_job("v", {**body, "EnforceIndex": True, "JobModifyIndex": 0})

    changed = job("v", group("g", 2, task("t", "import time; time.sleep(59)")), job_type="service")
    api.job.register_job("v", changed)  # a changed task: its allocations are replaced
    nomad_double.wait_until(lambda: alloc.terminal() and running(nomad_double, "v", 2), what="new")
    # Versions: 1 the scale; the preserve-counts re-register equals it (no version); 2 the change.
    assert api.job.get_job("v")["Version"] == 2
    nomad_double.assert_no_violations()


def test_framed_follow_sends_heartbeats_while_the_task_is_quiet(nomad_double: NomadDouble) -> None:
    # 3 s of silence against a heartbeat each quiet second: one comes even if the double's
    # thread is held up for 2 s on a loaded machine (1.5 s left it half a second).
    code = "import time; print('a', flush=True); time.sleep(3.0); print('b', flush=True)"
    client(nomad_double).job.register_job("hb", job("hb", group("g", 1, task("t", code))))
    alloc = nomad_double.job_allocations("hb")[0]
    answer = requests.get(
        f"{nomad_double.address}/v1/client/fs/logs/{alloc.id}",
        params={"task": "t", "type": "stdout", "follow": "true"},
        headers=auth(nomad_double),
        stream=True,
        timeout=10,
    )
    frames = [json.loads(raw) for raw in answer.text.replace("}{", "}\n{").splitlines()]
    data = b"".join(base64.b64decode(f["Data"]) for f in frames if f)
    assert data == b"a\nb\n"
    assert {} in frames  # at least one heartbeat during the 3 s of silence


def test_a_changed_variable_rerenders_and_restarts_or_signals_the_task(
    nomad_double: NomadDouble,
) -> None:
    def tmpl(dest: str, **mode: str) -> dict[str, Any]:
        body = '{{ with nomadVar "nomad/jobs/cm" }}K={{ .k }}{{ end }}\n'
        return {"EmbeddedTmpl": body, "DestPath": dest, "Envvars": True, **mode}

    code = (
        "import os, signal, sys, time\n"
        "signal.signal(signal.SIGHUP, lambda *_: print('hup', flush=True))\n"
        "print('K', os.environ['K'], flush=True)\n"
        "time.sleep(60)\n"
    )
    restarting = task("r", code, Templates=[tmpl("local/r.env")])  # ChangeMode restart
    signalled = task(
        "s", code, Templates=[tmpl("local/s.env", ChangeMode="signal", ChangeSignal="SIGHUP")]
    )
    nomad_double.set_variable("nomad/jobs/cm", {"k": "one"})
    client(nomad_double).job.register_job(
        "cm", job("cm", group("r", 1, restarting), group("s", 1, signalled))
    )
    nomad_double.wait_until(lambda: running(nomad_double, "cm", 2), what="running")
    r = nomad_double.allocation("cm", "r", 0)
    s = nomad_double.allocation("cm", "s", 0)
    nomad_double.wait_until(
        lambda: "K one" in nomad_double.logs(r.id, "r") and "K one" in nomad_double.logs(s.id, "s"),
        what="first renders",
    )
    nomad_double.set_variable("nomad/jobs/cm", {"k": "two"})
    nomad_double.wait_until(lambda: "K two" in nomad_double.logs(r.id, "r"), what="restart")
    nomad_double.wait_until(lambda: "hup" in nomad_double.logs(s.id, "s"), what="SIGHUP")
    events = [e["Type"] for e in r.tasks["r"].state["Events"]]
    assert "Restart Signaled" in events and r.tasks["r"].state["Restarts"] == 1
    assert [e["Type"] for e in s.tasks["s"].state["Events"]][-1] == "Signaling"
    assert s.tasks["s"].state["Restarts"] == 0
    assert (s.alloc_dir / "s" / "local" / "s.env").read_text() == "K=two\n"
