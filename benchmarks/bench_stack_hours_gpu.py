"""Issue 27's "hours with the best stack": the ruling's 4B voice (23.4M real tokens a job, 3 arms x 2 seeds)
priced on the demo corpus with the best batching and the best stack, then replayed with that stack.

Four labprobe commands, each written to $OUT/stack_hours_commands.sh before it runs and its --json kept:
1. `probe carrier` on random-weight Qwen3-4B-Base at the replay's widest batch (3 x 2,048; --batch-size), rows
   packed as goodput's best batching packs them (--rows), rank-32 LoRA,
   through --harness (default benchmarks.harness_plain, the step issue 27's stacks improve on): `--search`
   for the fastest stack, or `--stack NAME` measured beside the baseline (faster: no search) -> carrier.json.
2. `probe replay` of the baseline (the fit measured in its own session serves as the profile, as in
   README's goodput example) on benchmarks/data/demo_lengths_qwen3.csv, batch 3, max length 2,048 ->
   replay_baseline.json (or --baseline-profile FILE: an earlier one, measured through the same harness).
3. `probe goodput` with --profile replay_baseline.json --stack-json carrier.json and the ruling's budget:
   every strategy priced with the stack; summary `priced_with`, `best_hours_per_job`, `baseline_hours_per_job`
   -> goodput_stack.json.
4. `probe replay --variant STACK --profile replay_baseline.json --stack-json carrier.json`: the same batches
   run with the stack, predicted as goodput priced them -> replay_stack.json.
Verdict (stack_hours_summary.json, printed last): goodput's best strategy among those replayed (`packed`,
often the best, is replayed too: rows of concatenated samples, positions restarting at each) and
|error_pct| <= 5 for every replayed strategy.

On an H200 one device call holds at most 600 s: run it in phases with the same --out (carried from one call
to the next), `--phase carrier` (the carrier with --stack: 5 minutes on 2026-12-05, the baseline's and the
stack's fresh processes, compile and numerics included), `--phase baseline` (the baseline's replay: its fit,
then 4 strategies x --num-steps steps, packed rows of 6 x 2,048 at 1.1 s a step; more than 4.5 minutes at 80
steps), then `--phase rest` (the pricing and the stacked replay with its compiles); `--phase first` is
carrier and baseline in one call (at 3 x 2,048 and 60 steps on an H100: 3.5 and 5 minutes, within one
call's 10). With `--from DIR` a later phase reads the earlier files from DIR and writes only its own into
--out. `--tiny` runs all four on the CPU with a tiny random Qwen3 in seconds a step
(a dry run of the commands: its figures are no GPU result).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHECKPOINT = ROOT / "demo" / "checkpoints" / "qwen3-4b-base"
LENGTHS = ROOT / "benchmarks" / "data" / "demo_lengths_qwen3.csv"
BUDGET = ["--token-budget", "23400000", "--num-arms", "3", "--num-seeds", "2"]
STRATEGIES = ("longest", "sorted", "bucket", "packed")
LIMIT_PCT = 5.0


def tiny_checkpoint(out: Path) -> Path:
    from transformers import Qwen3Config

    path = out / "tiny-qwen3"
    Qwen3Config(
        hidden_size=32,
        intermediate_size=48,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
        vocab_size=128,
        num_hidden_layers=2,
        tie_word_embeddings=True,
    ).save_pretrained(path)
    return path


def common(args) -> list[str]:
    """The model and step options carrier and both replays share (like with like)."""
    out = ["--checkpoint", str(args.checkpoint), "--weights", "random", "--harness", args.harness]
    out += ["--lora-rank", "32", "--lora-alpha", "64", "--batch-size", str(args.batch_size)]
    return out + (["--device", "cpu"] if args.tiny else [])


def carrier_argv(args) -> list[str]:
    argv = ["probe", "carrier", *common(args), "--seq-len", str(args.max_length), "--rows", args.rows]
    argv += (
        ["--search", "--search-budget-s", str(args.search_budget_s)]
        if args.stack is None
        else ["--variant", args.stack]
    )
    if args.tiny:
        argv += ["--steps", "3", "--warmup-steps", "1", "--max-steps", "3", "--numerics-steps", "2"]
    return argv


def replay_argv(args, *extra: str) -> list[str]:
    argv = ["probe", "replay", *common(args), "--lengths", str(LENGTHS), "--max-length", str(args.max_length)]
    for s in STRATEGIES:
        argv += ["--strategies", s]
    argv += ["--num-steps", str(args.num_steps), "--warmup-steps", "3"]
    return (
        argv
        + (["--fit-lens", "16", "--fit-lens", "64", "--fit-lens", "256", "--fit-steps", "2"] if args.tiny else [])
        + list(extra)
    )


def goodput_argv(args, baseline: Path, carrier: Path) -> list[str]:
    argv = ["probe", "goodput", "--lengths", str(LENGTHS), "--profile", str(baseline), "--stack-json", str(carrier)]
    argv += ["--batch-size", str(args.batch_size), "--max-length", str(args.max_length), *BUDGET]
    return argv + (["--stack", args.stack] if args.stack else [])


def labprobe(argv: list[str], out_file: Path, log: Path) -> dict:
    """Run `python3 -m runner.cli ARGV --json` (no install, no Ray), keep its JSON; a refusal (exit 2) stops."""
    command = [sys.executable, "-m", "runner.cli", *argv, "--json"]
    with log.open("a") as f:
        f.write(
            " ".join(shlex.quote(c) for c in ["python3", "-m", "runner.cli", *argv, "--json"]) + f" > {out_file.name}\n"
        )
    # the checkout first, the caller's path after it (the carried wheels on the device)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
    # its stderr (progress, errors) goes straight to ours: a call killed at its time limit keeps what it said
    done = subprocess.run(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True)
    if done.returncode not in (0, 1):
        raise SystemExit(f"{argv[1]} exited {done.returncode} (its error is above)")
    out_file.write_text(done.stdout)
    return json.loads(done.stdout)


VERDICT_CHECKS = ("stack_trustworthy", "stack_of_the_fits_model", "stack_of_the_fits_step")
"""goodput's checks the hours rest on: a stack measured launch-bound or noisy, another model's, or
through another harness, LoRA rank, CE chunk or card, prices nothing the replay could confirm. Its
numerics are reported beside the verdict, not in it: the replay checks hours, and the lab may accept a
stack's numerics price."""


