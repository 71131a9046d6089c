"""`labprobe store export` and the client recipes of docs/store.md, on the demo store (the demo sweep, then its
padding jobs again, so compaction has replaced files, plus a newer run of one slot, a second host, and a killed
writer's rows without their job row): a plain Parquet reader over the export, and each recipe, gives exactly
`labprobe compare`'s rows and values. A sweep vacuums what its compaction replaced."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import time
from datetime import timedelta
from pathlib import Path

import duckdb
import pandas as pd
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
import yaml
from deltalake import DeltaTable

from runner.cli import main as labprobe
from runner.store.export import MANIFEST
from runner.store.store import KEY_COLUMNS, JobKey, Store

REPO = Path(__file__).resolve().parents[3]
KEYS = ["checkpoint", "host", "strategy"]


def _later(store: Store, job: pd.Series, run_id: str, host: str, scale: float, *, commit: bool = True) -> None:
    """A newer run of `job`'s padding work (on `host`), pad fractions scaled: its rows, and its job row
    unless not `commit` (a writer killed between its tables and its job row)."""
    fields = {f.name for f in dataclasses.fields(JobKey)}
    key = JobKey(**{**{k: job[k] for k in fields}, "run_id": run_id, "host": host, "job_id": f"{job['job_id']}-{host}"})
    key = dataclasses.replace(key, finished_at=job["finished_at"] + timedelta(hours=1))
    rows = Store(store.root).read("padding.strategies")
    rows = rows[(rows["job_id"] == job["job_id"]) & (rows["run_id"] == job["run_id"])]
    rows = rows.drop(columns=list(KEY_COLUMNS)).assign(pad_fraction=rows["pad_fraction"] * scale)
    store.write_table(key, "strategies", rows.to_dict("records"))
    if commit:
        store.write_job(key, status="ok", started_at=key.finished_at, wall_s=1.0, summary={}, config={}, env={})


@pytest.fixture(scope="module")
def demo(tmp_path_factory, demo_sweep) -> Path:
    """A folder holding `results` (the demo store: a copy of the session's demo sweep) and `export` (its export), as
    the recipes expect."""
    folder = tmp_path_factory.mktemp("demo")
    root = folder / "results"
    assert (demo_sweep / "code").read_text() == "0", (demo_sweep / "out.txt").read_text()[-2000:]
    shutil.copytree(demo_sweep / "store", root, symlinks=True)
    sweep = ["sweep", "--inline", "local", "--cluster", str(_lab_with_a_padding_plan(folder)), "--store", str(root)]
    # its padding again: compaction now leaves the first run's files replaced (the table the recipes read)
    assert labprobe([*sweep, "--plan", "padding", "--force"]) == 0
    store = Store(root)
    jobs = store.jobs()
    job = jobs[(jobs["probe"] == "padding") & (jobs["checkpoint"] == "qwen3-0.6b-base")].iloc[-1]
    _later(store, job, "29990101T000000Z-late", "local", 0.5)  # the newest run of a demo slot
    _later(store, job, "29990101T000000Z-late", "gx10", 0.9)  # a second host
    _later(store, job, "29990102T000000Z-dead", "local", 2.0, commit=False)  # never committed: never read
    assert labprobe(["store", "export", str(folder / "export"), "--store", str(root)]) == 0
    return folder


def compared(root: Path) -> pd.DataFrame:
    """`labprobe compare --probe padding --json`'s values as rows (checkpoint, host, strategy, pad_fraction)."""
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-m", "runner.cli", "compare", "--probe", "padding", "--json", "--store", str(root)],
        capture_output=True,
        text=True,
        check=True,
        cwd=root.parent,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    result = json.loads(out.stdout)
    rows = [
        {"checkpoint": r["checkpoint"], "host": h, "strategy": r["group"].removeprefix("strategy="), "pad_fraction": v}
        for r in result["rows"]
        for h, v in r["values"].items()
        if v is not None
    ]
    return pd.DataFrame(rows).sort_values(KEYS).reset_index(drop=True)


def _same(got: pd.DataFrame, want: pd.DataFrame) -> None:
    got = got[[*KEYS, "pad_fraction"]].sort_values(KEYS).reset_index(drop=True)
    pd.testing.assert_frame_equal(got, want, check_dtype=False, rtol=1e-12)


def test_the_demo_store_holds_what_the_checks_need(demo):
    want = compared(demo / "results")
    assert sorted(want["host"].unique()) == ["gx10", "local"]
    newest = want[(want["checkpoint"] == "qwen3-0.6b-base") & (want["host"] == "local")]["pad_fraction"]
    older = want[(want["checkpoint"] == "qwen3-1.7b-base") & (want["host"] == "local")]["pad_fraction"]
    assert list(newest) == pytest.approx(list(older * 0.5))  # the newest run, not the sweeps'
    # A glob over a table's folder counts the replaced files too: what the export is for.
    folder = demo / "results" / "tables" / "padding.strategies"
    globbed = duckdb.sql(f"SELECT count(*) FROM read_parquet('{folder}/*.parquet')").fetchall()[0][0]
    assert globbed > len(DeltaTable(str(folder)).to_pandas())


def test_every_plain_reader_over_the_export_gets_exactly_the_stores_rows(demo):
    store = Store(demo / "results")
    manifest = json.loads((demo / "export" / MANIFEST).read_text())
    assert sorted(manifest["tables"]) == sorted(store.table_names())
    for name in store.table_names():
        path = demo / "export" / f"{name}.parquet"
        want = store.read(name)
        for got in (
            duckdb.sql(f"SELECT * FROM read_parquet('{path}')").df(),
            pd.read_parquet(path),
            ds.dataset(path).to_table().to_pandas(),
        ):
            assert len(got) == len(want), name
            assert set(map(tuple, got[["job_id", "run_id"]].values)) == set(
                map(tuple, want[["job_id", "run_id"]].values)
            )
    rows = pd.read_parquet(demo / "export" / "padding.strategies.parquet")
    assert "29990102T000000Z-dead" not in set(rows["run_id"])  # the killed writer's rows stay out
    assert {"host", "checkpoint", "checkpoint_fp"} <= set(rows.columns)


def _pages() -> str:
    """README.md and every page of docs/: the recipes and the quick look live on one of them (docs/store.md)."""
    return "\n".join(p.read_text() for p in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))])


