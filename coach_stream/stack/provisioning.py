"""Saying what the stack is doing while it provisions and starts (``stack up``'s spinner).

The first ``stack up`` fetches the broker's jars with Maven and builds fake-gcs-server with
``go install``: minutes on a slow link, silent unless someone reports it. The stack's
functions take a ``Steps`` callback (``stack up`` shows it on a terminal; tests collect
it); the tools' output goes line by line to the provisioning log and, shortened to what a
person wants to see (the artifact being fetched), to the callback.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable, Mapping
from pathlib import Path

Steps = Callable[[str], None]
"""``steps(text)``: what the stack is doing now, one short line."""


def no_steps(_text: str) -> None:
    return None


_MAVEN = re.compile(r"Download(?:ed|ing) from \S+: \S+/([^/\s]+?)(?: \((.*?)(?: at .*)?\))?$")
_GO = re.compile(r"^go: (downloading|extracting|finding) (\S+)(?: (\S+))?")


def describe_line(line: str) -> tuple[bool, str] | None:
    """``(fetched, what)`` for a Maven or Go output line worth showing (``fetched``: one
    more artifact or module is here), or None for the rest."""
    text = line.strip()
    if match := _MAVEN.search(text):
        name, size = match.group(1), match.group(2)
        if "Downloaded" in text:
            return True, name + (f" ({size})" if size else "")
        return False, f"{name} …"
    if match := _GO.match(text):
        module = f"{match.group(2)} {match.group(3) or ''}".rstrip()
        return match.group(1) == "downloading", module
    return None


def run_logged(
    argv: list[str],
    log: Path,
    what: str,
    steps: Steps = no_steps,
    env: Mapping[str, str] | None = None,
) -> int:
    """Run ``argv`` to its end, its output appended to ``log`` and reported to ``steps`` as
    ``"<what>: <n> fetched · <artifact>"``; the exit code."""
    log.parent.mkdir(parents=True, exist_ok=True)
    steps(what)
    fetched = 0
    with (
        log.open("ab") as out,
        subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env
        ) as process,
    ):
        assert process.stdout is not None  # stdout=PIPE
        for raw in process.stdout:
            out.write(raw)
            described = describe_line(raw.decode("utf-8", errors="replace"))
            if described is None:
                continue
            done, detail = described
            fetched += done
            steps(f"{what}: {fetched} fetched · {detail}")
        out.flush()
        return process.wait()
