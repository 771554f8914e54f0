"""Reference pages generated from the code, so they cannot drift from it.

``python -m coach_stream.docs_gen`` writes ``docs/reference/config.md`` (from the pydantic
preset models in ``coach_stream.config``) and ``docs/reference/cli.md`` (from the CLI's
own click commands); ``--check`` writes nothing and exits 1 when a committed page is out
of date. ``tests/unit/test_docs_reference.py`` runs the same comparison.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

PAGES: dict[str, str] = {
    "config.md": "coach_stream.docs_gen.config_ref",
    "cli.md": "coach_stream.docs_gen.cli_ref",
}
"""Each generated page under ``docs/reference/`` and the module that renders it."""


def render(page: str) -> str:
    """The current text of one page (``PAGES``' key)."""
    import importlib

    module = importlib.import_module(PAGES[page])
    renderer: Callable[[], str] = module.render
    return renderer()


def reference_dir(root: Path) -> Path:
    return root / "docs" / "reference"
