"""The morning report, rendered from a real store: several hosts, carriers, failures, a drift.

`build_lab_store` writes five nights of a small lab through runner.store.store.Store (real Parquet):
three hosts, two carriers, profile scaling and kernel tables, a padding table; the last night has
one failed job, two jobs skipped at the deadline, and a planted 5% slowdown of qwen3-4b on h200-a.
test_report_browser.py loads the same report in Chromium.
"""

from __future__ import annotations

import base64
import html.parser
import random
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from runner.analysis.report import write_report
from runner.store.store import JobKey, Store

HOSTS = ("gx10", "ana-ml2", "h200-a")
CARRIERS = {"qwen3-0.6b": 0.6e9, "qwen3-4b": 4.0e9}
# Median s/step per (carrier, host) at 4,096 tokens; ana-ml2's 0.6B step is launch-bound (wide spread).
STEP_S = {
    ("qwen3-0.6b", "gx10"): 0.21,
    ("qwen3-0.6b", "ana-ml2"): 0.35,
    ("qwen3-0.6b", "h200-a"): 0.19,
    ("qwen3-4b", "gx10"): 0.52,
    ("qwen3-4b", "ana-ml2"): 0.95,
    ("qwen3-4b", "h200-a"): 0.40,
}
SPREAD_PCT = {("qwen3-0.6b", "ana-ml2"): 4.2}
TOKENS = 4096
NUM_NIGHTS = 5
LAST_RUN = f"night-{NUM_NIGHTS - 1}"
SLOWDOWN = 1.05
SLOW = ("qwen3-4b", "h200-a")
FAILED = ("qwen3-4b", "ana-ml2")
SKIPPED_HOST = "gx10"
CHECK_FAILED_HOST = "h200-a"
KERNEL_SHARES = {
    "bf16 GEMM": 0.46,
    "fp32 GEMM": 0.14,
    "attention": 0.18,
    "elementwise": 0.12,
    "optimizer": 0.06,
    "memcpy and memset": 0.04,
}


def _key(run: int, probe: str, host: str, checkpoint: str, minute: int) -> JobKey:
    return JobKey(
        run_id=f"night-{run}",
        job_id=f"{probe}-{host}-{checkpoint}",
        probe=probe,
        host=host,
        checkpoint=checkpoint,
        checkpoint_fp=f"fp-{checkpoint}",
        config_hash=f"cfg-{probe}",
        code_version="0.1.0",
        finished_at=datetime(2026, 11, 28, 1, minute, tzinfo=timezone.utc) + timedelta(days=run),
    )


def _job(store: Store, key: JobKey, status: str = "ok", reason: str = "", summary: dict | None = None) -> None:
    wall_s = 0.0 if status == "skipped" else 40.0
    store.write_job(
        key,
        status=status,
        reason=reason,
        started_at=key.finished_at - timedelta(seconds=wall_s),
        wall_s=wall_s,
        summary=summary or {},
        config={},
        env={"host": key.host},
        plan="nightly",
    )


def _carrier_row(carrier: str, host: str, step_s: float) -> dict:
    """The columns of probes/carrier/probe.py's CarrierRow (its `checkpoint` lives in the key)."""
    spread = SPREAD_PCT.get((carrier, host), 0.8)
    busy = 0.62 if spread > 2 else 0.97
    return {
        "params_total": int(CARRIERS[carrier]),
        "params_trainable": int(CARRIERS[carrier] / 200),
        "tokens_per_step": TOKENS,
        "warmup_steps": 3,
        "steps": 10 if spread <= 2 else 30,
        "step_s": step_s,
        "tok_per_s": TOKENS / step_s,
        "spread_pct": spread,
        "iqr_pct": spread / 3,
        "peak_mem_bytes": int(CARRIERS[carrier] * 6),
        "gpu_busy_frac": busy,
        "mfu": 6 * CARRIERS[carrier] * TOKENS / step_s / 989e12,
        "hours_per_job": 1e9 / (TOKENS / step_s) / 3600,
        "hours_sweep": 4e9 / (TOKENS / step_s) / 3600,
        "trustworthy": spread <= 2.0,
        "launch_bound": busy < 0.9,
        "status": "ok",
    }


