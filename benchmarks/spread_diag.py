"""Why do the compiled rows' step times spread 2.4-5.7%? Issue 27's diagnosis, one GPU call.

On the H200 the compiled stacks (compile + bf16-adapters + fused-adamw, Qwen3-4B-Base 1 x 4,096) showed a
bump of 15-20 ms on every fifth step (every third on the 1.7B at 4 x 4,096), at the same positions in every
process; the collector was ruled out. Both periods are about one second of wall clock (5 x 0.2 s,
3 x 0.37 s), and the same positions in every process point at something deterministic. This script
times the same step with each suspect switched off or changed in turn and records, per step: the GPU time
of each phase (forward + loss, backward, optimizer) from CUDA events, the host's wall time to launch the
step and the whole step's wall time, the allocator's counters (cudaMalloc/cudaFree calls, alloc retries:
a retry frees the cache, which synchronises), the collector's, and the card's SM clock, power and clock-event
reasons after each step (NVML). Segments, each `--steps` steps after
warm-up, in one process (the model and its compiled graphs are shared):
  probe_like   as the probe times it: events around the step, waited on every step, collector frozen
  no_sync      no wait per step (the host runs ahead; one sync at the end): a host-side bump vanishes
  sleep_50ms   50 ms of host sleep after each step: a bump that follows wall clock moves in step count
  nvml_thread  a thread polling NVML every 50 ms (what a gpu_busy sampler would do) during the steps
  gc_live      the collector not frozen (as a training loop that never freezes)
  empty_cache  torch.cuda.empty_cache() after every step: every step re-allocates from the driver
  ce_sync      the chunked loss as it was before 2026-12-05 (boolean indexing: nonzero, which waits for the
               GPU, in every chunk): against probe_like, what the loss's waits did to the bumps
  profiled     as probe_like under the torch profiler (CPU and GPU timelines, benchmarks/timeline.py): per
               step, kernel time against idle gaps, the gaps where the host was late and what it ran then,
               and the kernels that grew at the bump steps; each step's profiled span beside its CUDA events
After the segments, one step under a sync census (CUDA: torch.cuda.set_sync_debug_mode; CPU: the aten ops
that read a result back) lists where the step still waits for the device.
and in a second fresh process, PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (set before CUDA starts),
the probe_like and no_sync segments. Writes $OUT/spread_diag.json: the raw per-step records and, per
segment, median, spread (all steps and the worst window of 5, the probe's window), the bump steps
(> 3% over the median), their period in steps and seconds, which phase carries the excess, and whether
the allocator or collector moved at the bumps.

    PYTHONPATH=. python3 benchmarks/spread_diag.py --out DIR                 # H200, about 3.5 minutes
    PYTHONPATH=. python3 benchmarks/spread_diag.py --out DIR --no-expandable \
        --segments probe_like ce_sync no_sync profiled                       # what is still open: ~1.5 min
    PYTHONPATH=. python3 benchmarks/spread_diag.py --out DIR --tiny --steps 12   # CPU dry run
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile, record_function

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script, no install

import timeline  # noqa: E402 - benchmarks/timeline.py, beside this script

from probes.step import harness  # noqa: E402
from probes.step.measure import syncs  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SEGMENTS = ("probe_like", "no_sync", "sleep_50ms", "nvml_thread", "gc_live", "empty_cache", "ce_sync", "profiled")
ALLOC_SEGMENTS = ("probe_like", "no_sync")
BUMP = 1.03
WINDOW = 5


class Clock:
    """Marks within a step: CUDA events on a GPU (read after the segment), perf_counter on the CPU."""

    def __init__(self, cuda: bool):
        self.cuda, self.marks = cuda, []

    def mark(self) -> None:
        if self.cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            self.marks.append(event)
        else:
            self.marks.append(time.perf_counter())

    def phases_ms(self) -> list[float]:
        pairs = zip(self.marks, self.marks[1:])
        return [a.elapsed_time(b) if self.cuda else 1e3 * (b - a) for a, b in pairs]


def _alloc_counts(cuda: bool) -> dict[str, int]:
    out = {"gc": sum(s["collections"] for s in gc.get_stats())}
    if cuda:
        stats = torch.cuda.memory_stats()
        for key in ("num_device_alloc", "num_device_free", "num_alloc_retries", "num_sync_all_streams"):
            out[key] = int(stats.get(key, 0))
    return out


def phased_step(step, clock: Clock) -> None:
    """One TrainStep (probes/step/train/models.py) with a mark between its phases: forward + loss, backward,
    optimizer (step and zero_grad). A harness with its own train_step is one phase."""
    clock.mark()
    if step.harness_step is not None:
        step()
        clock.mark()
        return
    for b, scale in zip(step.micro_batches, step.scales):
        with step.precision():
            loss = step.loss_fn(step.model, b)
            loss = loss if scale is None else loss * scale
        clock.mark()
        loss.backward()
        clock.mark()
    step.optimizer.step()
    step.optimizer.zero_grad(set_to_none=True)
    clock.mark()


def _nvml_poller(stop: threading.Event, trace: list) -> threading.Thread:
    """Poll NVML every 50 ms, keeping (time, SM clock MHz, utilization %, clock-event reasons bitmask):
    a clock dip or a power/thermal reason at the bump steps would show here."""

    def poll() -> None:
        try:
            import pynvml

            pynvml.nvmlInit()
            handle = _nvml_handle(pynvml)
        except Exception:  # noqa: BLE001 - no NVML: the segment runs without a poller, and says so
            return
        reasons = getattr(pynvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or getattr(
            pynvml, "nvmlDeviceGetCurrentClocksThrottleReasons", lambda h: -1
        )
        while not stop.wait(0.05):
            try:
                util = pynvml.nvmlDeviceGetUtilizationRates(handle).gpu
                pynvml.nvmlDeviceGetMemoryInfo(handle)
                clock = pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM)
                trace.append((time.perf_counter(), clock, util, int(reasons(handle))))
            except Exception:  # noqa: BLE001 - a sample NVML refuses is a missing sample, the poller goes on
                continue

    thread = threading.Thread(target=poll, daemon=True)
    thread.start()
    return thread


class CardState:
    """The card's SM clock (MHz), power (W) and clock-event reasons bitmask, read once after each step (after its
    wait, outside its events): a bump that is the power or clock controller's shows as a dip at the bump steps
    (periods near a second in every process, counted from when the load began). None without NVML."""

    def __init__(self, cuda: bool):
        self.handle = None
        if not cuda:
            return
        try:
            import pynvml

            pynvml.nvmlInit()
            self.nvml, self.handle = pynvml, _nvml_handle(pynvml)
        except Exception:  # noqa: BLE001 - no NVML: the records say so (None), the timing runs as before
            self.handle = None

    def read(self) -> dict | None:
        """One sample, None where NVML cannot give it (power on a MIG slice or vGPU): never the run's end."""
        if self.handle is None:
            return None
        n, h = self.nvml, self.handle
        reasons = getattr(n, "nvmlDeviceGetCurrentClocksEventReasons", None) or getattr(
            n, "nvmlDeviceGetCurrentClocksThrottleReasons", None
        )
        try:
            return {"sm_mhz": n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_SM), "power_w": n.nvmlDeviceGetPowerUsage(h) / 1e3,
                    "reasons": int(reasons(h)) if reasons else -1}  # fmt: skip
        except Exception:  # noqa: BLE001 - a sample NVML refuses is a missing sample
            return None


