"""The harness contract: a lab's harness module outside the package is imported and used, bad ones are
refused by name; the reference harness's chunked CE equals the full-logits CE, loss and gradients."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode
from transformers import AutoModelForCausalLM, Qwen3Config

from probes.carrier import probe as carrier
from probes.profile import probe as profile
from probes.result import InputError
from probes.step import harness
from probes.step.measure import syncs
from runner.cli import main


def test_the_configs_copies_of_the_reference_harness_constants_agree():
    """probes.step.choices copies them so that Configs import no torch, and the harness's source (hashed into
    every result) stays as it was."""
    from probes.step import choices

    assert (
        (choices.REFERENCE, choices.CHUNK_TOKENS)
        == (harness.REFERENCE, harness.CHUNK_TOKENS)
        == (
            harness.__name__,
            1024,
        )
    )


def test_reference_targets_all_seven_projections(tiny):
    model = AutoModelForCausalLM.from_config(Qwen3Config.from_pretrained(tiny))
    assert harness.discover_target_modules(model) == [
        "q_proj",
        "k_proj",
        "v_proj",
        "o_proj",
        "gate_proj",
        "up_proj",
        "down_proj",
    ]


def test_a_lab_harness_outside_the_package_is_imported_and_used(tiny, harness_calls):
    result = carrier.run(
        carrier.Config(
            checkpoint=(tiny,),
            weights="random",
            harness="harness_custom",
            lora_rank=4,
            seq_len=16,
            warmup_steps=1,
            steps=2,
            max_steps=2,
            device="cpu",
            processes=1,
        )
    )
    row = result.tables["carriers"][0]
    # its targets, not the reference's: q (32 -> 32) and v (32 -> 16) on 2 layers, rank 4
    assert row.params_trainable == 2 * 4 * ((32 + 32) + (32 + 16))
    lines = harness_calls.read_text().splitlines()  # written by the worker process that measured
    assert lines.count("discover") == 1
    assert lines.count("loss") == 1 + 2 + 2  # warm-up + timed steps + the 2 profiled steps of the baseline
    assert row.step_s > 0


@pytest.mark.parametrize(
    "path, named",
    [
        ("no_such_harness_xyz", "does not import: ModuleNotFoundError"),
        ("harness_broken", "does not import: SyntaxError"),
        ("harness_raises", "does not import: RuntimeError: LAB_DATA_DIR is not set$"),
        ("harness_incomplete", "lacks compute_loss"),
    ],
)
def test_a_bad_harness_is_an_input_error_naming_it(lab_path, path, named):
    with pytest.raises(InputError, match=named) as info:
        harness.load_harness(path)
    assert path in str(info.value)


def test_the_cli_refuses_a_bad_harness_in_one_line(tiny, lab_path, capsys):
    code = main(["probe", "carrier", "--checkpoint", str(tiny), "--harness", "harness_incomplete", "--steps", "0"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "harness_incomplete" in err and "compute_loss" in err


@pytest.mark.parametrize("probe", ["carrier", "profile"])
@pytest.mark.parametrize(
    "path, named", [("harness_broken", "SyntaxError"), ("harness_raises", "RuntimeError"), ("", "--harness is empty")]
)
def test_the_cli_refuses_a_harness_that_fails_at_import_in_one_line(tiny, lab_path, capsys, probe, path, named):
    extra = ["--steps", "0"] if probe == "carrier" else []
    code = main(["probe", probe, "--checkpoint", str(tiny), "--harness", path, "--device", "cpu", *extra])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and named in err and "Traceback" not in err


def test_an_empty_harness_path_is_refused_by_both_configs(tiny):
    with pytest.raises(InputError, match="harness is empty"):
        carrier.Config(checkpoint=(tiny,), harness=" ")
    with pytest.raises(InputError, match="harness is empty"):
        profile.Config(checkpoint=tiny, harness="")
    with pytest.raises(InputError, match="harness is empty"):
        harness.load_harness("")


@pytest.mark.parametrize("chunk", [1, 5, 16, 64])
def test_chunked_ce_equals_full_logits_in_loss_and_gradients(chunk):
    g = torch.Generator().manual_seed(chunk)
    tokens, hidden_size, vocab = 37, 12, 50
    hidden = torch.randn(tokens, hidden_size, generator=g, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(vocab, hidden_size, generator=g, dtype=torch.float64, requires_grad=True)
    labels = torch.randint(0, vocab, (tokens,), generator=g)
    labels[::4] = -100
    loss = harness.cross_entropy(hidden, weight, labels, chunk)
    loss.backward()
    got = (loss.detach(), hidden.grad.clone(), weight.grad.clone())
    hidden.grad = weight.grad = None
    expected = F.cross_entropy(hidden @ weight.t(), labels, ignore_index=-100)
    expected.backward()
    torch.testing.assert_close(got[0], expected.detach())
    torch.testing.assert_close(got[1], hidden.grad)
    torch.testing.assert_close(got[2], weight.grad)


class _OpLog(TorchDispatchMode):
    """The ops a call runs, and those that would read back from a CUDA device (probes.step.measure.syncs)."""

    def __init__(self):
        super().__init__()
        self.names, self.read_back = [], []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        self.names.append(name)
        if syncs.reads_back(func, args, kwargs):
            self.read_back.append(name)
        return func(*args, **(kwargs or {}))


def _old_chunked_ce_grads(hidden, weight, labels, chunk):
    """The gradients of hidden and weight the boolean-indexing version gave (it ran nonzero per chunk)."""
    grad_hidden, grad_weight = torch.zeros_like(hidden), torch.zeros_like(weight, dtype=torch.float32)
    grad_weight = grad_weight.to(torch.float64) if weight.dtype == torch.float64 else grad_weight
    for start in range(0, hidden.shape[0], chunk):
        h, y = hidden.detach()[start : start + chunk], labels[start : start + chunk]
        logits = harness._upcast(F.linear(h, weight))
        grad = logits.softmax(-1)
        keep = y != -100
        grad[keep, y[keep]] -= 1.0
        grad[~keep] = 0.0
        grad = (grad / (labels != -100).sum().clamp(min=1)).to(hidden.dtype)
        grad_hidden[start : start + chunk] = grad @ weight
        grad_weight += harness._upcast(grad.t() @ h)
    return grad_hidden, grad_weight.to(weight.dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
def test_chunked_ce_waits_for_no_result_of_the_gpu_and_keeps_the_old_values_to_the_bit(dtype):
    g = torch.Generator().manual_seed(3)
    hidden = torch.randn(37, 12, generator=g).to(dtype).requires_grad_()
    weight = torch.randn(50, 12, generator=g).to(dtype).requires_grad_()
    labels = torch.randint(0, 50, (37,), generator=g)
    labels[::3] = -100
    labels[8:16] = -100  # a chunk with nothing to learn; the last chunk is short (5 tokens)
    with _OpLog() as log:
        harness.cross_entropy(hidden, weight, labels, 8).backward()
    assert "scatter_add_" in log.names and log.read_back == []
    expected_hidden, expected_weight = _old_chunked_ce_grads(hidden, weight.detach(), labels, 8)
    assert torch.equal(hidden.grad, expected_hidden) and torch.equal(weight.grad, expected_weight)


def test_an_ignored_row_gets_no_gradient_even_when_its_logits_are_not_finite():
    hidden = torch.randn(6, 4, requires_grad=True)
    weight = torch.randn(9, 4)
    labels = torch.tensor([1, 2, -100, 3, 4, 5])
    with torch.no_grad():
        hidden[2] = float("nan")
    harness.cross_entropy(hidden, weight, labels, 4).backward()
    assert torch.equal(hidden.grad[2], torch.zeros(4)) and torch.isfinite(hidden.grad).all()


def test_compute_loss_is_the_models_own_next_token_loss(tiny):
    model = AutoModelForCausalLM.from_config(Qwen3Config.from_pretrained(tiny)).double()
    ids = torch.randint(1, 128, (2, 24), generator=torch.Generator().manual_seed(1))
    labels = ids.clone()
    labels[1, 20:] = -100
    batch = {"input_ids": ids, "labels": labels}
    expected = model(input_ids=ids, labels=labels, use_cache=False).loss  # HF shifts labels itself
    for chunk in (0, 7):
        got = harness.compute_loss(model, batch, chunk_tokens=chunk)
        torch.testing.assert_close(got, expected.to(got.dtype), rtol=1e-5, atol=1e-6)  # HF: fp32 loss


def test_a_harness_resolves_from_the_current_directory_as_python_m_would(tiny, tmp_path):
    """The `labprobe` script's folder, not the cwd, heads sys.path: `--harness mytrainer.train` in the lab's
    repo must still import there, and in the worker processes that measure (their calls are counted)."""
    import os
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    lab = tmp_path / "lab"
    (lab / "mytrainer").mkdir(parents=True)
    (lab / "mytrainer" / "__init__.py").write_text("")
    shutil.copy(Path(__file__).parents[2] / "data" / "harness_custom.py", lab / "mytrainer" / "train.py")
    calls = tmp_path / "calls.txt"
    script = Path(sys.executable).with_name("labprobe")
    env = {**os.environ, "LABPROBE_TEST_CALLS_FILE": str(calls)}
    argv = [str(script), "probe", "carrier", "--checkpoint", str(tiny), "--harness", "mytrainer.train"]
    argv += [
        "--weights",
        "random",
        "--seq-len",
        "16",
        "--steps",
        "2",
        "--max-steps",
        "2",
        "--warmup-steps",
        "1",
        "--processes",
        "1",
    ]
    proc = subprocess.run(argv, cwd=lab, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert "does not import" not in proc.stderr, proc.stderr
    assert proc.returncode in (0, 1), proc.stderr  # 1: a CPU step's spread may fail rows_trustworthy
    assert "loss" in calls.read_text().split(), "the worker process did not run the lab's harness"
