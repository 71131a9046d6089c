"""The `profile` probe's measurements, all through one model session (probes.step.session; probes.profile.probe
orders them and documents the tables and units).

Each measurement here times steps through the session (probes.step.measure.timing) or profiles them
(probes.step.measure.kernels), an out-of-memory becoming a row rather than a crash (`oom_guard`): a scaling
point, its gpu_busy_frac (profiled AFTER every timing: CUPTI lingers), the padding penalty's three
cases, CE alone, and the kernel profile.
"""

from __future__ import annotations

import dataclasses

import torch

from probes.profile.config import Config
from probes.step import harness as reference
from probes.step.masking import fast_path
from probes.step.masking.attention_calls import ForwardConfig
from probes.step.measure import kernels, syncs
from probes.step.session import Session, oom_guard
from probes.step.steptime.fit import ScalingRow
from probes.step.train import models


def scaling_point(session: Session, seq_len: int) -> ScalingRow:
    b = session.config.batch_size
    base = dict(seq_len=seq_len, batch_size=b, tokens=b * seq_len)
    if session.model is not None:
        base.update(params_total=session.counts.params_total, params_active=round(session.counts.params_active))

    def measure() -> ScalingRow:
        t, peak = session.time(f"scaling/{seq_len}", session.step(b, seq_len))
        return ScalingRow(
            **base,
            step_s=t.median_s,
            spread_pct=100 * t.spread,
            spread_all_pct=100 * t.spread_all,
            iqr_pct=100 * t.iqr,
            steps=t.num_steps,
            peak_mem_bytes=peak,
        )

    return oom_guard(session, measure, lambda msg: ScalingRow(**base, status=msg))


@dataclasses.dataclass(frozen=True, kw_only=True)
class PaddingRow:
    case: str
    shape: str
    """Batch shape(s) of the step: "2x4096", or "1x4096+1x2048" for two micro-batches."""
    real_tokens: int
    attention_mask: bool
    fast_path_all_layers: bool | None
    step_s: float | None
    spread_pct: float | None
    penalty_same_shape_s: float | None = None
    """half_padded only: its step_s minus unpadded_same_shape's (the mask's own cost)."""
    penalty_same_shape_pct: float | None = None
    penalty_same_tokens_s: float | None = None
    """half_padded only: its step_s minus unpadded_same_tokens's (what the padding costs)."""
    penalty_same_tokens_pct: float | None = None
    status: str = "ok"


def _fast_path(config: Config, padding: str) -> bool | None:
    """Whether every layer keeps SDPA's maskless path, read by the recorded forward (config only, as the
    mask probe reads it). An architecture it cannot build gives None (unknown), not a failure here."""
    return fast_path.all_layers(
        ForwardConfig(checkpoint=config.checkpoint, seq_len=config.seq_len, batch_size=2, padding=padding)
    )


