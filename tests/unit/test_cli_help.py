"""Every command's ``--help`` reads as its docstring was written (issue 20): each paragraph
whole and in order, ``[bracketed]`` text kept (rich markup must not eat it), and a line
broken only where the terminal's width forced it, never where the source file's was.

The commands are read from the CLI itself, so a new command is checked without listing it.
"""

from __future__ import annotations

import functools
import io
import itertools
import re
from collections.abc import Iterator
from contextlib import redirect_stdout
from typing import Any

import pytest
import typer.main

from coach_stream.cli.main import build_app, main

WIDTH = 100
"""The terminal's width for every help rendered here (COLUMNS), so the layout is stable."""

PAD = 1
"""Typer's help text has one column of padding on each side, inside the terminal's width."""


def _walk(command: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    yield path, command
    for name, subcommand in sorted(getattr(command, "commands", {}).items()):
        if not subcommand.hidden:
            yield from _walk(subcommand, (*path, name))


COMMANDS = dict(_walk(typer.main.get_command(build_app())))
"""Each command's path (``()`` is ``coach-stream`` itself) and its click command, whose
``help`` is the docstring as typer read it, before the CLI prepares it for rich."""

GROUPS = [path for path, command in COMMANDS.items() if getattr(command, "commands", None)]


def _id(path: tuple[str, ...]) -> str:
    return " ".join(path) or "coach-stream"


@functools.cache
def _help(path: tuple[str, ...]) -> list[str]:
    """``coach-stream PATH --help`` as printed on a WIDTH-column terminal, line by line."""
    with pytest.MonkeyPatch.context() as env, redirect_stdout(io.StringIO()) as out:
        env.setenv("COLUMNS", str(WIDTH))
        assert main([*path, "--help"]) == 0
    lines = out.getvalue().splitlines()
    # Rich pads every line to the terminal's width: proof that COLUMNS was honoured.
    assert max(map(len, lines)) == WIDTH
    return lines


def _words(text: str) -> str:
    return " ".join(text.split())


def _doc_paragraphs(text: str | None) -> list[str]:
    """The docstring's paragraphs (blank-line separated), whitespace normalised."""
    return [_words(block) for block in re.split(r"\n\s*\n", (text or "").strip()) if block]


def _description(lines: list[str]) -> list[list[str]]:
    """The paragraphs the help prints between its usage line and its first panel."""
    usage = next(i for i, line in enumerate(lines) if line.strip().startswith("Usage:"))
    end = next((i for i, line in enumerate(lines) if line.startswith("╭")), len(lines))
    after_usage = next(i for i in range(usage, end) if not lines[i].strip())
    paragraphs: list[list[str]] = [[]]
    for line in lines[after_usage:end]:
        if line.strip():
            paragraphs[-1].append(line.strip())
        elif paragraphs[-1]:
            paragraphs.append([])
    return [paragraph for paragraph in paragraphs if paragraph]


def _command_rows(lines: list[str]) -> tuple[dict[str, list[str]], int]:
    """The Commands panel: each command's summary, line by line, and the summary's width."""
    start = next(i for i, line in enumerate(lines) if line.startswith("╭─ Commands"))
    end = next(i for i in range(start, len(lines)) if lines[i].startswith("╰"))
    inside = [line[1:-1] for line in lines[start + 1 : end]]  # between the panel's borders
    first = re.match(r" \S+ +", inside[0])
    assert first, inside[0]
    column = first.end()  # where the summaries start; names are padded to one width
    rows: dict[str, list[str]] = {}
    name = ""
    for line in inside:
        name = line[:column].strip() or name  # a wrapped summary's next line has no name
        rows.setdefault(name, []).append(line[column:].strip())
    return rows, len(inside[0]) - column - PAD


def _forced_breaks_only(lines: list[str], width: int) -> list[str]:
    """The line breaks that width did not force: the next word would have fitted."""
    return [
        f"{line!r} / {after.split()[0]!r}"
        for line, after in itertools.pairwise(lines)
        if len(line) + 1 + len(after.split()[0]) <= width
    ]


def test_logs_help_shows_the_task_prefix_literally() -> None:
    """Rich took ``[task]`` for a style tag: "prefixed with  (on Nomad"."""
    assert "prefixed with [task] (on Nomad" in _words("\n".join(_help(("logs",))))


@pytest.mark.parametrize("path", list(COMMANDS), ids=_id)
def test_help_keeps_the_bracketed_text(path: tuple[str, ...]) -> None:
    shown = _words("\n".join(_help(path)))
    for bracketed in re.findall(r"\[[^\]]*\]", COMMANDS[path].help or ""):
        assert _words(bracketed) in shown, bracketed


@pytest.mark.parametrize("path", list(COMMANDS), ids=_id)
def test_help_shows_every_paragraph_whole_and_in_order(path: tuple[str, ...]) -> None:
    shown = [_words(" ".join(paragraph)) for paragraph in _description(_help(path))]
    assert shown == _doc_paragraphs(COMMANDS[path].help)


@pytest.mark.parametrize("path", list(COMMANDS), ids=_id)
def test_help_breaks_a_paragraph_only_where_the_width_does(path: tuple[str, ...]) -> None:
    for paragraph in _description(_help(path)):
        assert _forced_breaks_only(paragraph, WIDTH - 2 * PAD) == []


@pytest.mark.parametrize("path", GROUPS, ids=_id)
def test_a_group_lists_each_commands_summary_whole(path: tuple[str, ...]) -> None:
    """The Commands panel shows each command's first paragraph, wrapped to its column."""
    rows, width = _command_rows(_help(path))
    for name, command in COMMANDS[path].commands.items():
        if command.hidden:
            continue
        assert _words(" ".join(rows[name])) == _doc_paragraphs(command.help)[0], name
        assert _forced_breaks_only(rows[name], width) == [], name
