"""A harness for the MoE benchmark: the reference step with LoRA on attention only (q/k/v/o).

benchmarks/bench_carriers_gpu.py times Qwen3-30B-A3B with it: the reference would also adapt the fused
experts through PEFT's `target_parameters`, which builds every expert's delta weight each forward
(128 experts x 48 layers); attention-only LoRA is what the lab's MoE runs start from.
"""

from __future__ import annotations

from probes.step.harness import compute_loss  # noqa: F401 - the harness's loss is the reference's

ATTENTION = ("q_proj", "k_proj", "v_proj", "o_proj")


def discover_target_modules(model) -> list[str]:
    return list(ATTENTION)


def discover_target_parameters(model) -> list[str]:
    """No expert parameters: attention only."""
    return []
