"""Kernels torch lists under more than one CPU event of a profiled step (GPU only; the diagnostic behind
the attribution fix in benchmarks/RESULTS.md's variants section).

`PYTHONPATH=. python3 benchmarks/attribution_check.py demo/checkpoints/qwen3-1.7b-base 4 4096`: builds the
baseline step through benchmarks/harness_plain.py, profiles two steps with the attribution ranges, and
prints the device rows against the kernels the CPU events list, then which events list a kernel twice.
"""

import collections
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script, no install

import torch
from torch.autograd import DeviceType

from probes.step import harness as reference
from probes.step.measure import attribution, kernels
from probes.step.train import contract
from probes.step.variants import worker
from probes.step.variants.measurement import Spec

ckpt, batch, seq = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
spec = Spec(
    checkpoint=ckpt,
    weights="random",
    harness="benchmarks.harness_plain",
    lora_rank=32,
    lora_alpha=64.0,
    batch_size=batch,
    seq_len=seq,
    warmup_steps=2,
    steps=2,
    max_steps=2,
    ce_chunk=1024,
    device="cuda",
)
device = torch.device("cuda")
pieces = contract.resolve(reference.load_harness(spec.harness))
model = worker.build(spec, pieces, spec.variant, device)
step = worker.make_step(spec, model, pieces, 1024, device)
for _ in range(3):
    step()
torch.cuda.synchronize()
with attribution.scopes(model):
    prof = kernels.profile_steps(step, device=device, num_steps=2)
cpu = [e for e in prof.events if e.device_type == DeviceType.CPU and not getattr(e, "is_async", False)]
rows = collections.Counter((r.name, round(r.time_range.end - r.time_range.start, 3)) for r in prof.rows)
listed = collections.Counter()
holders = collections.defaultdict(list)
for op in cpu:
    for k in getattr(op, "kernels", ()):
        key = (k.name, round(float(k.duration), 3))
        listed[key] += 1
        holders[key].append(op)
extra = {k: listed[k] - rows.get(k, 0) for k in listed if listed[k] > rows.get(k, 0)}
print("device rows", sum(rows.values()), "listed", sum(listed.values()), "surplus kernels", sum(extra.values()))
print(
    "rows us",
    sum(kernels.self_us(r) for r in prof.rows) / 2,
    "listed us",
    sum(float(k.duration) for op in cpu for k in getattr(op, "kernels", ())) / 2,
)
names = collections.Counter()
nested = 0
for key in list(extra)[:2000]:
    hs = holders[key]
    names[tuple(sorted(h.name[:60] for h in hs))] += 1
    ids = {id(h) for h in hs}
    if len(ids) < len(hs):
        nested += 1
print("same event object twice:", nested)
for k, v in names.most_common(15):
    print(v, k)
# the same FunctionEvent objects twice in the events list?
ids = collections.Counter(id(e) for e in cpu)
print("event objects listed twice:", sum(1 for v in ids.values() if v > 1), "of", len(ids))
idc = collections.Counter(e.id for e in cpu)
print("event ids seen twice:", sum(1 for v in idc.values() if v > 1))
sample = [h for key in list(extra)[:3] for h in holders[key]]
for h in sample:
    print(
        "holder",
        h.name,
        h.id,
        h.thread,
        h.time_range.start,
        h.time_range.end,
        h.sequence_nr,
        [k.name[:40] for k in h.kernels][:3],
        "parent",
        h.cpu_parent.name if h.cpu_parent else None,
    )
print("torch", torch.__version__)