def _nvml_handle(pynvml):
    """NVML's handle of the card torch runs on, by UUID: NVML ignores CUDA_VISIBLE_DEVICES and numbers cards
    in PCI order, so CUDA's index can name another card."""
    uuid = str(torch.cuda.get_device_properties(torch.cuda.current_device()).uuid)
    return pynvml.nvmlDeviceGetHandleByUUID(uuid if uuid.startswith(("GPU-", "MIG-")) else f"GPU-{uuid}")


class SyncingCE(torch.autograd.Function):
    """The chunked loss as probes/step/harness.py had it before 2026-12-05, line for line: boolean indexing per
    chunk runs nonzero, whose output size the host must read back, so the host waits for the GPU every chunk."""

    @staticmethod
    def forward(ctx, hidden, weight, labels, chunk_tokens: int):
        num_labelled = (labels != -100).sum().clamp(min=1)
        loss = torch.zeros((), device=hidden.device, dtype=harness._upcast(hidden[:0]).dtype)
        grad_hidden = torch.zeros_like(hidden) if hidden.requires_grad else None
        grad_weight = torch.zeros_like(harness._upcast(weight)) if weight.requires_grad else None
        for start in range(0, hidden.shape[0], chunk_tokens):
            h, y = hidden[start : start + chunk_tokens], labels[start : start + chunk_tokens]
            logits = harness._upcast(F.linear(h, weight))
            loss += F.cross_entropy(logits, y, ignore_index=-100, reduction="sum")
            grad = logits.softmax(-1)
            keep = y != -100
            grad[keep, y[keep]] -= 1.0
            grad[~keep] = 0.0
            grad = (grad / num_labelled).to(hidden.dtype)
            if grad_hidden is not None:
                grad_hidden[start : start + chunk_tokens] = grad @ weight
            if grad_weight is not None:
                grad_weight += harness._upcast(grad.t() @ h)
        ctx.save_for_backward(grad_hidden, grad_weight)
        ctx.weight_dtype = weight.dtype
        return loss / num_labelled

    backward = staticmethod(harness._ChunkedLinearCE.backward)  # unchanged: it only scales the saved gradients


