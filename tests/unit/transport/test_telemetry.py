"""TelemetryEvent encoding and the sink's best-effort promise (no broker needed)."""

from __future__ import annotations

import math

from coach_stream.codec.avro import MAGIC
from coach_stream.observability.fold import RunTelemetry
from coach_stream.transport.settings import KafkaSettings, RunTopics
from coach_stream.transport.telemetry import (
    TelemetrySink,
    decode_event,
    encode_event,
    fan_out,
)


def test_an_event_round_trips_as_the_json_line_would_read() -> None:
    fields = {
        "time/env_steps": 2560,
        "eval/mean_return": 13.5,
        "unknown": math.nan,
        "reason": "target_reached",
        "done": True,
        "missing": None,
        "positions": {"0": 12},
    }
    data = encode_event("run-1", "trainer", "progress", fields)
    assert data[:2] == MAGIC
    task, event = decode_event(data)
    assert task == "trainer"
    assert event["event"] == "progress" and event["task"] == "trainer"
    assert event["time/env_steps"] == 2560 and isinstance(event["time/env_steps"], int)
    assert event["eval/mean_return"] == 13.5
    assert event["unknown"] is None and event["missing"] is None  # as JSON lines: null
    assert event["done"] is True and event["reason"] == "target_reached"
    assert event["positions"] == '{"0": 12}'


def test_the_fold_reads_telemetry_events_like_log_lines() -> None:
    progress = RunTelemetry("r", eval_episodes=4)
    reported: list[tuple[str, str, dict[str, object]]] = [
        ("trainer", "started", {}),
        ("trainer", "progress", {"time/env_steps": 100}),
        ("evaluator", "evaluation", {"mean_return": 50.0, "episodes": 4}),
        ("trainer", "finished", {"reason": "target_reached"}),
    ]
    for task, event, fields in reported:
        progress.feed(*decode_event(encode_event("r", task, event, fields)))
    assert progress.trainer_starts == 1 and progress.env_steps == 100
    assert progress.mean_eval_return == 50.0
    assert progress.finished is not None and progress.finished["reason"] == "target_reached"


def test_a_sink_without_a_broker_never_stops_the_task() -> None:
    settings = KafkaSettings(bootstrap_servers="127.0.0.1:9", delivery_timeout_ms=1000)
    seen: list[str] = []
    sink = TelemetrySink(settings, RunTopics.for_run("r"), "r", "rollout-0")
    events = fan_out(lambda event, fields: seen.append(event), sink)
    events("progress", {"env_steps": 1})
    sink.close()  # undelivered: a warning, not an exception
    assert seen == ["progress"]
    assert RunTopics.for_run("r").telemetry == "coach-stream.r.telemetry"
