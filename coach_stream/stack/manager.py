"""The single-machine stack: Kafka and fake-gcs-server as local processes on 127.0.0.1.

``up`` is idempotent: services already healthy are left alone, missing ones are provisioned
(first time only) and started. Ports are chosen free on the first ``up`` and kept with the
Kafka log directory, so experience topics survive ``down``/``up`` (offline replay needs
them), and fake-gcs-server keeps its objects on disk, so checkpoints survive too (a trainer
resumes instead of starting over); ``down --purge`` discards both. ``down`` stops only
processes this stack started, identified by pid and kernel start time.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import shlex
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from coach_stream import processes
from coach_stream.errors import ServiceUnavailableError
from coach_stream.processes import ProcessRecord
from coach_stream.stack import gcs, kafka
from coach_stream.stack.provisioning import Steps, no_steps


@dataclass(frozen=True)
class ServiceStatus:
    name: str
    address: str
    pid: int | None
    running: bool
    healthy: bool
    detail: str


class LocalStack:
    """Provisions, starts and stops the stack's services; state lives under ``cache_dir``."""

    def __init__(self, cache_dir: Path) -> None:
        self.cache_dir = cache_dir
        self.home = cache_dir / "stack"
        self.kafka_layout = kafka.KafkaLayout(
            libs=cache_dir / "kafka" / kafka.KAFKA_VERSION / "libs", home=self.home / "kafka"
        )
        self.gcs_bin_dir = cache_dir / "bin" / "fake-gcs-server"
        self.state_file = self.home / "state.json"
        self.provision_log = self.home / "provision.log"
        self.gcs_log = self.home / "fake-gcs-server.log"
        self.gcs_data = self.home / "gcs"  # buckets and objects: kept across down/up

    # ------------------------------------------------------------------ state

    def _load(self) -> dict[str, Any]:
        try:
            data: dict[str, Any] = json.loads(self.state_file.read_text())
        except (OSError, ValueError):
            return {}
        return data

    def _save(self, state: dict[str, Any]) -> None:
        self.home.mkdir(parents=True, exist_ok=True)
        tmp = self.state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(state, indent=2, sort_keys=True))
        tmp.replace(self.state_file)

    @contextlib.contextmanager
    def _locked(self) -> Iterator[dict[str, Any]]:
        """Serialize stack changes between concurrent CLI calls; yields the mutable state."""
        self.home.mkdir(parents=True, exist_ok=True)
        with (self.home / ".lock").open("w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            state = self._load()
            try:
                yield state
            finally:
                self._save(state)

    @staticmethod
    def _record(entry: dict[str, Any] | None) -> ProcessRecord | None:
        if not entry or "pid" not in entry:
            return None
        return ProcessRecord.from_json(entry)

    # ------------------------------------------------------------------ addresses

    def kafka_bootstrap(self) -> str | None:
        entry = self._load().get("kafka", {})
        return f"127.0.0.1:{entry['broker_port']}" if "broker_port" in entry else None

    def gcs_endpoint(self) -> str | None:
        entry = self._load().get("gcs", {})
        return gcs.endpoint(entry["port"]) if "port" in entry else None

    def env(self) -> dict[str, str]:
        """The variables clients need; empty entries are left out."""
        result: dict[str, str] = {}
        if (bootstrap := self.kafka_bootstrap()) is not None:
            result["KAFKA_BOOTSTRAP_SERVERS"] = bootstrap
        if (endpoint := self.gcs_endpoint()) is not None:
            result["STORAGE_EMULATOR_HOST"] = endpoint
        return result

    # ------------------------------------------------------------------ lifecycle

    def up(
        self, kafka_enabled: bool = True, gcs_enabled: bool = True, steps: Steps = no_steps
    ) -> None:
        """Start what is not running; ``steps`` hears what is being done (``stack up``'s
        spinner: the first run fetches the jars and builds the emulator, minutes)."""
        with self._locked() as state:
            if kafka_enabled:
                state["kafka"] = self._up_kafka(state.get("kafka", {}), steps)
            if gcs_enabled:
                state["gcs"] = self._up_gcs(state.get("gcs", {}), steps)

    def _up_kafka(self, entry: dict[str, Any], steps: Steps) -> dict[str, Any]:
        record = self._record(entry)
        if record is not None and record.is_alive():
            bootstrap = f"127.0.0.1:{entry['broker_port']}"
            steps(f"Kafka: running, checking that {bootstrap} answers")
            kafka.wait_ready(record, self.kafka_layout, bootstrap)
            return entry
        kafka.find_java()
        kafka.provision(self.kafka_layout.libs, self.provision_log, steps)
        formatted = (self.kafka_layout.data / "meta.properties").exists()
        if formatted and "broker_port" in entry:
            broker_port, controller_port = entry["broker_port"], entry["controller_port"]
            for port, service in ((broker_port, "the Kafka broker"),
                                  (controller_port, "the Kafka controller")):  # fmt: skip
                processes.require_free_port(port, service, fix=self._taken_port_fix(port))
        else:
            shutil.rmtree(self.kafka_layout.data, ignore_errors=True)
            broker_port, controller_port = processes.free_port(), processes.free_port()
        steps("Kafka: writing its config" + ("" if formatted else ", formatting its log directory"))
        kafka.configure(self.kafka_layout, broker_port, controller_port)
        steps(f"Kafka: starting the broker on 127.0.0.1:{broker_port}, waiting until it answers")
        record = kafka.start(self.kafka_layout)
        entry = {
            **record.to_json(),
            "broker_port": broker_port,
            "controller_port": controller_port,
        }
        try:
            kafka.wait_ready(record, self.kafka_layout, f"127.0.0.1:{broker_port}")
        except ServiceUnavailableError:
            processes.stop(record)
            raise
        return entry

    def _taken_port_fix(self, port: int) -> str:
        """What frees a kept Kafka port. A plain ``down``/``up`` does not: the ports are kept
        with Kafka's log directory (its topics); only ``down --purge`` forgets them."""
        from coach_stream.stack import default_cache_dir

        own = self.cache_dir == default_cache_dir()
        cache = "" if own else f" --cache-dir {shlex.quote(str(self.cache_dir))}"
        return (
            f"the stack keeps its ports across down/up (with Kafka's topics), so stop that "
            f"process (`ss -ltnp 'sport = :{port}'` names it), or run `coach-stream stack down "
            f"--purge{cache} && coach-stream stack up{cache}` for new ports (this deletes the "
            "stack's topics and stored objects), or start a separate stack with another "
            "--cache-dir (COACH_STREAM_CACHE)"
        )

    def _up_gcs(self, entry: dict[str, Any], steps: Steps) -> dict[str, Any]:
        record = self._record(entry)
        if record is not None and record.is_alive():
            steps(f"fake-gcs-server: running, checking that {gcs.endpoint(entry['port'])} answers")
            gcs.wait_ready(record, gcs.endpoint(entry["port"]), self.gcs_log)
            return entry
        binary = gcs.provision(self.gcs_bin_dir, self.provision_log, steps)
        port = entry.get("port")
        if port is None or not processes.port_is_free(port):
            port = processes.free_port()
        steps(f"fake-gcs-server: starting on {gcs.endpoint(port)}, waiting until it answers")
        record = gcs.start(binary, port, self.gcs_log, self.gcs_data)
        try:
            gcs.wait_ready(record, gcs.endpoint(port), self.gcs_log)
            gcs.create_bucket(gcs.endpoint(port))
        except ServiceUnavailableError:
            processes.stop(record)
            raise
        return {**record.to_json(), "port": port}

    def down(self, purge: bool = False) -> list[str]:
        """Stop what this stack started; returns the names of the services it stopped."""
        stopped: list[str] = []
        with self._locked() as state:
            for name in ("gcs", "kafka"):
                entry = state.get(name, {})
                record = self._record(entry)
                if record is not None and record.is_alive():
                    processes.stop(record)
                    stopped.append(name)
                for key in ("pid", "start_time"):
                    entry.pop(key, None)
            if purge:
                shutil.rmtree(self.kafka_layout.home, ignore_errors=True)
                shutil.rmtree(self.gcs_data, ignore_errors=True)
                state.clear()
        return stopped

    def stop_kafka(self) -> None:
        """Stop only the broker, keeping its data and ports (``up`` starts it again)."""
        with self._locked() as state:
            entry = state.get("kafka", {})
            record = self._record(entry)
            if record is not None:
                processes.stop(record)
            for key in ("pid", "start_time"):
                entry.pop(key, None)

    def status(self) -> list[ServiceStatus]:
        state = self._load()
        services = (
            ("kafka", f"kafka {kafka.KAFKA_VERSION}", self.kafka_bootstrap(), kafka.is_healthy,
             self.kafka_layout.log),
            ("gcs", f"fake-gcs-server {gcs.FAKE_GCS_VERSION}", self.gcs_endpoint(), gcs.is_healthy,
             self.gcs_log),
        )  # fmt: skip
        result = []
        for key, name, address, is_healthy, log in services:
            record = self._record(state.get(key, {}))
            running = record is not None and record.is_alive()
            result.append(
                ServiceStatus(
                    name=name,
                    address=address or "-",
                    pid=record.pid if running and record else None,
                    running=running,
                    healthy=running and address is not None and is_healthy(address),
                    detail=str(log),
                )
            )
        return result