def _write_profile(store: Store, run: int, host: str, checkpoint: str, rng: random.Random) -> None:
    """The tables of probes/profile/probe.py: scaling (with the fit's values), fit, kernels."""
    key = _key(run, "profile", host, checkpoint, 30 + HOSTS.index(host))
    base = STEP_S[(checkpoint, host)]
    terms = {"quadratic": 0.15 * base / TOKENS**2, "linear": 0.7 * base / TOKENS, "fixed": 0.15 * base}

    def fit_s(n: int) -> float:
        return terms["quadratic"] * n * n + terms["linear"] * n + terms["fixed"]

    scaling = [
        {
            "seq_len": n,
            "batch_size": 1,
            "tokens": n,
            "step_s": fit_s(n) * (1 + rng.uniform(-0.005, 0.005)),
            "spread_pct": 0.6,
            "iqr_pct": 0.2,
            "steps": 5,
            "peak_mem_bytes": int(2e9 + n * 1e6),
            "gpu_busy_frac": 0.97,
            "launch_bound": False,
            "in_fit": True,
            "fit_s": fit_s(n),
            "heldout_err_pct": 0.4,
            "status": "ok",
        }
        for n in (1024, 2048, 4096, 8192)
    ]
    fit = [
        {"term": t, "coef": c, "unit": u, "share_at_production_pct": 100 * share}
        for (t, c), u, share in zip(terms.items(), ("s/token^2", "s/token", "s"), (0.15, 0.7, 0.15))
    ]
    kernels = [
        {
            "category": c,
            "kernel_s_per_step": base * 0.8 * share,
            "share_pct": share * 100,
            "num_calls_per_step": 100.0,
            "top_kernel": f"{c.split()[0]}_kernel",
        }
        for c, share in KERNEL_SHARES.items()
    ]
    for name, rows in (("scaling", scaling), ("fit", fit), ("kernels", kernels)):
        store.write_table(key, name, rows)
    _job(
        store,
        key,
        summary={
            "step_s_4096": scaling[2]["step_s"],
            "quadratic_share_pct": 15.0,
            "seq_len": TOKENS,
            "step_s": scaling[2]["step_s"],
            "max_heldout_err_pct": 0.4,
            "padding_penalty_same_shape_pct": 20.0,
            "padding_penalty_same_tokens_pct": 38.0,
        },
    )


def _write_mask_and_bucket(store: Store, run: int, host: str) -> None:
    """probes/mask/probe.py's `layers` (Qwen3-4B: 36 full-attention layers, all on the fast path) and
    probes/bucket/probe.py's `sweep` with its summary's 90%-gain pick."""
    key = _key(run, "mask", host, "qwen3-4b", 56)
    store.write_table(
        key,
        "layers",
        [
            {
                "layer": i,
                "layer_type": "full_attention",
                "mask": "none",
                "is_causal": True,
                "fast_path": True,
                "backend": "flash",
                "window": None,
                "keys_min": 1,
                "keys_max": 4096,
                "band_ok": True,
                "cross_sequence": False,
            }
            for i in range(36)
        ],
    )
    _job(store, key, summary={"num_layers": 36, "layers_fast_path": 36, "layers_cross_sequence": 0})
    key = _key(run, "bucket", host, "qwen3-4b", 57)
    sweep = [
        {
            "bucket_size": b,
            "num_batches": 163,
            "pad_fraction": f,
            "pad_fraction_std": 0.01,
            "gain_vs_random": 0.68 / f,
            "sources_per_batch": spb,
            "source_entropy_ratio": spb / 4,
        }
        for b, f, spb in ((8, 0.68, 3.14), (136, 0.17, 1.67), (1300, 0.02, 1.65))
    ]
    store.write_table(key, "sweep", sweep)
    _job(store, key, summary={"bucket_size_90pct_gain": 136, "its_pad_fraction": 0.17})


