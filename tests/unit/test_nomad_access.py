"""``with_nomad_access``: the four ``--nomad-*`` options, declared once, reach a command as one
``NomadAccess``; the command's own options and docstring are kept."""

from __future__ import annotations

import pytest
import typer
from typer.testing import CliRunner

from coach_stream.cli.nomad import NomadAccess, with_nomad_access

seen: list[tuple[str, NomadAccess]] = []


@with_nomad_access
def show(run_id: str = typer.Argument(...), *, nomad: NomadAccess) -> None:
    """Show a run."""
    seen.append((run_id, nomad))


def app() -> typer.Typer:
    application = typer.Typer()
    application.command("show")(show)
    application.command("other")(lambda: None)  # two commands: "show" stays a subcommand
    return application


def test_the_options_arrive_as_one_access_object() -> None:
    seen.clear()
    args = ["show", "r1", "--nomad-addr", "http://n:4646", "--nomad-token", "t",
            "--nomad-namespace", "ns", "--nomad-region", "eu"]  # fmt: skip
    result = CliRunner().invoke(app(), args)
    assert result.exit_code == 0, result.output
    assert seen == [("r1", NomadAccess("http://n:4646", "t", "ns", "eu"))]


def test_unset_options_are_none_and_the_help_lists_them() -> None:
    seen.clear()
    assert CliRunner().invoke(app(), ["show", "r2"]).exit_code == 0
    assert seen == [("r2", NomadAccess())]
    shown = CliRunner().invoke(app(), ["show", "--help"], env={"COLUMNS": "200"}).output
    assert "Show a run." in shown
    for flag in ("--nomad-addr", "--nomad-token", "--nomad-namespace", "--nomad-region"):
        assert flag in shown


def test_configured_follows_the_flag_then_nomad_addr(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NOMAD_ADDR", raising=False)
    assert not NomadAccess().configured
    assert NomadAccess(addr="http://n:4646").configured
    monkeypatch.setenv("NOMAD_ADDR", "http://m:4646")
    assert NomadAccess().configured
