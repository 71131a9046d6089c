"""The device check of GPU jobs (runner/gpu/cuda.py): on this CPU machine torch sees no CUDA, which is the
no-CUDA case itself; the test seam (LABPROBE_FAKE_CUDA=1 with fake NVML) stands for a GPU host's torch."""

from __future__ import annotations

import pytest
import torch
from nvml_util import gpu, write_fake

from runner.gpu import idle
from runner.gpu.cuda import NoCudaError, check_device


@pytest.fixture
def env(monkeypatch):
    for key in ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "LABPROBE_FAKE_CUDA"):
        monkeypatch.delenv(key, raising=False)
    return monkeypatch


def settle(host: str, visible: str, env) -> idle.Card:
    env.setenv("CUDA_VISIBLE_DEVICES", visible)
    return idle.guard(host)


@pytest.mark.skipif(torch.cuda.is_available(), reason="the no-CUDA case needs a torch that sees no CUDA")
def test_a_torch_without_cuda_fails_in_one_line_naming_it(fake_nvml_dir, env):
    write_fake(fake_nvml_dir, "box", [gpu(0), gpu(1)])
    card = settle("box", "1", env)
    with pytest.raises(NoCudaError) as err:
        check_device("box", card, cards=list(card.seen))
    [line] = str(err.value).splitlines()
    assert line.startswith("box: GPU job placed on GPU 1 (GPU-fake-1), but torch.cuda.is_available() is False")
    assert f"torch {torch.__version__}" in line and "CUDA_VISIBLE_DEVICES='1'" in line
    assert ("built without CUDA: the CPU wheel?" if torch.version.cuda is None else "built for CUDA") in line


def test_the_seam_sees_the_card_cuda_would_and_records_it(fake_nvml_dir, env):
    write_fake(fake_nvml_dir, "box", [gpu(0), gpu(1)])
    env.setenv("LABPROBE_FAKE_CUDA", "1")
    card = settle("box", "1", env)
    device = check_device("box", card, cards=list(card.seen))
    assert (device.index, device.uuid, device.name, device.torch) == (1, "GPU-fake-1", "NVIDIA H200", torch.__version__)
    assert device.env()["gpu_index"] == "1" and device.env()["gpu_uuid"] == "GPU-fake-1"
    # Card 1 settled, but CUDA would number card 0 first (the variable changed after the guard): refused.
    env.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    with pytest.raises(NoCudaError, match=r"torch's cuda:0 is NVIDIA H200 GPU-fake-0 .*not run on a card it was not"):
        check_device("box", card, cards=list(card.seen))


@pytest.mark.skipif(torch.cuda.is_available(), reason="the no-CUDA case needs a torch that sees no CUDA")
def test_the_seam_is_ignored_unless_nvml_is_faked(fake_nvml_dir, env):
    write_fake(fake_nvml_dir, "box", [gpu(0)])
    env.setenv("LABPROBE_FAKE_CUDA", "1")
    card = settle("box", "0", env)
    env.delenv("LABPROBE_FAKE_NVML_DIR")  # real NVML (none here): the seam cannot make a real host pass
    with pytest.raises(NoCudaError, match="torch.cuda.is_available"):
        check_device("box", card, cards=list(card.seen))
