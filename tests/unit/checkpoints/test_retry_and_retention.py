# mypy: disable-error-code="no-untyped-call"
"""Retry backoff (with a fake clock: no sleeping) and the retention rule."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import requests
from google.api_core import exceptions as gexc

from coach_stream.checkpoints import LocalCheckpointStore, policy_key, prune_policies
from coach_stream.checkpoints.gcs import is_transient
from coach_stream.checkpoints.retention import versions_to_delete
from coach_stream.checkpoints.retry import RetryPolicy, call_with_retry
from coach_stream.errors import ConfigError, ServiceUnavailableError, StoreUnavailableError


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds

    def __call__(self) -> float:
        return self.now


def flaky(failures: list[BaseException]):  # type: ignore[no-untyped-def]
    calls = {"n": 0}

    def fn() -> str:
        calls["n"] += 1
        if failures:
            raise failures.pop(0)
        return "ok"

    return fn, calls


def test_transient_errors_are_retried_with_growing_backoff() -> None:
    clock = FakeClock()
    fn, calls = flaky([gexc.ServiceUnavailable("503"), ConnectionResetError(), requests.Timeout()])
    policy = RetryPolicy(attempts=5, initial_backoff_s=0.1, multiplier=2.0)
    result = call_with_retry(
        fn,
        policy=policy,
        is_transient=is_transient,
        describe="x",
        sleep=clock.sleep,
        clock=clock,
        rng=random.Random(0),
    )
    assert result == "ok" and calls["n"] == 4
    assert len(clock.sleeps) == 3
    for i, slept in enumerate(clock.sleeps):
        assert 0.05 * 2**i <= slept <= 0.1 * 2**i


def test_permanent_errors_pass_through_at_once() -> None:
    clock = FakeClock()
    fn, calls = flaky([gexc.Forbidden("no")])
    with pytest.raises(gexc.Forbidden):
        call_with_retry(
            fn,
            policy=RetryPolicy(),
            is_transient=is_transient,
            describe="x",
            sleep=clock.sleep,
            clock=clock,
        )
    assert calls["n"] == 1 and clock.sleeps == []


def test_exhausted_retries_raise_one_clear_error() -> None:
    clock = FakeClock()
    fn, calls = flaky([gexc.InternalServerError("500")] * 10)
    with pytest.raises(StoreUnavailableError, match="could not write it") as info:
        call_with_retry(
            fn,
            policy=RetryPolicy(attempts=3),
            is_transient=is_transient,
            describe="write it",
            sleep=clock.sleep,
            clock=clock,
        )
    assert calls["n"] == 3
    assert isinstance(info.value, ServiceUnavailableError)  # catchable either way


def test_deadline_stops_retrying_early() -> None:
    clock = FakeClock()
    fn, calls = flaky([gexc.BadGateway("502")] * 100)
    policy = RetryPolicy(attempts=100, initial_backoff_s=1.0, max_backoff_s=1.0, deadline_s=3.0)
    with pytest.raises(StoreUnavailableError):
        call_with_retry(
            fn,
            policy=policy,
            is_transient=is_transient,
            describe="x",
            sleep=clock.sleep,
            clock=clock,
        )
    assert calls["n"] <= 7 and clock.now <= 3.0


def test_classification() -> None:
    assert is_transient(gexc.GatewayTimeout("504"))
    assert is_transient(gexc.TooManyRequests("429"))
    assert is_transient(requests.ConnectionError())
    assert not is_transient(gexc.NotFound("404"))
    assert not is_transient(gexc.PreconditionFailed("412"))
    assert not is_transient(ValueError())


def test_invalid_policy_is_a_config_error() -> None:
    with pytest.raises(ConfigError):
        RetryPolicy(attempts=0)


def test_retention_keeps_last_k_and_the_protected_one() -> None:
    assert versions_to_delete(range(10), keep_last=3) == [0, 1, 2, 3, 4, 5, 6]
    assert versions_to_delete(range(10), keep_last=3, protected=[2]) == [0, 1, 3, 4, 5, 6]
    assert versions_to_delete([4, 5], keep_last=3) == []
    with pytest.raises(ConfigError, match="keep at least 1"):
        versions_to_delete([1], keep_last=0)


def test_prune_deletes_from_the_store(tmp_path: Path) -> None:
    store = LocalCheckpointStore(tmp_path)
    for v in range(6):
        store.put(policy_key("r", v), b"x")
    store.put(policy_key("other", 0), b"x")
    assert prune_policies(store, "r", keep_last=2, protected=[1]) == [0, 2, 3]
    assert store.list("runs/r/policies/") == [policy_key("r", v) for v in (1, 4, 5)]
    assert store.list("runs/other/policies/") == [policy_key("other", 0)]
