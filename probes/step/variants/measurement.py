"""What goes to a worker process and what comes back: `Spec` (one step of one checkpoint under one Variant)
and `Measurement` (every figure of that process), each with its JSON form.

The Variant travels as the typed object: the probe's Config resolves the `--variant` values once
(probes.step.variants.stacks), the Spec carries the Variant, and only its canonical name crosses into the child,
where `Spec.from_json` resolves it again (the one place the worker side looks a name up). The child's
answer comes back as a Measurement through `Measurement.from_json`, which gives it the parent's own
Variant; an answer that does not read (not JSON, a key it does not know, a value of the wrong type,
another variant's) is a Measurement whose status is `failed: ...`, never a crash of the probe.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from probes.result import InputError
from probes.step.variants import catalog, stacks

INPUT_ERROR = "input_error"
"""The key of the child's one-key answer when it found bad input (weights that do not load): the
parent raises it as an InputError."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class Spec:
    checkpoint: str
    weights: str
    harness: str
    lora_rank: int
    lora_alpha: float
    batch_size: int
    seq_len: int
    warmup_steps: int
    steps: int
    max_steps: int
    ce_chunk: int
    device: str
    variant: catalog.Variant = catalog.BASELINE_VARIANT
    seed: int = 0
    profile_steps: int = 1
    predict: bool = False
    """Attribute the profile and run the what-if micro-benchmarks (the baseline's first process)."""
    ce_chunks: tuple[int, ...] = ()
    """CE chunk sizes the micro-benchmark times (those of the ce-chunk variants asked for)."""
    numerics_steps: int = 0
    """Steps of the numerics price after the timing (0: none; probes.step.variants.numerics)."""
    rows: str = "full"
    """How the measured batch's rows are filled (probes.step.train.models.row_fill): full or packed."""
    numerics_dir: str = ""
    """Folder of the baseline's first-step gradient: the baseline saves it there, the others compare."""

    @classmethod
    def of(cls, config, checkpoint: Path, **more) -> Spec:
        """The spec of one checkpoint's step from a carrier or profile Config (the fields they share)."""
        fields = (
            "weights",
            "harness",
            "lora_rank",
            "lora_alpha",
            "batch_size",
            "seq_len",
            "warmup_steps",
            "steps",
            "max_steps",
            "ce_chunk",
            "device",
            "seed",
        )
        return cls(checkpoint=str(checkpoint), **{f: getattr(config, f) for f in fields}, **more)

    def to_json(self) -> str:
        """The spec as the child reads it: the variant by its canonical name."""
        values = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        return json.dumps({**values, "variant": self.variant.name})

    @classmethod
    def from_json(cls, text: str) -> Spec:
        """The child's side of `to_json`: the variant's name resolved to its Variant, here and only here."""
        data = json.loads(text)
        return cls(**{**data, "variant": stacks.get(data["variant"]), "ce_chunks": tuple(data["ce_chunks"])})


