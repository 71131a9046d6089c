"""`labprobe compare` over a real store written through runner.store.store: the newest ok job per host and
checkpoint, values and ratios as computed by hand, row groups kept apart, and the three warnings."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest

from probes.result import InputError
from runner import cli
from runner.analysis.compare import compare
from runner.store.store import JobKey, Store

T0 = datetime(2026, 12, 1, 22, 0, tzinfo=timezone.utc)
ENV = {
    "python": "3.11.9",
    "torch": "2.13.0",
    "transformers": "5.24.0",
    "cuda": "12.8",
    "driver": "570.1",
    "gpu": "NVIDIA H200",
}


def put(
    store: Store,
    *,
    host: str,
    ckpt: str,
    run: int,
    values: dict[int, float],
    fp: str = "fp-a",
    spread_pct: float = 0.5,
    env: dict | None = None,
    status: str = "ok",
    config: dict | None = None,
) -> None:
    key = JobKey(
        run_id=f"r{run}",
        job_id=f"{host}-{ckpt}",
        probe="profile",
        host=host,
        checkpoint=ckpt,
        checkpoint_fp=fp,
        config_hash="c1" if config is None else f"c-{sorted(config.items())}",
        code_version="v",
        finished_at=T0 + timedelta(hours=run),
    )
    if status == "ok":
        store.write_table(
            key,
            "scaling",
            [
                {"seq_len": n, "steps": 5 + i + (host == "ana-ml2"), "step_s": v, "spread_pct": spread_pct}
                for i, (n, v) in enumerate(values.items())
            ],
        )
    store.write_job(
        key,
        status=status,
        started_at=key.finished_at,
        wall_s=1.0,
        summary={},
        config=config or {},
        env=env or ENV,
        plan="nightly",
    )


@pytest.fixture
def store(tmp_path) -> Store:
    store = Store(tmp_path)
    put(store, host="gx10", ckpt="A", run=0, values={1024: 9.0, 2048: 9.0})  # older run: ignored
    put(store, host="gx10", ckpt="A", run=1, values={1024: 0.10, 2048: 0.20})
    put(
        store,
        host="ana-ml2",
        ckpt="A",
        run=1,
        values={1024: 0.15, 2048: 0.25},
        spread_pct=5.0,
        env={**ENV, "torch": "2.12.0", "gpu": "NVIDIA RTX 6000"},
    )
    put(store, host="gx10", ckpt="B", run=1, values={1024: 0.40, 2048: 0.80}, fp="fp-b")
    put(store, host="ana-ml2", ckpt="B", run=1, values={1024: 0.20, 2048: 0.40}, fp="fp-b-other")
    put(store, host="ana-ml2", ckpt="C", run=1, values={1024: 1.0, 2048: 1.0})
    put(store, host="ana-ml2", ckpt="C", run=2, values={}, status="failed")  # newest is failed: no C there
    put(store, host="gx10", ckpt="C", run=1, values={1024: 0.5, 2048: 0.5})
    return store


def test_values_ratios_and_row_groups(store):
    result = compare(store, "profile", host_order=["gx10", "ana-ml2"])
    assert (result.table, result.metric, result.baseline, result.hosts) == (
        "scaling",
        "step_s",
        "gx10",
        ["gx10", "ana-ml2"],
    )
    rows = {(r["checkpoint"], r["group"]): r for r in result.rows}
    # seq_len tells rows apart and is the same on both hosts; `steps` differs per host, so it is no label.
    assert set(rows) == {(c, f"seq_len={n}") for c in "ABC" for n in (1024, 2048)}
    a = rows[("A", "seq_len=1024")]
    assert a["values"] == {"gx10": 0.10, "ana-ml2": 0.15}
    assert a["ratios"]["ana-ml2"] == pytest.approx(0.15 / 0.10)
    assert rows[("B", "seq_len=2048")]["ratios"]["ana-ml2"] == pytest.approx(0.40 / 0.80)
    assert rows[("C", "seq_len=1024")]["values"] == {"gx10": 0.5}  # ana-ml2's newest C job failed
    flipped = compare(store, "profile", baseline="ana-ml2")
    assert {(r["checkpoint"], r["group"]): r for r in flipped.rows}[("A", "seq_len=1024")]["ratios"][
        "gx10"
    ] == pytest.approx(0.10 / 0.15)


def test_warnings_fingerprint_versions_spread(store):
    warnings = compare(store, "profile").warnings
    assert any(w.startswith("checkpoint B: fingerprints differ") for w in warnings), warnings
    assert not any(w.startswith("checkpoint A: fingerprints") for w in warnings)
    assert any(w.startswith("torch versions differ") and "2.12.0" in w for w in warnings), warnings
    assert not any(w.startswith("gpu") for w in warnings)  # different GPUs are what is compared
    assert any(w.startswith("A @ ana-ml2: spread_pct up to 5.0%") for w in warnings), warnings
    assert not any("@ gx10: spread_pct" in w for w in warnings)
    rows = {(r["checkpoint"], r["group"]): r for r in compare(store, "profile").rows}
    assert rows[("A", "seq_len=1024")]["untrusted"] == {"gx10": False, "ana-ml2": True}  # hatched in the plot


def test_hosts_running_different_labprobe_code_are_warned(tmp_path):
    store = Store(tmp_path)
    put(store, host="gx10", ckpt="A", run=1, values={1024: 0.1}, env={**ENV, "code_version": "0.1.0+gabc1234"})
    put(store, host="ana-ml2", ckpt="A", run=1, values={1024: 0.2}, env={**ENV, "code_version": "0.1.0+gdef5678"})
    warnings = compare(store, "profile").warnings
    [code] = [w for w in warnings if w.startswith("labprobe code versions differ: ")]
    assert "gx10 0.1.0+gabc1234" in code and "ana-ml2 0.1.0+gdef5678" in code, code
    # A job stored before hosts recorded their code version is no evidence of a difference.
    put(store, host="ana-ml2", ckpt="A", run=2, values={1024: 0.2}, env=ENV)
    put(store, host="gx10", ckpt="B", run=1, values={1024: 0.1}, env={**ENV, "code_version": "0.1.0+gabc1234"})
    assert not any("code versions" in w for w in compare(store, "profile").warnings)


def test_cli_json_plot_and_bad_input(store, tmp_path, capsys):
    png = tmp_path / "cmp.png"
    code = cli.main(
        [
            "compare",
            "--probe",
            "profile",
            "--store",
            str(store.root),
            "--cluster",
            "/nonexistent",
            "--baseline",
            "gx10",
            "--json",
            "--plot",
            str(png),
        ]
    )
    assert code == 0
    data = json.loads(capsys.readouterr().out)
    assert data["metric"] == "step_s" and data["baseline"] == "gx10" and len(data["rows"]) == 6
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    assert (
        cli.main(
            [
                "compare",
                "--probe",
                "profile",
                "--store",
                str(store.root),
                "--cluster",
                "/nonexistent",
                "--baseline",
                "gx10",
            ]
        )
        == 0
    )
    text = capsys.readouterr().out
    assert "ana-ml2/gx10" in text and "1.500x" in text and "warning: torch versions differ" in text
    with pytest.raises(InputError, match="--metric: no column 'nope'"):
        compare(store, "profile", metric="nope")
    with pytest.raises(InputError, match="--baseline: host 'gx11'"):
        compare(store, "profile", baseline="gx11")
    assert cli.main(["compare", "--probe", "mask", "--store", str(store.root), "--cluster", "/x"]) == 2


def test_jobs_wall_time_is_the_default_only_for_a_probe_without_an_answer(tmp_path):
    store = Store(tmp_path)
    for host, wall in (("gx10", 2.0), ("ana-ml2", 3.0)):
        key = JobKey(
            run_id="r",
            job_id=host,
            probe="replay",
            host=host,
            checkpoint="A",
            checkpoint_fp="f",
            config_hash="c",
            code_version="v",
            finished_at=T0,
        )
        store.write_job(key, status="ok", started_at=T0, wall_s=wall, summary={}, config={}, env=ENV)
    result = compare(store, "replay", host_order=["gx10", "ana-ml2"])
    assert (result.table, result.metric) == ("jobs", "wall_s")
    assert result.rows[0]["ratios"] == {"gx10": 1.0, "ana-ml2": 1.5}


def test_the_default_metric_of_a_cpu_probe_is_its_answer(tmp_path):
    """mask compares its answer's words, bucket its summary's answer, padding the pad fraction per strategy:
    never wall time."""
    store = Store(tmp_path)
    fast = {"gx10": 28, "ana-ml2": 0}  # ana-ml2's transformers loses the fast path on every layer
    for host in ("gx10", "ana-ml2"):
        for probe, summary in (
            ("mask", {"layers_fast_path": fast[host], "model_type": "qwen3"}),
            ("bucket", {"bucket_size_90pct_gain": 136}),
            ("padding", {}),
        ):
            key = JobKey(
                run_id="r",
                job_id=f"{probe}-{host}",
                probe=probe,
                host=host,
                checkpoint="A",
                checkpoint_fp="f",
                config_hash="c",
                code_version="v",
                finished_at=T0,
            )
            if probe == "padding":
                store.write_table(
                    key,
                    "strategies",
                    [{"strategy": s, "pad_fraction": f} for s, f in (("fixed", 0.86), ("sorted", 0.02))],
                )
            if probe == "mask":  # 28 full-attention layers: a mask tensor on ana-ml2's, none on gx10's
                mask = "none" if fast[host] else "tensor"
                layers = [
                    {"layer": i, "kind": "softmax", "mask": mask, "fast_path": mask == "none", "band_ok": True,
                     "cross_sequence": False, "window": None}
                    for i in range(28)
                ]  # fmt: skip
                store.write_table(key, "layers", layers)
            store.write_job(key, status="ok", started_at=T0, wall_s=5.0, summary=summary, config={}, env=ENV)
    order = ["gx10", "ana-ml2"]
    mask = compare(store, "mask", host_order=order)  # worded as the sweep's table words it
    assert (mask.table, mask.metric) == ("answer", "full_fast_path")
    assert mask.rows[0]["values"] == {"gx10": "28 of 28", "ana-ml2": "0 of 28"}
    assert mask.warnings == ["checkpoint A: hosts answer full_fast_path differently (gx10: 28 of 28; ana-ml2: 0 of 28)"]
    summary = compare(store, "mask", table="summary", metric="layers_fast_path", host_order=order)
    assert summary.rows[0]["values"] == {h: float(v) for h, v in fast.items()}
    assert compare(store, "bucket", host_order=order).rows[0]["values"] == {"gx10": 136.0, "ana-ml2": 136.0}
    padding = compare(store, "padding", host_order=order)
    assert (padding.table, padding.metric) == ("strategies", "pad_fraction")
    assert {r["group"]: r["values"]["ana-ml2"] for r in padding.rows} == {
        "strategy=fixed": 0.86,
        "strategy=sorted": 0.02,
    }
    with pytest.raises(InputError, match="--metric: name the summary figure"):
        compare(store, "mask", table="summary")


def test_the_by_option_is_gone(tmp_path, capsys):
    """`--by` was parsed and never read: it is refused now, not silently ignored."""
    store = Store(tmp_path)
    key = JobKey(
        run_id="r",
        job_id="m",
        probe="mask",
        host="gx10",
        checkpoint="A",
        checkpoint_fp="f",
        config_hash="c",
        code_version="v",
        finished_at=T0,
    )
    store.write_job(key, status="ok", started_at=T0, wall_s=1.0, summary={"layers_fast_path": 28}, config={}, env=ENV)
    args = ["compare", "--probe", "mask", "--table", "summary", "--metric", "layers_fast_path"]
    args += ["--store", str(tmp_path), "--cluster", "/x"]
    assert cli.main(args) == 0
    capsys.readouterr()
    assert cli.main([*args, "--by", "host"]) == 2
    assert "--by" in capsys.readouterr().err


def test_a_row_column_named_checkpoint_does_not_shadow_the_key(tmp_path):
    store = Store(tmp_path)
    for host, tok in (("gx10", 1000.0), ("ana-ml2", 800.0)):
        key = JobKey(
            run_id="r",
            job_id=host,
            probe="carrier",
            host=host,
            checkpoint="family",
            checkpoint_fp="f",
            config_hash="c",
            code_version="v",
            finished_at=T0,
        )
        store.write_table(key, "carriers", [{"checkpoint": "/models/qwen3-0.6b", "tok_per_s": tok}])
        store.write_job(key, status="ok", started_at=T0, wall_s=1.0, summary={}, config={}, env=ENV)
    result = compare(store, "carrier", host_order=["gx10", "ana-ml2"])
    assert (result.table, result.metric) == ("carriers", "tok_per_s")
    assert [(r["checkpoint"], r["ratios"]) for r in result.rows] == [("family", {"gx10": 1.0, "ana-ml2": 0.8})]


def test_the_direction_follows_the_unit():
    from runner.analysis.compare import better

    assert better("step_s") == better("pad_fraction") == better("peak_mem_bytes") == "lower is better"
    assert better("tok_per_s") == better("mfu") == better("gain_vs_random") == "higher is better"
    assert better("num_layers") == ""


@pytest.mark.parametrize("command", ["compare", "history"])
def test_a_plot_path_that_cannot_be_an_image_is_one_line_exit_2(tmp_path, capsys, command):
    folder = tmp_path / "plot.png"
    folder.mkdir()
    for bad, needle in ((folder, "is a folder"), (tmp_path / "plot.txt", "expected a .png, .svg or .pdf")):
        assert cli.main([command, "--probe", "mask", "--store", str(tmp_path / "store"), "--plot", str(bad)]) == 2
        err = capsys.readouterr().err.strip()
        assert "--plot" in err and needle in err and "\n" not in err
    assert not (tmp_path / "store").exists()  # refused before anything was read or written


def test_hosts_measuring_through_another_optimizer_or_autocast_are_warned(tmp_path):
    store = Store(tmp_path)
    gx10 = {**ENV, "harness_optimizer": "AdamW (fused)", "harness_autocast_dtype": "torch.bfloat16"}
    ana = {**ENV, "harness_optimizer": "SGD", "harness_autocast_dtype": "None"}
    put(store, host="gx10", ckpt="A", run=1, values={1024: 0.1}, env=gx10)
    put(store, host="ana-ml2", ckpt="A", run=1, values={1024: 0.14}, env=ana)
    warnings = compare(store, "profile").warnings
    assert any(w.startswith("harness_optimizer") and "SGD" in w for w in warnings), warnings
    assert any(w.startswith("harness_autocast_dtype") and "bfloat16" in w for w in warnings), warnings


def test_a_length_one_host_lacks_is_a_row_of_its_own_not_pooled(tmp_path):
    """gx10 measured 1024 and 2048, ana-ml2 only 1024 (it ran out of memory at 2048): the same speed."""
    store = Store(tmp_path)
    put(store, host="gx10", ckpt="A", run=1, values={1024: 0.10, 2048: 0.20})
    put(store, host="ana-ml2", ckpt="A", run=1, values={1024: 0.10})
    rows = {r["group"]: r for r in compare(store, "profile").rows}
    assert rows["seq_len=1024"]["ratios"]["ana-ml2"] == pytest.approx(1.0)
    assert rows["seq_len=2048"]["values"] == {"gx10": 0.20}


def test_hosts_that_ran_different_configs_are_warned_naming_the_fields(tmp_path):
    store = Store(tmp_path)
    put(store, host="gx10", ckpt="A", run=1, values={1024: 0.9}, config={"seq_len": 2048, "steps": 10})
    put(store, host="ana-ml2", ckpt="A", run=1, values={1024: 0.4}, config={"seq_len": 4096, "steps": 10})
    [warning] = [w for w in compare(store, "profile").warnings if "different configs" in w]
    assert warning.startswith(
        "checkpoint A: hosts ran different configs (seq_len: ana-ml2 4096, gx10 2048)"
    )  # host order


def test_the_compare_plot_draws_a_checkpoint_named_with_dollar_signs(tmp_path):
    """matplotlib reads `$...$` as math: `--plot` of a checkpoint `a$\\frac$b` raised in the middle of saving."""
    from runner.analysis.compare_plot import plot_comparison

    store = Store(tmp_path / "store")
    for host, step_s in (("gx10", 0.1), ("ana-ml2", 0.2)):
        put(store, host=host, ckpt="a$\\frac$b", run=1, values={1024: step_s})
    path = plot_comparison(compare(store, "profile"), tmp_path / "cmp.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
