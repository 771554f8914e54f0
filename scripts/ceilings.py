"""The "Ceilings" table of docs/performance.md: each hot path against the part beneath it.

Runs the benches that measure a path beside its ceiling in the same run (``rollout.py`` at 8
and 32 envs, ``against_sample_factory.py``, ``replay.py``), or reads their JSON lines from
``--from FILE...``, and prints the Markdown table (path | ceiling | ours | ratio | what
limits it); ``--write`` replaces the table in docs/performance.md between its markers.
Every figure is a bench line; nothing is typed in.

Usage (stack up): ``python scripts/ceilings.py [--quick] [--from lines.jsonl ...] [--write]``
(a table of bench lines, not a bench itself: ``make bench-quick`` runs the benches).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BENCH = REPO / "bench"
DOC = REPO / "docs" / "performance.md"
BEGIN, END = "<!-- ceilings:begin -->", "<!-- ceilings:end -->"


@dataclass(frozen=True)
class Row:
    bench: str
    metric: str
    path: str
    ceiling: str
    limit: str
    num_envs: int | None = None  # which of a bench's runs (rollout: one per vector width ...
    preset: str | None = None  # ... and per preset)


PATHS = (
    Row("rollout", "worker_steps_per_cpu_s", "rollout worker, CartPole (`cartpole-ppo`, 8 envs), "
          "env steps per CPU-second", "the bare vector env, random actions",
          "the act (the actor's 64x64 MLP on 8 rows in one compiled call, ~25 us a vector "
          "step run cold: env + policy alone keeps 0.85-0.87), then the chunker (~21 us a "
          "vector step since 2026-12-08, when its steps were kept and written up to 128 at "
          "a time: 1.146x the worker that wrote each step as it came, paired; it was ~49) "
          "and producing (~0.6 records a vector step, ~10 us of Python each with its "
          "delivery report, and librdkafka's thread: 0.768 of the ceiling without Kafka, "
          "0.739 with). Runs on 2026-12-07 read 0.51-0.73 (four machines), 0.564 on "
          "2026-12-07 late's EPYC before the steps were kept",
          num_envs=8, preset="cartpole-ppo"),
    Row("rollout", "env_policy_steps_per_cpu_s", "env + policy only (no chunker, codec or Kafka)",
          "the bare vector env", "the compiled act's call and its arrays, run cold between "
          "env steps (numpy's act, about 25 calls: 0.59-0.69; 0.805-0.87 since the critic "
          "pass went, 2026-12-07 night)",
          num_envs=8, preset="cartpole-ppo"),
    Row("rollout", "worker_steps_per_cpu_s", "rollout worker, CartPole, 32 envs "
          "(`--set rollout.num_envs=32`)", "the bare vector env, random actions",
          "producing (~1.6 records a vector step: 0.963 of the ceiling without Kafka, "
          "0.839 with) and the act (env + policy alone: 0.952); the chunker's steps kept "
          "and written together since 2026-12-08 (1.09x the worker that wrote each step as "
          "it came, paired). Runs on 2026-12-07 read 0.543-1.0 (four machines)",
          num_envs=32,
          preset="cartpole-ppo"),
    Row("rollout", "env_policy_steps_per_cpu_s", "env + policy only, 32 envs",
          "the bare vector env", "the compiled act, 45 us on 32 rows against 110 for the "
          "numpy act (its 64x64 layers vectorised over outputs, two rows at a time), the "
          "actor's MLP alone since 2026-12-07 night",
          num_envs=32,
          preset="cartpole-ppo"),
    Row("rollout", "worker_steps_per_cpu_s", "rollout worker, LunarLander (`lunarlander-ppo`, "
          "8 envs): an env that costs more per step", "the bare vector env, random actions",
          "a Box2D step costs ~8x CartPole's, so the compiled act, the chunker and the "
          "producer are a few per cent of it (0.775 with the numpy act; 1.024x the worker "
          "that also ran the critic, paired, 2026-12-07 night; 1.012x the worker that wrote "
          "each chunk's record as it finished, 2026-12-07 late; 1.025x the worker that "
          "wrote each step as it came, 2026-12-08)", num_envs=8,
          preset="lunarlander-ppo"),
    Row("rollout", "worker_steps_per_cpu_s", "rollout worker, LunarLander, 32 envs",
          "the bare vector env, random actions", "the chunker's emits and the producer, "
          "shared by 4x the envs", num_envs=32, preset="lunarlander-ppo"),
    Row("rollout", "worker_steps_per_cpu_s", "rollout worker, HalfCheetah (`halfcheetah-sac`, "
          "1 env), env steps per CPU-second", "the bare vector env (MuJoCo), random actions",
          "one env: every step pays the act (the 256x256 numpy pass and the squashed "
          "Gaussian's sampling, 34 us warm, about twice that between MuJoCo steps; a "
          "the compiled act, on since 2026-12-08 after this row was measured: 1.127x the "
          "worker, paired, `bench/rollout.py --numpy-sac`): env + policy alone keeps "
          "0.623. The chunker's steps are kept and written together since 2026-12-08 "
          "(1.019x, paired). 0.627 on 2026-12-07 afternoon's machine (MuJoCo 165 us a "
          "step), 0.517 on the evening's (73 us), 0.623 at night's (~95 us), 0.557 late, on "
          "an EPYC (~150 us): our Python does not speed up as much as MuJoCo does",
          num_envs=1, preset="halfcheetah-sac"),
    Row("rollout", "env_policy_steps_per_cpu_s", "env + policy only, HalfCheetah SAC",
          "the bare vector env", "the squashed Gaussian's 256x256 numpy pass (measured with "
          "the network acting since 2026-12-06 evening; earlier lines drew the uniform "
          "warm-up actions)", num_envs=1, preset="halfcheetah-sac"),
    Row("rollout", "worker_steps_per_cpu_s", "rollout worker, HalfCheetah PPO "
          "(`halfcheetah-ppo`, 1 env, normalised observations)", "the bare vector env (MuJoCo)",
          "the act (compiled: the actor's 256x256 pass and the sampling in one call; since "
          "2026-12-07 night no critic pass, 1.114x the worker that ran it, paired, and the "
          "standardising compiled too; since 2026-12-07 late its normal draws taken in "
          "blocks: 1.059x the worker that asked its generator at every act, paired) and its "
          "own actions: MuJoCo steps the policy's narrow Gaussian (std 0.135) in 64 us "
          "against 55 for the ceiling's uniform actions (more contacts). The act ran 43-50 "
          "us between MuJoCo steps against ~20 warm; env + policy alone keeps 0.749, and "
          "0.776 with 8 envs a worker (worker 0.8). Since 2026-12-08 the chunker's steps "
          "are kept and written together (1.039x the worker that wrote each step, paired), "
          "so the worker keeps about what env + policy does. 0.601 on 2026-12-07 "
          "afternoon's machine, 0.502 on the evening's (twice as fast at MuJoCo), 0.64 at "
          "night's, 0.693 (paired 0.651) late, on an EPYC",
          num_envs=1, preset="halfcheetah-ppo"),
    Row("rollout", "worker_steps_per_cpu_s", "rollout worker, Pong (`pong-ppo`, 8 envs), "
          "env steps per CPU-second", "the bare vector env (ALE, 84x84x4 frames), random "
          "actions", "the Nature CNN's forward pass in torch: about as many CPU-seconds as "
          "the emulator's (env + policy alone: about 0.5); a GPU acting worker is the fix",
          num_envs=8, preset="pong-ppo"),
    Row("sample_factory", "worker_steps_per_cpu_s", "rollout worker (8 envs) against Sample "
          "Factory 2.1.1's sampler (2 workers x 8 envs, its inference worker), CartPole",
          "Sample Factory's env steps per CPU-second of its process tree (a ratio above 1: "
          "ours moves more)", "not a ceiling but the reference sampler; its rollout and "
          "inference workers exchange every step between processes (not profiled here)",
          num_envs=8),
    Row("sample_factory", "equal_processes_env_steps_per_s", "rollout workers at equal "
          "processes: 2 of ours (8 envs each, producing to Kafka) against Sample Factory "
          "2.1.1's sampler with 2 rollout workers (8 envs each), CartPole, env steps/s of wall "
          "time", "Sample Factory's wall-clock env steps/s (a ratio above 1: ours moves more)",
          "not a ceiling but the reference sampler; Sample Factory also runs an inference "
          "worker, a third process, on the same 2 cores", num_envs=8),
    Row("replay", "topic_to_batches_mb_s", "replay: topic -> training batches, MB/s of records",
          "Kafka's own consumer (`kafka-consumer-perf-test`, fetch MB/s)",
          "ours decodes every record into training columns in one Python process (profiled "
          "2026-12-07 after the Tensor headers were matched instead of parsed: librdkafka's "
          "consume() and its Message objects a third of the CPU, the columnar decode under "
          "half, of which the data's copies a third; to_transitions a tenth); Kafka's tool "
          "only counts the bytes it fetched (several JVM threads)"),
)  # fmt: skip


def run_benches(quick: bool) -> list[dict[str, object]]:
    lines: list[dict[str, object]] = []
    for script in ("rollout.py", "rollout.py --set rollout.num_envs=32",
                   "rollout.py --preset lunarlander-ppo",
                   "rollout.py --preset lunarlander-ppo --set rollout.num_envs=32",
                   "rollout.py --preset halfcheetah-sac", "rollout.py --preset halfcheetah-ppo",
                   "rollout.py --preset pong-ppo", "against_sample_factory.py",
                   "replay.py"):  # fmt: skip
        args = [sys.executable, str(BENCH / script.split()[0]), *script.split()[1:]]
        args += ["--quick"] if quick else []
        done = subprocess.run(args, capture_output=True, text=True, check=True, cwd=BENCH)
        lines += [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    return lines


def number(value: object) -> str:
    v = float(value)  # type: ignore[arg-type]
    return f"{v:,.0f}" if abs(v) >= 1000 else f"{v:g}"


def table(lines: list[dict[str, object]]) -> str:
    found = {
        (str(line["bench"]), str(line["metric"]), line.get("num_envs"), line.get("preset")): line
        for line in lines
    }
    rows = ["| path | ceiling | ours | ceiling's figure | ratio | what limits it |",
            "|---|---|---|---|---|---|"]  # fmt: skip
    for p in PATHS:
        line = found.get((p.bench, p.metric, p.num_envs, p.preset))
        if line is None or line.get("value") is None:
            why = "" if line is None else str(line.get("skipped", ""))
            rows.append(f"| {p.path} | {p.ceiling} | not measured {why} | | | |")
            continue
        spread = f" (passes {line['spread']})" if "spread" in line else ""
        paired = f" (paired {line['paired_ratio']})" if "paired_ratio" in line else ""
        rows.append(
            f"| {p.path} | {p.ceiling} | {number(line['value'])} {line['unit']}{spread} | "
            f"{number(line['baseline_value'])} | {line['ratio']}{paired} | {p.limit} |"
        )
    return "\n".join(rows) + "\n"


def write(doc: Path, text: str) -> None:
    page = doc.read_text()
    if BEGIN not in page or END not in page:
        raise SystemExit(f"{doc} has no {BEGIN} ... {END} markers for the table")
    head, rest = page.split(BEGIN, 1)
    doc.write_text(head + BEGIN + "\n" + text + END + rest.split(END, 1)[1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the benches' --quick: < 60 s each")
    parser.add_argument("--from", dest="sources", nargs="*", type=Path, default=None)
    parser.add_argument("--write", action="store_true", help=f"replace the table in {DOC.name}")
    args = parser.parse_args()
    if args.sources:
        lines = [json.loads(x) for f in args.sources for x in f.read_text().splitlines() if x]
    else:
        lines = run_benches(args.quick)
        for line in lines:
            print(json.dumps(line))
    text = table(lines)
    if args.write:
        write(DOC, text)
    else:
        print(text, file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
