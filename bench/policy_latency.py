"""Policy update latency: trainer announce -> every rollout worker process has swapped.

Setup per (store, model): one trainer (this process) and 4 subscriber *processes*, each a
``CheckpointPolicySource`` on the real control topic and checkpoint store, blocked in
``wait_for`` as a SYNC worker is. For every version the trainer runs ``Announcer.
publish_policy`` (create-only write, read-back verify, announce); each worker reports the
wall-clock time at which it had fetched, sha256-verified and ``torch.load``-ed it. Figures:

* ``announce_to_all_swapped_p50/p99``: from the moment the PolicyVersion is handed to the
  producer until the LAST of the 4 workers has the new weights loaded;
* ``publish_to_all_swapped_p50``: the same, from the start of ``publish_policy`` (so it
  includes the trainer's write and read-back of the checkpoint).

Stores: the GCS emulator (fake-gcs-server through the real client) and the local
directory store. Models: a CartPole-size MLP (4-64-64-2) and a ~50 MB model.

Baseline, in the same run: the original Coach's mechanism, every worker polling a
checkpoint-name file every 10 s and then fetching the checkpoint. A poller whose phase is
independent of the trainer notices a new version after U(0, 10 s); the last of N workers
notices after 10 s * max(U1..UN), whose quantile q is 10 s * q**(1/N); then it pays one
transfer. Running real 10 s pollers for every version would take minutes, so the bench
measures the transfer (fetch, sha256, load, on the same store) for every version and
reports 10 s * q**(1/N) + the measured transfer quantile. With ``--baseline-poll-s S`` it
also runs a real polling reader at interval S to check the model (see docs/checkpoints.md).
The first announcement after the clients start (librdkafka's connection and producer-id
set-up, ~0.5 s) is reported on its own line and left out of the quantiles.

Usage: ``KAFKA_BOOTSTRAP_SERVERS=... STORAGE_EMULATOR_HOST=... python bench/policy_latency.py
[--quick]``.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import random
import statistics
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any

import jsonl

COACH_POLL_INTERVAL_S = 10.0
BASELINE = "coach_poll_checkpoint_file_10s"


@dataclass(frozen=True)
class Model:
    name: str
    sizes: tuple[int, ...]  # MLP layer widths
    quick_versions: int
    full_versions: int


MODELS = (
    Model("cartpole_mlp", (4, 64, 64, 2), quick_versions=30, full_versions=200),
    Model("mlp_50mb", (3600, 3600, 2), quick_versions=3, full_versions=20),
)


def make_blob(model: Model, seed: int) -> bytes:
    import torch

    from coach_stream.checkpoints import policy_to_bytes

    torch.manual_seed(seed)
    layers: list[torch.nn.Module] = []
    for a, b in zip(model.sizes[:-1], model.sizes[1:], strict=True):
        layers += [torch.nn.Linear(a, b), torch.nn.Tanh()]
    return policy_to_bytes(torch.nn.Sequential(*layers[:-1]).state_dict())


# ----------------------------------------------------------------------------- workers


def worker_main(worker_id: int, jobs: Any, reports: Any) -> None:
    """One rollout worker: for each job, follow the run's versions and report swap times."""
    from coach_stream.checkpoints import open_store
    from coach_stream.control import CheckpointPolicySource
    from coach_stream.transport.control import KafkaControlSubscriber
    from coach_stream.transport.settings import KafkaSettings, RunTopics

    while True:
        job = jobs.get()
        if job is None:
            return
        run_id, bootstrap, store_url, emulator, versions = job
        settings = KafkaSettings(bootstrap_servers=bootstrap)
        topics = RunTopics.for_run(run_id)
        with (
            open_store(store_url, gcs_emulator_host=emulator) as store,
            KafkaControlSubscriber(settings, topics) as subscriber,
        ):
            source = CheckpointPolicySource(subscriber, store, run_id=run_id)
            source.latest(timeout=30)  # joins: reads the (empty) topic to its end
            reports.put(("ready", worker_id, -1, time.time()))
            for version in range(versions):
                loaded = source.wait_for(version, timeout=120)
                reports.put(("swapped", worker_id, loaded.version.version, time.time()))


# ----------------------------------------------------------------------------- trainer


