"""The containers' environment means, under the official image's own converter, what we intend.

``KafkaCluster`` configures a node only through ``KAFKA_*`` variables. Both images turn
those into ``server.properties`` with the broker's ``kafka.docker.KafkaDockerWrapper``
(``coach-stream/kafka`` runs the same class from the same jars), so running that class here
on the jars the local stack resolved checks the exact file a container starts with, without
Docker. Needs Java and the cached jars (``coach-stream stack up`` resolves them).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from coach_stream.stack import default_cache_dir
from coach_stream.stack.kafka import KAFKA_VERSION
from coach_stream.testing.kafka_container import NodePorts, node_environment

pytestmark = pytest.mark.integration

PORTS = [NodePorts(19001, 19002), NodePorts(19003, 19004), NodePorts(19005, 19006)]


def _wrapper_properties(env: dict[str, str], tmp_path: Path) -> dict[str, str]:
    libs = default_cache_dir() / "kafka" / KAFKA_VERSION / "libs"
    java = shutil.which("java")
    if java is None or not (libs / ".complete").exists():
        why = f"needs Java and the Kafka jars in {libs} (run `coach-stream stack up` once)"
        if os.environ.get("COACH_STREAM_REQUIRE_SERVICES") == "1":
            pytest.fail(why, pytrace=False)
        pytest.skip(why)
    defaults, mounted, final = tmp_path / "default", tmp_path / "mounted", tmp_path / "final"
    for folder in (defaults, mounted, final):
        folder.mkdir()
    image_files = Path(__file__).parents[2] / "coach_stream" / "stack" / "kafka_image"
    for name in ("server.properties", "log4j2.yaml", "tools-log4j2.yaml"):
        (defaults / name).write_bytes(image_files.joinpath(name).read_bytes())
    env = {**env, "KAFKA_LOG_DIRS": str(tmp_path / "data")}
    done = subprocess.run(
        [
            java,
            f"-Dlog4j2.configurationFile={defaults / 'tools-log4j2.yaml'}",
            "-cp",
            f"{libs}/*",
            "kafka.docker.KafkaDockerWrapper",
            "setup",
            f"--default-configs-dir={defaults}",
            f"--mounted-configs-dir={mounted}",
            f"--final-configs-dir={final}",
        ],
        env={"PATH": os.environ["PATH"], **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "data" / "meta.properties").exists(), "storage was not formatted"
    lines = (final / "server.properties").read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if "=" in line)


def test_a_cluster_nodes_variables_become_the_intended_broker_properties(tmp_path: Path) -> None:
    env = node_environment(2, PORTS, "5L6g3nShT-eMCtK--X86sw", min_insync_replicas=2)

    properties = _wrapper_properties(env, tmp_path)

    assert properties["node.id"] == "2"
    assert properties["process.roles"] == "broker,controller"
    assert properties["listeners"] == "PLAINTEXT://127.0.0.1:19003,CONTROLLER://127.0.0.1:19004"
    assert properties["advertised.listeners"] == "PLAINTEXT://127.0.0.1:19003"
    assert properties["controller.quorum.voters"] == (
        "1@127.0.0.1:19002,2@127.0.0.1:19004,3@127.0.0.1:19006"
    )
    assert properties["min.insync.replicas"] == "2"
    assert properties["default.replication.factor"] == "3"
    assert properties["offsets.topic.replication.factor"] == "3"
    # Host networking only: no address other than loopback anywhere in the config.
    for key in ("listeners", "advertised.listeners", "controller.quorum.voters"):
        hosts = {
            part.split("//")[-1].split("@")[-1].rsplit(":", 1)[0]
            for part in properties[key].split(",")
        }
        assert hosts == {"127.0.0.1"}, (key, hosts)
    # The heap is a JVM option for the start script, not a broker property.
    assert not any(key.startswith("heap") for key in properties)
