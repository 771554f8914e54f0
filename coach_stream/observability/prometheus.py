"""A Prometheus endpoint on the trainer and on each rollout worker (``metrics_port``).

The exporter is one more ``EventSink`` beside the JSON lines and the telemetry topic: it
keeps the task's last "progress" event and, at each scrape, turns it into metric families
under the stable names of ``SERIES`` (plus ``coach_stream_consumer_lag_records`` per
partition), every one labelled ``run_id`` and ``task``. The loops therefore know nothing
about Prometheus, and ``/metrics`` shows exactly the figures ``status`` shows::

    with MetricsEndpoint(port=0, run_id="r1", task="trainer") as endpoint:
        events = fan_out(JsonLines(sys.stdout, "trainer"), telemetry, endpoint.exporter)
        telemetry("metrics", endpoint.announcement())   # status shows the URL
        ...

``metrics_port`` (preset, ``launch --metrics-port``): unset = no endpoint; ``0`` = any
free port for every task; ``P`` = the trainer on P and rollout worker i on P + 1 + i, so
a static Prometheus configuration knows them (the evaluator serves none: its returns are
the trainer's ``coach_stream_eval_mean_return``).
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry, ProcessCollector
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import start_http_server
from prometheus_client.registry import Collector

from coach_stream.core import ClosingContext
from coach_stream.errors import ConfigError
from coach_stream.observability.fold import nested, number

PREFIX = "coach_stream_"
LABELS = ("run_id", "task")


@dataclass(frozen=True)
class Series:
    """One metric: its name (counters get ``_total``), kind, help, and the progress-event
    key it comes from on the trainer and on a rollout worker (None: not reported there)."""

    name: str
    kind: str
    help: str
    trainer_key: str | None
    worker_key: str | None


SERIES: tuple[Series, ...] = (
    Series("env_steps", "counter", "Env steps: acted (worker) or learned from (trainer).",
           "time/env_steps", "env_steps"),
    Series("env_steps_per_second", "gauge", "Env steps per second over the last report.",
           "time/env_steps_per_s", "env_steps_per_s"),
    Series("episodes", "counter", "Episodes finished by the worker.", None, "episodes"),
    Series("chunks_produced", "counter", "Experience chunks written by the worker.",
           None, "chunks"),
    Series("policy_version", "gauge",
           "Policy version in use (worker) or newest announced (trainer).",
           "time/policy_version", "policy_version"),
    Series("rejected_versions", "counter", "Policy versions a worker refused (bad checksum).",
           None, "rejected_versions"),
    Series("updates", "counter", "Learner updates (gradient steps).", "time/updates", None),
    Series("updates_per_second", "gauge", "Learner updates per second.",
           "time/updates_per_s", None),
    Series("transitions_consumed", "counter",
           "Env steps read from the experience topic, stale ones included.",
           "time/transitions_consumed", None),
    Series("policy_lag_versions", "gauge",
           "Mean versions between the newest policy and the chunks read since the last report.",
           "rollout/policy_lag_mean", None),
    Series("samples_per_insert", "gauge",
           "Transitions sampled per transition inserted (off-policy learners).",
           "train/samples_per_insert", None),
    Series("stale_chunks_dropped", "counter", "Chunks dropped as too old to learn from.",
           "rollout/dropped_stale", None),
    Series("stale_steps_dropped", "counter", "Env steps in the chunks dropped as stale.",
           "rollout/dropped_stale_steps", None),
    Series("dead_lettered", "counter", "Records sent to the dead-letter topic by the trainer.",
           "rollout/dead_lettered", None),
    Series("checkpoint_version", "gauge", "Version of the newest saved trainer state.",
           "time/checkpoint_version", None),
    Series("checkpoint_timestamp_seconds", "gauge",
           "When the newest trainer state was saved (Unix time).",
           "time/checkpoint_saved_at", None),
    Series("eval_mean_return", "gauge", "Mean greedy return of the last evaluation episodes.",
           "eval/mean_return", None),
    Series("episode_return_mean", "gauge", "Mean return of the last training episodes.",
           "rollout/mean_return", "mean_return"),
    Series("last_report_timestamp_seconds", "gauge", "When the task last reported (Unix time).",
           "time", "time"),
)  # fmt: skip
CONSUMER_LAG = "consumer_lag_records"


def derived_fields(fields: Mapping[str, Any]) -> dict[str, Any]:
    """The trainer's figures that are sums of reported ones (consumed = kept + stale)."""
    kept, stale = (
        number(fields.get("time/env_steps")),
        number(fields.get("rollout/dropped_stale_steps")),
    )
    if kept is None:
        return {}
    return {"time/transitions_consumed": kept + (stale or 0.0)}