@contextlib.contextmanager
def _condition(name: str, cuda: bool):
    """The segment's condition around its steps; yields a dict where `profiled` leaves its profile."""
    held, swapped = {}, harness._ChunkedLinearCE
    with contextlib.ExitStack() as stack:
        if name == "ce_sync":  # the frozen base weight needs no gradient: SyncingCE gives none, as the harness
            harness._ChunkedLinearCE = SyncingCE
            stack.callback(setattr, harness, "_ChunkedLinearCE", swapped)
        if name == "profiled":
            activities = [ProfilerActivity.CPU, *([ProfilerActivity.CUDA] if cuda else [])]
            held["prof"] = stack.enter_context(profile(activities=activities))
        yield held


def run_segment(name: str, step, steps: int, cuda: bool) -> list[dict]:
    """`steps` steps under segment `name`'s condition; one record per step."""
    stop, trace = threading.Event(), []
    poller = _nvml_poller(stop, trace) if name == "nvml_thread" else None
    frozen = name != "gc_live"
    gc.collect()
    if frozen:
        gc.freeze()
    records, clocks, origin, card = [], [], time.perf_counter(), CardState(cuda)
    try:
        with _condition(name, cuda) as held:
            for i in range(steps):
                clock, before = Clock(cuda), _alloc_counts(cuda)
                begin = time.perf_counter()
                with record_function(f"{timeline.STEP_MARK}{i}") if name == "profiled" else contextlib.nullcontext():
                    phased_step(step, clock)
                launched = time.perf_counter()
                if cuda and name != "no_sync":
                    clock.marks[-1].synchronize()
                done = time.perf_counter()
                if name == "empty_cache" and cuda:
                    torch.cuda.empty_cache()
                after = _alloc_counts(cuda)
                records.append({"t_s": begin - origin, "launch_ms": 1e3 * (launched - begin), "wall_ms": 1e3 * (done - begin),
                                "delta": {k: after[k] - before[k] for k in after}, "card": card.read()})  # fmt: skip
                clocks.append(clock)
                if name == "sleep_50ms":
                    time.sleep(0.05)
            if cuda:
                torch.cuda.synchronize()
    finally:
        stop.set()
        if frozen:
            gc.unfreeze()
    for record, clock in zip(records, clocks):
        record["phase_ms"] = clock.phases_ms()
        record["step_ms"] = sum(record["phase_ms"])
    if poller is not None:  # samples as (seconds from the segment's start, SM MHz, util %, reasons)
        records[0]["nvml_trace"] = [(round(t - origin, 3), c, u, r) for t, c, u, r in trace] or "NVML not available"
    if "prof" in held:
        try:
            _add_timeline(records, held["prof"])
        except Exception as exc:  # noqa: BLE001 - the segment's CUDA-event timings stand without the analysis
            records[0]["timeline_error"] = f"{type(exc).__name__}: {exc}"
    return records