def _recipes() -> dict[str, str]:
    text = _pages()
    found = re.findall(r"```python\n(# labprobe recipe: (\w+).*?)```", text, re.S)
    return {name: body for body, name in found}


def test_the_docs_have_the_three_recipes():
    assert sorted(_recipes()) == ["deltalake", "duckdb", "polars"]


@pytest.mark.parametrize("name", ["duckdb", "polars", "deltalake"])
def test_a_docs_recipe_gives_compares_rows_and_values(demo, name, monkeypatch, capsys):
    monkeypatch.chdir(demo)  # the recipes read results/ and export/ relative to the lab's folder
    scope: dict = {}
    exec(compile(_recipes()[name], f"docs recipe {name}", "exec"), scope)
    _same(scope["pad"], compared(demo / "results"))


def test_the_docs_quick_look_commands_run(demo):
    import subprocess

    text = _pages()
    block = re.search(r"```bash\n(labprobe store export export\n.*?)```", text, re.S).group(1)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    for line in block.strip().splitlines():
        out = subprocess.run(line, shell=True, cwd=demo, capture_output=True, text=True, env=env)
        assert out.returncode == 0, (line, out.stderr[-2000:])
        assert "padding.strategies" in out.stdout if line.startswith("labprobe") else "pad_fraction" in out.stdout


def test_export_again_replaces_and_leaves_no_stale_file(demo, tmp_path):
    folder = tmp_path / "export"
    assert labprobe(["store", "export", str(folder), "--store", str(demo / "results")]) == 0
    manifest = json.loads((folder / MANIFEST).read_text())
    manifest["tables"]["gone.table"] = {"version": 0, "rows": 1}  # a table an earlier export wrote
    (folder / MANIFEST).write_text(json.dumps(manifest))
    (folder / "gone.table.parquet").write_bytes(b"old")
    assert labprobe(["store", "export", str(folder), "--store", str(demo / "results")]) == 0
    assert not (folder / "gone.table.parquet").exists()
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        [MANIFEST, *(f"{n}.parquet" for n in Store(demo / "results").table_names())]
    )


