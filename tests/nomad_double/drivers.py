"""The task drivers of the double's one client node: ``raw_exec`` and ``docker``.

A driver starts a task's main process and answers for it: its signals, its graceful stop
(``KillSignal``, then SIGKILL after ``KillTimeout``), its exit (code, signal, OOM kill) and
what is left once it is gone. :class:`~.executor.TaskRunner` owns everything else (restart
policy, templates, events), the same for both, as Nomad's task runner does above its
drivers.

``docker`` runs the task as a container on a real Docker engine (``DOCKER_HOST``), the way
Nomad's docker driver does: host networking, the allocation and task directories mounted at
``/alloc``, ``/local`` and ``/secrets``, only the task's own environment (never the node's),
``MemoryMB`` as the memory limit and ``CPU`` as CPU shares, the container named
``<task>-<alloc id>`` and removed once the task is dead. The node never pulls: an image the
engine does not have fails the task with the message Nomad gives for a failed pull.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any, Protocol

CONTAINER_LABEL = "io.coachstream.testcontainers"  # what scripts/test-containers.sh sweeps
_OOM_FLAG_WAIT_S = 3.0  # how long a 137 without the OOM flag waits for it


class DriverFailure(Exception):  # noqa: N818 (Nomad's event name)
    """The driver could not start the task: a ``Driver Failure`` event that fails it."""


class TaskDriver(Protocol):
    name: str

    def base_env(self, host_env: Mapping[str, str]) -> dict[str, str]: ...
    def task_paths(self, task_dir: Path, alloc_dir: Path) -> dict[str, str]: ...
    def launch(
        self, argv: Sequence[str], task_dir: Path, env: Mapping[str, str],
        stdout: IO[bytes], stderr: IO[bytes],
    ) -> subprocess.Popen[bytes]: ...  # fmt: skip
    def send_signal(self, process: subprocess.Popen[bytes], sig: signal.Signals) -> None: ...
    def stop(
        self, process: subprocess.Popen[bytes], sig: signal.Signals, timeout: float
    ) -> None: ...
    def finished(self, process: subprocess.Popen[bytes], code: int) -> tuple[int, int, bool]: ...
    def main_pid(self, process: subprocess.Popen[bytes]) -> int: ...
    def cleanup(self, process: subprocess.Popen[bytes]) -> None: ...


class RawExec:
    """``raw_exec``: the command as a host process in its own process group."""

    name = "raw_exec"

    def base_env(self, host_env: Mapping[str, str]) -> dict[str, str]:
        return dict(host_env)

    def task_paths(self, task_dir: Path, alloc_dir: Path) -> dict[str, str]:
        return {
            "NOMAD_TASK_DIR": str(task_dir / "local"),
            "NOMAD_SECRETS_DIR": str(task_dir / "secrets"),
            "NOMAD_ALLOC_DIR": str(alloc_dir / "alloc"),
        }

    def launch(
        self, argv: Sequence[str], task_dir: Path, env: Mapping[str, str],
        stdout: IO[bytes], stderr: IO[bytes],
    ) -> subprocess.Popen[bytes]:  # fmt: skip
        command = argv[0]
        if not os.path.isabs(command):
            local = task_dir / command
            found = str(local) if local.exists() else shutil.which(command, path=env.get("PATH"))
            if found is None:
                raise DriverFailure(
                    "failed to launch command with executor: "
                    f'exec: "{command}": executable file not found in $PATH'
                )
            command = found
        try:
            return subprocess.Popen(
                [command, *argv[1:]],
                cwd=task_dir,
                env=dict(env),
                stdin=subprocess.DEVNULL,
                stdout=stdout,
                stderr=stderr,
                start_new_session=True,  # own process group, like Nomad's executor (setsid)
            )
        except OSError as error:
            raise DriverFailure(f"failed to launch command with executor: {error}") from error

    def send_signal(self, process: subprocess.Popen[bytes], sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(sig)

    def stop(self, process: subprocess.Popen[bytes], sig: signal.Signals, timeout: float) -> None:
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=timeout)
        self.cleanup(process)
        process.wait()

    def finished(self, process: subprocess.Popen[bytes], code: int) -> tuple[int, int, bool]:
        self.cleanup(process)
        if code < 0:  # killed by a signal: Nomad's executor reports 128 + signal
            return 128 - code, -code, False
        return code, 0, False

    def main_pid(self, process: subprocess.Popen[bytes]) -> int:
        return process.pid

    def cleanup(self, process: subprocess.Popen[bytes]) -> None:
        kill_group(process.pid)


class Docker:
    """``docker``: the task as a container on the engine at ``docker_host``."""

    name = "docker"

    def __init__(self, docker_host: str, task: Mapping[str, Any], alloc_id: str) -> None:
        self.docker_host = docker_host
        self.task = task
        self.container = f"{task['Name']}-{alloc_id}"
        self.alloc_id = alloc_id

    def _cli(self, *args: str, timeout: float = 900.0) -> subprocess.CompletedProcess[str]:
        # Generous: on vfs, removing a container deletes a whole copy of its image (a minute
        # for two of the 5.7 GB runtime image on a loaded 2-core machine).
        return subprocess.run(
            [docker_binary(), *args],
            env=self._cli_env({}),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def _cli_env(self, task_env: Mapping[str, str]) -> dict[str, str]:
        # The task's variables reach the container as `-e NAME` (value from the CLI's own
        # environment), so no value appears on a command line.
        return {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": os.environ.get("HOME", "/root"),
            **task_env,
            "DOCKER_HOST": self.docker_host,
        }

    def base_env(self, host_env: Mapping[str, str]) -> dict[str, str]:
        return {}  # a container sees its image's environment and the task's, not the node's

    def task_paths(self, task_dir: Path, alloc_dir: Path) -> dict[str, str]:
        return {
            "NOMAD_TASK_DIR": "/local",
            "NOMAD_SECRETS_DIR": "/secrets",
            "NOMAD_ALLOC_DIR": "/alloc",
        }

    def launch(
        self, argv: Sequence[str], task_dir: Path, env: Mapping[str, str],
        stdout: IO[bytes], stderr: IO[bytes],
    ) -> subprocess.Popen[bytes]:  # fmt: skip
        image = str(self.task["Config"]["image"])
        if self._cli("image", "inspect", "--format", "{{.Id}}", image).returncode != 0:
            repository = image.rsplit(":", 1)[0] if "/" not in image.rsplit(":", 1)[-1] else image
            raise DriverFailure(
                f"Failed to pull `{image}`: API error (404): pull access denied for {repository},"
                " repository does not exist or may require 'docker login': denied: requested"
                " access to the resource is denied"
            )
        self._cli("rm", "-f", self.container)  # a leftover of an earlier start
        alloc_dir = task_dir.parent
        for path in (alloc_dir / "alloc", task_dir / "local", task_dir / "secrets"):
            path.chmod(0o777)  # as Nomad: the image's user is not the node's
        # Nomad's `entrypoint` replaces the image's; `command` and `args` follow it.
        entrypoint = [str(part) for part in self.task["Config"].get("entrypoint") or []]
        resources = self.task.get("Resources") or {}
        memory = int(resources.get("MemoryMB") or 300)
        created = subprocess.run(
            [
                docker_binary(), "create", "--pull", "never", "--name", self.container,
                "--network", "host", "--label", f"{CONTAINER_LABEL}=nomad-double",
                "--label", f"com.hashicorp.nomad.alloc_id={self.alloc_id}",
                "--label", f"com.hashicorp.nomad.task_name={self.task['Name']}",
                "--memory", f"{memory}m", "--memory-swap", f"{memory}m",
                "--cpu-shares", str(int(resources.get("CPU") or 100)),
                "-v", f"{alloc_dir / 'alloc'}:/alloc", "-v", f"{task_dir / 'local'}:/local",
                "-v", f"{task_dir / 'secrets'}:/secrets",
                *(arg for name in env for arg in ("-e", name)),
                *(["--entrypoint", entrypoint[0]] if entrypoint else []),
                image, *entrypoint[1:], *argv,
            ],
            env=self._cli_env(env),
            capture_output=True,
            text=True,
            timeout=1800,  # vfs copies the whole image for each container
            check=False,
        )  # fmt: skip
        if created.returncode != 0:
            raise DriverFailure(f"failed to create container: {created.stderr.strip()}")
        process = subprocess.Popen(
            [docker_binary(), "start", "--attach", self.container],
            env=self._cli_env({}),
            stdin=subprocess.DEVNULL,
            stdout=stdout,
            stderr=stderr,
            start_new_session=True,
        )
        self._wait_started(process)
        return process

    def _wait_started(self, process: subprocess.Popen[bytes]) -> None:
        """Until the engine has started the container (Nomad's "Started" comes after the
        driver's StartTask), or the attached client has exited."""
        deadline = time.monotonic() + 120.0
        while process.poll() is None and time.monotonic() < deadline:
            state = self._cli("inspect", "--format", "{{.State.Status}}", self.container)
            if state.stdout.strip() not in ("", "created"):
                return
            time.sleep(0.05)  # polling the engine's state; bounded by the deadline

    def send_signal(self, process: subprocess.Popen[bytes], sig: signal.Signals) -> None:
        self._cli("kill", "--signal", sig.name, self.container)

    def stop(self, process: subprocess.Popen[bytes], sig: signal.Signals, timeout: float) -> None:
        self._cli("kill", "--signal", sig.name, self.container)
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self._cli("kill", self.container)
        self.cleanup(process)
        process.wait()

    def finished(self, process: subprocess.Popen[bytes], code: int) -> tuple[int, int, bool]:
        exit_code, oom = self._exit_state()
        # The engine learns of an OOM kill from containerd's OOM event, which can come
        # after the exit event: a SIGKILL's 137 without the flag is looked at again, for a
        # bounded time, before it is reported as a plain kill (seen 1 in 12 under load).
        deadline = time.monotonic() + _OOM_FLAG_WAIT_S
        while exit_code == 137 and not oom and time.monotonic() < deadline:
            time.sleep(0.05)  # polling the engine's state; bounded by the deadline
            exit_code, oom = self._exit_state()
        self.cleanup(process)
        # Nomad's docker driver reports the container's exit code and no signal.
        return (code if exit_code is None else exit_code), 0, oom

    def _exit_state(self) -> tuple[int | None, bool]:
        """(exit code, OOM killed) as the engine reports them; (None, False) when it cannot."""
        state = self._cli(
            "inspect", "--format", "{{.State.ExitCode}} {{.State.OOMKilled}}", self.container
        )
        if state.returncode != 0:
            return None, False
        exit_code, oom = state.stdout.split()
        return int(exit_code), oom == "true"

    def main_pid(self, process: subprocess.Popen[bytes]) -> int:
        answer = self._cli("inspect", "--format", "{{.State.Pid}}", self.container)
        pid = int(answer.stdout.strip() or 0) if answer.returncode == 0 else 0
        if pid <= 0:
            raise RuntimeError(f"container {self.container} has no running process")
        return pid

    def cleanup(self, process: subprocess.Popen[bytes]) -> None:
        self._cli("rm", "-f", self.container)
        kill_group(process.pid)


def docker_binary() -> str:
    """The docker.io package's own client (it matches the engine's API version)."""
    return "/usr/bin/docker" if os.path.exists("/usr/bin/docker") else "docker"


def kill_group(pgid: int) -> None:
    """SIGKILL what is left in a process group (Nomad's executor cleans up the same way)
    and return once it is gone, so a terminal task really has no process left."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)
    deadline = time.monotonic() + 2.0
    while group_members(pgid) and time.monotonic() < deadline:
        time.sleep(0.005)  # SIGKILL is delivered asynchronously; this is a bounded wait


def group_members(pgid: int) -> list[int]:
    """Live (not zombie) processes of a process group, from /proc."""
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[0] != "Z" and int(fields[2]) == pgid:
            members.append(int(stat.parent.name))
    return members
