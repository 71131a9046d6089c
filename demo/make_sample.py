"""Build demo/recorded/carrier_h200.json, a recorded sample of real GPU results, from the raw files of
benchmarks/results/ (described in benchmarks/RESULTS.md): `python demo/make_sample.py`.

Nothing here is measured or invented: every row is copied from a run on a lent `nvidia-h200` machine
(one NVIDIA H200, driver 580.159.04, torch 2.11.0+cu130, transformers 5.17.0, peft 0.21.0). The two
"hosts" are two loans of that machine on two days; whether it was the same physical card is not
known. They are named for what they are:
- `h200-0312`: 2026-12-03 09:13 UTC (runs 1 and 2 stored a minute apart to keep their order), `benchmarks/results/gpu_carrier.json` (run 1 in-process, run 2
  through the CLI), through the reference harness of that day (no autocast: the step
  `benchmarks/harness_plain.py` keeps);
- `h200-0412`: 2026-12-04 12:39-13:57 UTC, `benchmarks/results/variants3/` (the 4B set and its rerun,
  the 1.7B set before and after an attribution fix that changed no timing), through
  `benchmarks/harness_plain.py`, every variant.
Kept where both loans measured the same work (4B at 1 x 4,096 tokens, 1.7B at 4 x 4,096), plus the
first loan's 0.6B at 1 x 4,096 (launch-bound: the flag shows). The first loan's rows are the harness
as it was, which is what a `baseline` variant is.
"""

from __future__ import annotations

import json
from pathlib import Path

HERE = Path(__file__).resolve().parent
RESULTS = HERE.parent / "benchmarks" / "results"
ENV = {"gpu": "NVIDIA H200", "torch": "2.11.0+cu130", "transformers": "5.17.0", "peft": "0.21.0"}
KEEP_FIRST = {("4096", "qwen3-0.6b-base"), ("4096", "qwen3-4b-base"), ("16384", "qwen3-1.7b-base")}


def first_loan() -> list[dict]:
    data = json.loads((RESULTS / "gpu_carrier.json").read_text())
    runs = []
    for tokens, block in data.items():
        for number, run in enumerate(block["runs"], 1):
            config = {k: v for k, v in run["config"].items() if k != "checkpoint"}
            for row in run["tables"]["carriers"]:
                if (tokens, row["model"]) not in KEEP_FIRST:
                    continue
                row = {**row, "variant": "baseline", "mfu_vs_measured_peak": row.pop("mfu", None)}
                runs.append(
                    {
                        "host": "h200-0312",
                        "run": f"recorded-20261203T0913Z-{number}",
                        "finished_at": f"2026-12-03T09:{13 + number}:00+00:00",
                        "source": f"benchmarks/results/gpu_carrier.json [{tokens}] run {number}",
                        "checkpoint": row["model"],
                        "config": {**config, "checkpoint": [row["model"]]},
                        "env": {**ENV, "harness": run["config"]["harness"], "peak": run["summary"].get("peak")},
                        "rows": [row],
                    }
                )
    return runs


def second_loan() -> list[dict]:
    runs = []
    for folder, checkpoint in (
        ("4b_1x4096", "qwen3-4b-base"),
        ("4b_1x4096_rerun", "qwen3-4b-base"),
        ("1.7b_4x4096_before_dedup", "qwen3-1.7b-base"),
        ("1.7b_4x4096", "qwen3-1.7b-base"),
    ):
        path = RESULTS / "variants3" / folder
        shape = folder.removesuffix("_rerun").removesuffix("_before_dedup")
        result = json.loads((path / f"variants_{shape}.json").read_text())
        date = json.loads(next(path.glob("variants_summary_*.json")).read_text())["environment"]["date"]
        config = {k: v for k, v in result["config"].items() if k != "checkpoint"}
        runs.append(
            {
                "host": "h200-0412",
                "run": f"recorded-{date[:16].replace('-', '').replace(':', '')}Z",
                "finished_at": date,
                "source": f"benchmarks/results/variants3/{folder}",
                "checkpoint": checkpoint,
                "config": {**config, "checkpoint": [checkpoint]},
                "env": {**ENV, "harness": config["harness"], "peak": result["summary"].get("peak")},
                "rows": result["tables"]["carriers"],
            }
        )
    return runs


def main() -> None:
    out = HERE / "recorded" / "carrier_h200.json"
    out.parent.mkdir(exist_ok=True)
    sample = {"about": __doc__.strip(), "probe": "carrier", "table": "carriers", "runs": first_loan() + second_loan()}
    out.write_text(json.dumps(sample, indent=1, sort_keys=True) + "\n")
    print(f"{out}: {len(sample['runs'])} recorded jobs")


if __name__ == "__main__":
    main()