def verdict(priced: dict, replayed: dict) -> dict:
    rows = replayed["tables"].get("replay", [])
    errors = {r["strategy"]: r["error_pct"] for r in rows}
    s = priced["summary"]
    failed = [
        f"{probe}: {c.get('name')}"
        for probe, result in (("goodput", priced), ("replay", replayed))
        for c in result.get("checks") or []
        if not c.get("ok")
    ]
    factors = (s.get("stack_step_factor"), replayed.get("summary", {}).get("stack_step_factor"))
    same_price = factors[0] is not None and factors[0] == factors[1]
    return {
        "priced_with": s.get("priced_with"),
        "best_hours_per_job": s.get("best_hours_per_job"),
        "best_hours_sweep": s.get("best_hours_sweep"),
        "baseline_hours_per_job": s.get("baseline_hours_per_job"),
        "stack": s.get("stack"),
        "stack_step_factor": factors[0],
        "replay_stack_step_factor": factors[1],
        "stack_within_tolerance": s.get("stack_within_tolerance"),
        "failed_checks": failed,
        "replayed": list(errors),
        "best_strategy_replayed": s.get("best_strategy") in errors,
        "error_pct": errors,
        "ok": s.get("best_strategy") in errors
        and all(e is not None and abs(e) <= LIMIT_PCT for e in errors.values())
        and same_price
        and not any(f"goodput: {name}" in failed for name in VERDICT_CHECKS),
    }


def _earlier(args, name: str) -> Path:
    """An earlier phase's file: written by this run into --out, else left by an earlier call in --from."""
    here = args.out / name
    return here if here.exists() or args.from_dir is None else args.from_dir / name


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument(
        "--from",
        dest="from_dir",
        type=Path,
        default=None,
        help="where an earlier call's carrier.json and replay_baseline.json are (default: --out); --out then "
        "holds only this call's files (a device call returns at most 8)",
    )
    parser.add_argument("--phase", choices=("all", "first", "carrier", "baseline", "rest"), default="all")
    parser.add_argument("--checkpoint", type=Path, default=CHECKPOINT)
    parser.add_argument("--harness", default="benchmarks.harness_plain")
    parser.add_argument("--stack", default=None, help="the stack to price and replay; unset: carrier --search")
    parser.add_argument("--search-budget-s", type=float, default=900.0)
    parser.add_argument("--baseline-profile", type=Path, default=None)
    parser.add_argument("--num-steps", type=int, default=60)
    parser.add_argument(
        "--batch-size",
        type=int,
        default=3,
        help="rows a batch (3 x 2,048 fits an H100; 6 x 2,048 needs about 104 GiB for the baseline)",
    )
    parser.add_argument(
        "--rows",
        default="packed",
        choices=("full", "packed"),
        help="the carrier's row fill: packed, as goodput's best batching (full rows priced packed batches 9.4%% "
        "short on an H100)",
    )
    parser.add_argument("--tiny", action="store_true", help="a CPU dry run with a tiny random Qwen3")
    args = parser.parse_args()
    args.out = args.out.resolve()
    args.from_dir = args.from_dir.resolve() if args.from_dir else None
    args.out.mkdir(parents=True, exist_ok=True)
    args.max_length = 256 if args.tiny else 2048
    if args.tiny:  # no --search on the CPU: compile would build its C++ kernels there
        args.checkpoint, args.num_steps = tiny_checkpoint(args.out), min(args.num_steps, 8)
        args.stack = args.stack or "bf16-adapters+fused-adamw"
    log = args.out / "stack_hours_commands.sh"
    if args.phase in ("all", "first", "carrier"):
        labprobe(carrier_argv(args), args.out / "carrier.json", log)
    if args.phase in ("all", "first", "baseline") and args.baseline_profile is None:
        labprobe(replay_argv(args), args.out / "replay_baseline.json", log)
    if args.phase in ("first", "carrier", "baseline"):
        return 0
    carrier, baseline = (_earlier(args, name) for name in ("carrier.json", "replay_baseline.json"))
    baseline = args.baseline_profile or baseline
    priced = labprobe(goodput_argv(args, baseline, carrier), args.out / "goodput_stack.json", log)
    stack = priced["summary"]["stack"]
    replayed = labprobe(
        replay_argv(args, "--variant", stack, "--profile", str(baseline), "--stack-json", str(carrier)),
        args.out / "replay_stack.json",
        log,
    )
    summary = {"tiny_cpu_dry_run": args.tiny, **verdict(priced, replayed)}
    (args.out / "stack_hours_summary.json").write_text(json.dumps(summary, indent=1))
    print(json.dumps(summary, indent=1))
    return 0 if summary["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