def build_lab_store(root: Path, *, seed: int = 0) -> Store:
    store, rng = Store(root), random.Random(seed)
    for run in range(NUM_NIGHTS):
        last = run == NUM_NIGHTS - 1
        for i, (carrier, host) in enumerate(sorted(STEP_S)):
            key = _key(run, "carrier", host, carrier, i)
            if last and (carrier, host) == FAILED:
                _job(
                    store,
                    key,
                    status="failed",
                    reason="torch.OutOfMemoryError: CUDA out of memory (tried to allocate 2.32 GiB)",
                )
                continue
            step_s = STEP_S[(carrier, host)] * (1 + rng.uniform(-0.01, 0.01))
            step_s *= SLOWDOWN if last and (carrier, host) == SLOW else 1.0
            store.write_table(key, "carriers", [_carrier_row(carrier, host, step_s)])
            _job(store, key, summary={"step_s": step_s, "tok_per_s": TOKENS / step_s})
        for host in HOSTS:
            if last and host == SKIPPED_HOST:
                _job(store, _key(run, "profile", host, "qwen3-4b", 50), status="skipped", reason="deadline")
            else:
                _write_profile(store, run, host, "qwen3-4b", rng)
            key = _key(run, "padding", host, "qwen3-4b", 55)
            store.write_table(
                key,
                "strategies",
                [
                    {"strategy": s, "pad_fraction": f, "tokens_per_batch": 16384}
                    for s, f in (("none", 0.41), ("sorted", 0.03), ("bucketed", 0.07))
                ],
            )
            reason = "checks failed: truncated_below_1pct" if last and host == CHECK_FAILED_HOST else ""
            _job(store, key, reason=reason, summary={"best": "sorted", "pad_fraction_none": 0.41})
            _write_mask_and_bucket(store, run, host)
    return store


@pytest.fixture(scope="module")
def lab(tmp_path_factory) -> tuple[Store, Path, str]:
    store = build_lab_store(tmp_path_factory.mktemp("lab") / "results")
    path, text = write_report(store, LAST_RUN)
    return store, path, text


