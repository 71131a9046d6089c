"""benchmarks/fla_check.py decides, on the device, whether fla runs as released under the carried Triton or the
lifted copies are timed instead (benchmarks/gpu_all.sh --next 26): its verdict must see a wrong gradient."""

from benchmarks import fla_check


def _report_from_a_cpu_dry_run() -> dict:
    parts = {
        "chunk_gated_delta_rule": fla_check.gated_delta_rule("cpu", T=64, H=2, D=16),
        "causal_conv1d_fn": fla_check.conv("cpu", T=64, dim=32),
    }
    return {"parts": parts}


def test_a_right_run_passes_and_the_torch_conv_refusing_seq_idx_is_not_wrong():
    report = _report_from_a_cpu_dry_run()
    assert report["parts"]["chunk_gated_delta_rule"]["single"]["wrong"] == []
    assert isinstance(report["parts"]["causal_conv1d_fn"]["packed_seq_idx"], str)  # refused, recorded
    assert fla_check.all_right(report)


def test_a_wrong_gradient_or_a_failed_part_fails_the_verdict():
    report = _report_from_a_cpu_dry_run()
    report["parts"]["chunk_gated_delta_rule"]["single"]["wrong"] = ["d_g"]
    assert not fla_check.all_right(report)
    report = _report_from_a_cpu_dry_run()
    report["parts"]["causal_conv1d_fn"] = {"error": "ImportError: no causal_conv1d_cuda"}
    assert not fla_check.all_right(report)


def test_the_conv_check_takes_fresh_gradients_each_run():
    """The reference run made the caller's weight require grad: on the GPU the next run's weight copy was
    no leaf (its gradient None: the H100 check failed with AttributeError), on the CPU it added to the first
    run's gradient in place, so the two compared alike whatever they held."""
    import torch
    import torch.nn.functional as F

    def conv(x, w, bias, activation, **kw):  # a depthwise causal conv: the shape transformers' fn has
        y = F.conv1d(F.pad(x, (w.shape[1] - 1, 0)), w[:, None, :], groups=w.shape[0])
        return F.silu(y)

    x, weight, grad_out = torch.randn(1, 8, 16), torch.randn(8, 4), torch.randn(1, 8, 16)
    first = fla_check.conv_grads(conv, x, weight, "cpu", grad_out)
    kept = first["d_weight"].clone()
    second = fla_check.conv_grads(conv, x, weight, "cpu", grad_out)
    assert not weight.requires_grad
    assert second["d_weight"] is not first["d_weight"]
    assert torch.equal(first["d_weight"], kept) and torch.equal(second["d_weight"], kept)
