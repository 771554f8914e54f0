"""Apache Kafka 4.x in KRaft combined mode, from Maven Central jars, on 127.0.0.1.

Provisioning resolves the pom shipped in ``stack/maven/`` into a directory of jars once
(the user's cache dir); starting formats the log directory on first use and launches
``kafka.Kafka`` with the machine's Java 17. Ready means a metadata request answered
(``transport.admin.broker_answers``, the transport package's quiet probe), never a fixed
sleep.
"""

from __future__ import annotations

import shutil
import subprocess
import uuid
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from coach_stream import processes
from coach_stream.errors import ServiceUnavailableError
from coach_stream.processes import ProcessRecord
from coach_stream.stack.provisioning import Steps, no_steps, run_logged

KAFKA_VERSION = "4.4.0"
DEPENDENCY_PLUGIN = "org.apache.maven.plugins:maven-dependency-plugin:3.8.1"
HEAP = "-Xmx768m"


@dataclass(frozen=True)
class KafkaLayout:
    """Where the broker's jars, data and logs live."""

    libs: Path  # cached jars, shared by every stack on this machine
    home: Path  # this stack's data, config and log

    @property
    def data(self) -> Path:
        return self.home / "data"

    @property
    def config(self) -> Path:
        return self.home / "server.properties"

    @property
    def log4j_config(self) -> Path:
        return self.home / "log4j2.properties"

    @property
    def log(self) -> Path:
        return self.home / "server.log"

    @property
    def console_log(self) -> Path:
        return self.home / "console.log"


def find_java() -> str:
    java = shutil.which("java")
    if java is None:
        raise ServiceUnavailableError(
            "Java was not found on PATH; the Kafka broker needs Java 17 or newer "
            "(install it, e.g. `apt-get install openjdk-17-jre-headless`)."
        )
    return java


def provision(libs: Path, log: Path, steps: Steps = no_steps) -> None:
    """Resolve the broker's jars from Maven Central into ``libs`` (once; cached after),
    reporting each artifact fetched to ``steps``."""
    done_marker = libs / ".complete"
    if done_marker.exists():
        return
    mvn = shutil.which("mvn")
    if mvn is None:
        raise ServiceUnavailableError(
            "Maven (`mvn`) was not found on PATH; it is needed once to fetch the Kafka jars "
            "(install it, e.g. `apt-get install maven`)."
        )
    staging = libs.with_name(libs.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    pom = staging / "pom.xml"
    pom.write_bytes(resources.files("coach_stream.stack").joinpath("maven/pom.xml").read_bytes())
    # Not -q: Maven's "Downloaded from central: ..." lines are what the spinner shows
    # (-B keeps them one line each, without the transfer progress meter).
    returncode = run_logged(
        [
            mvn,
            "-B",
            "-f",
            str(pom),
            f"{DEPENDENCY_PLUGIN}:copy-dependencies",
            f"-DoutputDirectory={staging / 'jars'}",
            "-DincludeScope=runtime",
        ],
        log,
        f"Kafka {KAFKA_VERSION} jars, first run only",
        steps,
    )
    if returncode != 0:
        raise ServiceUnavailableError(
            f"Maven could not resolve Kafka {KAFKA_VERSION} from Maven Central "
            f"(exit {returncode}); check network access to the registry and see {log}:\n"
            + processes.tail(log)
        )
    shutil.rmtree(libs, ignore_errors=True)
    (staging / "jars").rename(libs)
    shutil.rmtree(staging, ignore_errors=True)
    done_marker.write_text(KAFKA_VERSION + "\n")


def single_node_properties(data: Path, controller_port: int, listeners: str) -> str:
    """A KRaft node that is its own controller, storing under ``data``; ``listeners`` are
    the lines that name and secure its broker listeners (the controller's is added here)."""
    return f"""\
process.roles=broker,controller
node.id=1
controller.quorum.bootstrap.servers=127.0.0.1:{controller_port}
controller.listener.names=CONTROLLER
{listeners.strip()}
log.dirs={data}
num.partitions=1
# One node: every internal topic has one replica; few partitions keep start-up fast.
offsets.topic.replication.factor=1
offsets.topic.num.partitions=4
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=4
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
message.max.bytes=16777216
"""


def _server_properties(layout: KafkaLayout, broker_port: int, controller_port: int) -> str:
    listeners = f"""\
listeners=PLAINTEXT://127.0.0.1:{broker_port},CONTROLLER://127.0.0.1:{controller_port}
advertised.listeners=PLAINTEXT://127.0.0.1:{broker_port}
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
inter.broker.listener.name=PLAINTEXT
"""
    return single_node_properties(layout.data, controller_port, listeners)


_LOG4J = """\
appender.file.type = File
appender.file.name = FILE
appender.file.fileName = {log}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = FILE
logger.kafka.name = kafka
logger.kafka.level = INFO
logger.state.name = state.change.logger
logger.state.level = WARN
"""


def _classpath(libs: Path) -> str:
    return f"{libs}/*"


def configure(layout: KafkaLayout, broker_port: int, controller_port: int) -> None:
    """Write the broker's config and format its storage the first time."""
    layout.home.mkdir(parents=True, exist_ok=True)
    layout.config.write_text(_server_properties(layout, broker_port, controller_port))
    layout.log4j_config.write_text(_LOG4J.format(log=layout.log))
    if (layout.data / "meta.properties").exists():
        return
    java = find_java()
    result = subprocess.run(
        [
            java,
            "-cp",
            _classpath(layout.libs),
            "kafka.tools.StorageTool",
            "format",
            "--standalone",
            "-t",
            _cluster_id(),
            "-c",
            str(layout.config),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        raise ServiceUnavailableError(
            f"Formatting Kafka's log directory {layout.data} failed (exit {result.returncode}); "
            f"remove it and run `coach-stream stack up` again:\n{result.stdout}{result.stderr}"
        )


def _cluster_id() -> str:
    """A KRaft cluster id: 16 random bytes, URL-safe base64 without padding."""
    import base64

    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


def start(layout: KafkaLayout) -> ProcessRecord:
    java = find_java()
    argv = [
        java,
        HEAP,
        "-XX:+UseG1GC",
        "-Djava.awt.headless=true",
        f"-Dlog4j2.configurationFile={layout.log4j_config}",
        "-cp",
        _classpath(layout.libs),
        "kafka.Kafka",
        str(layout.config),
    ]
    return processes.spawn(argv, layout.console_log)


def wait_ready(
    record: ProcessRecord, layout: KafkaLayout, bootstrap: str, timeout: float = 120.0
) -> None:
    """Block until the broker answers a metadata request, or explain why it did not."""
    processes.wait_ready(
        record,
        lambda: is_healthy(bootstrap, timeout=2.0),  # waits up to 2 s while it starts
        timeout,
        died=lambda: (
            f"The Kafka broker exited during start-up; its last log lines ({layout.log}):\n"
            f"{processes.tail(layout.log)}\n{processes.tail(layout.console_log)}"
        ),
        silent=lambda: (
            f"The Kafka broker at {bootstrap} did not answer within {timeout:.0f} s; "
            f"see {layout.log}:\n{processes.tail(layout.log)}"
        ),
    )


def is_healthy(bootstrap: str, timeout: float = 3.0) -> bool:
    from coach_stream.transport.admin import broker_answers

    return broker_answers(bootstrap, timeout)