class _Page(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.images: list[dict] = []
        self.external: list[str] = []
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "img":
            self.images.append(attrs)
        for name in ("src", "href"):
            if name in attrs and not str(attrs[name]).startswith(("data:", "#")):
                self.external.append(f"{tag} {name}={attrs[name]}")

    def handle_data(self, data):
        self.text.append(data)


def _parse(path: Path) -> _Page:
    page = _Page()
    page.feed(path.read_text(encoding="utf-8"))
    return page


def test_report_lands_under_the_store_and_embeds_real_pngs(lab):
    store, path, _ = lab
    assert path == store.root / "reports" / f"{LAST_RUN}.html"
    page = _parse(path)
    assert page.external == []  # self-contained: nothing fetched from anywhere
    # one bar chart per carrier, one scaling plot and one kernel plot for the profiled checkpoint, the
    # host comparison of padding's strategies and bucket's sweep
    alts = [img["alt"] for img in page.images]
    assert len(alts) == len(CARRIERS) + 4, alts
    assert any(a.startswith("padding:") for a in alts) and any(a.startswith("bucket:") for a in alts)
    for img in page.images:
        prefix = "data:image/png;base64,"
        assert img["src"].startswith(prefix) and img.get("alt")
        png = base64.b64decode(img["src"][len(prefix) :])
        assert png[:8] == b"\x89PNG\r\n\x1a\n"
        width, height = int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")
        assert width > 200 and height > 100


def test_report_names_every_host_carrier_failure_and_skip(lab):
    _, path, _ = lab
    text = " ".join(_parse(path).text)
    for name in HOSTS + tuple(CARRIERS):
        assert name in text
    assert "CUDA out of memory" in text and "deadline" in text and "truncated_below_1pct" in text
    for section in (
        "What this run found",
        "What changed since the last run",
        "Failed and skipped jobs",
        "Carriers",
        "Step-time scaling",
        "Kernel time by category",
        "Job summaries",
        "padding.strategies",
        "profile.fit",
    ):
        assert section in text


def test_report_summary_counts_and_the_planted_drift(lab):
    text = lab[2]
    num_jobs = len(STEP_S) + 4 * len(HOSTS)  # carriers, then profile, padding, mask and bucket per host
    assert f"run {LAST_RUN}: {num_jobs} job(s) on {len(HOSTS)} host(s)" in text
    assert f"{num_jobs - 2} ok, 1 failed, 1 skipped" in text
    assert f"  padding on {CHECK_FAILED_HOST}/qwen3-4b: checks failed: truncated_below_1pct" in text
    alert_lines = [line for line in text.splitlines() if line.startswith("  ") and "earlier run" in line]
    # Only the planted slowdown: the ±1% noise elsewhere stays under 3%.
    assert len(alert_lines) == 1, text
    carrier, host = SLOW
    assert f"{host}/{carrier}" in alert_lines[0] and "step_s" in alert_lines[0] and " up " in alert_lines[0]
    assert "drift alerts: 1" in text


def test_kernel_table_in_the_report_is_per_host_milliseconds(lab):
    store, path, _ = lab
    page = path.read_text(encoding="utf-8")
    kernels = store.read("profile.kernels")
    row = kernels[
        (kernels["run_id"] == LAST_RUN) & (kernels["host"] == "h200-a") & (kernels["category"] == "bf16 GEMM")
    ].iloc[0]
    expected_ms = STEP_S[("qwen3-4b", "h200-a")] * 0.8 * KERNEL_SHARES["bf16 GEMM"] * 1e3
    assert row["kernel_s_per_step"] * 1e3 == pytest.approx(expected_ms)
    assert f"{expected_ms:.4f}".rstrip("0") in page


def test_report_of_a_run_with_only_a_failed_job_and_no_tables(tmp_path):
    store = Store(tmp_path)
    key = _key(0, "carrier", "gx10", "qwen3-4b", 0)
    _job(store, key, status="failed", reason="ModuleNotFoundError: mytrainer")
    path, text = write_report(store, "night-0")
    page = _parse(path)
    assert page.images == [] and "ModuleNotFoundError: mytrainer" in " ".join(page.text)
    assert "no answer of this run has an earlier ok run to compare with" in " ".join(page.text)
    assert "0 ok, 1 failed, 0 skipped" in text and "drift alerts: none" in text


def test_a_run_with_no_jobs_gets_a_report_that_says_so(lab):
    """A resumed sweep that found everything stored ran no jobs: its report must not fail the sweep."""
    path, text = write_report(lab[0], "resumed-with-nothing-left")
    assert "no jobs of this run" in text and "no record of its plan" in text
    page = _parse(path)
    assert page.images == [] and "stored no jobs" in " ".join(page.text)


def _findings(path: Path) -> tuple[str, str]:
    """The page's text before the collapsed raw tables, and the raw part."""
    page = path.read_text(encoding="utf-8")
    head, raw = page.split("<details", 1)
    return " ".join(_text(head).split()), raw


def _text(fragment: str) -> str:
    page = _Page()
    page.feed(fragment)
    return " ".join(page.text)


def test_the_report_opens_with_the_findings_then_the_plots_and_collapses_the_raw_tables(lab):
    _, path, _ = lab
    findings, raw = _findings(path)
    headings = (
        "What this run found",
        "What changed since the last run",
        "Failed and skipped jobs",
        "Host comparison",
        "Carriers: per-host comparison",
        "Step-time scaling",
        "Kernel time by category",
    )
    order = [findings.index(h) for h in headings]
    assert order == sorted(order)
    page = path.read_text(encoding="utf-8")
    head = page.split("<details", 1)[0]
    assert "<img" not in head.split("Host comparison", 1)[0]  # no plot before the findings end
    assert "<img" not in raw  # every plot shown, only raw tables collapsed
    for heading in ("Jobs per host", "Job summaries", "profile.fit"):
        assert heading in _text(raw)


def test_the_findings_show_each_probes_answer_from_the_stored_rows(lab):
    """Recomputed from the stored tables: the carriers' tok/s, the pad fraction per strategy, the fit's
    shares; ana-ml2's failed qwen3-4b carrier shows night-3's value, marked; the drift alert and the
    newly failed check are what changed."""
    store, path, _ = lab
    findings, _ = _findings(path)
    carriers = store.read("carrier.carriers")
    tok = carriers.sort_values("finished_at").groupby(["host", "checkpoint"])["tok_per_s"].last()
    for (host, carrier), value in tok.items():
        assert f"{carrier} {host}" in findings and f"{value:,.1f}" in findings, (host, carrier)
    failed_carrier, failed_host = FAILED
    earlier = carriers[(carriers["host"] == failed_host) & (carriers["checkpoint"] == failed_carrier)]
    earlier_run = earlier.sort_values("finished_at")["run_id"].iloc[-1]
    assert earlier_run != LAST_RUN
    assert f"{failed_carrier} {failed_host} earlier: run {earlier_run}" in findings
    assert "shown instead" in findings and f"run {earlier_run}" in findings
    strategies = store.read("padding.strategies")
    for fraction in strategies[strategies["run_id"] == LAST_RUN]["pad_fraction"].unique():
        assert f"{100 * fraction:g}".rstrip("0").rstrip(".") in findings
    fit = store.read("profile.fit")
    shares = fit[(fit["run_id"] == LAST_RUN) & (fit["host"] == "h200-a")].set_index("term")["share_at_production_pct"]
    profile = findings[findings.index("profile: where does the step's time go") :]
    row = profile[profile.index("qwen3-4b h200-a this run") :][:120]
    assert f" {shares['quadratic']:g} {shares['linear']:g} {shares['fixed']:g} " in row, row
    slow_carrier, slow_host = SLOW
    assert f"carrier {slow_host}/{slow_carrier}" in findings and "(1 drift alert(s), 1 changed answer(s))" in findings
    assert f"padding {slow_carrier} @ {CHECK_FAILED_HOST}: since run night-3: checks ok -> failed" in findings


def test_checkpoints_sharing_a_tokenizer_are_one_answer_row_and_their_rows_still_reach_the_plots(tmp_path):
    """Padding figures that are identical over two checkpoints (one tokenizer) are one answer row naming
    both; the report still finds the rows behind that row, so its padding plot is drawn."""
    from runner.analysis import report_data, report_plots

    store = Store(tmp_path / "results")
    rows = [
        {"strategy": s, "batch_size": 8, "max_length": 4096, "pad_fraction": f}
        for s, f in (("fixed", 0.929), ("longest", 0.693), ("sorted", 0.0312), ("packed", 0.0104))
    ]
    for minute, checkpoint in enumerate(("qwen3-0.6b", "qwen3-4b")):
        key = _key(1, "padding", "local", checkpoint, minute)
        store.write_table(key, "strategies", rows)
        _job(store, key)
    data = report_data.collect(store, "night-1", threshold_pct=5.0, max_spread_pct=2.0)
    (section,) = [s for s in data.answers if s.probe == "padding"]
    assert [a.checkpoint for a in section.answers] == ["qwen3-0.6b, qwen3-4b"]
    assert len(data.tables["padding.strategies"]) == 8
    assert "<img" in report_plots.comparisons_html(data, lambda fig, alt: "<img>")


def test_the_report_takes_the_baseline_host_the_sweep_took(tmp_path):
    """The sweep's end-of-run text gives ratios to the cluster's first host; its report does the same
    (the run's record keeps that order), not to the alphabetically first."""
    from runner.analysis.report_data import collect
    from runner.analysis.report_runs import run_hosts, write_run

    store = build_lab_store(tmp_path / "results")
    last = f"night-{NUM_NIGHTS - 1}"
    jobs = store.jobs()
    work = list(
        jobs[jobs["run_id"] == last][["probe", "host", "checkpoint", "config_hash"]].itertuples(index=False, name=None)
    )
    write_run(store, last, plan="nightly", work=work, hosts=["gx10", "ana-ml2", "h200-a"], outcome="ok")
    assert run_hosts(store, last) == ["gx10", "ana-ml2", "h200-a"]
    data = collect(store, last, threshold_pct=3.0, max_spread_pct=2.0)
    carrier = next(a for a in data.answers if a.probe == "carrier")
    assert carrier.baseline == "gx10"
    write_run(store, last, plan="nightly", work=work, outcome="ok")  # a record of before: no order, as it was
    assert (
        next(
            a for a in collect(store, last, threshold_pct=3.0, max_spread_pct=2.0).answers if a.probe == "carrier"
        ).baseline
        == "ana-ml2"
    )
