"""pytest fixtures for the Nomad double (loaded from tests/conftest.py via ``pytest_plugins``).

- ``nomad_contract`` (session): Nomad's routes and Go API types (the checker is built into
  the cache the first time; without Go or the module proxy: skip, or fail with
  ``COACH_STREAM_REQUIRE_SERVICES=1``), plus the OpenAPI layer where ``NOMAD_OPENAPI_SPEC``
  names a file.
- ``nomad_double_factory`` (function): ``make(**kwargs) -> NomadDouble`` (kwargs of
  :class:`NomadDouble`, e.g. ``token=None`` for ACLs off, ``unknown_keys="record"``).
- ``nomad_double`` (function): one double with ACLs on (a random token).
- ``nomad_double_session`` (session): one double shared by a whole session.

Every double is stopped at teardown (all its processes killed), and the teardown fails the
test when one of the double's own responses broke Nomad's API.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from .apicheck import ApiCheckUnavailableError
from .contract import Contract
from .double import NomadDouble, shared_contract

MakeDouble = Callable[..., NomadDouble]


def contract_or_skip() -> Contract:
    """The contract; when the checker cannot be built: skip, or fail when services are
    required (CI)."""
    try:
        return shared_contract()
    except ApiCheckUnavailableError as error:
        if os.environ.get("COACH_STREAM_REQUIRE_SERVICES") == "1":
            pytest.fail(f"{error} (COACH_STREAM_REQUIRE_SERVICES=1)", pytrace=False)
        pytest.skip(str(error))


@pytest.fixture(scope="session")
def nomad_contract() -> Contract:
    return contract_or_skip()


def _finish(doubles: list[NomadDouble]) -> None:
    bad: list[str] = []
    for double in doubles:
        double.stop()
        bad.extend(str(v) for v in double.response_violations)
    if bad:
        pytest.fail("the Nomad double answered outside Nomad's API:\n" + "\n".join(bad))


@pytest.fixture
def nomad_double_factory(nomad_contract: Contract) -> Iterator[MakeDouble]:
    made: list[NomadDouble] = []

    def make(**kwargs: Any) -> NomadDouble:
        kwargs.setdefault("token", str(uuid.uuid4()))
        double = NomadDouble(contract=nomad_contract, **kwargs)
        made.append(double)
        return double

    yield make
    _finish(made)


@pytest.fixture
def nomad_double(nomad_double_factory: MakeDouble) -> NomadDouble:
    return nomad_double_factory()


@pytest.fixture(scope="session")
def nomad_double_session(nomad_contract: Contract) -> Iterator[NomadDouble]:
    double = NomadDouble(contract=nomad_contract, token=str(uuid.uuid4()))
    yield double
    _finish([double])