def padding_penalty(session: Session) -> list[PaddingRow]:
    """Half-padded 2 x n against the same shape unpadded and the same real tokens unpadded."""
    n = session.config.seq_len
    half = max(1, n // 2)
    cases = [
        ("unpadded_same_shape", f"2x{n}", 2 * n, "none", lambda: session.step(2, n)),
        ("unpadded_same_tokens", f"1x{n}+1x{half}", n + half, "none", lambda: session.micro_step([n, half])),
        ("half_padded", f"2x{n}", n + half, "right", lambda: session.step(2, n, real_lengths=[n, half])),
    ]
    # One mask probe per padding mode, not per case: the two unpadded cases ask the same question.
    fast = {padding: _fast_path(session.config, padding) for padding in {c[3] for c in cases}}
    rows = []
    for case, shape, real, padding, make in cases:
        base = dict(
            case=case,
            shape=shape,
            real_tokens=real,
            attention_mask=padding != "none",
            fast_path_all_layers=fast[padding],
        )

        def measure(case=case, base=base, make=make) -> PaddingRow:
            t, _ = session.time(f"padding/{case}", make())
            return PaddingRow(**base, step_s=t.median_s, spread_pct=100 * t.spread)

        rows.append(
            oom_guard(
                session, measure, lambda msg, base=base: PaddingRow(**base, step_s=None, spread_pct=None, status=msg)
            )
        )
    same_shape, same_tokens, padded = (r.step_s for r in rows)
    if padded is not None:
        extra = {}
        for name, ref in (("same_shape", same_shape), ("same_tokens", same_tokens)):
            if ref is not None:
                extra |= {f"penalty_{name}_s": padded - ref, f"penalty_{name}_pct": 100 * (padded - ref) / ref}
        rows[2] = dataclasses.replace(rows[2], **extra)
    return rows


@dataclasses.dataclass(frozen=True, kw_only=True)
class CeRow:
    mode: str
    tokens: int
    chunk_tokens: int
    ce_s: float | None
    spread_pct: float | None
    peak_mem_bytes: int | None
    share_of_step_pct: float | None
    status: str = "ok"


def cross_entropy_table(session: Session) -> list[CeRow]:
    """CE alone; its share of the step is filled in by with_ce_share once the step time is known."""
    c, device = session.config, session.device
    tokens = c.batch_size * c.seq_len
    weight = session.model.get_base_model().get_output_embeddings().weight
    rows = []
    for mode, chunk in (("chunked", c.ce_chunk), ("unchunked", 0)):
        base = dict(mode=mode, tokens=tokens, chunk_tokens=min(chunk, tokens) if chunk else tokens)

        def measure(chunk=chunk, mode=mode, base=base) -> CeRow:
            generator = torch.Generator(device=device).manual_seed(0)
            hidden = torch.randn(
                tokens, weight.shape[1], device=device, dtype=weight.dtype, generator=generator, requires_grad=True
            )
            labels = torch.randint(0, weight.shape[0], (tokens,), device=device, generator=generator)

            def ce_step() -> None:
                reference.cross_entropy(hidden, weight, labels, chunk).backward()
                hidden.grad = None

            models.release(device)
            before = torch.cuda.memory_allocated(device) if device.type == "cuda" else None
            t, peak = session.time(f"ce/{mode}", ce_step)
            return CeRow(
                **base,
                ce_s=t.median_s,
                spread_pct=100 * t.spread,
                peak_mem_bytes=None if peak is None else peak - before,
                share_of_step_pct=None,
            )

        rows.append(
            oom_guard(
                session,
                measure,
                lambda msg, base=base: CeRow(
                    **base, ce_s=None, spread_pct=None, peak_mem_bytes=None, share_of_step_pct=None, status=msg
                ),
            )
        )
    return rows


def with_ce_share(rows: list[CeRow], step_s: float | None) -> list[CeRow]:
    """Each CE time as a share of the step; none where the step is unknown or the fit gives no step there (a
    noisy fit can dip to zero or below between its points: production_step_in_fit says so)."""
    if not step_s or step_s <= 0:
        return rows
    return [dataclasses.replace(r, share_of_step_pct=100 * r.ce_s / step_s) if r.ce_s else r for r in rows]


def sync_census(session: Session) -> tuple[list[syncs.SyncRow] | None, str | None]:
    """Where the production step waits for the device (probes.step.measure.syncs), after a warm step, and why there
    is no answer when there is none: out of memory, or a census the step does not survive (a lab harness's
    own code under the census's dispatch mode). The census is an aside: it never ends the probe."""
    c = session.config
    step = session.step(c.batch_size, c.seq_len)

    def measure() -> tuple[list[syncs.SyncRow] | None, str | None]:
        step()
        try:
            return syncs.census(step, session.device), None
        except Exception as exc:  # noqa: BLE001 - the timings above stand; the summary says why there is no census
            if models.is_oom(exc):
                raise  # to oom_guard, which gives the memory back
            return None, f"not taken: {type(exc).__name__}: {(str(exc).splitlines() or [''])[0][:160]}"

    return oom_guard(session, measure, lambda msg: (None, f"not taken: {msg}"))


def kernel_profile(session: Session) -> kernels.Profile | None:
    c = session.config
    step = session.step(c.batch_size, c.seq_len)

    def measure() -> kernels.Profile:
        step()  # a warm step outside the profile: no allocator or autotuner start-up inside it
        return kernels.profile_steps(step, device=session.device, num_steps=c.profile_steps)

    return oom_guard(session, measure, lambda msg: None)