def test_export_refuses_a_folder_that_is_not_an_export(demo, tmp_path, capsys):
    (tmp_path / "notes.txt").write_text("mine")
    assert labprobe(["store", "export", str(tmp_path), "--store", str(demo / "results")]) == 2
    err = capsys.readouterr().err
    assert "not empty" in err and str(tmp_path) in err and len(err.strip().splitlines()) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]
    assert labprobe(["store", "export", "--store", str(demo / "results")]) == 2
    assert labprobe(["store", "check", str(tmp_path), "--store", str(demo / "results")]) == 2


def _lab_with_a_padding_plan(folder: Path, **store) -> Path:
    """The repo's cluster file, its plans and a `padding` one (the demo's padding jobs), its store `store`."""
    lab = yaml.safe_load((REPO / "cluster.yaml").read_text())
    lab["store"] = store or lab.get("store", {})
    for host in lab["hosts"]:
        host.update({k: str(REPO / v) for k, v in host.items() if k.endswith("_root") and not v.startswith("/")})
    lab["plans"]["padding"] = [{"probe": "padding", "hosts": ["local"], "corpus": "demo"}]
    (folder / "cluster.yaml").write_text(yaml.safe_dump(lab, sort_keys=False))
    return folder / "cluster.yaml"


def test_a_sweep_vacuums_the_files_its_compaction_replaced(tmp_path):
    cluster = _lab_with_a_padding_plan(tmp_path, root=str(tmp_path / "store"), vacuum_retention_days=0)
    sweep = ["sweep", "--inline", "local", "--plan", "padding", "--cluster", str(cluster)]
    assert labprobe(sweep) == 0
    # Vacuum never deletes a file younger than an hour (a writer may be about to commit it): age the
    # first sweep's files, so the second sweep's compaction replaces old files its vacuum may delete.
    hours_ago = time.time() - 2 * 3600
    aged = {}
    for folder in (tmp_path / "store" / "tables").iterdir():
        aged[folder.name] = {p.name for p in folder.glob("*.parquet")}
        for path in folder.glob("*.parquet"):
            os.utime(path, (hours_ago, hours_ago))
    assert labprobe([*sweep, "--force"]) == 0
    for folder in (tmp_path / "store" / "tables").iterdir():
        on_disk = {p.name for p in folder.glob("*.parquet")}
        live = {Path(u).name for u in DeltaTable(str(folder)).file_uris()}
        replaced = aged[folder.name] - live
        assert replaced, folder.name  # the second compaction did replace the first sweep's files
        assert not replaced & on_disk, folder.name  # and the sweep's vacuum deleted them
        assert on_disk - live <= on_disk - aged[folder.name], folder.name  # only this sweep's young files stay


def test_export_into_a_folder_whose_name_is_not_utf8(demo, tmp_path):
    """A folder named in bytes that are not UTF-8 (kept as surrogates): the same files as a plain one."""
    store = str(demo / "results")
    folder, plain = Path(os.fsdecode(bytes(tmp_path) + b"/ex\xff")), tmp_path / "plain"
    assert labprobe(["store", "export", str(folder), "--store", store]) == 0
    assert labprobe(["store", "export", str(plain), "--store", store]) == 0
    assert sorted(p.name for p in folder.iterdir()) == sorted(p.name for p in plain.iterdir())
    for name in Store(store).table_names():
        with open(folder / f"{name}.parquet", "rb") as odd, open(plain / f"{name}.parquet", "rb") as ok:
            assert pq.read_table(odd).equals(pq.read_table(ok))


def test_export_from_a_path_that_is_not_a_store_is_one_line_and_writes_nothing(tmp_path, capsys):
    (tmp_path / "a-file").write_text("not a store")
    for store in (tmp_path / "a-file", tmp_path / "missing"):
        assert labprobe(["store", "export", str(tmp_path / "out"), "--store", str(store)]) == 2
        err = capsys.readouterr().err
        assert str(store) in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists() and not (tmp_path / "missing").exists()