def _add_timeline(records: list[dict], prof) -> None:
    """Each record gets its step's profiled timeline (benchmarks/timeline.py); the first also the launch share
    found. The profiled span is the step's time measured a second way, beside its CUDA events."""
    steps, found = timeline.per_step(timeline.spans(prof))
    if len(steps) != len(records):
        raise ValueError(f"{len(steps)} profiled step marks for {len(records)} steps")
    for record, measured in zip(records, steps):
        record["timeline"] = measured
    records[0]["timeline_launches_found"] = found


def sync_census(step, cuda: bool) -> list[dict]:
    """Where one step waits for the device (probes.step.measure.syncs), after the timed segments: it slows the step."""
    rows = syncs.census(step, torch.device("cuda" if cuda else "cpu"))
    return [{"what": r.what, "where": r.where, "count": r.count_per_step} for r in rows]


def _spread(values: list[float]) -> float:
    return (max(values) - min(values)) / statistics.median(values)


def summarize(records: list[dict]) -> dict:
    """Median, spreads, the bump steps and what moved with them."""
    times = [r["step_ms"] for r in records]
    median = statistics.median(times)
    bumps = [i for i, t in enumerate(times) if t > BUMP * median]
    calm = [i for i in range(len(times)) if i not in bumps] or list(range(len(times)))
    phases = len(records[0]["phase_ms"])

    def mean_at(idx, fn):
        return statistics.fmean(fn(records[i]) for i in idx) if idx else None

    windows = [_spread(times[i : i + WINDOW]) for i in range(max(1, len(times) - WINDOW + 1))]
    return {
        "steps": len(times),
        "median_ms": median,
        "spread_all_pct": 100 * _spread(times),
        "spread_window_pct": {"best": 100 * min(windows), "worst": 100 * max(windows)},
        "bump_steps": bumps,
        "bump_excess_ms": [times[i] - median for i in bumps],
        "bump_period_steps": sorted({b - a for a, b in zip(bumps, bumps[1:])}),
        "bump_period_s": [round(records[b]["t_s"] - records[a]["t_s"], 3) for a, b in zip(bumps, bumps[1:])],
        "excess_by_phase_ms": [
            (mean_at(bumps, lambda r, p=p: r["phase_ms"][p]) or 0) - mean_at(calm, lambda r, p=p: r["phase_ms"][p])
            for p in range(phases)
        ],
        "launch_ms": {"calm": mean_at(calm, lambda r: r["launch_ms"]), "bumps": mean_at(bumps, lambda r: r["launch_ms"])},
        "counters_at_bumps": {k: sum(records[i]["delta"][k] for i in bumps) for k in records[0]["delta"]},
        "counters_elsewhere": {k: sum(records[i]["delta"][k] for i in calm) for k in records[0]["delta"]},
        "card": _card_at(records, bumps, calm),
        **(_timeline_summary(records, bumps) if "timeline" in records[0] else {}),
        **({"timeline_error": records[0]["timeline_error"]} if "timeline_error" in records[0] else {}),
    }  # fmt: skip


