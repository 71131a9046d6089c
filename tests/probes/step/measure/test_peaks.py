"""The datasheet peak table: real device names (as NVML and torch print them) find their row, look-alike
names do not (L4 vs L40S, A10 vs A100 and A10G, H200 vs GH200 and H200 NVL), an unlisted card says so,
and every card of the table has its source in docs/measurement.md."""

from __future__ import annotations

from pathlib import Path

import pytest

from probes.step.measure import flops, peaks

DOCS = Path(__file__).resolve().parents[4] / "docs" / "measurement.md"


@pytest.mark.parametrize(
    ("name", "tflops"),
    [
        ("NVIDIA GB10", 125.0),
        ("NVIDIA B200", 2250.0),
        ("NVIDIA B300 SXM6 AC", 2250.0),
        ("NVIDIA GB200", 2500.0),
        ("NVIDIA RTX PRO 6000 Blackwell Workstation Edition", 503.8),
        ("NVIDIA RTX PRO 6000 Blackwell Server Edition", 503.8),
        ("NVIDIA GeForce RTX 5090", 209.5),
        ("NVIDIA GeForce RTX 4090", 165.2),
        ("NVIDIA L40S", 362.05),
        ("NVIDIA L4", 121.0),
        ("NVIDIA A10", 125.0),
        ("NVIDIA A100-SXM4-40GB", 312.0),
        ("NVIDIA A100 80GB PCIe", 312.0),
        ("NVIDIA H100 80GB HBM3", 989.0),
        ("NVIDIA H100 PCIe", 756.0),
        ("NVIDIA H100 NVL", 835.0),
        ("NVIDIA H200", 989.0),
        ("NVIDIA H200 NVL", 835.0),
        ("NVIDIA GH200 480GB", 989.0),
    ],
)
def test_each_listed_card_finds_its_dense_bf16_peak(name, tflops):
    assert flops.datasheet_peak_flops(name) == pytest.approx(tflops * 1e12)
    assert f"{tflops:g} TFLOP/s dense bf16" in peaks.describe(name)


@pytest.mark.parametrize("name", ["NVIDIA A10G", "NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition", "Tesla T4"])
def test_a_card_not_listed_says_so_and_keeps_the_measured_peak(name):
    assert flops.datasheet_peak_flops(name) is None
    assert (
        peaks.describe(name)
        == f"datasheet: {name} not listed (probes/step/measure/peaks.py): MFU against the measured peak only"
    )


def test_derived_figures_say_they_are_uncertain():
    assert "uncertain" in peaks.describe("NVIDIA GB10")
    assert "uncertain" not in peaks.describe("NVIDIA H200")


def test_every_card_has_its_source_in_the_docs():
    section = DOCS.read_text().split("## Datasheet peaks", 1)[1].split("\n## ", 1)[0]
    for peak in peaks.PEAKS:
        row = next((line for line in section.splitlines() if line.startswith(f"| {peak.card} |")), None)
        assert row is not None, f"docs/measurement.md has no row for {peak.card}"
        assert f"{peak.bf16_dense_tflops:g}" in row and ("uncertain" in row) == peak.uncertain, row
