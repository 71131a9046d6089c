"""A stack as the change a lab makes: the Transformers TrainingArguments, PEFT and torch settings that give
each member, and the labprobe command that measures it again.

The probe's variants and a Trainer's options are close but not always the same thing, and each line says
where they differ: Trainer's `torch_compile=True` compiles the whole model where `compile` compiles each
decoder layer (regional compilation; both need `use_cache=False` in training, or the cache's Python state
makes dynamo recompile until it falls back to eager), and `use_liger_kernel=True` also swaps the loss for
Liger's fused linear CE where `liger` keeps the harness's.
"""

from __future__ import annotations

from probes.step import stacks, variants

SETTINGS: dict[str, list[str]] = {
    "bf16-autocast": ["TrainingArguments(bf16=True) (forward and loss under bf16 autocast; PEFT's fp32 adapters)"],
    "bf16-adapters": [
        "PEFT: get_peft_model(model_in_bf16, lora_config, autocast_adapter_dtype=False) "
        "(adapter weights and AdamW state stay bf16)",
    ],
    "fused-adamw": ['TrainingArguments(optim="adamw_torch_fused") / torch.optim.AdamW(params, fused=True)'],
    "grad-ckpt": [
        'TrainingArguments(gradient_checkpointing=True, gradient_checkpointing_kwargs={"use_reentrant": False})'
    ],
    "compile": [
        "torch: for layer in model.get_base_model().model.layers: layer.compile()  (model.config.use_cache = False); "
        "TrainingArguments(torch_compile=True) compiles the whole model instead",
    ],
    "liger": [
        "liger_kernel.transformers.apply_liger_kernel_to_<family>(rope=True, swiglu=True, rms_norm=True) before "
        "get_peft_model; TrainingArguments(use_liger_kernel=True) also fuses the linear CE",
    ],
}


def lines(stack: str) -> list[str]:
    """One setting per member (a CE chunk is the harness's own `chunk_tokens`; a lab variant is its own code)."""
    if stack == variants.BASELINE:
        return ["no change: the harness as it is"]
    out = []
    for member in stacks.members(stack):
        if member in SETTINGS:
            out += SETTINGS[member]
        elif variants.CE_CHUNK.fullmatch(member):
            out.append(f"the harness's compute_loss(..., chunk_tokens={member.split('=')[1]})")
        else:
            out.append(f"{member}: the lab's own change (its prepare function)")
    return out


def command(stack: str, checkpoint: str, harness: str, batch_size: int, seq_len: int, weights: str) -> str:
    """The `labprobe probe carrier` command measuring the stack again beside the baseline."""
    return (
        f"labprobe probe carrier --checkpoint {checkpoint} --weights {weights} --harness {harness} "
        f"--batch-size {batch_size} --seq-len {seq_len} --variant {stack}"
    )