def _timeline_summary(records: list[dict], bumps: list[int]) -> dict:
    """The profiled segment: bumps against the rest (benchmarks/timeline.py), and the profiled span against
    the CUDA events' step time, step by step (two ways of timing one step: they should agree within a ms)."""
    steps = [r["timeline"] for r in records]
    differ = [abs(t["span_ms"] - r["step_ms"]) for t, r in zip(steps, records) if t["gpu_ops"]]
    return {
        "timeline": timeline.compare(steps, bumps),
        "timeline_launches_found": records[0].get("timeline_launches_found"),
        "profiled_span_vs_events_ms": {"median": statistics.median(differ), "max": max(differ)} if differ else None,
    }


def _card_at(records: list[dict], bumps: list[int], calm: list[int]) -> dict | None:
    """Mean SM clock and power at the bump steps and elsewhere, and the reasons bitmasks seen at each (over the
    steps that got a sample). One sample a step, read when its wait ends (no_sync: no wait), not during it."""
    bumps = [i for i in bumps if records[i].get("card") is not None]
    calm = [i for i in calm if records[i].get("card") is not None]
    if not bumps and not calm:
        return None
    out = {}
    for where, idx in (("bumps", bumps), ("calm", calm)):
        cards = [records[i]["card"] for i in idx]
        out[where] = {
            "sm_mhz": statistics.fmean(c["sm_mhz"] for c in cards) if cards else None,
            "power_w": statistics.fmean(c["power_w"] for c in cards) if cards else None,
            "reasons": sorted({c["reasons"] for c in cards}),
        }
    return out


def _tiny_checkpoint() -> Path:
    """A two-layer Qwen3 config (random weights are built from it) for a CPU dry run."""
    config = json.loads((ROOT / "demo" / "checkpoints" / "qwen3-0.6b-base" / "config.json").read_text())
    config.update(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=2,
                  num_key_value_heads=1, head_dim=32, vocab_size=512, max_position_embeddings=512)  # fmt: skip
    config.pop("layer_types", None)
    folder = Path(tempfile.mkdtemp(prefix="spread_diag_"))
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def _threads() -> dict:
    """Who else runs in this process after the warm-up: Python threads by name (a poller, a compile pool's
    reader holding the GIL would delay the host) and native threads by name (/proc: OpenMP, the autograd
    engine's, the driver's), and child processes (compile workers)."""
    native: dict[str, int] = {}
    for task in Path("/proc/self/task").glob("*/comm"):
        try:
            name = task.read_text().strip()
        except OSError:  # a thread that ended between the listing and the read
            continue
        native[name] = native.get(name, 0) + 1
    lists = list(Path("/proc/self/task").glob("*/children"))  # each thread's own children: read them all
    children = sum(len(_read_or_empty(p).split()) for p in lists) if lists else None
    return {
        "python": sorted(t.name for t in threading.enumerate()),
        "native": dict(sorted(native.items(), key=lambda kv: -kv[1])),
        "child_processes": children,
    }


def _read_or_empty(path: Path) -> str:
    """A /proc file of a thread that may end between the listing and the read: empty then, never a crash that
    would lose the run after its warm-up."""
    try:
        return path.read_text()
    except OSError:
        return ""


