"""Shared by unit and integration tests: marks every test under tests/integration."""

from __future__ import annotations

from pathlib import Path

import pytest

_INTEGRATION = Path(__file__).parent / "integration"

# The Nomad API double's fixtures (nomad_double, nomad_double_factory, nomad_double_session).
pytest_plugins = ["nomad_double.fixtures"]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if _INTEGRATION in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.integration)
