"""``coach-stream attach``: a shadow learner on a live run's experience, through the real CLI,
Kafka and processes. It reads every record of the source's experience topic in a consumer
group of its own, learns and announces as a run of its own, and ends once the source has
ended and its topic was read to the end."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from cli_helpers import Result, Services, Workspace, processes_mentioning, refused

pytestmark = pytest.mark.integration

# Small and quick: the claim is the plumbing (what is read, by whom, when it ends), not a
# solve; a target of 501 is out of CartPole's reach, so both runs end by their other rules.
QUICK = (
    "--set", "target_return=501", "--set", "dqn.learning_starts=256",
    "--set", "dqn.samples_per_insert=2", "--set", "dqn.publish_every=16",
)  # fmt: skip


def status(ws: Workspace, services: Services, run_id: str) -> dict[str, object]:
    shown = ws.run("status", run_id, "--json", "--kafka", services.kafka, "--state-dir",
                   str(ws.state_dir))  # fmt: skip
    assert shown.code == 0, shown.stderr
    parsed: dict[str, object] = json.loads(shown.stdout)
    return parsed


def attach(ws: Workspace, services: Services, *args: str) -> Result:
    return ws.run(
        "attach", *args, "--kafka", services.kafka, "--state-dir", str(ws.state_dir),
        "--checkpoints", str(ws.cwd / "ckpt"), timeout=600,
    )  # fmt: skip


@pytest.fixture
def source(ws: Workspace, services: Services, run_id: str) -> Iterator[str]:
    """A live cartpole-dqn run of 4,000 env steps, started detached."""
    from coach_stream.transport.admin import delete_run_topics
    from coach_stream.transport.settings import KafkaSettings, RunTopics

    started = ws.launch(
        "cartpole-dqn", "--run-id", run_id, "--workers", "2", "--detach",
        "--kafka", services.kafka, "--checkpoints", str(ws.cwd / "ckpt"),
        "--set", "env_step_budget=4000", *QUICK,
    )  # fmt: skip
    assert started.code == 0, started.stderr
    try:
        yield run_id
    finally:
        ws.run("stop", run_id, "--state-dir", str(ws.state_dir))
        kafka = KafkaSettings(bootstrap_servers=services.kafka)
        for each in (run_id, f"{run_id}-shadow"):
            delete_run_topics(kafka, RunTopics.for_run(each))


def end_offsets(services: Services, topic: str) -> dict[str, int]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": services.kafka, "group.id": "attach-test-ends"})
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        return {
            str(p): consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
            for p in partitions
        }
    finally:
        consumer.close()


def test_a_shadow_learns_a_live_run_to_its_end_and_bad_attaches_are_refused(
    ws: Workspace, services: Services, source: str
) -> None:
    from coach_stream.transport.settings import RunTopics

    shadow = f"{source}-shadow"
    done = attach(ws, services, source, "--preset", "cartpole-dqn", "--run-id", shadow, *QUICK)
    assert done.code == 1, done.stderr[-3000:]  # ended, target out of reach
    assert f"learning from run {source}'s experience" in done.stderr
    assert "source_exhausted" in done.stdout + done.stderr

    ran, shadowed = status(ws, services, source), status(ws, services, shadow)
    assert ran["finished"]["reason"] == "budget_exhausted"  # type: ignore[index]
    finished = shadowed["finished"]
    assert finished["reason"] == "source_exhausted" and finished["final_version"] >= 1  # type: ignore[index]
    # The shadow read, in its own group, at least every record the source's own trainer had
    # read when it ended (a worker's last chunks may land after both have stopped).
    ends = end_offsets(services, RunTopics.for_run(source).experience)
    read = json.loads(shadowed["progress"]["rollout/positions"])  # type: ignore[index]
    learned = json.loads(ran["progress"]["rollout/positions"])  # type: ignore[index]
    assert read.keys() == learned.keys() == ends.keys()
    assert all(learned[p] <= read[p] <= ends[p] for p in ends), (learned, read, ends)
    assert finished["env_steps"] >= ran["finished"]["env_steps"] >= 4000  # type: ignore[index]
    assert (finished["duplicate_chunks"], finished["chunk_gaps"]) == (0, 0)  # type: ignore[index]
    assert processes_mentioning(shadow) == []

    # Refused before anything is made: an unknown run, another env, no behaviour columns.
    refused(attach(ws, services, "no-such-run-0", "--preset", "cartpole-dqn"), says="No run")
    mismatch = attach(ws, services, source, "--preset", "pendulum-sac", "--run-id", "sac-x")
    refused(mismatch, says="acts on CartPole-v1")
    impala = attach(ws, services, source, "--preset", "cartpole-impala", "--run-id", "impala-x")
    refused(impala, says="workers write none")  # DQN's chunks carry no behaviour log-probs
    assert ws.run_dirs() == sorted([source, shadow])
