"""Does this process's torch run on the card the job was placed on? A GPU job measures a GPU or does not run.

A GPU probe falls back to the CPU wherever torch sees no CUDA device (the CPU wheel, a torch built for
a CUDA the driver cannot run, a container without the device): its timing would be stored as the
host's GPU measurement. So a GPU job placed on a GPU host calls `check_device(host, card)` after the
idleness guard (runner.gpu.idle.guard) settled its card, before the probe runs. It raises NoCudaError,
one line naming what torch and the driver say, when

- `torch.cuda.is_available()` is false (torch version, the CUDA it was built for or "none: the CPU
  wheel?", the driver NVML reports), or
- torch's `cuda:0` is not the placed card (its UUID differs: a CUDA_VISIBLE_DEVICES or device order
  that points elsewhere).

Otherwise it returns the `Device` the job ran on (index and UUID as NVML numbers them, name, driver,
CUDA and torch build), which the job's row records.

Test seam, and the only one: CI has no CUDA. With env LABPROBE_FAKE_CUDA=1 *and* fake NVML readings
(LABPROBE_FAKE_NVML_DIR, or the pynvml test double of tests/helpers/nvml_double), torch's view is
taken to be what CUDA would make of the fake cards: those CUDA_VISIBLE_DEVICES names (an index or a
UUID), in that order, `cuda:0` the first. Torch itself is not touched; with real NVML the variable
is ignored, so it cannot make a real host pass.

Never imports Ray.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from typing import Any

from runner.gpu.nvml import FAKE_ENV

FAKE_CUDA_ENV = "LABPROBE_FAKE_CUDA"
DOUBLE_ENV = "LABPROBE_PYNVML_SCENARIO"
"""The env var the pynvml test double reads its scenario from (it names itself by it: `pynvml.ENV`)."""


class NoCudaError(RuntimeError):
    """A GPU job whose torch cannot run on the placed card; str(e) is the one-line reason."""


@dataclasses.dataclass(frozen=True)
class Device:
    """The GPU a job ran on, as its row records it."""

    index: int
    """NVML's index of the card (PCI order), on its host."""
    uuid: str
    name: str
    driver: str
    cuda: str
    """The CUDA version torch was built for (torch.version.cuda)."""
    torch: str

    def env(self) -> dict[str, str]:
        """The job row's env entries (env_json of the jobs table)."""
        return {
            "gpu_index": str(self.index),
            "gpu_uuid": self.uuid,
            "gpu": self.name,
            "driver": self.driver,
            "cuda": self.cuda,
            "torch": self.torch,
        }


def faked() -> bool:
    """Whether the test seam is on: LABPROBE_FAKE_CUDA=1 with fake NVML readings (files or the double)."""
    if os.environ.get(FAKE_CUDA_ENV) != "1":
        return False
    double = getattr(sys.modules.get("pynvml"), "ENV", None) == DOUBLE_ENV
    return bool(os.environ.get(FAKE_ENV)) or double


def check_device(host: str, card: Any, *, cards: list[Any] | None = None) -> Device:
    """The Device torch's cuda:0 is, when it is `card` (a runner.gpu.idle Card or GpuReading: index,
    uuid, name); NoCudaError otherwise. `cards`: every card NVML lists on the host (the seam's view)."""
    import torch

    driver = driver_version()
    where = f"{host}: GPU job placed on GPU {card.index} ({card.uuid or card.name})"
    if faked():
        seen = _fake_cuda0(cards or [card])
        if seen is None:
            raise NoCudaError(f"{where}, but CUDA sees no device (CUDA_VISIBLE_DEVICES={_visible()!r}; fake CUDA)")
        name, uuid, driver = seen.name, seen.uuid, "fake NVML"
    else:
        if not torch.cuda.is_available():
            built = (
                f"built for CUDA {torch.version.cuda}" if torch.version.cuda else "built without CUDA: the CPU wheel?"
            )
            raise NoCudaError(
                f"{where}, but torch.cuda.is_available() is False (torch {torch.__version__} {built}; NVIDIA driver {driver or 'unknown: NVML gave none'}; CUDA_VISIBLE_DEVICES={_visible()!r}): "
                "not run, a CPU timing is not this host's GPU measurement"
            )
        props = torch.cuda.get_device_properties(0)
        name, uuid = props.name, _torch_uuid(props)
    if uuid and card.uuid and _bare(uuid) != _bare(card.uuid):
        raise NoCudaError(
            f"{where}, but torch's cuda:0 is {name} {uuid} (CUDA_VISIBLE_DEVICES={_visible()!r}, "
            f"CUDA_DEVICE_ORDER={os.environ.get('CUDA_DEVICE_ORDER')!r}): not run on a card it was not placed on"
        )
    return Device(
        index=card.index,
        uuid=card.uuid or uuid,
        name=card.name or name,
        driver=driver,
        cuda=torch.version.cuda or "",
        torch=str(torch.__version__),
    )


def _fake_cuda0(cards: list[Any]) -> Any | None:
    """The seam: the fake card CUDA would number 0 under CUDA_VISIBLE_DEVICES (None: no device)."""
    visible = _visible()
    if visible is None:
        return min(cards, key=lambda c: c.index) if cards else None
    first = [w.strip() for w in visible.split(",") if w.strip()][:1]
    return next((c for w in first for c in cards if w in (str(c.index), c.uuid)), None)


def _visible() -> str | None:
    return os.environ.get("CUDA_VISIBLE_DEVICES")


def _torch_uuid(props: Any) -> str:
    """torch's device UUID as NVML spells it (GPU-<hex groups>); "" where this torch does not say."""
    uuid = getattr(props, "uuid", None)
    return f"GPU-{uuid}" if uuid is not None else ""


def _bare(uuid: str) -> str:
    return uuid.lower().removeprefix("gpu-").replace("-", "")


def driver_version() -> str:
    """The NVIDIA driver NVML reports; "" where there is no NVML (or it gives none)."""
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            version = pynvml.nvmlSystemGetDriverVersion()
            return version.decode() if isinstance(version, bytes) else str(version)
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # no NVML on this host, or a double without the call: the driver stays unknown
        return ""
