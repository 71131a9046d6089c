"""GPU checks of issue 4 in one call: the 4B profile and the three-carrier bench, twice per shape.

Run by benchmarks/gpu_all.sh on an H200 (PYTHONPATH=. , no install). Random-weight Qwen3-0.6B/1.7B/4B-
Base built from demo/checkpoints/*/config.json, rank-32 LoRA on all seven linear projections.
Writes JSON under --out and prints a verdict per criterion last. --quick: a smoke run (0.6B only,
few steps) to catch CUDA-only bugs before spending device time on the full run. Each probe runs
in its own process (the second carrier run of each shape through the literal `labprobe probe carrier`
CLI), so no profiler of one run lingers in the next one's timings. BENCH_FAMILY (comma-separated
checkpoint dirs) replaces the family for a dry run on the CPU with tiny configs.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script, no install

from probes.carrier import probe as carrier  # noqa: E402
from probes.profile import probe as profile  # noqa: E402
from runner.cli.options import option_name  # noqa: E402
from runner.cli.probe import render  # noqa: E402
from runner.tables import format_table  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
FAMILY = (
    [Path(p) for p in os.environ["BENCH_FAMILY"].split(",")]
    if os.environ.get("BENCH_FAMILY")
    else [ROOT / "demo" / "checkpoints" / f"qwen3-{size}-base" for size in ("0.6b", "1.7b", "4b")]
)


def environment() -> dict:
    import peft
    import transformers

    try:
        driver = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version,clocks.max.sm", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
        ).stdout.strip()
    except OSError as exc:
        driver = f"nvidia-smi: {exc}"
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none",
        "driver_and_max_sm_clock": driver,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "peft": peft.__version__,
        "python": platform.python_version(),
        "cpu_count": os.cpu_count(),
    }


def carrier_config(batch_size: int, steps: int, family: list[Path]) -> carrier.Config:
    return carrier.Config(
        checkpoint=tuple(family),
        weights="random",
        lora_rank=32,
        lora_alpha=64.0,
        seq_len=4096,
        batch_size=batch_size,
        warmup_steps=3,
        steps=steps,
        max_steps=3 * steps,
        token_budget=1_000_000_000,
        num_arms=4,
        num_seeds=3,
    )


def cli_args(config: carrier.Config) -> list[str]:
    """The same Config as `labprobe probe carrier` options."""
    args = []
    for field in dataclasses.fields(config):
        value = getattr(config, field.name)
        if value is None:
            continue
        option = option_name(field.name)
        for item in value if isinstance(value, tuple) else (value,):
            args += [option, str(item)]
    return args


def job(kind: str, batch_size: int, steps: int, out: Path) -> int:
    """One probe run in this process (the parent runs each job in its own process, so no profiler
    of an earlier job lingers in a later job's timings)."""
    begin = time.perf_counter()
    if kind == "profile":
        config = profile.Config(
            checkpoint=FAMILY[2] if steps > 2 else FAMILY[0],
            weights="random",
            lora_rank=32,
            lora_alpha=64.0,
            seq_lens=(2048, 4096, 6144, 8192, 12288) if steps > 2 else (1024, 2048, 4096),
            batch_size=1,
            seq_len=4096,
            warmup_steps=2,
            steps=steps,
            max_steps=3 * steps,
            profile_steps=3,
        )
        result = profile.run(config)
    else:
        result = carrier.run(carrier_config(batch_size, steps, FAMILY if steps > 3 else FAMILY[:1]))
    wall = time.perf_counter() - begin
    print(render(result), f"\n[{kind} {batch_size}x4096: {wall:.1f} s wall]", flush=True)
    payload = {
        "wall_s": wall,
        **result.to_json_dict(),
        "timings": json.loads(result.artifacts.get("timings.json", "{}")),
        "evidence": json.loads(result.artifacts.get("evidence.json", "{}")),
    }
    out.write_text(json.dumps(payload, indent=1))
    if "kernels_key_averages.txt" in result.artifacts:
        out.with_suffix(".txt").write_text(result.artifacts["kernels_key_averages.txt"])
    return 0


def spawn(args: list[str], tmp: Path, name: str) -> tuple[dict, float]:
    """Run a job (or the literal CLI) in a fresh process; returns its JSON and wall seconds."""
    out = tmp / f"{name}.json"
    begin = time.perf_counter()
    if args[0] == "cli":
        proc = subprocess.run(
            [sys.executable, "-m", "runner.cli", "probe", *args[1:], "--json"], capture_output=True, text=True
        )
        print(proc.stderr[-2000:], flush=True)
        out.write_text(proc.stdout)
    else:
        proc = subprocess.run([sys.executable, __file__, "--job", *args, "--job-out", str(out)])
    wall = time.perf_counter() - begin
    if not out.is_file() or not out.read_text().strip():
        raise SystemExit(f"job {name} wrote nothing (exit {proc.returncode})")
    data = json.loads(out.read_text())
    if args[0] == "cli":
        print(f"$ labprobe probe {' '.join(args[1:])} --json   # tables as the CLI prints them:")
        for table, rows in data["tables"].items():
            print(format_table(rows, title=f"== {data['probe']}.{table}"))
        print(f"[cli: {wall:.1f} s wall, exit {proc.returncode}]", flush=True)
    data["wall_s"] = wall
    return data, wall


def rows_by_name(bench: dict) -> dict[str, dict]:
    return {r["model"]: r for r in bench["tables"]["carriers"]}


def gpu_bound_ok(row: dict | None) -> bool:
    return row is not None and row.get("status") == "ok" and row["launch_bound"] is False and row["spread_pct"] <= 2.0


def _brief(row: dict | None) -> str:
    if row is None:
        return "missing"
    return f"{row.get('status')}, busy {row.get('gpu_busy_frac')}, spread {row.get('spread_pct')}"


AGREE = {"4096": ("qwen3-4b-base",), "16384": ("qwen3-0.6b-base", "qwen3-1.7b-base")}
"""The rows issue 4 names for the two-run 3% agreement: always judged, FAIL when missing or not GPU-bound."""


def agreement(key: str, name: str, runs: list[dict]) -> tuple[str, bool, str]:
    a, b = (run.get(name) for run in runs)
    label = f"{key}: {name} two runs agree within 3%"
    if not (gpu_bound_ok(a) and gpu_bound_ok(b)):
        return label, False, f"not judged: run 1 {_brief(a)}; run 2 {_brief(b)}"
    diff = abs(a["step_s"] - b["step_s"]) / min(a["step_s"], b["step_s"]) * 100
    return label, diff <= 3.0, f"{a['step_s']:.4f} vs {b['step_s']:.4f} s ({diff:.2f}%)"


def verdicts(benches: dict, prof: dict, prof_wall: float) -> list[tuple[str, bool, str]]:
    out = []
    runs = {key: [rows_by_name(b) for b in benches[key]["runs"]] for key in ("4096", "16384")}
    bound = [("4096", "qwen3-4b-base")] + [("16384", n) for n in ("qwen3-0.6b-base", "qwen3-1.7b-base")]
    for key, name in bound:  # both runs: one quiet run is not the criterion
        for i, run in enumerate(runs[key], 1):
            row = run.get(name)
            out.append((f"{key}: {name} GPU-bound, spread <= 2% (run {i})", gpu_bound_ok(row), _brief(row)))
    for i, run in enumerate(runs["4096"], 1):
        row = run.get("qwen3-0.6b-base")
        out.append(
            (
                f"4096: qwen3-0.6b-base flagged launch-bound (run {i})",
                row is not None and row["launch_bound"] is True,
                _brief(row),
            )
        )
    for key in ("4096", "16384"):
        out += [agreement(key, name, runs[key]) for name in AGREE[key]]
        for name in sorted(set(runs[key][0]) - set(AGREE[key])):  # the other GPU-bound rows, when both are
            if gpu_bound_ok(runs[key][0][name]) and gpu_bound_ok(runs[key][1].get(name)):
                out.append(agreement(key, name, runs[key]))
        walls = benches[key]["walls_s"]
        out.append((f"{key}: three-carrier bench <= 300 s", max(walls) <= 300, f"walls {walls}"))
    return out + profile_verdicts(prof, prof_wall)


def profile_verdicts(prof: dict, prof_wall: float) -> list[tuple[str, bool, str]]:
    s, out = prof["summary"], []
    out.append(
        (
            "profile: >= 3 GPU-bound lengths fitted",
            len(s["fitted_lens"]) >= 3,
            f"fitted {s['fitted_lens']}, launch-bound {s['launch_bound_lens']}",
        )
    )
    out.append(
        (
            "profile: held-out error <= 5% (>= 4 fitted)",
            len(s["fitted_lens"]) >= 4 and (s["max_heldout_err_pct"] or 99) <= 5.0,
            f"max {s['max_heldout_err_pct']}",
        )
    )
    pad = {r["case"]: r for r in prof["tables"]["padding_penalty"]}
    half = pad["half_padded"]
    out.append(
        (
            "profile: padding penalty measured against both references",
            half["penalty_same_shape_pct"] is not None and half["penalty_same_tokens_pct"] is not None,
            f"{half['step_s']} s half-padded vs same shape {pad['unpadded_same_shape']['step_s']} s "
            f"({half['penalty_same_shape_pct']}%), vs same tokens {pad['unpadded_same_tokens']['step_s']} s "
            f"({half['penalty_same_tokens_pct']}%)",
        )
    )
    out.append(
        (
            "profile: kernel time <= step wall",
            s["kernel_s_per_step"] <= s["step_wall_s"],
            f"{s['kernel_s_per_step']} <= {s['step_wall_s']}",
        )
    )
    out.append(("profile: whole 4B profile <= 180 s", prof_wall <= 180, f"{prof_wall:.1f} s"))
    return out


def print_verdicts(checks: list[tuple[str, bool, str]]) -> None:
    print("\n== verdicts")
    for name, ok, detail in checks:
        print(f"  [{'ok' if ok else 'FAIL'}] {name}: {detail}")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path)
    parser.add_argument("--quick", action="store_true", help="smoke run: 0.6B only, few steps")
    parser.add_argument("--profile-only", action="store_true", help="only the 4B profile (a re-check)")
    parser.add_argument("--job", nargs=3, metavar=("KIND", "BATCH", "STEPS"), help=argparse.SUPPRESS)
    parser.add_argument("--job-out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.job:
        return job(args.job[0], int(args.job[1]), int(args.job[2]), args.job_out)
    args.out.mkdir(parents=True, exist_ok=True)
    env = environment()
    print(json.dumps(env), flush=True)
    (args.out / "gpu_env.json").write_text(json.dumps(env, indent=1))
    tmp = Path(tempfile.mkdtemp())
    if args.quick:
        spawn(["carrier", "1", "3"], tmp, "carrier")
        spawn(["profile", "1", "2"], tmp, "profile")
        return 0
    prof, prof_wall = spawn(["profile", "1", "5"], tmp, "profile")
    (args.out / "gpu_profile.json").write_text(json.dumps(prof, indent=1))
    shutil.copy(tmp / "profile.txt", args.out / "gpu_kernels_key_averages.txt")
    if args.profile_only:
        checks = profile_verdicts(prof, prof["wall_s"])
        (args.out / "gpu_profile_summary.json").write_text(
            json.dumps({"env": env, "checks": [{"name": n, "ok": ok, "detail": d} for n, ok, d in checks]}, indent=1)
        )
        print_verdicts(checks)
        return 0 if all(ok for _, ok, _ in checks) and all(c["ok"] for c in prof["checks"]) else 1
    benches = {}
    for batch_size in (1, 4):
        key = str(4096 * batch_size)
        first = spawn(["carrier", str(batch_size), "10"], tmp, f"carrier{key}")
        second = spawn(["cli", "carrier", *cli_args(carrier_config(batch_size, 10, FAMILY))], tmp, f"cli{key}")
        benches[key] = {"runs": [first[0], second[0]], "walls_s": [round(first[1], 1), round(second[1], 1)]}
    (args.out / "gpu_carrier.json").write_text(json.dumps(benches, indent=1))
    checks = verdicts(benches, prof, prof["wall_s"])
    (args.out / "gpu_summary.json").write_text(
        json.dumps({"env": env, "checks": [{"name": n, "ok": ok, "detail": d} for n, ok, d in checks]}, indent=1)
    )
    print_verdicts(checks)
    return 0 if all(ok for _, ok, _ in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