def _partition_values(value: object) -> dict[str, float]:
    return {str(p): n for p, v in nested(value).items() if (n := number(v)) is not None}


class MetricsExporter(Collector):
    """An ``EventSink`` that remembers the last "progress" event; a Prometheus collector."""

    def __init__(self, run_id: str, task: str) -> None:
        self.run_id, self.task = run_id, task
        self._latest: dict[str, Any] = {}

    def __call__(self, event: str, fields: Mapping[str, object]) -> None:
        if event == "progress":
            latest = {"time": time.time(), **fields}
            latest.update(derived_fields(latest))
            self._latest = latest  # one reference swap: the scrape thread sees old or new

    def collect(self) -> Iterator[Metric]:
        latest, labels = self._latest, [self.run_id, self.task]
        trainer = self.task == "trainer"
        for series in SERIES:
            key = series.trainer_key if trainer else series.worker_key
            value = number(latest.get(key)) if key else None
            if value is None:
                continue
            family: Metric
            if series.kind == "counter":
                family = CounterMetricFamily(PREFIX + series.name, series.help, labels=LABELS)
            else:
                family = GaugeMetricFamily(PREFIX + series.name, series.help, labels=LABELS)
            family.add_metric(labels, value)
            yield family
        lag = _partition_values(latest.get("rollout/consumer_lag"))
        if lag:
            family = GaugeMetricFamily(
                PREFIX + CONSUMER_LAG,
                "Records in each experience partition the trainer has not read yet.",
                labels=(*LABELS, "partition"),
            )
            for partition, records in sorted(lag.items()):
                family.add_metric([*labels, partition], records)
            yield family


def task_port(base: int | None, task: str) -> int | None:
    """The port ``task`` serves on for a configured ``metrics_port`` (module docstring)."""
    if base is None or task == "evaluator":
        return None
    if base == 0 or task == "trainer":
        return base
    index = task.rsplit("-", 1)[-1]
    return base + 1 + int(index) if index.isdigit() else 0


class MetricsEndpoint(ClosingContext):
    """``/metrics`` for one task, served on a daemon thread from ``__enter__`` to close."""

    def __init__(self, port: int, run_id: str, task: str, addr: str = "0.0.0.0") -> None:
        self.exporter = MetricsExporter(run_id, task)
        self._requested, self._addr = port, addr
        self._server: Any = None
        self._thread: threading.Thread | None = None
        self.port: int | None = None

    def start(self) -> int:
        """Listen; the port chosen (the requested one, or a free one for 0)."""
        registry = CollectorRegistry(auto_describe=False)
        registry.register(self.exporter)
        ProcessCollector(registry=registry)  # process_resident_memory_bytes, cpu seconds
        try:
            self._server, self._thread = start_http_server(
                self._requested, addr=self._addr, registry=registry
            )
        except OSError as error:
            raise ConfigError(
                f"The metrics endpoint cannot listen on port {self._requested} ({error}); "
                "choose another metrics_port, or 0 for any free port."
            ) from error
        self.port = int(self._server.server_port)
        return self.port

    def __enter__(self) -> MetricsEndpoint:
        self.start()
        return self

    def announcement(self) -> dict[str, object]:
        """The fields of the task's "metrics" telemetry event (``status`` shows the URL)."""
        host = socket.gethostname()
        return {"port": self.port, "host": host, "url": f"http://{host}:{self.port}/metrics"}

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None


@contextlib.contextmanager
def metrics_endpoint(
    base_port: int | None, run_id: str, task: str
) -> Iterator[MetricsEndpoint | None]:
    """The task's endpoint for the preset's ``metrics_port`` while the block runs (None
    when the port is unset, or ``task`` serves none)."""
    port = task_port(base_port, task)
    if port is None:
        yield None
        return
    with MetricsEndpoint(port, run_id, task) as endpoint:
        yield endpoint
