"""pytest fixtures for the Nomad double (loaded from tests/conftest.py via ``pytest_plugins``).

- ``nomad_openapi_spec`` (session): the parsed description; missing -> skip, or fail with
  ``COACH_STREAM_REQUIRE_SERVICES=1``.
- ``nomad_double_factory`` (function): ``make(**kwargs) -> NomadDouble`` (kwargs of
  :class:`NomadDouble`, e.g. ``token=None`` for ACLs off, ``unknown_keys="record"``).
- ``nomad_double`` (function): one double with ACLs on (a random token).
- ``nomad_double_session`` (session): one double shared by a whole session.

Every double is stopped at teardown (all its processes killed), and the teardown fails the
test when one of the double's own responses broke the description.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from .double import NomadDouble, SpecMissingError, load_spec, spec_path
from .openapi import OpenAPISpec

MakeDouble = Callable[..., NomadDouble]


def spec_or_skip() -> OpenAPISpec:
    """The description; missing: skip, or fail when services are required (CI)."""
    try:
        return load_spec(spec_path())
    except SpecMissingError as error:
        if os.environ.get("COACH_STREAM_REQUIRE_SERVICES") == "1":
            pytest.fail(f"{error} (COACH_STREAM_REQUIRE_SERVICES=1)", pytrace=False)
        pytest.skip(str(error))


@pytest.fixture(scope="session")
def nomad_openapi_spec() -> OpenAPISpec:
    return spec_or_skip()


def _finish(doubles: list[NomadDouble]) -> None:
    bad: list[str] = []
    for double in doubles:
        double.stop()
        bad.extend(str(v) for v in double.response_violations)
    if bad:
        pytest.fail(
            "the Nomad double answered outside Nomad's OpenAPI description:\n" + "\n".join(bad)
        )


@pytest.fixture
def nomad_double_factory(nomad_openapi_spec: OpenAPISpec) -> Iterator[MakeDouble]:
    made: list[NomadDouble] = []

    def make(**kwargs: Any) -> NomadDouble:
        kwargs.setdefault("token", str(uuid.uuid4()))
        double = NomadDouble(spec=nomad_openapi_spec, **kwargs)
        made.append(double)
        return double

    yield make
    _finish(made)


@pytest.fixture
def nomad_double(nomad_double_factory: MakeDouble) -> NomadDouble:
    return nomad_double_factory()


@pytest.fixture(scope="session")
def nomad_double_session(nomad_openapi_spec: OpenAPISpec) -> Iterator[NomadDouble]:
    double = NomadDouble(spec=nomad_openapi_spec, token=str(uuid.uuid4()))
    yield double
    _finish([double])