def worker(args: argparse.Namespace, target: Path) -> None:
    """One process's segments, written to `target` after each (a segment that fails keeps those before it),
    then the sync census."""
    from probes.step import harness as reference
    from probes.step.train import contract
    from probes.step.variants import stacks
    from probes.step.variants import worker as step_worker
    from probes.step.variants.measurement import Spec

    device = torch.device("cuda" if torch.cuda.is_available() and not args.tiny else "cpu")
    spec = Spec(
        checkpoint=str(_tiny_checkpoint() if args.tiny else args.checkpoint), weights="random",
        harness="benchmarks.harness_plain", lora_rank=32, lora_alpha=64.0, batch_size=args.batch,
        seq_len=args.seq_len, warmup_steps=3, steps=args.steps, max_steps=args.steps, ce_chunk=32 if args.tiny else 1024,
        device=device.type, variant=stacks.get(args.variant),
    )  # fmt: skip
    variant = spec.variant
    pieces = variant.contract(contract.resolve(reference.load_harness(spec.harness)))
    model = step_worker.build(spec, pieces, variant, device)
    step = step_worker.make_step(spec, model, pieces, spec.ce_chunk, device)
    begin = time.perf_counter()
    for _ in range(args.warmup):  # compiles at the first; the allocator and autotuner settle after
        step()
    if device.type == "cuda":
        torch.cuda.synchronize()
    out = {"device": device.type, "variant": variant.name, "warmup_s": time.perf_counter() - begin, "segments": {}}
    out["threads"] = _threads()
    for name in args.segments:
        records = run_segment(name, step, args.steps, device.type == "cuda")
        out["segments"][name] = {"summary": summarize(records), "records": records}
        for record in records:  # the summary compared every kernel; the file keeps each step's ten longest
            if "timeline" in record:
                kernels = record["timeline"]["kernels_ms"]
                record["timeline"]["kernels_ms"] = dict(sorted(kernels.items(), key=lambda kv: -kv[1])[:10])
        print(f"[spread_diag] {args.alloc or 'default'} {name}: " + json.dumps(out["segments"][name]["summary"])[:400], flush=True)  # fmt: skip
        target.write_text(json.dumps(out))
    try:
        out["sync_census"] = sync_census(step, device.type == "cuda")
    except Exception as exc:  # noqa: BLE001 - the census is a diagnosis of its own: the timings stand without it
        out["sync_census"] = f"failed: {type(exc).__name__}: {exc}"
    print(f"[spread_diag] {args.alloc or 'default'} sync census: {json.dumps(out['sync_census'])[:600]}", flush=True)
    target.write_text(json.dumps(out))


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--checkpoint", type=Path, default=ROOT / "demo" / "checkpoints" / "qwen3-4b-base")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--seq-len", type=int, default=4096)
    parser.add_argument("--variant", default="bf16-adapters+compile+fused-adamw")
    parser.add_argument("--steps", type=int, default=40, help="steps per segment")
    parser.add_argument("--warmup", type=int, default=4)
    parser.add_argument("--tiny", action="store_true", help="a two-layer Qwen3 on the CPU (a dry run)")
    parser.add_argument("--segments", nargs="+", default=list(SEGMENTS), choices=SEGMENTS)
    parser.add_argument("--no-expandable", action="store_true", help="no second process with expandable_segments")
    parser.add_argument("--alloc", default=None, help="(worker) PYTORCH_CUDA_ALLOC_CONF of this process")
    parser.add_argument("--worker-json", type=Path, default=None, help="(internal) run one process's segments")
    args = parser.parse_args()
    if args.worker_json:
        worker(args, args.worker_json)
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    report = {"argv": sys.argv[1:], "processes": {}}
    processes = [(None, args.segments)] + ([] if args.no_expandable else [("expandable_segments:True", ALLOC_SEGMENTS)])
    for alloc, segments in processes:
        env = dict(os.environ, **({"PYTORCH_CUDA_ALLOC_CONF": alloc} if alloc else {}))
        target = args.out / f"spread_diag_{'default' if alloc is None else 'expandable'}.part.json"
        cmd = [sys.executable, __file__, *sys.argv[1:], "--segments", *segments, "--worker-json", str(target)]
        cmd += ["--alloc", alloc] if alloc else []
        begin = time.perf_counter()
        rc = subprocess.run(cmd, env=env).returncode  # a fresh process: the allocator reads its conf at start
        key = alloc or "default"
        # what a failed process wrote before it failed is kept, beside its exit status
        report["processes"][key] = json.loads(target.read_text()) if target.exists() else {}
        report["processes"][key]["exit"] = rc
        report["processes"][key]["process_wall_s"] = time.perf_counter() - begin
        target.unlink(missing_ok=True)
        (args.out / "spread_diag.json").write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
