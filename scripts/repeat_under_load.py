"""Run tests N times under busy loops and count each test's passes: the check every test
that waits on time, signals, scheduling or learning must pass before CI relies on it
(docs/testing.md, "Tests that could pass by luck").

    .venv/bin/python scripts/repeat_under_load.py --runs 20 --busy 2 -- tests/cli/test_with_stack.py

Each run is a fresh pytest process (a failure in one run cannot leak into the next) with a
JUnit report; the busy loops (`yes`, one per ``--busy``) spin for the whole time, as a
loaded 2-core CI machine's other work does. Prints one line per run and then one per test:
``passed/runs`` with the slowest duration seen and how many runs skipped it (a skip is
not a pass: with ``COACH_STREAM_REQUIRE_SERVICES=1``, as CI sets, a service that could not
start fails instead). ``--out FILE`` also appends the per-test lines as JSON, and
``FILE`` with its suffix replaced by ``.runs.jsonl`` gets each run's outcomes as the run
ends. Exit 1 when any test failed or was skipped in any run.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ElementTree
from collections import defaultdict
from pathlib import Path

from coach_stream.testing.load import busy_loops

REPO = Path(__file__).resolve().parents[1]


def skipped(report: Path) -> list[str]:
    """The test cases a JUnit report says were skipped (not run: never counted as passed)."""
    return [
        f"{case.get('classname', '')}::{case.get('name', '')}"
        for case in ElementTree.parse(report).getroot().iter("testcase")
        if case.find("skipped") is not None
    ]


def outcomes(report: Path) -> dict[str, tuple[bool, float, str]]:
    """Each test case of a JUnit report: (passed, seconds, why it failed); a skip counts as
    not run (``skipped`` lists them)."""
    found: dict[str, tuple[bool, float, str]] = {}
    for case in ElementTree.parse(report).getroot().iter("testcase"):
        if case.find("skipped") is not None:
            continue
        name = f"{case.get('classname', '')}::{case.get('name', '')}"
        failure = case.find("failure")
        failure = failure if failure is not None else case.find("error")
        why = "" if failure is None else (failure.get("message") or "")[:400]
        found[name] = (failure is None, float(case.get("time") or 0.0), why)
    return found


def record_run(path: Path, run: int, found: dict[str, tuple[bool, float, str]]) -> None:
    """Append one JSON line per test of run ``run``: whether it passed and how long it took."""
    with path.open("a") as out:
        for name, (passed, seconds, _) in found.items():
            line = {"run": run, "test": name, "passed": passed, "seconds": round(seconds, 1)}
            out.write(json.dumps(line) + "\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--busy", type=int, default=2, help="busy loops (default 2)")
    parser.add_argument("--out", type=Path, help="append per-test JSON lines here")
    parser.add_argument("pytest_args", nargs="+", help="after --: what pytest runs")
    args = parser.parse_args()
    if args.runs < 1 or args.busy < 0:
        parser.error("--runs must be at least 1 and --busy at least 0")
    passes: dict[str, int] = defaultdict(int)
    seen: dict[str, int] = defaultdict(int)
    slowest: dict[str, float] = defaultdict(float)
    skips: dict[str, int] = defaultdict(int)
    pytest = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    with tempfile.TemporaryDirectory() as scratch, busy_loops(args.busy):
        for run in range(args.runs):
            report = Path(scratch) / f"run-{run}.xml"
            began = time.monotonic()
            done = subprocess.run(
                [*pytest, f"--junitxml={report}", *args.pytest_args],
                cwd=REPO,
                capture_output=True,
                text=True,
                check=False,
            )
            found = outcomes(report) if report.exists() else {}
            for name in skipped(report) if report.exists() else []:
                skips[name] += 1
            for name, (passed, seconds, _) in found.items():
                seen[name] += 1
                passes[name] += passed
                slowest[name] = max(slowest[name], seconds)
            failed = [f"{name}: {why}" for name, (passed, _, why) in found.items() if not passed]
            if args.out is not None:  # each run as it ends: a batch stopped early keeps them
                record_run(args.out.with_suffix(".runs.jsonl"), run + 1, found)
            load = os.getloadavg()[0]
            print(
                f"run {run + 1}/{args.runs}: exit {done.returncode}, {len(found)} tests, "
                f"{len(failed)} failed, {time.monotonic() - began:.0f} s, load {load:.1f}"
                + "".join(f"\n  FAILED {name}" for name in failed),
                flush=True,
            )
    for name in sorted(set(seen) | set(skips)):
        line = {"test": name, "passed": passes[name], "runs": seen[name],
                "skipped": skips[name], "slowest_s": round(slowest[name], 1),
                "busy_loops": args.busy}  # fmt: skip
        skip_note = f"  ({skips[name]} runs skipped it: not run)" if skips[name] else ""
        print(f"{passes[name]}/{seen[name]}  {slowest[name]:6.1f} s  {name}{skip_note}")
        if args.out is not None:
            with args.out.open("a") as out:
                out.write(json.dumps(line) + "\n")
    return 0 if all(passes[n] == seen[n] for n in seen) and not any(skips.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
