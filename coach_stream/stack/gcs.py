"""fake-gcs-server on 127.0.0.1: the GCS JSON API that the real google-cloud-storage client
reaches through ``STORAGE_EMULATOR_HOST``.

Built once with ``go install`` from the Go module proxy into the cache. Unlike the PyPI
``gcp-storage-emulator``, it enforces generation preconditions (``if_generation_match=0``),
which create-only checkpoint writes depend on.

It runs with its filesystem backend under the stack's directory, not in memory: a
restarted emulator that forgot every object would make a resumed trainer find no state
and silently start the run over (issue 8). Object metadata (the sha256 and writer token)
goes into extended attributes, or a sidecar file where the filesystem has none.
"""

from __future__ import annotations

import json
import os
import shutil
import urllib.error
import urllib.request
from pathlib import Path

from coach_stream import processes
from coach_stream.errors import ServiceUnavailableError
from coach_stream.processes import ProcessRecord
from coach_stream.stack.provisioning import Steps, no_steps, run_logged

FAKE_GCS_MODULE = "github.com/fsouza/fake-gcs-server"
FAKE_GCS_VERSION = "v1.55.0"
DEFAULT_BUCKET = "coach-stream"
"""Ensured at every start (created, or already there from an earlier run on the same data
directory), so ``gs://coach-stream/...`` checkpoints work on the local stack with no setup."""


def binary_path(bin_dir: Path) -> Path:
    return bin_dir / FAKE_GCS_VERSION / "fake-gcs-server"


def provision(bin_dir: Path, log: Path, steps: Steps = no_steps) -> Path:
    """``go install`` the pinned fake-gcs-server into the cache (once), reporting each
    module fetched to ``steps``."""
    binary = binary_path(bin_dir)
    if binary.exists():
        return binary
    go = shutil.which("go")
    if go is None:
        raise ServiceUnavailableError(
            "Go was not found on PATH; it is needed once to build fake-gcs-server "
            "(install Go 1.22 or newer, e.g. `apt-get install golang`)."
        )
    staging = binary.parent.with_name(binary.parent.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    env = dict(os.environ, GOBIN=str(staging), CGO_ENABLED="0")
    returncode = run_logged(
        [go, "install", f"{FAKE_GCS_MODULE}@{FAKE_GCS_VERSION}"],
        log,
        f"fake-gcs-server {FAKE_GCS_VERSION} go install, first run only",
        steps,
        env,
    )
    if returncode != 0:
        raise ServiceUnavailableError(
            f"`go install {FAKE_GCS_MODULE}@{FAKE_GCS_VERSION}` failed (exit {returncode}); "
            f"check access to the Go module proxy and see {log}:\n{processes.tail(log)}"
        )
    shutil.rmtree(binary.parent, ignore_errors=True)
    staging.rename(binary.parent)
    return binary


def start(binary: Path, port: int, log: Path, data: Path) -> ProcessRecord:
    """Start the emulator on ``port``, keeping buckets and objects under ``data``.

    ``data`` survives ``stop``/``start``: what a trainer stored is there after a restart.
    """
    data.mkdir(parents=True, exist_ok=True)
    argv = [
        str(binary),
        "-scheme",
        "http",
        "-host",
        "127.0.0.1",
        "-port",
        str(port),
        "-public-host",
        f"127.0.0.1:{port}",
        "-backend",
        "filesystem",
        "-filesystem-root",
        str(data),
        "-log-level",
        "warn",
    ]
    return processes.spawn(argv, log)


def endpoint(port: int) -> str:
    return f"http://127.0.0.1:{port}"


def is_healthy(url: str, timeout: float = 2.0) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/storage/v1/b", timeout=timeout) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def create_bucket(url: str, name: str = DEFAULT_BUCKET) -> None:
    """Create ``name`` on the emulator; an existing bucket is fine."""
    request = urllib.request.Request(
        f"{url}/storage/v1/b?project=coach-stream",
        data=json.dumps({"name": name}).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=5.0):
            return
    except urllib.error.HTTPError as error:
        if error.code == 409:  # already there
            return
        raise ServiceUnavailableError(
            f"fake-gcs-server at {url} refused to create bucket {name!r} ({error.code}); "
            f"restart the stack with `coach-stream stack down && coach-stream stack up`."
        ) from error


def wait_ready(record: ProcessRecord, url: str, log: Path, timeout: float = 30.0) -> None:
    processes.wait_ready(
        record,
        lambda: is_healthy(url, timeout=1.0),
        timeout,
        died=lambda: (
            f"fake-gcs-server exited during start-up; its last log lines ({log}):\n"
            f"{processes.tail(log)}"
        ),
        silent=lambda: (
            f"fake-gcs-server at {url} did not answer within {timeout:.0f} s; see {log}."
        ),
    )
