"""The generated reference pages are current: docs/reference/*.md equal what
``python -m coach_stream.docs_gen`` renders from the code now."""

from __future__ import annotations

from pathlib import Path

import pytest

from coach_stream.config import Preset
from coach_stream.docs_gen import PAGES, reference_dir, render
from coach_stream.docs_gen.__main__ import main as docs_gen_main

ROOT = Path(__file__).resolve().parents[2]
FIX = "regenerate it with `python -m coach_stream.docs_gen` and commit the result"


@pytest.mark.parametrize("page", sorted(PAGES))
def test_the_committed_page_is_current(page: str) -> None:
    path = reference_dir(ROOT) / page
    assert path.is_file(), f"{path} is missing; {FIX}"
    assert path.read_text(encoding="utf-8") == render(page), f"{path} is out of date; {FIX}"


def test_the_config_page_lists_every_key_with_a_description() -> None:
    text = render("config.md")
    rows = [line for line in text.splitlines() if line.startswith("| `")]
    for name in Preset.model_fields:
        assert f"| `{name}` |" in text or f"## `{name}:`" in text, name
    undocumented = [row.split("|")[1].strip() for row in rows if row.rstrip().endswith("|  |")]
    assert undocumented == [], "fields without a docstring in coach_stream/config.py"


def test_the_cli_page_has_every_command_and_option() -> None:
    import typer.main

    from coach_stream.cli.main import build_app

    text = render("cli.md")
    launch = typer.main.get_command(build_app()).commands["launch"]  # type: ignore[attr-defined]
    for param in launch.params:
        shown = param.name.upper() if type(param).__name__ == "TyperArgument" else param.opts[0]
        assert f"`{shown}`" in text, shown
    for command in ("launch", "status", "report", "replay inspect", "stack up"):
        assert f"`coach-stream {command}`" in text, command


def test_check_mode_fails_on_a_stale_page(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = reference_dir(tmp_path)
    folder.mkdir(parents=True)
    for page in PAGES:
        (folder / page).write_text(render(page), encoding="utf-8")
    # `python -m coach_stream.docs_gen` calls this main; in this process, torch is imported once
    check = ["--check", "--root", str(tmp_path)]
    assert docs_gen_main(check) == 0
    (folder / "config.md").write_text("stale\n", encoding="utf-8")
    capsys.readouterr()
    assert docs_gen_main(check) == 1
    assert "config.md" in capsys.readouterr().err