@dataclasses.dataclass(kw_only=True)
class Measurement:
    """One worker process's figures (a field is None where the process did not get that far), or, after
    probes.step.variants.processes.merge, those of several processes of the same step."""

    variant: catalog.Variant
    status: str = "ok"
    """ok, `oom while STAGE: ...`, `not applicable: ...`, or `failed: ...` (the process died, timed out,
    or its answer did not read)."""
    caveat: str = ""
    """The variant's caveat as the child reported it (empty when it reported nothing)."""
    harness_step: dict | None = None
    """The harness contract's pieces (probes.step.train.contract.Contract.describe), the variant's swapped in."""
    harness_fallbacks: list[str] | None = None
    harness_env: dict[str, str] | None = None
    kernel_packages: dict[str, str | None] | None = None
    params_total: int | None = None
    params_trainable: int | None = None
    params_active: int | None = None
    lora_targets: dict[str, list[str]] | None = None
    step_flops: float | None = None
    timings: dict | None = None
    """probes.step.measure.timing.Timing.to_dict of the timed steps."""
    step_s: float | None = None
    mean_all_s: float | None = None
    """Mean of every timed step after the configured warm-up (the median's window is the quiet one): what
    hours are priced from; after a merge, the mean of the processes' means."""
    spread_pct: float | None = None
    spread_all_pct: float | None = None
    iqr_pct: float | None = None
    trustworthy: bool | None = None
    steps: int | None = None
    warmup_steps: int | None = None
    peak_mem_bytes: int | None = None
    optimizer: str | None = None
    compile_s: float | None = None
    """A compiled variant's first step less its median step."""
    graph_breaks: int | None = None
    """A compiled variant's graph breaks (torch._dynamo's counters, after the timed steps)."""
    graph_break_reasons: list[str] | None = None
    """The commonest of them, `N x reason`."""
    library_changes: dict[str, str] | None = None
    """What a library variant changed (probes.step.variants.libvariants): the Liger call made, the float8 layers."""
    gc_during_timing: dict | None = None
    attention_backends: list[str] | None = None
    kernel_s_per_step: float | None = None
    gpu_busy_frac: float | None = None
    """Kernel time over step time; None on the CPU (no device timeline)."""
    kernel_table: list[dict] | None = None
    attributed_s: dict[str, float] | None = None
    """Kernel seconds per step by scope/phase/kind (probes.step.measure.attribution), with `predict` only."""
    numerics: dict | None = None
    """probes.step.variants.numerics' record (the gradient probe and the curve), with `numerics_steps` only."""
    microbench: dict | None = None
    not_measured: dict[str, str] | None = None
    """Stages after the timing that ran out of memory, each with the error's first line (`numerics`,
    `micro-benchmarks`): the timing stands, those figures are missing and say why."""
    stage_s: dict[str, float] | None = None
    kernel_fallbacks: list[str] | None = None
    process_wall_s: float | None = None
    """The whole child process, start to answer read (set by the parent)."""
    processes: int = 1
    """Processes merged into this result."""
    process_step_s: list[float] | None = None
    """The merged processes' median steps (a searched row measured twice: both processes', though its figures are the
    kept one's alone; probes.step.variants.search)."""
    spread_across_pct: float | None = None
    """(max-min)/median of those medians; None for one process."""

    @classmethod
    def failed(cls, variant: catalog.Variant, why: str) -> Measurement:
        return cls(variant=variant, status=f"failed: {why}")

    def given(self) -> dict:
        """The fields holding a figure (neither None nor the field's default): what this process reported."""
        defaults = {f.name: f.default for f in dataclasses.fields(self)}
        return {k: v for k, v in vars(self).items() if v is not None and v != defaults[k]}

    def to_dict(self) -> dict:
        """The JSON-able form: the variant by its name, its status, and what was reported (`given`)."""
        given = {k: v for k, v in self.given().items() if k not in ("variant", "status")}
        return {"variant": self.variant.name, "status": self.status, **given}

    def to_json(self) -> str:
        return json.dumps(self.to_dict())

    @classmethod
    def from_json(cls, text: str, variant: catalog.Variant) -> Measurement:
        """The child's answer for `variant` (the parent's own object, which the answer must name); an
        InputError when the child found bad input; `failed: unreadable answer: ...` when it does not read."""
        try:
            data = json.loads(text)
        except ValueError as exc:
            return cls.failed(variant, f"unreadable answer: {exc}")
        if not isinstance(data, dict):
            return cls.failed(variant, f"unreadable answer: a JSON {type(data).__name__}, not an object")
        if INPUT_ERROR in data:
            raise InputError(str(data[INPUT_ERROR]))
        if (wrong := _wrong(data, variant)) is not None:
            return cls.failed(variant, f"unreadable answer: {wrong}")
        return cls(**{**data, "variant": variant})


_TYPES = {"str": str, "int": int, "float": (int, float), "bool": bool, "dict": dict, "list": list}
"""The JSON types a Measurement field's annotation accepts (its outer type: `dict[str, float] | None` is a dict;
what a dict or list holds is the reader's to read)."""


def _wrong(data: dict, variant: catalog.Variant) -> str | None:
    """What makes `data` no answer for `variant`: an unknown key, a value of the wrong type, another name."""
    types = {f.name: f.type for f in dataclasses.fields(Measurement)}
    unknown = sorted(set(data) - set(types))
    if unknown:
        return f"unknown key(s) {', '.join(unknown)}"
    if data.get("variant") != variant.name:
        return f"it names variant {data.get('variant')!r}, not {variant.name!r}"
    for key, value in data.items():
        outer = types[key].split(" |")[0].split("[")[0]
        if value is None and not types[key].endswith("| None"):
            return f"{key} is null"
        number = outer in ("int", "float")  # JSON's true is Python's int too: no count or time
        if value is not None and (not isinstance(value, _TYPES.get(outer, object)) or number and type(value) is bool):
            return f"{key} is a {type(value).__name__}, not a {outer}"
    return None
