"""Services the fault drills may kill: their own Kafka broker and fake-gcs-server.

The drills ``kill -9`` the broker and the emulator, fill the broker's disk, and stop the
emulator with SIGSTOP; doing that to the session's shared services would break every other
test (and anyone else using the local stack). So each drill module starts its own, from
the same cached jars and binary as ``coach-stream stack`` (no download when the stack has
run once), on free ports under the test's temporary directory, and kills them at the end
even when the drill fails.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from coach_stream import processes
from coach_stream.processes import ProcessRecord
from coach_stream.stack import LocalStack, default_cache_dir, gcs, kafka


def _kill(record: ProcessRecord | None) -> None:
    if record is not None and record.is_alive():
        os.killpg(record.pid, signal.SIGKILL)
        _wait_dead(record)


def _wait_dead(record: ProcessRecord, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while record.is_alive():  # a killed group leader is reaped by init; poll its /proc entry
        if time.monotonic() > deadline:
            raise TimeoutError(f"process {record.pid} outlived SIGKILL by {timeout:.0f} s")
        time.sleep(0.05)


@dataclass
class DrillBroker:
    """A one-node KRaft broker whose data lives under ``home`` (optionally a small tmpfs)."""

    home: Path
    broker_port: int = field(default_factory=processes.free_port)
    controller_port: int = field(default_factory=processes.free_port)
    extra_properties: str = ""
    record: ProcessRecord | None = None

    def __post_init__(self) -> None:
        stack = LocalStack(default_cache_dir())
        kafka.provision(stack.kafka_layout.libs, stack.provision_log)
        self.layout = kafka.KafkaLayout(libs=stack.kafka_layout.libs, home=self.home)

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.broker_port}"

    def start(self) -> None:
        kafka.configure(self.layout, self.broker_port, self.controller_port)
        if self.extra_properties:
            with self.layout.config.open("a") as config:
                config.write(self.extra_properties)
        self.record = kafka.start(self.layout)
        kafka.wait_ready(self.record, self.layout, self.bootstrap)

    def kill(self) -> None:
        """``kill -9``: no shutdown, no flush, the page cache keeps what it acknowledged."""
        _kill(self.record)

    def alive(self) -> bool:
        return self.record is not None and self.record.is_alive()

    def wait_exit(self, timeout: float) -> bool:
        """Whether the broker exited within ``timeout`` (it halts when its disk fails)."""
        deadline = time.monotonic() + timeout
        while self.alive():
            if time.monotonic() > deadline:
                return False
            time.sleep(0.1)
        return True


@dataclass
class DrillGcs:
    """fake-gcs-server with its filesystem backend under ``home``: objects survive a kill."""

    home: Path
    port: int = field(default_factory=processes.free_port)
    record: ProcessRecord | None = None

    def __post_init__(self) -> None:
        stack = LocalStack(default_cache_dir())
        self.binary = gcs.provision(stack.gcs_bin_dir, stack.provision_log)

    @property
    def endpoint(self) -> str:
        return gcs.endpoint(self.port)

    def start(self) -> None:
        log = self.home / "fake-gcs-server.log"
        self.record = gcs.start(self.binary, self.port, log, self.home / "data")
        gcs.wait_ready(self.record, self.endpoint, log)
        gcs.create_bucket(self.endpoint)

    def kill(self) -> None:
        """``kill -9`` (a stopped process dies of SIGKILL too)."""
        _kill(self.record)

    def pause(self) -> None:
        """SIGSTOP: the port still accepts connections, nothing answers (a hung server)."""
        assert self.record is not None
        os.kill(self.record.pid, signal.SIGSTOP)

    def resume(self) -> None:
        assert self.record is not None
        os.kill(self.record.pid, signal.SIGCONT)


def mount_tmpfs(path: Path, size: str) -> str | None:
    """Mount a tmpfs of ``size`` at ``path``; the reason it cannot, or None."""
    path.mkdir(parents=True, exist_ok=True)
    result = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        return f"`mount -t tmpfs` failed ({result.stderr.strip() or result.returncode})"
    return None


def unmount(path: Path) -> None:
    subprocess.run(["umount", "-l", str(path)], capture_output=True, check=False)


def fill_disk(directory: Path, leave_bytes: int) -> Path:
    """Take all but ``leave_bytes`` of the free space of ``directory``'s filesystem with one
    file (really allocated, not sparse); deleting the file gives the space back."""
    stats = os.statvfs(directory)
    free = stats.f_bavail * stats.f_frsize
    filler = directory / "filler"
    fd = os.open(filler, os.O_CREAT | os.O_WRONLY, 0o600)
    try:
        os.posix_fallocate(fd, 0, max(free - leave_bytes, 1))
    finally:
        os.close(fd)
    return filler
