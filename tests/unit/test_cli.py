from __future__ import annotations

import io
import subprocess
import sys
from contextlib import redirect_stdout

import pytest
import typer
import typer.main

from coach_stream import __version__
from coach_stream.cli.help_text import show_as_written
from coach_stream.cli.main import build_app, build_listing, main
from coach_stream.cli.options import checkpoint_url
from coach_stream.errors import ConfigError


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"coach-stream {__version__}"


def test_help_lists_the_stack(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    assert "stack" in capsys.readouterr().out


def _rendered_help(app: typer.Typer) -> str:
    cli = show_as_written(typer.main.get_command(app))
    with pytest.MonkeyPatch.context() as env, redirect_stdout(io.StringIO()) as out:
        env.setenv("COLUMNS", "100")
        cli(args=["--help"], standalone_mode=False)
    return out.getvalue()


def test_the_listing_says_what_every_command_group_says_of_itself() -> None:
    """``coach-stream --help`` is built from COMMAND_SUMMARIES, not from the groups: the
    same text, in the same order, as the CLI with every group imported."""
    listing = _rendered_help(build_listing())
    assert "replay" in listing and "export-policy" in listing
    assert listing == _rendered_help(build_app())


def test_the_listing_imports_no_command_group() -> None:
    code = (
        "import sys; from coach_stream.cli.main import main; main(['--help']); "
        "print('IMPORTED', 'torch' in sys.modules, 'coach_stream.cli.launch' in sys.modules, "
        "file=sys.stderr)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    imported = [line for line in done.stderr.splitlines() if line.startswith("IMPORTED")]
    assert imported == ["IMPORTED False False"]


def test_env_before_any_up_is_one_clear_error(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["stack", "env", "--cache-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "coach-stream stack up" in err
    assert "Traceback" not in err


def test_exit_codes_of_commands_reach_the_caller(
    tmp_path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`stack status` raises typer.Exit(1) with its services stopped: main returns 1, not 0."""
    assert main(["stack", "status", "--cache-dir", str(tmp_path)]) == 1
    assert "stopped" in capsys.readouterr().out


@pytest.mark.parametrize(
    "argv",
    [
        ["launch", "cartpole-ppo", "--workers", "0"],
        ["launch", "cartpole-ppo", "--no-such-flag"],
        ["no-such-command"],
        ["stack", "no-such-command"],
    ],
)
def test_usage_errors_are_one_line_and_exit_2(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1
    assert "--help" in err


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("gs://bucket", "gs://bucket"),
        ("gs://bucket/some/prefix", "gs://bucket/some/prefix"),
        ("file:///abs/dir", "file:///abs/dir"),
    ],
)
def test_checkpoint_urls_that_are_kept(given: str, expected: str) -> None:
    assert checkpoint_url(given) == expected


def test_checkpoint_dirs_become_file_urls(tmp_path) -> None:
    assert checkpoint_url(str(tmp_path / "ckpt")) == (tmp_path / "ckpt").as_uri()
    assert checkpoint_url(None, tmp_path / "state") == (tmp_path / "state/checkpoints").as_uri()


@pytest.mark.parametrize(
    ("given", "says"),
    [
        ("s3://bucket/x", "unsupported scheme 's3'"),
        ("http://host/x", "unsupported scheme 'http'"),
        ("gs://", "names no bucket"),
        ("gs:///prefix", "names no bucket"),
        ("file://host/dir", "not a local file URL"),
    ],
)
def test_checkpoint_urls_that_are_refused(given: str, says: str) -> None:
    with pytest.raises(ConfigError, match=says):
        checkpoint_url(given)


TWO_RANKS = ["train", "--preset", "cartpole-ppo", "--run-id", "r", "--set", "trainer.count=2"]


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["launch", "cartpole-ppo", "--trainers", "0"], "--trainers"),
        (["launch", "cartpole-ppo", "--workers", "2", "--trainers", "3"], "use --trainers 2"),
        (["train", "--preset", "cartpole-ppo", "--run-id", "r", "--rank", "1"], "--rank 1"),
        (TWO_RANKS, "needs --rendezvous"),
        (
            [*TWO_RANKS, "--rendezvous", "${NOMAD_ADDR_rendezvous}", "--announce-rendezvous"],
            "--rendezvous must be HOST:PORT (where rank 0 listens), got '${NOMAD_ADDR_rend",
        ),
        ([*TWO_RANKS, "--rendezvous", "10.0.0.1:70000"], "--rendezvous must be HOST:PORT"),
        # one trainer never meets another, but a malformed address is still a typo to report
        ([*TWO_RANKS[:5], "--rendezvous", "nohost"], "--rendezvous must be HOST:PORT"),
    ],
)
def test_bad_trainer_ranks_are_one_line_and_exit_2(
    argv: list[str], says: str, tmp_path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Refused before anything is created: no service is reachable at these addresses."""
    where = ["--kafka", "127.0.0.1:9", "--state-dir", str(tmp_path)]
    if argv[0] == "train":
        where = ["--kafka", "127.0.0.1:9", "--checkpoints", str(tmp_path / "ckpt")]
    assert main([*argv, *where]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1, err
    assert says in err
    assert not (tmp_path / "ckpt").exists()
