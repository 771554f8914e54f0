"""How often a preset solves: N real launches (`coach-stream launch`, the local orchestrator,
the real stack), optionally under busy loops, with the preset as it is as the baseline.

A learning test in CI is only as reliable as its preset's worst launch, so this counts
launches, not seconds. Each launch is one JSON line (solved or not, env steps, wall time,
the load average when it ended); the summary line is the variant's solved count with the
baseline's beside it when ``--baseline`` runs the unchanged preset interleaved with it (the
same load for both). Nothing is tuned per launch: every launch uses the preset's seed, so the
spread is what the processes' scheduling does to the order of experience, which is what
varies from one CI run to the next.

Usage (stack up): ``python bench/launches.py cartpole-impala --launches 20 --busy 2
[--set impala.norm_adv=true ...] [--baseline]``. ``--quick``: 2 launches of cartpole-ppo.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import jsonl
from jsonl import emit

from coach_stream.testing.load import busy_loops

CLI = Path(sys.executable).with_name("coach-stream")
_STEPS = re.compile(r"^env steps: ([\d,]+)", re.MULTILINE)


def launch(preset: str, overrides: list[str], workers: int, state_dir: Path) -> dict[str, object]:
    """One launch followed to its end; what it printed decides solved and env steps."""
    run_id = f"bench-{preset}-{uuid.uuid4().hex[:8]}"
    argv = [str(CLI), "launch", preset, "--run-id", run_id, "--workers", str(workers)]
    argv += ["--state-dir", str(state_dir)]
    for override in overrides:
        argv += ["--set", override]
    began = time.monotonic()
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    wall = time.monotonic() - began
    steps = _STEPS.search(done.stdout)
    if done.returncode not in (0, 1) or steps is None:  # no run's end: a real error
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        raise SystemExit(f"launch of {preset} failed with exit {done.returncode}: {tail}")
    best, rounds = best_evaluation(state_dir / "runs" / run_id / "logs" / "evaluator.log")
    return {
        "run_id": run_id,
        "solved": done.returncode == 0,
        "best_eval": best,
        "eval_rounds": rounds,
        "env_steps": int(steps.group(1).replace(",", "")) if steps else None,
        "wall_s": round(wall, 1),
        "load1": round(os.getloadavg()[0], 2),
    }


def best_evaluation(log: Path) -> tuple[float | None, int]:
    """The best round mean the evaluator reported (each round is ``eval_episodes`` greedy
    episodes of one version), and how many rounds: how close an unsolved launch came."""
    means = []
    for line in log.read_text().splitlines() if log.exists() else []:
        with contextlib.suppress(ValueError):
            event = json.loads(line)
            if isinstance(event, dict) and event.get("event") == "evaluation":
                means.append(float(event["mean_return"]))
    return (max(means) if means else None), len(means)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("preset", nargs="?", default="cartpole-ppo")
    parser.add_argument("--launches", type=int, default=20)
    parser.add_argument("--busy", type=int, default=0, help="busy loops while launching")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    parser.add_argument("--baseline", action="store_true", help="also the preset unchanged")
    parser.add_argument("--quick", action="store_true", help="2 launches of cartpole-ppo")
    args = parser.parse_args()
    if args.quick:
        args.preset, args.launches = "cartpole-ppo", 2
    if args.launches < 1 or args.busy < 0:
        parser.error("--launches must be at least 1 and --busy at least 0")
    sides = [("variant", args.overrides)] + ([("baseline", [])] if args.baseline else [])
    solved = {side: 0 for side, _ in sides}
    with tempfile.TemporaryDirectory(prefix="bench-launches-") as state, busy_loops(args.busy):
        for index in range(args.launches):
            for side, overrides in sides:
                outcome = launch(args.preset, overrides, args.workers, Path(state))
                solved[side] += bool(outcome["solved"])
                line = {"preset": args.preset, "side": side, "launch": index, **outcome}
                print(json.dumps({"bench": "launches", **line}), flush=True)
    baseline = solved.get("baseline")
    emit(
        "launches",
        f"{args.preset}_solved_of_{args.launches}",
        solved["variant"],
        "launches",
        "preset unchanged" if args.baseline else None,
        baseline,
        overrides=args.overrides,
        busy_loops=args.busy,
        workers=args.workers,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(jsonl.run(main))
