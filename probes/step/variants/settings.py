"""A stack as the change a lab makes: the Transformers TrainingArguments, PEFT and torch settings that give
each member, and the labprobe command that measures it again.

The probe's variants and a Trainer's options are close but not always the same thing, and each line says
where they differ: Trainer's `torch_compile=True` compiles the whole model where `compile` compiles each
decoder layer (regional compilation; both need `use_cache=False` in training, or the cache's Python state
makes dynamo recompile until it falls back to eager), and `use_liger_kernel=True` also swaps the loss for
Liger's fused linear CE where `liger` keeps the harness's.
"""

from __future__ import annotations

import dataclasses
import shlex

from probes.step.variants import catalog, stacks

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
        "liger_kernel.transformers.apply_liger_kernel_to_<family>(rope=True, swiglu=True, rms_norm=True, "
        "cross_entropy=False, fused_linear_cross_entropy=False) before get_peft_model (its defaults also swap "
        "the loss for Liger's fused linear CE, as TrainingArguments(use_liger_kernel=True) does; Qwen3.5 keeps "
        "Liger's default rope=False)",
    ],
    "float8": [
        "torchao: after get_peft_model, torchao.float8.convert_to_float8_training(model, module_filter_fn=lambda m, "
        'fqn: fqn.endswith(".base_layer") and m.in_features % 16 == 0 and m.out_features % 16 == 0) '
        "(the frozen base projections only; compile the layers too, or the casts cost more than the GEMMs save)",
    ],
    "float8-frozen": [
        "labprobe: after get_peft_model, probes.step.variants.fp8.convert(model, {name for name, m in "
        'model.named_modules() if name.endswith(".base_layer")}) (a 90-line module on torch._scaled_mm: copy it; '
        "both dimensions of each projection multiples of 16; eager only on CUDA: compiled, its input gradients came "
        "out zero on an H100)",
    ],
    "cuda-graphs": [
        'torch: for layer in model.get_base_model().model.layers: layer.compile(mode="reduce-overhead")  '
        '(model.config.use_cache = False); TrainingArguments(torch_compile=True, torch_compile_mode="reduce-overhead") '
        "captures the whole model instead",
    ],
}


def lines(stack: str) -> list[str]:
    """One setting per member (a CE chunk is the harness's own `chunk_tokens`; a lab variant is its own code)."""
    if stack == catalog.BASELINE:
        return ["no change: the harness as it is"]
    out = []
    for member in stacks.members(stack):
        if member in SETTINGS:
            out += SETTINGS[member]
        elif catalog.CE_CHUNK.fullmatch(member):
            out.append(f"the harness's compute_loss(..., chunk_tokens={member.split('=')[1]})")
        elif catalog.MICRO_BATCH.fullmatch(member):
            rows = member.split("=")[1]
            out.append(
                f"TrainingArguments(per_device_train_batch_size={rows}, gradient_accumulation_steps=<the step's rows "
                f"/ {rows}>) (the same tokens per optimizer step)"
            )
        else:
            out.append(f"{member}: the lab's own change (its prepare function)")
    return out


ALWAYS = ("weights", "harness", "batch_size", "seq_len")
"""The step's identity, always on the reproducing command."""
WHEN_SET = (
    "lora_rank", "lora_alpha", "ce_chunk", "seed", "device", "warmup_steps", "steps", "max_steps", "processes",
    "numerics_steps", "rows",
)  # fmt: skip
"""Fields that change what is measured, on the command when they differ from the probe's default."""


def command(stack: str, checkpoint: str, config) -> str:
    """The `labprobe probe carrier` command measuring the stack again beside the baseline, with every
    setting of `config` (a carrier Config) that differs from its default."""
    defaults = {f.name: f.default for f in dataclasses.fields(config)}
    names = [*ALWAYS, *(n for n in WHEN_SET if getattr(config, n) != defaults.get(n))]
    # quoted: the line is meant to be pasted into a shell, and a path may hold spaces or `$(...)`
    flags = " ".join(f"--{n.replace('_', '-')} {shlex.quote(str(getattr(config, n)))}" for n in names)
    return f"labprobe probe carrier --checkpoint {shlex.quote(checkpoint)} {flags} --variant {shlex.quote(stack)}"