class TimedPublisher:
    """Records when each message is handed to the real publisher (the announce time)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.handed_at: list[float] = []

    def publish(self, message: Any) -> None:
        self.handed_at.append(time.time())
        self.inner.publish(message)

    def close(self) -> None:
        self.inner.close()

    def __enter__(self) -> TimedPublisher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if len(ordered) == 1:
        return ordered[0]
    position = q * (len(ordered) - 1)
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def run_case(
    store_kind: str,
    model: Model,
    versions: int,
    workers: int,
    jobs: list[Any],
    reports: Any,
    bootstrap: str,
    emulator: str | None,
    baseline_poll_s: float | None,
) -> dict[str, Any]:
    from coach_stream.checkpoints import open_store, policy_from_bytes
    from coach_stream.control import Announcer
    from coach_stream.transport.admin import ensure_run_topics
    from coach_stream.transport.control import KafkaControlPublisher
    from coach_stream.transport.settings import KafkaSettings, RunTopics

    run_id = f"bench-{uuid.uuid4().hex[:10]}"
    settings = KafkaSettings(bootstrap_servers=bootstrap)
    topics = RunTopics.for_run(run_id)
    ensure_run_topics(settings, topics, experience_partitions=1)
    tmp = tempfile.TemporaryDirectory(prefix="policy-latency-")
    bucket = None
    if store_kind == "gcs":
        bucket = create_bucket(emulator)
        store_url = f"gs://{bucket}/bench"
    else:
        store_url = f"file://{tmp.name}"
    blobs = [make_blob(model, seed) for seed in range(min(versions, 3))]
    for queue in jobs:
        queue.put((run_id, bootstrap, store_url, emulator, versions))
    for _ in range(workers):
        kind, *_rest = reports.get(timeout=120)
        assert kind == "ready"

    announce_lat: list[float] = []
    publish_lat: list[float] = []
    transfer: list[float] = []
    poller = None
    with (
        open_store(store_url, gcs_emulator_host=emulator) as store,
        TimedPublisher(KafkaControlPublisher(settings, topics)) as publisher,
        open_store(store_url, gcs_emulator_host=emulator) as reader_store,
    ):
        if baseline_poll_s:
            poller = Poller(reader_store, store_url, baseline_poll_s)
            poller.start()
        publisher.inner.open()  # a trainer connects once, before its first announcement
        announcer = Announcer(store, publisher, run_id, keep_last=5)
        for version in range(versions):
            blob = blobs[version % len(blobs)]
            if poller is not None:  # announce at a random phase of the poller's cycle
                time.sleep(random.uniform(0, poller.interval))
            started = time.time()
            message = announcer.publish_policy(blob, trainer_step=version, env_steps=version)
            if poller is not None:  # Coach's trainer rewrote the checkpoint-name file
                poller.announce(message.version, message.uri, time.time())
            handed = publisher.handed_at[-1]
            done: list[float] = []
            while len(done) < workers:
                kind, _worker, seen, at = reports.get(timeout=120)
                if kind == "swapped" and seen == version:
                    done.append(at)
            announce_lat.append(max(done) - handed)
            publish_lat.append(max(done) - started)
            # Baseline transfer: what a Coach poller does once it sees the new name.
            t0 = time.time()
            policy_from_bytes(reader_store.get(message.uri, expected_sha256=message.sha256))
            transfer.append(time.time() - t0)
            if poller is not None:
                poller.wait_seen(version)
        if poller is not None:
            poller.stop()
    if bucket is not None:
        delete_bucket(emulator, bucket)
    tmp.cleanup()
    return {
        "announce": announce_lat,
        "publish": publish_lat,
        "transfer": transfer,
        "size": len(blobs[0]),
        "poll_measured": poller.latencies[1:] if poller is not None else [],
        "poll_interval": baseline_poll_s,
    }


class Poller(threading.Thread):
    """A real Coach-style reader: every ``interval`` s read the name file, fetch if newer."""

    def __init__(self, store: Any, store_url: str, interval: float) -> None:
        super().__init__(daemon=True)
        self.store, self.interval = store, interval
        self.latest: tuple[int, str, float] | None = None  # what the name file says
        self.seen = -1
        self.latencies: list[float] = []
        self.stopping = threading.Event()
        self.changed = threading.Condition()

    def announce(self, version: int, uri: str, at: float) -> None:
        self.latest = (version, uri, at)

    def run(self) -> None:
        from coach_stream.checkpoints import policy_from_bytes

        while not self.stopping.wait(self.interval):
            latest = self.latest
            if latest is not None and latest[0] > self.seen:
                policy_from_bytes(self.store.get(latest[1]))
                with self.changed:
                    self.latencies.append(time.time() - latest[2])
                    self.seen = latest[0]
                    self.changed.notify_all()

    def wait_seen(self, version: int) -> None:
        with self.changed:
            self.changed.wait_for(lambda: self.seen >= version, timeout=self.interval * 3 + 60)

    def stop(self) -> None:
        self.stopping.set()
        self.join()


def _gcs_client(emulator: str | None) -> Any:
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    return storage.Client(
        project="bench",
        credentials=AnonymousCredentials(),  # type: ignore[no-untyped-call]
        client_options={"api_endpoint": emulator},
    )


def create_bucket(emulator: str | None) -> str:
    name = f"bench-{uuid.uuid4().hex[:10]}"
    client = _gcs_client(emulator)
    client.create_bucket(name)
    client.close()
    return name


def delete_bucket(emulator: str | None, name: str) -> None:
    client = _gcs_client(emulator)
    for blob in client.list_blobs(name):
        blob.delete()
    client.bucket(name).delete()
    client.close()


def emit(metric: str, value: float, baseline_value: float, unit: str = "ms") -> None:
    jsonl.emit("policy_latency", metric, value, unit, BASELINE, baseline_value, digits=2)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer versions (< 60 s)")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--stores", default="gcs,local")
    parser.add_argument("--models", default=",".join(m.name for m in MODELS))
    parser.add_argument(
        "--baseline-poll-s",
        type=float,
        default=None,
        help="also run a real polling reader at this interval (validates the model)",
    )
    args = parser.parse_args()
    bootstrap = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    emulator = os.environ.get("STORAGE_EMULATOR_HOST")
    stores = [s for s in args.stores.split(",") if s]
    if not bootstrap or ("gcs" in stores and not emulator):
        print(
            "set KAFKA_BOOTSTRAP_SERVERS and STORAGE_EMULATOR_HOST (eval $(coach-stream stack "
            "env)), or pass --stores local.",
            file=sys.stderr,
        )
        return 2
    models = [m for m in MODELS if m.name in args.models.split(",")]
    # Fork before any Kafka client, torch op or GCS session exists in this process (no
    # threads to inherit), after the heavy imports, so the 4 workers start in milliseconds
    # instead of re-importing torch each on a loaded machine.
    import coach_stream.checkpoints
    import coach_stream.control
    import coach_stream.transport.control  # noqa: F401

    context = mp.get_context("fork")
    reports = context.Queue()
    jobs = [context.Queue() for _ in range(args.workers)]
    procs = [
        context.Process(target=worker_main, args=(i, jobs[i], reports), daemon=True)
        for i in range(args.workers)
    ]
    for proc in procs:
        proc.start()
    started = time.monotonic()
    try:
        for store_kind in stores:
            for model in models:
                # +1: the first announcement after the clients start is reported apart.
                versions = 1 + (model.quick_versions if args.quick else model.full_versions)
                result = run_case(
                    store_kind,
                    model,
                    versions,
                    args.workers,
                    jobs,
                    reports,
                    bootstrap,
                    emulator,
                    args.baseline_poll_s,
                )
                report(store_kind, model, result, args.workers)
                print(
                    f"# {store_kind}/{model.name} done at {time.monotonic() - started:.1f} s",
                    file=sys.stderr,
                )
    finally:
        for queue in jobs:
            queue.put(None)
        for proc in procs:
            proc.join(timeout=30)
            if proc.is_alive():
                proc.terminate()
    return 0


def coach_all_swapped(q: float, workers: int, transfer: list[float]) -> float:
    """Quantile ``q`` of Coach's announce -> all ``workers`` swapped latency, in seconds.

    Each poller's phase is uniform on [0, interval) and independent, so the last of N
    pollers notices after interval * max(U1..UN), whose quantile is interval * q**(1/N);
    then it pays one transfer (the pollers' fetches rarely overlap, so no contention).
    """
    return float(COACH_POLL_INTERVAL_S * q ** (1 / workers)) + quantile(transfer, q)


def report(store_kind: str, model: Model, result: dict[str, Any], workers: int) -> None:
    ms = 1000.0
    first = result["announce"][0]
    announce, publish = result["announce"][1:], result["publish"][1:]
    transfer = result["transfer"][1:]
    prefix = f"{store_kind}/{model.name}/{workers}_workers"
    base_p50 = coach_all_swapped(0.5, workers, transfer) * ms
    base_p99 = coach_all_swapped(0.99, workers, transfer) * ms
    emit(f"{prefix}/announce_to_all_swapped_p50", quantile(announce, 0.5) * ms, base_p50)
    emit(f"{prefix}/announce_to_all_swapped_p99", quantile(announce, 0.99) * ms, base_p99)
    emit(f"{prefix}/publish_to_all_swapped_p50", quantile(publish, 0.5) * ms, base_p50)
    emit(f"{prefix}/first_announce_to_all_swapped", first * ms, base_p50)
    if result["poll_measured"]:
        measured = [x * ms for x in result["poll_measured"]]
        print(
            json.dumps(
                {
                    "bench": "policy_latency",
                    "note": "real polling reader (validates the modelled baseline)",
                    "case": prefix,
                    "poll_mean_ms": round(statistics.fmean(measured), 1),
                    "model_mean_ms": round(
                        (result["poll_interval"] / 2 + statistics.fmean(transfer)) * ms, 1
                    ),
                    "n": len(measured),
                }
            ),
            file=sys.stderr,
        )
    print(
        json.dumps(
            {
                "bench": "policy_latency",
                "case": prefix,
                "checkpoint_bytes": result["size"],
                "versions": len(announce),
                "transfer_p50_ms": round(quantile(transfer, 0.5) * ms, 2),
            }
        ),
        file=sys.stderr,
    )


if __name__ == "__main__":
    sys.exit(jsonl.run(main))
