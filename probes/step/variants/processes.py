"""Run probes.step.variants.worker in fresh processes: one per measurement, the same data and seed in each.

A fresh process per variant keeps one variant's allocator, autotuner, compiled graphs and profiler
(CUPTI stays attached once started: probes.step.measure.kernels) out of the next one's timings, and two
processes of the same step measure the spread a rerun sees, which one process's steps cannot.
The child gets this process's environment and `sys.path` (a lab harness importable here is importable there).
It is a fork of a server that has done the imports once (probes.step.variants.preload: ~7 s a process saved,
nothing else shared), on a GPU as on a CPU; with LABPROBE_PRELOAD=0, and wherever no server can serve, `python -m
probes.step.variants.worker`.
A child that dies or outlasts `timeout_s` is a result with its reason, never a crash of the probe.
The Spec carries the Variant object and each answer comes back as a Measurement holding that same object
(probes.step.variants.measurement says how they cross the process boundary).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from probes.step.variants import catalog, preload
from probes.step.variants.measurement import Measurement, Spec

LOG = logging.getLogger(__name__)
TIMEOUT_S = 900
"""Per process: a 4B compile plus its steps on an H200 takes about a minute and a half."""


def run(spec: Spec, timeout_s: float = TIMEOUT_S) -> Measurement:
    """The worker's Measurement, or one whose status is "failed: ..." naming what went wrong. Logged as it
    ends (logger probes.step.variants.processes): a line at INFO, the whole result as JSON at DEBUG."""
    begin = time.perf_counter()
    LOG.info("%s %s: measuring in a fresh process", Path(spec.checkpoint).name, spec.variant.name)
    result = _run(spec, timeout_s)
    result.process_wall_s = time.perf_counter() - begin
    LOG.info(
        "%s %s: %s, step_s %s, spread %s%%, %.1f s in the process (stages %s; gc while timed %s)",
        Path(spec.checkpoint).name,
        spec.variant.name,
        result.status,
        result.step_s,
        result.spread_pct,
        result.process_wall_s,
        result.stage_s,
        result.gc_during_timing,
    )
    LOG.debug("%s", json.dumps({"checkpoint": spec.checkpoint, **result.to_dict()}))
    return result


def _run(spec: Spec, timeout_s: float) -> Measurement:
    with tempfile.TemporaryDirectory(prefix="labprobe-worker-") as tmp:
        spec_path, out_path, log_path = Path(tmp) / "spec.json", Path(tmp) / "out.json", Path(tmp) / "log.txt"
        spec_path.write_text(spec.to_json())
        argv = [str(spec_path), str(out_path)]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
        code = preload.run(argv, env, log_path, timeout_s)
        if code is preload.UNSERVED:
            code = _spawned(argv, env, log_path, timeout_s)
        if code is None:
            return Measurement.failed(spec.variant, f"timed out after {timeout_s:.0f} s")
        if code != 0 or not out_path.is_file():
            lines = [line for line in log_path.read_text(errors="replace").splitlines() if line.strip()]
            last = lines[-1][:160] if lines else "no output"
            return Measurement.failed(spec.variant, f"exit {code}: {last}")
        return Measurement.from_json(out_path.read_text(), spec.variant)


def _spawned(argv: list[str], env: dict, log_path: Path, timeout_s: float) -> int | None:
    """The worker as `python -m`, paying the imports: its exit status, None past the timeout."""
    with log_path.open("w") as log:
        try:
            return subprocess.run(
                [sys.executable, "-m", "probes.step.variants.worker", *argv],
                stdout=log,
                stderr=subprocess.STDOUT,
                timeout=timeout_s,
                env=env,
                check=False,
            ).returncode
        except subprocess.TimeoutExpired:
            return None


def merge(results: list[Measurement]) -> Measurement:
    """Several processes of one step as one result: the median of their medians, the worst in-process
    spread, and `spread_across_pct` ((max-min)/median of the process medians; None for one process).
    Not ok when any process is not: the first's figures with the first failing one's over them."""
    failed = [r for r in results if r.status != "ok"]
    if failed:
        return dataclasses.replace(results[0], **failed[0].given())
    medians = [r.step_s for r in results]

    def worst(key: str, pick=max):
        values = [getattr(r, key) for r in results if getattr(r, key) is not None]
        return pick(values) if values else None

    return dataclasses.replace(
        results[0],
        processes=len(results),
        process_step_s=medians,
        step_s=statistics.median(medians),
        mean_all_s=statistics.fmean(means) if (means := [r.mean_all_s for r in results if r.mean_all_s]) else None,
        trustworthy=all(r.trustworthy for r in results),
        spread_across_pct=100 * (max(medians) - min(medians)) / statistics.median(medians)
        if len(results) > 1
        else None,
        spread_pct=worst("spread_pct"),
        spread_all_pct=worst("spread_all_pct"),
        iqr_pct=worst("iqr_pct"),
        peak_mem_bytes=worst("peak_mem_bytes"),
        gpu_busy_frac=worst("gpu_busy_frac", min),
    )


def measure_baseline(base: Spec, chosen: tuple[catalog.Variant, ...], processes: int) -> Measurement:
    """The baseline in `processes` fresh processes, merged: the first attributes its profile, runs the
    micro-benchmarks and the numerics (saving its first gradient in base.numerics_dir)."""
    chunks = tuple(v.ce_chunk for v in chosen if v.ce_chunk is not None)
    runs = [
        run(
            dataclasses.replace(
                base,
                variant=catalog.BASELINE_VARIANT,
                predict=i == 0,
                ce_chunks=chunks,
                profile_steps=max(base.profile_steps, 2) if i == 0 else 1,
                numerics_steps=base.numerics_steps if i == 0 else 0,
            )
        )
        for i in range(processes)
    ]
    return merge(runs)


def measure_set(
    base: Spec, chosen: tuple[catalog.Variant, ...], processes: int
) -> tuple[Measurement, list[Measurement]]:
    """The baseline (measure_baseline), then each other variant in one process: (merged baseline,
    variant results). With numerics, the baseline's gradient lives in a folder for the set's time."""
    with tempfile.TemporaryDirectory(prefix="labprobe-numerics-") as tmp:
        base = dataclasses.replace(base, numerics_dir=base.numerics_dir or tmp)
        baseline = measure_baseline(base, chosen, processes)
        others = [
            run(dataclasses.replace(base, variant=v, profile_steps=1)) for v in chosen if v.name != catalog.BASELINE
        ]
    return baseline, others
