"""Re-price a recorded H200 replay with the current step model, on the CPU, from the files alone.

The replay of 2026-12-03 (benchmarks/results/goodput/) was predicted by a model without the
one-off cost of a batch shape's first step; this script applies the model as the code now builds it
(probes/replay/probe.py: the fit, its launch-bound points, and `new_shape_s` from the same run's fit-point
warm-up timings) to the SAME recorded measurements. It is a post-hoc check of the model on data
that exposed the missing term, not an independent confirmation: that needs a fresh GPU run.
    PYTHONPATH=. python3 benchmarks/replay_reanalysis.py [--results benchmarks/results/goodput]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.bench_goodput_gpu import FIT_LENS, LENGTHS, replay_config  # noqa: E402
from probes.corpus import lengths as corpus  # noqa: E402
from probes.profile.contract import step_model  # noqa: E402  (a replay's fit tables are a profile's)
from probes.replay import model as replay_model  # noqa: E402
from probes.replay import probe as replay  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--results", type=Path, default=Path(__file__).resolve().parent / "results" / "goodput")
    args = parser.parse_args()
    recorded = json.loads((args.results / "gpu_replay.json").read_text())
    raw = json.loads((args.results / "gpu_replay_timings.json").read_text())
    config = replay_config()
    lengths = corpus.read_lengths_file(LENGTHS).length
    model = dataclasses.replace(
        step_model(recorded, source="the recorded H200 fit"),
        new_shape_s=replay_model.new_shape_s(raw, f"fit/{max(FIT_LENS)}"),
    )
    steps = recorded["tables"]["replay_steps"]
    size = next(r["bucket_size"] for r in recorded["tables"]["replay"] if r["strategy"] == "bucket")
    plans = {s: replay.shapes(config, lengths, s, size) for s in config.strategies}
    for s, batches in plans.items():  # the same batches as recorded, or the comparison means nothing
        mine = [(r["rows"], r["width"], r["real_tokens"]) for r in steps if r["strategy"] == s]
        assert mine == [(len(b), int(b.max()), int(b.sum())) for b in batches], f"{s}: batches differ"
    timed = {
        s: replay.Timed(
            times=[r["measured_s"] for r in steps if r["strategy"] == s],
            warm=replay.warm_indices(plans[s], config.warmup_steps),
            compiled_in=[],
            warmup_graphs=0,
            limit_hits=0,
        )
        for s in config.strategies
    }
    seen = {(config.batch_size, w) for w in FIT_LENS}
    rows, step_rows = replay._tables(plans, timed, model, size, seen, config.max_length)
    out = {
        "model": dataclasses.asdict(model),
        "replay": [dataclasses.asdict(r) for r in rows],
        "recorded_error_pct": {r["strategy"]: r["error_pct"] for r in recorded["tables"]["replay"]},
        "new_shape_steps": {s: int(sum(r.new_shape for r in step_rows if r.strategy == s)) for s in plans},
        "excess_s_by_kind": _excess(step_rows),
    }
    (args.results / "replay_reanalysis.json").write_text(json.dumps(out, indent=1))
    print(
        json.dumps(
            {k: out[k] for k in ("replay", "recorded_error_pct", "new_shape_steps", "excess_s_by_kind")}, indent=1
        )
    )
    return 0


def _excess(step_rows) -> dict:
    """Measured minus predicted, by strategy and whether the step's shape was new (mean, median, sum)."""
    out = {}
    for s in sorted({r.strategy for r in step_rows}):
        for new in (True, False):
            e = [r.measured_s - r.predicted_s for r in step_rows if r.strategy == s and r.new_shape == new]
            if e:
                out[f"{s}/{'new' if new else 'repeat'}"] = {
                    "steps": len(e),
                    "mean_s": float(np.mean(e)),
                    "median_s": float(np.median(e)),
                    "sum_s": float(np.sum(e)),
                }
    return out


if __name__ == "__main__":
    sys.exit(main())
