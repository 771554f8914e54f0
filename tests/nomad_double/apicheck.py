"""Nomad's own Go API types as the judge of every body the double reads or serves.

``apicheck/`` is a small Go program built from ``github.com/hashicorp/nomad/api`` at the
version pinned in its ``go.mod`` (fetched through the Go module proxy, like fake-gcs-server).
It decodes a body into the named API type, refusing keys no field takes, and names every
problem with its JSON path. It is built once into the project's cache, keyed by a hash of
its sources, and one ``-serve`` process per Python process answers all checks.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import threading
from pathlib import Path
from typing import Any

from coach_stream.stack import default_cache_dir

SOURCE_DIR = Path(__file__).resolve().parent / "apicheck"
_SOURCES = ("go.mod", "go.sum", "main.go", "fields.go")


class ApiCheckUnavailableError(Exception):
    """The checker could not be built (no Go, or no Go module proxy): one line says why."""


def source_key() -> str:
    digest = hashlib.sha256()
    for name in _SOURCES:
        digest.update(name.encode() + b"\0" + (SOURCE_DIR / name).read_bytes())
    return digest.hexdigest()[:16]


def binary_path(cache_dir: Path | None = None) -> Path:
    cache = cache_dir or default_cache_dir()
    return cache / "bin" / "nomad-apicheck" / source_key() / "nomad-apicheck"


def build(cache_dir: Path | None = None) -> Path:
    """The checker's binary, built first when the cache lacks this version of its sources."""
    binary = binary_path(cache_dir)
    if binary.exists():
        return binary
    go = shutil.which("go")
    if go is None:
        raise ApiCheckUnavailableError(
            "Go was not found on PATH; it is needed once to build the Nomad API checker "
            "(tests/nomad_double/apicheck): install Go 1.26 or newer"
        )
    staging = binary.with_name(binary.name + ".partial")
    staging.parent.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, CGO_ENABLED="0", GOFLAGS="-mod=readonly")
    done = subprocess.run(
        [go, "build", "-o", str(staging), "."],
        cwd=SOURCE_DIR,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise ApiCheckUnavailableError(
            f"building the Nomad API checker failed (go build exit {done.returncode}: {last}); "
            "check access to the Go module proxy"
        )
    staging.rename(binary)
    return binary


class ApiChecker:
    """One ``nomad-apicheck -serve`` process; ``check`` is safe from any thread."""

    def __init__(self, binary: Path) -> None:
        self.binary = binary
        self._lock = threading.Lock()
        self._process: subprocess.Popen[str] | None = None

    def _serving(self) -> subprocess.Popen[str]:
        if self._process is None or self._process.poll() is not None:
            self._process = subprocess.Popen(
                [str(self.binary), "-serve"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
                bufsize=1,
            )
        return self._process

    def check(self, type_name: str, body: Any) -> list[str]:
        """Every problem of ``body`` as a value of Nomad's API type ``type_name``; ``[]``: none."""
        line = json.dumps({"type": type_name, "body": body}) + "\n"
        with self._lock:
            process = self._serving()
            assert process.stdin is not None and process.stdout is not None
            process.stdin.write(line)
            process.stdin.flush()
            answer = json.loads(process.stdout.readline())
        if answer.get("error"):
            raise ValueError(f"nomad-apicheck: {answer['error']}")
        return list(answer["problems"])

    def close(self) -> None:
        with self._lock:
            if self._process is not None:
                self._process.stdin.close()  # type: ignore[union-attr]
                self._process.wait(timeout=10)
                self._process = None


_SHARED: dict[Path, ApiChecker] = {}
_SHARED_LOCK = threading.Lock()


def shared_checker(cache_dir: Path | None = None) -> ApiChecker:
    """This process's checker (built first if needed); every double and test shares it."""
    binary = build(cache_dir)
    with _SHARED_LOCK:
        if binary not in _SHARED:
            _SHARED[binary] = ApiChecker(binary)
        return _SHARED[binary]
