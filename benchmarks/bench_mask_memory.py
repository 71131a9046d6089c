"""Peak memory of the mask probe per (row, query, key) cell: the figure probes/mask/probe.py bounds lengths by.

Runs `probes.mask.probe` in a fresh process per point (ru_maxrss is a high-water mark) at two lengths and
reports the slope, bytes per cell = (peak(s2) - peak(s1)) / (b * (s2^2 - s1^2)), so the fixed cost of
torch and the reduced model cancels. CPU only; the demo checkpoints' configs.

    PYTHONPATH=. python benchmarks/bench_mask_memory.py [--lengths 4096 8192]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
_CHILD = """
import resource, sys
from probes.mask import probe as mask
ck, s, pad, impl = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
mask.run(mask.Config(checkpoint=ck, seq_len=s, padding=pad, attn_implementation=impl))
print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base) * 1024)
"""


def peak_bytes(checkpoint: Path, seq_len: int, padding: str, impl: str) -> int:
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, str(checkpoint), str(seq_len), padding, impl],
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO,
    )
    return int(out.stdout.split()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs=2, default=[4096, 8192])
    args = parser.parse_args()
    s1, s2 = args.lengths
    print("| checkpoint | padding | attention | peak at s1, MiB | peak at s2, MiB | bytes per cell |")
    print("|---|---|---|---|---|---|")
    for name in ("qwen3-0.6b-base", "gemma-3-4b"):
        checkpoint = REPO / "demo" / "checkpoints" / name
        for padding, impl in (("none", "sdpa"), ("right", "sdpa"), ("packed", "sdpa"), ("right", "eager")):
            p1, p2 = peak_bytes(checkpoint, s1, padding, impl), peak_bytes(checkpoint, s2, padding, impl)
            print(
                f"| {name} | {padding} | {impl} | {p1 / 2**20:.0f} | {p2 / 2**20:.0f} | "
                f"{(p2 - p1) / (s2 * s2 - s1 * s1):.1f} |"
            )


if __name__ == "__main__":
    main()
