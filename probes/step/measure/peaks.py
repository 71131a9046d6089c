"""Dense bf16 tensor-core peaks from NVIDIA's published figures, by device name: the conventional MFU
denominator (`mfu_vs_datasheet_peak`). Each figure's source, and why a derived one is uncertain, is
in docs/measurement.md ("Datasheet peaks").

Dense means without 2:4 structured sparsity: NVIDIA's headline figures are mostly sparse, twice
these. bf16 means bf16 inputs with fp32 accumulation, what a training matmul uses; GeForce cards run
that at half their fp16-accumulate rate, and their figures here are the fp32-accumulate ones. A card
not listed gets None: its MFU is then only the one against the measured peak (probes.step.measure.flops).
"""

from __future__ import annotations

import dataclasses
import re


@dataclasses.dataclass(frozen=True)
class Peak:
    card: str
    pattern: str
    """A regular expression searched in the NVML / torch device name (word boundaries keep L4 off L40S)."""
    bf16_dense_tflops: float
    uncertain: bool = False
    """True where the figure is derived from another precision or sparse-only figures, not printed as such."""


PEAKS = (
    Peak("GB10 (DGX Spark, ASUS Ascent GX10)", r"\bGB10\b", 125.0, uncertain=True),
    Peak("GB200 (per GPU, NVL72)", r"\bGB200\b", 2500.0),
    Peak("B300 (HGX)", r"\bB300\b", 2250.0, uncertain=True),
    Peak("B200 (HGX, 1,000 W)", r"\bB200\b", 2250.0),
    Peak("RTX PRO 6000 Blackwell (Workstation, Server)", r"RTX PRO 6000 Blackwell(?! Max-Q)", 503.8, uncertain=True),
    Peak("GeForce RTX 5090", r"\bRTX 5090\b", 209.5),
    Peak("GeForce RTX 4090", r"\bRTX 4090\b", 165.2),
    Peak("L40S", r"\bL40S\b", 362.05),
    Peak("L4", r"\bL4\b", 121.0),
    Peak("A10", r"\bA10\b", 125.0),
    Peak("A100 (40 and 80 GB, SXM and PCIe)", r"\bA100\b", 312.0),
    Peak("GH200", r"\bGH200\b", 989.0),
    Peak("H200 NVL", r"\bH200 NVL\b", 835.0),
    Peak("H200 (SXM)", r"\bH200\b", 989.0),
    Peak("H100 NVL", r"\bH100 NVL\b", 835.0),
    Peak("H100 PCIe", r"\bH100 PCIe\b", 756.0),
    Peak("H100 (SXM)", r"\bH100\b", 989.0),
)
"""First match wins: the NVL and PCIe variants stand before their SXM siblings."""


def lookup(device_name: str) -> Peak | None:
    """The table's row for a device name; None for a card not listed."""
    return next((p for p in PEAKS if re.search(p.pattern, device_name)), None)


def datasheet_peak_flops(device_name: str) -> float | None:
    """The dense bf16 peak for a device name, FLOP/s; None for a device not listed."""
    peak = lookup(device_name)
    return None if peak is None else peak.bf16_dense_tflops * 1e12


def describe(device_name: str) -> str:
    """`datasheet: 989 TFLOP/s dense bf16` (with `, uncertain` where derived), or why there is none."""
    peak = lookup(device_name)
    if peak is None:
        return f"datasheet: {device_name} not listed (probes/step/measure/peaks.py): MFU against the measured peak only"
    uncertain = ", uncertain: derived, see docs/measurement.md" if peak.uncertain else ""
    return f"datasheet: {peak.bf16_dense_tflops:g} TFLOP/s dense bf16 ({peak.card}{uncertain})"
