"""Help text shown as its docstring was written: whole paragraphs, brackets kept.

Typer renders ``--help`` with rich markup, which mangles plain docstrings two ways: it
takes ``[task]`` for a style tag and drops it, and it keeps the source's hard line breaks
inside every paragraph after the first, so a docstring wrapped for a 100-column source file
shows lines broken mid-sentence ("... for a" / "local run ..."). Docstrings here are plain
prose, so the whole command tree's help is rewritten once, in ``show_as_written``: each
paragraph on one line (rich wraps it to the terminal's width) with its markup escaped.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from rich.markup import escape

if TYPE_CHECKING:
    # typer vendors click; this is the type ``typer.main.get_command`` returns.
    from typer import _click

_BLANK_LINE = re.compile(r"\n\s*\n")


def paragraphs(text: str | None) -> list[str]:
    """``text``'s paragraphs (split at blank lines), each with its line breaks joined.

    The docs generator (``coach_stream.docs_gen.cli_ref``) uses this too, so the CLI
    reference shows the same paragraphs as ``--help``.
    """
    blocks = _BLANK_LINE.split((text or "").strip())
    return [joined for block in blocks if (joined := " ".join(block.split()))]


def as_written(text: str | None) -> str | None:
    """``text`` as rich markup that shows it literally, one line per paragraph."""
    if text is None:
        return None
    return "\n\n".join(escape(paragraph) for paragraph in paragraphs(text))


def show_as_written(command: _click.Command) -> _click.Command:
    """``command``, every command under it and their parameters, with help ``as_written``."""
    for attribute in ("help", "short_help", "epilog"):
        setattr(command, attribute, as_written(getattr(command, attribute, None)))
    for param in command.params:
        if getattr(param, "help", None):
            param.help = as_written(param.help)  # type: ignore[attr-defined]
    for subcommand in getattr(command, "commands", {}).values():
        show_as_written(subcommand)
    return command
