"""The first ``stack up`` says what it is doing: Maven's and Go's fetches reach the
``steps`` callback (the spinner) and the provisioning log, with stand-in ``mvn`` and ``go``
executables on PATH (no network)."""

from __future__ import annotations

import io
import os
import stat
from pathlib import Path

import pytest
from rich.console import Console

from coach_stream.cli.spinner import spinner
from coach_stream.errors import ServiceUnavailableError
from coach_stream.stack import gcs, kafka
from coach_stream.stack.provisioning import describe_line

CENTRAL = "https://repo.maven.apache.org/maven2"
KAFKA_JAR = f"{CENTRAL}/org/apache/kafka/kafka_2.13/4.4.0/kafka_2.13-4.4.0.jar"
SLF4J_JAR = f"{CENTRAL}/org/slf4j/slf4j-api/2.0.16/slf4j-api-2.0.16.jar"
FAKE_MVN = f"""#!/bin/sh
for arg in "$@"; do
  case "$arg" in -DoutputDirectory=*) out="${{arg#-DoutputDirectory=}}";; esac
done
echo "[INFO] Scanning for projects..."
echo "Downloading from central: {KAFKA_JAR}"
echo "Downloaded from central: {KAFKA_JAR} (6.6 MB at 3.1 MB/s)"
echo "Downloaded from central: {SLF4J_JAR} (69 kB at 1 MB/s)"
mkdir -p "$out" && touch "$out/kafka_2.13-4.4.0.jar"
"""
FAKE_GO = """#!/bin/sh
echo "go: downloading github.com/fsouza/fake-gcs-server v1.55.0" >&2
echo "go: downloading cloud.google.com/go/storage v1.50.0" >&2
touch "$GOBIN/fake-gcs-server"
"""


def _tool(folder: Path, name: str, script: str) -> None:
    path = folder / name
    path.write_text(script)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


@pytest.fixture
def tools(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "tools"
    folder.mkdir()
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")
    return folder


def test_maven_fetches_are_reported_and_logged(tools: Path, tmp_path: Path) -> None:
    _tool(tools, "mvn", FAKE_MVN)
    seen: list[str] = []
    libs, log = tmp_path / "libs", tmp_path / "provision.log"
    kafka.provision(libs, log, seen.append)
    assert seen == [
        "Kafka 4.4.0 jars, first run only",
        "Kafka 4.4.0 jars, first run only: 0 fetched · kafka_2.13-4.4.0.jar …",
        "Kafka 4.4.0 jars, first run only: 1 fetched · kafka_2.13-4.4.0.jar (6.6 MB)",
        "Kafka 4.4.0 jars, first run only: 2 fetched · slf4j-api-2.0.16.jar (69 kB)",
    ]
    assert (libs / ".complete").is_file() and (libs / "kafka_2.13-4.4.0.jar").is_file()
    assert "Scanning for projects" in log.read_text()  # every line in the log, shown or not


def test_go_install_is_reported_and_a_failure_names_the_log(tools: Path, tmp_path: Path) -> None:
    _tool(tools, "go", FAKE_GO)
    seen: list[str] = []
    binary = gcs.provision(tmp_path / "bin", tmp_path / "provision.log", seen.append)
    assert binary.is_file()
    assert seen[-1] == (
        "fake-gcs-server v1.55.0 go install, first run only: 2 fetched · "
        "cloud.google.com/go/storage v1.50.0"
    )
    _tool(tools, "go", '#!/bin/sh\necho "go: module lookup disabled" >&2\nexit 1\n')
    with pytest.raises(ServiceUnavailableError, match="module lookup disabled"):
        gcs.provision(tmp_path / "other", tmp_path / "provision.log", seen.append)


def test_lines_that_say_nothing_new_are_not_shown() -> None:
    assert describe_line("[INFO] BUILD SUCCESS") is None
    assert describe_line("go: extracting golang.org/x/net v0.30.0") == (
        False,
        "golang.org/x/net v0.30.0",
    )


def test_the_spinner_writes_nothing_off_a_terminal() -> None:
    log = io.StringIO()
    with spinner("working", console=Console(file=log)) as steps:
        steps("still working")
    assert log.getvalue() == ""
    shown = io.StringIO()
    with spinner("working", console=Console(file=shown, force_terminal=True)) as steps:
        steps("still working")
    assert "still working" in shown.getvalue()
