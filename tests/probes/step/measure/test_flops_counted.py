"""The step's FLOPs counted a second way: torch's FlopCounterMode over a real forward and backward of a tiny
model of each family (tests/probes/conftest.py), LoRA applied by the reference harness, against
probes.step.measure.flops' formulas, op by op.

What the counter sees on the CPU: matmuls (mm, bmm, baddbmm) and convolutions. It has no formula for
the CPU's fused SDPA kernel nor for transformers' triangular solves, so the softmax layers are left out
and the chunk's two solves are subtracted, each said where. The input embeddings require grad, so the
first layer's activation gradients run, as the formula charges them (with a frozen embedding autograd
skips them: under 0.5% of a real model's backward). Experts run through transformers' eager experts
(F.linear per expert): the counter has no formula for grouped_mm.
"""

from __future__ import annotations

import collections
import math

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from probes.step import harness as reference
from probes.step.measure import flops
from probes.step.train import models, params

B, L, RANK = 2, 24, 4


def counted(checkpoint) -> tuple[flops.Shape, collections.Counter, collections.Counter]:
    """(the formula's shape, forward counts by op, backward counts by op) of one LoRA step, fp32 on the CPU."""
    torch.manual_seed(0)
    model = models.build_model(checkpoint, weights="random", device=torch.device("cpu"), dtype=torch.float32)
    if params.count(model).num_experts:
        model.set_experts_implementation("eager")
    model = models.with_lora(model, reference, rank=RANK, alpha=8)
    ids = torch.randint(1, model.config.vocab_size, (B, L))
    embeds = model.get_input_embeddings()(ids).detach().requires_grad_()
    with FlopCounterMode(display=False) as forward:
        logits = model(inputs_embeds=embeds).logits
    with FlopCounterMode(display=False) as backward:
        logits.float().sum().backward()

    def by_op(mode) -> collections.Counter:
        return collections.Counter(
            {str(op).removeprefix("aten."): n for op, n in mode.get_flop_counts()["Global"].items()}
        )

    return flops.model_shape(model), by_op(forward), by_op(backward)


@pytest.mark.parametrize("family", ["tiny", "hybrid", "qwen3_moe", "gemma4_moe"])
def test_weight_matmuls_are_what_the_step_runs(family, request):
    shape, fwd, bwd = counted(request.getfixturevalue(family))
    tokens = B * L
    assert not {op for op in fwd | bwd if "attention" in op}  # the CPU's SDPA is invisible here (see above)
    assert fwd["mm"] == 2 * tokens * (shape.num_base_linear + shape.num_lora)
    assert bwd["mm"] == 2 * tokens * (shape.num_base_linear + shape.num_trained_base) + 4 * tokens * shape.num_lora


@pytest.mark.parametrize("family", ["qwen3_moe", "gemma4_moe"])
def test_lora_on_experts_costs_its_fold_and_a_weight_gradient(family, request):
    shape, fwd, bwd = counted(request.getfixturevalue(family))
    assert shape.fold > 0 and shape.num_trained_base > 0
    # PEFT 0.21 folds twice a forward: once to check the parametrization as it registers it (that result
    # is dropped: not charged), once for the matmuls; the backward passes W''s gradient to A and B.
    assert fwd["baddbmm"] == 2 * shape.fold
    assert bwd["bmm"] == 2 * shape.fold


def test_linear_attention_layers_as_the_chunked_rule_runs(hybrid):
    shape, fwd, bwd = counted(hybrid)
    linear = [s for s in shape.layers if s.kind == "linear"]
    rule = conv = 0.0
    for spec in linear:
        r, c = flops.linear_forward(spec, batch_size=B, seq_len=L)
        rule, conv = rule + r, conv + c
    chunk, dk, dv = flops.LINEAR_CHUNK, linear[0].linear_key_dim, linear[0].linear_value_dim
    chunks = len(linear) * B * math.ceil(L / chunk) * linear[0].linear_value_heads
    solves = chunks * 2 * chunk * chunk * (dk + dv)  # transformers solves these two with solve_triangular
    assert fwd["bmm"] == rule - solves
    assert fwd["convolution"] == conv and bwd["convolution_backward"] == conv  # frozen: the input's gradient
