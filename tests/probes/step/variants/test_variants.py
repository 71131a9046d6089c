"""Variants: every variant runs on a tiny model in its own process, predicted before measured; the
harness contract used as given or fallen back on by name; bad variant names refused in one line."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from torch.autograd import DeviceType

from probes.carrier import probe as carrier
from probes.result import InputError
from probes.step import harness as reference
from probes.step.measure import attribution, flops, kernels
from probes.step.train import contract, models
from probes.step.variants import catalog, processes, stacks, whatif
from probes.step.variants.measurement import Measurement
from runner.cli import main
from runner.hosts.jobenv import harness_env

ALL = ("bf16-autocast", "bf16-adapters", "fused-adamw", "grad-ckpt", "compile", "ce-chunk=8", "ce-chunk=0")


@pytest.fixture(scope="module")
def every_variant(tiny):
    """One carrier run of every variant on the tiny model (compile included: about a minute of it
    on a 2-core CPU, the longest part)."""
    return carrier.run(
        carrier.Config(
            checkpoint=(tiny,),
            weights="random",
            lora_rank=4,
            seq_len=16,
            batch_size=2,
            warmup_steps=1,
            steps=2,
            max_steps=2,
            device="cpu",
            processes=1,
            variant=ALL,
        )
    )


def test_every_variant_runs_in_its_own_process_and_says_its_caveat(every_variant):
    rows = {r.variant: r for r in every_variant.tables["carriers"]}
    assert list(rows) == ["baseline", *ALL]
    for name, row in rows.items():
        assert row.step_s is not None and row.step_s > 0, (name, row.status)
        assert row.caveat == catalog.get(name).caveat and row.caveat
        assert row.attention_backends == "flash (cpu)"  # read from the ops that ran
    assert rows["compile"].compile_s is not None and rows["compile"].compile_s > 0
    assert all(r.compile_s is None for n, r in rows.items() if n != "compile")
    assert rows["baseline"].processes == 1


def test_whatif_predicts_each_variant_from_the_baseline_profile_or_says_why_not(every_variant):
    table = every_variant.tables["whatif"]
    assert [r.variant for r in table] == list(ALL)  # every variant but the baseline
    baseline = every_variant.tables["carriers"][0]
    for r in table:
        variant_row = next(c for c in every_variant.tables["carriers"] if c.variant == r.variant)
        assert r.measured_saving_pct == pytest.approx(100 * (baseline.step_s - variant_row.step_s) / baseline.step_s)
        assert r.peak_mem_before_bytes == baseline.peak_mem_bytes
        assert r.peak_mem_after_bytes == variant_row.peak_mem_bytes
        if r.variant == "compile":
            assert r.predicted_saving_pct is None and r.error_pp is None and r.basis.startswith("not predicted")
        else:
            assert r.predicted_saving_pct is not None, r.basis
            assert r.error_pp == pytest.approx(r.predicted_saving_pct - r.measured_saving_pct)
    ckpt = {r.variant: r for r in table}["grad-ckpt"]
    assert ckpt.predicted_saving_pct < 0  # recomputing the forward can only cost time


def test_the_advice_ranks_measured_changes_by_speed_up(every_variant):
    advice = every_variant.summary["advice"]
    assert list(every_variant.summary)[-1] == "advice" and len(advice) == len(ALL)
    speedups = [float(line.split("(x")[1].split(")")[0]) for line in advice]
    assert speedups == sorted(speedups, reverse=True)
    assert all(" tok/s " in line and " -> " in line and "peak " in line for line in advice)


@pytest.mark.parametrize("probe", ["carrier", "profile"])
def test_an_unknown_variant_is_one_line_naming_the_known_ones_exit_2(tiny, capsys, probe):
    code = main(
        [
            "probe",
            probe,
            "--checkpoint",
            str(tiny),
            "--weights",
            "random",
            "--variant",
            "bf16-adapters",
            "--variant",
            "turbo",
            "--device",
            "cpu",
        ]
    )
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "'turbo'" in err
    assert all(name in err for name in ("baseline", "bf16-autocast", "compile", "ce-chunk=N"))


def test_variant_names_parse_baseline_first_and_once():
    parsed = stacks.parse(("compile", "baseline", "ce-chunk=512", "compile"))
    assert [v.name for v in parsed] == ["baseline", "compile", "ce-chunk=512"]
    assert parsed == (catalog.BASELINE_VARIANT, catalog.get("compile"), catalog.get("ce-chunk=512"))
    assert catalog.get("ce-chunk=512").ce_chunk == 512
    with pytest.raises(InputError, match="ce-chunk=-1"):
        catalog.get("ce-chunk=-1")


def test_a_harness_with_its_own_step_is_used_as_given(tiny, harness_calls):
    result = carrier.run(
        carrier.Config(
            checkpoint=(tiny,),
            weights="random",
            harness="harness_own_step",
            lora_rank=4,
            seq_len=16,
            warmup_steps=2,
            steps=2,
            max_steps=2,
            device="cpu",
            processes=1,
        )
    )
    step = result.summary["harness_step"]
    assert step["optimizer_class"] == "SGD" and step["autocast_dtype"] == "torch.bfloat16"
    assert step["train_step"] == "harness" and step["optimizer"] == "harness_own_step.make_optimizer"
    assert result.summary["harness_fallbacks"] == ["apply_lora"]  # the one piece it lacks, named
    # its train_step ran every step (2 warm-up, 2 timed, 2 profiled), with its SGD and its autocast
    assert harness_calls.read_text().splitlines() == ["SGD True"] * 6
    env = harness_env(result.summary)  # what the runner stores in the job's environment
    assert env["harness_optimizer"] == "SGD" and env["harness_autocast_dtype"] == "torch.bfloat16"
    assert env["harness"] == "harness_own_step" and len(env["harness_sha256"]) == 16 and env["peft"]


def test_a_harness_without_the_optional_pieces_falls_back_by_name(tiny, lab_path):
    import harness_custom

    pieces = contract.resolve(harness_custom)
    assert pieces.fallbacks == (
        "train_step",
        "apply_lora",
        "autocast_dtype",
        "make_optimizer",
        "gradient_checkpointing",
    )
    assert pieces.autocast_dtype == torch.bfloat16 and pieces.make_optimizer is reference.make_optimizer
    assert pieces.describe()["optimizer"] == "reference.make_optimizer"
    result = carrier.run(carrier.Config(checkpoint=(tiny,), harness="harness_custom", steps=0))
    assert set(result.summary["harness_fallbacks"]) == set(pieces.fallbacks)


def test_the_reference_harness_is_a_trainer_bf16_run(tiny):
    pieces = contract.resolve(reference)
    assert pieces.fallbacks == ("train_step",) and pieces.autocast_dtype == torch.bfloat16
    model = models.with_lora(
        models.build_model(tiny, weights="random", device=torch.device("cpu")), reference, rank=4, alpha=8
    )
    trainable = [p for p in model.parameters() if p.requires_grad]
    assert {p.dtype for p in trainable} == {torch.float32}  # PEFT keeps adapters in fp32
    optimizer = pieces.make_optimizer(trainable)
    assert contract.optimizer_class(optimizer) == "AdamW (fused)"  # Trainer's adamw_torch_fused
    assert optimizer.defaults["lr"] == 5e-5 and optimizer.defaults["weight_decay"] == 0.0


def test_the_across_process_spread_is_that_of_the_process_medians():
    runs = [
        Measurement(
            variant=catalog.BASELINE_VARIANT,
            caveat="the harness as it is",
            step_s=s,
            trustworthy=True,
            spread_pct=p,
            spread_all_pct=p,
            iqr_pct=0.1,
            peak_mem_bytes=m,
            gpu_busy_frac=b,
        )
        for s, p, m, b in ((0.40, 0.5, 10, 0.95), (0.42, 1.5, 12, 0.93), (0.41, 0.7, 11, 0.97))
    ]
    merged = processes.merge(runs)
    assert merged.step_s == 0.41 and merged.processes == 3 and merged.process_step_s == [0.40, 0.42, 0.41]
    assert merged.spread_across_pct == pytest.approx(100 * 0.02 / 0.41)
    assert merged.spread_pct == 1.5 and merged.peak_mem_bytes == 12 and merged.gpu_busy_frac == 0.93
    assert processes.merge(runs[:1]).spread_across_pct is None
    died = processes.merge([runs[0], Measurement.failed(catalog.BASELINE_VARIANT, "exit 1")])
    # the first process's figures stay, the failing one's status and what it reported go over them
    assert died.status == "failed: exit 1" and died.step_s == 0.40 and died.caveat == "the harness as it is"


def test_launch_bound_or_untrustworthy_rows_fail_a_check_and_say_so():
    config = carrier.Config(checkpoint=(Path("x"),), seq_len=8)
    base = dict(
        variant=catalog.BASELINE_VARIANT,
        params_total=1,
        params_trainable=1,
        step_s=0.5,
        warmup_steps=3,
        steps=10,
        spread_pct=1.0,
        spread_all_pct=1.0,
        iqr_pct=0.5,
        trustworthy=True,
        step_flops=1e12,
    )
    good = carrier._row(config, "m", Measurement(**base, gpu_busy_frac=0.97), (8e14, 9.89e14))
    launch = carrier._row(config, "m", Measurement(**base, gpu_busy_frac=0.6), (8e14, 9.89e14))
    across = carrier._row(config, "m", Measurement(**base, gpu_busy_frac=0.97, spread_across_pct=3.0), (8e14, 9.89e14))
    assert good.status == "ok" and good.trustworthy
    assert good.mfu_vs_measured_peak == pytest.approx(1e12 / 0.5 / 8e14)
    assert good.mfu_vs_datasheet_peak == pytest.approx(1e12 / 0.5 / 9.89e14)
    assert launch.launch_bound and "launch-bound" in launch.status and "not trustworthy" in launch.status
    assert not across.trustworthy and "spread above 2%" in across.status
    check = {c.name: c for c in carrier._checks(config, [good, launch, across])}["rows_trustworthy"]
    assert not check.ok and check.detail.count("m/baseline") == 2


@pytest.mark.parametrize(
    "name, tflops",
    [
        ("NVIDIA H200", 989),
        ("NVIDIA H100 80GB HBM3", 989),
        ("NVIDIA H100 PCIe", 756),
        ("NVIDIA GB10", 125),
        ("NVIDIA A10G", None),
    ],
)
def test_the_datasheet_peak_is_named_by_device(name, tflops):
    peak = flops.datasheet_peak_flops(name)
    assert peak == (None if tflops is None else tflops * 1e12)


def test_sliding_window_layers_are_counted_by_their_window():
    from transformers import Gemma3TextConfig

    config = Gemma3TextConfig(
        num_hidden_layers=6,
        sliding_window=4,
        num_attention_heads=2,
        head_dim=8,
        layer_types=["sliding_attention"] * 5 + ["full_attention"],
    )
    windows = flops._windows(config)
    assert windows == (4, 4, 4, 4, 4, None)
    shape = flops.Shape(num_base_linear=0, num_lora=0, num_layers=6, num_heads=2, head_dim=8, windows=windows)
    # by hand at L = 10: a window of 4 sees 1+2+3+4+4*6 = 34 keys in all, w*L - w^2/2 = 32 (the
    # formula's continuous count); a full layer L^2/2 = 50; 12*h*d FLOPs per pair, batch 3
    assert flops.step_flops(shape, batch_size=3, seq_len=10) == 12 * 3 * (5 * 32 + 50) * 2 * 8
    full = flops.Shape(num_base_linear=0, num_lora=0, num_layers=6, num_heads=2, head_dim=8)
    assert flops.step_flops(full, batch_size=3, seq_len=10) == 6 * 6 * 3 * 100 * 2 * 8  # the old formula
    assert flops.step_flops(shape, batch_size=1, seq_len=4) == flops.step_flops(full, batch_size=1, seq_len=4)


def test_a_cpu_profile_is_attributed_to_lora_loss_and_optimizer(tiny):
    model = models.with_lora(
        models.build_model(tiny, weights="random", device=torch.device("cpu")), reference, rank=4, alpha=8
    )
    step = models.train_step(
        model,
        reference,
        models.make_batch(vocab_size=128, batch_size=1, seq_len=16, device=torch.device("cpu")),
        chunk_tokens=8,
    )
    step()
    with attribution.scopes(model):
        prof = kernels.profile_steps(step, device=torch.device("cpu"), num_steps=2)
    attributed = attribution.attribute(prof)
    for scope, phase in (
        ("lora", "forward"),
        ("lora", "backward"),
        ("base", "forward"),
        ("loss", "forward"),
        ("decoder", "backward"),
        ("optimizer", "optimizer"),
    ):
        assert attribution.total(attributed, scope=scope, phase=phase) > 0, (scope, phase)
    assert attribution.total(attributed, scope="unattributed") < 0.1 * sum(attributed.values())
    assert not any(h for m in model.modules() for h in m._forward_hooks.values())  # hooks removed


def _op(op_id, name, parent=None, seq=-1, thread=1, fwd_thread=0, kernels_=()):
    return SimpleNamespace(
        id=op_id,
        name=name,
        cpu_parent=parent,
        sequence_nr=seq,
        thread=thread,
        fwd_thread=fwd_thread,
        device_type=DeviceType.CPU,
        is_async=False,
        time_range=SimpleNamespace(start=op_id, end=op_id + 1),
        kernels=list(kernels_),
    )


def test_cuda_kernels_are_attributed_through_the_op_that_launched_them():
    """Events shaped as torch builds them on CUDA: a forward mm inside labprobe::lora records node 7;
    its backward (evaluate_function with sequence_nr 7, on the autograd thread) launches a GEMM,
    which belongs to lora; the GPU annotation of the range is no kernel."""
    kernel = lambda name, us: SimpleNamespace(name=name, device=0, duration=us)  # noqa: E731
    lora = _op(1, "labprobe::lora")
    mm = _op(
        2,
        "aten::mm",
        lora,
        seq=7,
        kernels_=[kernel("sm80_xmma_gemm_f32f32_f32f32", 30.0), kernel("labprobe::lora", 99.0)],
    )
    backward = _op(3, "autograd::engine::evaluate_function: MmBackward0", seq=7, thread=2, fwd_thread=1)
    mm_back = _op(4, "aten::mm", backward, thread=2, kernels_=[kernel("nvjet_sm90_tst", 20.0)])
    annotation = SimpleNamespace(
        name="labprobe::lora",
        device_type=DeviceType.CUDA,
        is_async=False,
        is_user_annotation=True,
        time_range=SimpleNamespace(start=0, end=99, elapsed_us=lambda: 99),
    )
    prof = kernels.Profile([lora, mm, backward, mm_back, annotation], 1, DeviceType.CUDA, "", 1.0)
    assert attribution.attribute(prof) == pytest.approx(
        {"lora/forward/fp32 GEMM": 30e-6, "lora/backward/bf16 GEMM": 20e-6}
    )


def test_a_kernel_cupti_also_lists_under_its_overhead_event_counts_once():
    """As a 1.7B step at 4 x 4,096 profiled on the H200: when the host runs ahead, a "Command Buffer
    Full" event inside cudaLaunchKernel shares the launch's correlation id and torch lists the kernel
    under it as well as under the op; the op alone launched it."""
    kernel = SimpleNamespace(name="void at::native::vectorized_elementwise_kernel", device=0, duration=40.0)
    decoder = _op(1, "labprobe::decoder")
    rsqrt = _op(2, "aten::rsqrt", decoder, seq=5, kernels_=[kernel])
    launch = _op(3, "cudaLaunchKernel", rsqrt)
    overhead = _op(4, "Command Buffer Full", launch, kernels_=[kernel])
    prof = kernels.Profile([decoder, rsqrt, launch, overhead], 1, DeviceType.CUDA, "", 1.0)
    assert attribution.attribute(prof) == pytest.approx({"decoder/forward/elementwise": 40e-6})


def test_an_attribution_that_disagrees_with_the_device_rows_predicts_nothing():
    att = {"lora/forward/fp32 GEMM": 0.25, "base/forward/bf16 GEMM": 0.15}
    baseline = Measurement(
        variant=catalog.BASELINE_VARIANT,
        step_s=0.4,
        kernel_s_per_step=0.36,
        gpu_busy_frac=0.9,
        attributed_s=att,
        microbench={"lora": {"baseline": 0.25, "bf16-autocast": 0.125}},
    )
    autocast = catalog.get("bf16-autocast")
    predicted, why = whatif.predict(autocast, baseline)
    assert predicted is None and "counts 400.0 ms of kernel time a step, the device 360.0 ms (+11.1%)" in why
    predicted, _ = whatif.predict(autocast, dataclasses.replace(baseline, kernel_s_per_step=0.4))
    assert predicted == pytest.approx(100 * 0.25 * 0.5 / 0.4)


def test_a_profile_mostly_unattributed_predicts_nothing():
    baseline = Measurement(
        variant=catalog.BASELINE_VARIANT,
        step_s=1.0,
        attributed_s={"unattributed/unknown/fp32 GEMM": 0.5, "lora/forward/x": 0.01},
        microbench={"lora": {"baseline": 1.0, "bf16-autocast": 0.5}},
    )
    predicted, why = whatif.predict(catalog.get("bf16-autocast"), baseline)
    assert predicted is None and "2% of the profile's kernel time is attributed" in why


def test_whatif_measures_the_kernel_time_removed_a_second_way_and_names_a_launch_bound_variant():
    att = {"lora/forward/fp32 GEMM": 0.2, "base/forward/bf16 GEMM": 0.15}
    baseline = Measurement(
        variant=catalog.BASELINE_VARIANT,
        step_s=0.4,
        kernel_s_per_step=0.35,
        gpu_busy_frac=0.95,
        attributed_s=att,
        microbench={
            "lora": {"baseline": 1.0, "bf16-autocast": 0.6, "bf16-adapters": 0.5},
            "optimizer": {"baseline": 1.0, "bf16-adapters": 1.0},
        },
    )
    autocast = Measurement(
        variant=catalog.get("bf16-autocast"), step_s=0.32, kernel_s_per_step=0.27, gpu_busy_frac=0.94
    )
    adapters = Measurement(
        variant=catalog.get("bf16-adapters"), step_s=0.33, kernel_s_per_step=0.24, gpu_busy_frac=0.82
    )
    rows = {r.variant: r for r in whatif.table("m", baseline, [autocast, adapters])}
    assert rows["bf16-autocast"].predicted_saving_pct == pytest.approx(100 * 0.2 * 0.4 / 0.4)
    assert rows["bf16-autocast"].measured_saving_pct == pytest.approx(20.0)
    assert rows["bf16-autocast"].kernel_saving_pct == pytest.approx(20.0)
    assert "launch-bound" not in rows["bf16-autocast"].basis
    assert rows["bf16-adapters"].kernel_saving_pct == pytest.approx(100 * 0.11 / 0.4)
    assert "variant's step is launch-bound (GPU busy 0.82)" in rows["bf16-adapters"].basis
    cpu = dataclasses.replace(baseline, gpu_busy_frac=None)
    assert all(r.kernel_saving_pct is None for r in whatif.table("m", cpu, [autocast]))


def test_backends_are_read_from_kernel_names():
    rows = [
        SimpleNamespace(name=n, device_type=DeviceType.CUDA, is_async=False, is_user_annotation=False)
        for n in ("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16", "fmha_cutlassB_bf16_aligned")
    ]
    prof = kernels.Profile(rows, 1, DeviceType.CUDA, "", 1.0)
    assert attribution.backends(prof) == ["cudnn", "mem-efficient"]


def test_the_evidence_is_json(every_variant):
    evidence = json.loads(every_variant.artifacts["evidence.json"])
    (model,) = evidence
    assert evidence[model]["baseline"]["microbench"]["lora"]["baseline"] > 0
    compiled = evidence[model]["compile"]  # a stack's kernels by category, beside the baseline's
    assert compiled["status"] == "ok" and compiled["timings"] and "gpu_busy_frac" in compiled  # None on a CPU
    assert sum(r["kernel_s_per_step"] for r in compiled["kernel_table"]) > 0


def test_the_timed_steps_run_with_the_build_frozen_out_of_the_collector_and_record_each_collection():
    import gc

    from probes.step.variants import worker
    from runner.hosts.jobenv import spare_collector

    alive = [[] for _ in range(1000)]  # lists: objects the collector tracks (a bare object() it does not)
    outer = gc.get_freeze_count()  # tests/conftest.py froze what the collection left alive
    try:
        with worker._gc_watched() as record:
            assert gc.get_freeze_count() >= outer + len(alive)  # the objects alive before timing are frozen
            loop = []
            loop.append(loop)  # cyclic garbage: only the collector frees it
            del loop
            gc.collect()
        assert gc.get_freeze_count() == 0
        assert record["collections"] >= 1 and record["full_collections"] >= 1
        assert 0 < record["pause_ms_max"] <= record["pause_ms_total"]
    finally:
        if outer:  # a fresh freeze of what is alive now, as tests/conftest.py made, for the in-process tests after
            spare_collector()
