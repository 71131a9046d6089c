"""Trust, round three (issue 36): nothing outside the store is ever deleted; `store check` sees what
readers would miss (a lost log, a file replaced behind the log) and readers refuse it; a missing
store is named; `store repair` puts right what check finds without losing a row it can read."""

from __future__ import annotations

import os
import subprocess
import time
from datetime import datetime, timezone
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from probes.result import InputError
from runner import cli
from runner.store import maintain
from runner.store.store import JobKey, Store

DAY_S = 86400


def key(n: int, run: str = "r1") -> JobKey:
    return JobKey(
        run_id=run, job_id=f"k{n}", probe="carrier", host="gx10", checkpoint="c", checkpoint_fp="f",
        config_hash="h", code_version="v", finished_at=datetime.now(timezone.utc),
    )  # fmt: skip


def small_store(root: Path, num_jobs: int = 3, first: int = 0) -> Store:
    """Jobs k<first>.. each with 5 rows in carrier.big (x = 10 * job + row) and its job row."""
    store = Store(root)
    for n in range(first, first + num_jobs):
        k = key(n)
        store.write_table(k, "big", [{"x": 10 * n + i, "text": "y" * 40} for i in range(5)])
        store.write_job(k, status="ok", started_at=k.finished_at, wall_s=1.0, summary={}, config={}, env={})
    return store


def store_cmd(capsys, action: str, root: Path, *argv: str) -> tuple[int, str, str]:
    code = cli.main(["store", action, "--store", str(root), "--cluster", str(root.parent / "none.yaml"), *argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def age(root: Path, seconds: float) -> None:
    """Every regular file under `root` (not through links, not hard-linked ones) `seconds` old."""
    then = time.time() - seconds
    for folder, _dirs, files in os.walk(root):
        for name in files:
            path = os.path.join(folder, name)
            st = os.lstat(path)
            if not os.path.islink(path) and st.st_nlink == 1:
                os.utime(path, (then, then))


def outside_folder(tmp_path: Path) -> tuple[Path, dict[str, bytes]]:
    """A folder outside the store: six files and a subfolder, 30 days old."""
    outside = tmp_path / "elsewhere"
    (outside / "sub").mkdir(parents=True)
    for i in range(6):
        (outside / f"f{i}.parquet").write_bytes(os.urandom(100) + bytes([i]))
    (outside / "sub" / "deep.json").write_text("{}")
    age(outside, 30 * DAY_S)
    return outside, snapshot(outside)


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def plant(folder: Path, outside: Path) -> None:
    os.symlink(outside, folder / "linked_dir")
    os.symlink(outside / "f0.parquet", folder / "linked_file.parquet")
    os.link(outside / "f1.parquet", folder / "hard_link.parquet")


# -- 1. deletion never leaves the store --------------------------------------------------------


def test_vacuum_at_zero_days_deletes_nothing_behind_a_symlinked_folder_in_a_table(tmp_path, capsys):
    root = tmp_path / "store"
    small_store(root)
    outside, before = outside_folder(tmp_path)
    plant(root / "tables" / "carrier.big", outside)
    age(root, 30 * DAY_S)
    code, out, err = store_cmd(capsys, "vacuum", root, "--retention-days", "0")
    assert code == 0, err
    assert snapshot(outside) == before  # deleted 6 of 6 files there before the fix
    assert "left alone: " in out and "linked_dir" in out, out
    assert (root / "tables" / "carrier.big" / "linked_dir").is_symlink()
    assert (root / "tables" / "carrier.big" / "linked_file.parquet").is_symlink()
    code, out, _ = store_cmd(capsys, "check", root)
    assert code == 0 and "link: tables/carrier.big/linked_dir: symlink -> " in out, out
    assert len(Store(root).jobs()) == 3


def test_the_sweeps_own_vacuum_at_7_days_leaves_a_linked_folder_alone(tmp_path, caplog):
    root = tmp_path / "store"
    store = small_store(root)
    outside, before = outside_folder(tmp_path)
    for folder in (root, root / "tables", root / "tables" / "jobs", root / "tables" / "jobs" / "_delta_log"):
        plant(folder, outside)
    age(root, 30 * DAY_S)
    store.compact()
    store.vacuum(7)  # the hard links' names in the store may go: their files outside stay
    assert snapshot(outside) == before
    assert "vacuum left" in caplog.text and "`labprobe store check` lists the links" in caplog.text
    assert len(Store(root).jobs()) == 3 and maintain.check(Store(root)).ok


def test_a_link_loop_in_a_table_folder_is_one_line_not_a_traceback(tmp_path, capsys):
    root = tmp_path / "store"
    small_store(root)
    os.symlink(".", root / "tables" / "carrier.big" / "loop")
    code, out, err = store_cmd(capsys, "vacuum", root, "--retention-days", "0")
    assert code == 0 and "Traceback" not in err and "carrier.big: its folder cannot be listed" in out, out + err
    code, out, _ = store_cmd(capsys, "check", root)
    assert code == 0 and "link: tables/carrier.big/loop: symlink -> ." in out, out


@pytest.mark.parametrize("linked", ["table folder", "its _delta_log"])
def test_compact_and_vacuum_leave_a_table_whose_folder_is_a_link_alone(tmp_path, capsys, linked):
    root = tmp_path / "store"
    small_store(root)
    real = tmp_path / "moved"
    source = root / "tables" / "carrier.big"
    source = source if linked == "table folder" else source / "_delta_log"
    os.rename(source, real)
    os.symlink(real, source)
    age(real, 30 * DAY_S)
    before = snapshot(real)
    assert store_cmd(capsys, "compact", root)[0] == 0
    code, out, _ = store_cmd(capsys, "vacuum", root, "--retention-days", "0")
    assert code == 0 and "left alone: " in out and "resolves outside" in out, out
    assert snapshot(real) == before


def test_a_bind_mount_in_a_table_folder_is_never_entered(tmp_path, capsys):
    root = tmp_path / "store"
    small_store(root)
    outside, before = outside_folder(tmp_path)
    target = root / "tables" / "carrier.big" / "mounted"
    target.mkdir()
    if subprocess.run(["mount", "--bind", str(outside), str(target)], capture_output=True).returncode != 0:
        pytest.skip("bind mounts need privileges this machine does not give")
    try:
        age(root, 30 * DAY_S)
        code, out, _ = store_cmd(capsys, "vacuum", root, "--retention-days", "0")
        assert code == 0 and "is on another mount" in out, out
        assert snapshot(outside) == before
        code, out, _ = store_cmd(capsys, "check", root)
        assert code == 0 and "link: tables/carrier.big/mounted: another mount" in out, out
    finally:
        subprocess.run(["umount", str(target)], check=True)


def test_export_removes_only_its_own_files_whatever_its_manifest_names(tmp_path, capsys):
    root = tmp_path / "store"
    small_store(root)
    folder = tmp_path / "export"
    assert store_cmd(capsys, "export", root, str(folder))[0] == 0
    victim = tmp_path / "victim.parquet"
    victim.write_text("keep me")
    manifest = folder / "labprobe-export.json"
    manifest.write_text('{"store": "x", "tables": {"../victim": {}, "jobs": {}}}')
    assert store_cmd(capsys, "export", root, str(folder))[0] == 0
    assert victim.read_text() == "keep me"


# -- 3. check sees what readers rely on; readers refuse it -----------------------------------------


@pytest.mark.parametrize("table", ["jobs", "carrier.big"])
def test_a_removed_delta_log_is_exit_1_naming_the_table_and_every_reader_refuses(tmp_path, capsys, table):
    root = tmp_path / "store"
    small_store(root)
    assert store_cmd(capsys, "check", root)[0] == 0
    import shutil

    shutil.rmtree(root / "tables" / table / "_delta_log")
    code, out, _ = store_cmd(capsys, "check", root)
    assert code == 1 and f"unreadable: {root / 'tables' / table}: " in out and "no _delta_log" in out, out
    store = Store(root)
    for read in (lambda: store.read("carrier.big"), lambda: store.done_job_ids(["k0", "k1"]), store.table_names):
        with pytest.raises(InputError, match=f"table {table}: .*no _delta_log"):
            read()
    code, _, err = store_cmd(capsys, "export", root, str(tmp_path / "export"))
    assert code == 2 and "no _delta_log" in err and not (tmp_path / "export").exists(), err
    code = cli.main(["compare", "--probe", "carrier", "--table", "big", "--metric", "x", "--store", str(root)])
    assert code == 2 and "no _delta_log" in capsys.readouterr().err


def test_a_first_commit_killed_before_its_log_is_a_stray_not_a_lost_log(tmp_path, capsys):
    root = tmp_path / "store"
    small_store(root)
    folder = root / "tables" / "carrier.new"
    folder.mkdir()
    pq.write_table(
        pq.read_table(next((root / "tables" / "carrier.big").glob("*.parquet"))).slice(0, 0), folder / "a.parquet"
    )
    orphan = pq.read_table(next((root / "tables" / "carrier.big").glob("*.parquet")))
    orphan = orphan.set_column(
        orphan.schema.get_field_index("job_id"), "job_id", [["never-committed"] * orphan.num_rows]
    )
    pq.write_table(orphan, folder / "part-0.parquet")
    code, out, _ = store_cmd(capsys, "check", root)
    assert code == 0 and "stray: tables/carrier.new" in out, out
    assert Store(root).table_names() == ["carrier.big", "jobs"]


def replace_live_file(root: Path, keep_rows: int) -> Path:
    """A live data file of carrier.big overwritten by a valid Parquet file holding fewer of its rows."""
    path = Path(DeltaTable(str(root / "tables" / "carrier.big")).file_uris()[0].removeprefix("file://"))
    pq.write_table(pq.read_table(path).slice(0, keep_rows), path)
    return path


def test_a_live_file_replaced_by_valid_parquet_is_exit_1_and_every_reader_refuses(tmp_path, capsys):
    root = tmp_path / "store"
    small_store(root)
    path = replace_live_file(root, 2)
    code, out, _ = store_cmd(capsys, "check", root)
    assert code == 1 and path.name in out and "where the log says" in out, out
    store = Store(root)
    with pytest.raises(InputError, match="is not the file its log recorded"):
        store.read("carrier.big")
    code, _, err = store_cmd(capsys, "export", root, str(tmp_path / "export"))
    assert code == 2 and path.name in err and not (tmp_path / "export").exists(), err
    code = cli.main(["compare", "--probe", "carrier", "--table", "big", "--metric", "x", "--store", str(root)])
    assert code == 2 and "is not the file its log recorded" in capsys.readouterr().err
    assert store_cmd(capsys, "compact", root)[0] == 2  # never rewritten into a file the log would vouch for


def write_same_size(rows, path: Path, size: int) -> None:
    """Write `rows` to `path` padded (a schema metadata entry) to exactly `size` bytes."""
    pad = 0
    for _ in range(40):
        pq.write_table(rows.replace_schema_metadata({"pad": "x" * pad}), path)
        diff = size - path.stat().st_size
        if diff == 0:
            return
        pad = max(0, pad + (diff if abs(diff) < 4 else diff // 2))
    raise AssertionError(f"could not pad {path} to {size} bytes")


def test_check_compares_row_counts_and_ranges_where_the_size_matches(tmp_path, capsys):
    root = tmp_path / "store"
    small_store(root)
    path = Path(DeltaTable(str(root / "tables" / "carrier.big")).file_uris()[0].removeprefix("file://"))
    rows = pq.read_table(path)
    forged = rows.set_column(rows.schema.get_field_index("x"), "x", [[v + 1000 for v in rows.column("x").to_pylist()]])
    write_same_size(forged, path, path.stat().st_size)  # same size: only the row statistics can tell
    code, out, _ = store_cmd(capsys, "check", root)
    assert code == 1 and "column 'x' holds" in out and "above the log's max" in out, out


# -- 10. missing store, and repair --------------------------------------------------------------


@pytest.mark.parametrize("command", ["compare", "history"])
def test_a_store_path_that_does_not_exist_is_named(tmp_path, capsys, command):
    missing = tmp_path / "nope"
    code = cli.main([command, "--probe", "carrier", "--store", str(missing), "--cluster", str(tmp_path / "none.yaml")])
    err = capsys.readouterr().err
    assert code == 2 and f"store {missing}: no such directory" in err, err
    assert not missing.exists()


def newest_commit(root: Path, table: str = "jobs") -> Path:
    return max((root / "tables" / table / "_delta_log").glob("*.json"))


@pytest.mark.parametrize("cut", ["after the commitInfo line", "mid-line"])
def test_repair_after_a_truncated_commit_brings_the_row_back_and_check_to_exit_0(tmp_path, capsys, cut):
    root = tmp_path / "store"
    small_store(root)
    victim = newest_commit(root)
    data = victim.read_bytes()
    victim.write_bytes(data[: data.index(b"\n") + 1] if cut.startswith("after") else data[: len(data) // 2])
    assert store_cmd(capsys, "check", root)[0] == 1
    code, out, err = store_cmd(capsys, "repair", root)
    assert code == 0, err
    code, out, _ = store_cmd(capsys, "check", root)
    assert code == 0, out  # exit 1 for ever before: nothing repaired it
    assert sorted(Store(root).jobs()["job_id"]) == ["k0", "k1", "k2"]  # the cut commit's job row is found again
    assert store_cmd(capsys, "repair", root)[1].startswith(f"store {root}: nothing to repair")
    if cut == "mid-line":
        assert (root / "repairs" / "jobs" / victim.name).read_bytes() == data[: len(data) // 2]  # kept, not deleted
    else:  # a recorded commit that changes again is counted again
        victim.write_bytes(b"")
        assert store_cmd(capsys, "check", root)[0] == 1


def test_repair_makes_a_table_whose_log_was_lost_again_each_row_once(tmp_path, capsys):
    root = tmp_path / "store"
    small_store(root)
    assert store_cmd(capsys, "compact", root)[0] == 0  # the replaced files stay: each row twice on disk
    import shutil

    shutil.rmtree(root / "tables" / "carrier.big" / "_delta_log")
    assert store_cmd(capsys, "check", root)[0] == 1
    assert store_cmd(capsys, "repair", root)[0] == 0
    assert store_cmd(capsys, "check", root)[0] == 0
    rows = Store(root).read("carrier.big")
    assert sorted(rows["x"]) == [10 * n + i for n in range(3) for i in range(5)]


def test_repair_of_a_replaced_file_keeps_every_row_it_can_read(tmp_path, capsys):
    root = tmp_path / "store"
    small_store(root)
    replace_live_file(root, 2)
    assert store_cmd(capsys, "repair", root)[0] == 0
    assert store_cmd(capsys, "check", root)[0] == 0
    assert len(Store(root).read("carrier.big")) == 12  # 2 of the replaced job's 5 rows are all there is


# -- hostile review, round three (benchmarks/RESULTS.md) -------------------------------------------


def test_an_ascii_locale_checks_compacts_vacuums_and_repairs_a_store_at_a_non_ascii_path(tmp_path):
    """Under LC_ALL=C Python keeps a non-ASCII path's bytes as surrogates; delta-rs hands back real
    characters, which os.stat could not encode (UnicodeEncodeError from check, compact, every reader)."""
    import sys

    root = tmp_path / "störe"
    small_store(root)
    age(root, 30 * DAY_S)
    script = (
        "import sys\nfrom runner import cli\n"
        "for argv in (['check'], ['compact'], ['vacuum', '--retention-days', '0'], ['repair'], ['check']):\n"
        "    code = cli.main(['store', argv[0], '--store', sys.argv[1], '--cluster', 'none.yaml', *argv[1:]])\n"
        "    print('==', argv[0], code, flush=True)\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("LANG", "LC_CTYPE", "PYTHONIOENCODING")}
    env.update(LC_ALL="C", LANG="C", PYTHONUTF8="0", PYTHONPATH=str(Path(__file__).resolve().parents[3]))
    proc = subprocess.run(
        [sys.executable, "-c", script, os.fsencode(root)], env=env, cwd=tmp_path, capture_output=True, timeout=120
    )
    err = proc.stderr.decode("utf-8", "replace")
    assert "Traceback" not in err and proc.returncode == 0, err
    codes = [line for line in proc.stdout.decode("ascii", "replace").splitlines() if line.startswith("== ")]
    assert codes == ["== check 0", "== compact 0", "== vacuum 0", "== repair 0", "== check 0"], err


def test_compactions_log_cleanup_never_deletes_through_a_link_in_the_delta_log(tmp_path, capsys):
    """delta-rs' expired-log cleanup lists _delta_log following links, and its optimize runs it whatever
    post_commithook_properties say: a folder link there holding commit-named files had them deleted
    outside the store (4 of 4) by `store compact` and a sweep's end, once the log had a checkpoint."""
    root = tmp_path / "store"
    small_store(root)
    assert store_cmd(capsys, "compact", root)[0] == 0  # a log checkpoint: delta-rs' optimize cleans up to it
    log = root / "tables" / "carrier.big" / "_delta_log"
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    for commit in sorted(log.glob("*.json")):
        (outside / commit.name).write_bytes(commit.read_bytes())
    age(outside, 60 * DAY_S)
    before = snapshot(outside)
    os.symlink(outside, log / "linked")
    assert store_cmd(capsys, "vacuum", root, "--retention-days", "0")[0] == 0  # the log keeps 0 hours from now on
    small_store(root, first=3)  # more small files: compaction has work, then cleans the log
    age(root, 30 * DAY_S)
    code, out, err = store_cmd(capsys, "compact", root)
    assert code == 0, err
    assert snapshot(outside) == before  # optimize itself deleted them, whatever its commit hooks said
    assert "table carrier.big not compacted" in err and "linked is a symlink" in err, err
    assert len(Store(root).read("carrier.big")) == 30


def test_repair_of_a_replaced_file_takes_rows_from_the_files_compaction_replaced(tmp_path, capsys):
    """A sweep ends with a compaction, so the rows of a live file also sit in the files it replaced:
    repair took a replaced live file's 2 rows as the job's, dropping 3 rows it could read elsewhere."""
    root = tmp_path / "store"
    small_store(root)
    assert store_cmd(capsys, "compact", root)[0] == 0
    replace_live_file(root, 2)
    assert store_cmd(capsys, "repair", root)[0] == 0
    assert store_cmd(capsys, "check", root)[0] == 0
    assert sorted(Store(root).read("carrier.big")["x"]) == [10 * n + i for n in range(3) for i in range(5)]


@pytest.mark.parametrize("linked", ["table folder", "its _delta_log", "repairs"])
def test_repair_never_writes_or_moves_files_through_a_link(tmp_path, capsys, linked):
    """Repair rebuilt a table through a linked table folder (a log and a data file written outside the
    store), moved a cut commit out of a linked log, and wrote into a linked <store>/repairs."""
    root = tmp_path / "store"
    small_store(root)
    elsewhere = tmp_path / "elsewhere"
    source = {
        "table folder": root / "tables" / "carrier.big",
        "its _delta_log": root / "tables" / "carrier.big" / "_delta_log",
        "repairs": root / "repairs",
    }[linked]
    if linked == "repairs":
        elsewhere.mkdir()
    else:
        os.rename(source, elsewhere)
    os.symlink(elsewhere, source)
    cut = newest_commit(root, "carrier.big")
    cut.write_bytes(cut.read_bytes()[:20])  # a commit cut mid-line: repair moves it aside
    before = snapshot(elsewhere)
    code, out, err = store_cmd(capsys, "repair", root)
    assert snapshot(elsewhere) == before, out + err
    if linked != "repairs":
        assert code == 1 and "left alone: carrier.big: " in out, out + err
    else:
        assert code == 1 and "left alone: carrier.big: repairs/carrier.big resolves outside" in out, out + err


def test_check_and_repair_never_block_on_a_fifo_in_place_of_a_live_file(tmp_path):
    """A live file replaced by a FIFO: check opened it to read and waited for ever (as did repair)."""
    import sys

    root = tmp_path / "store"
    small_store(root)
    path = Path(DeltaTable(str(root / "tables" / "carrier.big")).file_uris()[0].removeprefix("file://"))
    path.unlink()
    os.mkfifo(path)
    script = (
        "import sys\nfrom runner import cli\n"
        "for action in ('check', 'repair'):\n"
        "    print('==', action, cli.main(['store', action, '--store', sys.argv[1], '--cluster', 'none.yaml']))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[3])}
    proc = subprocess.run(
        [sys.executable, "-c", script, str(root)], capture_output=True, timeout=60, cwd=tmp_path, text=True, env=env
    )
    assert "Traceback" not in proc.stderr and "== check 1" in proc.stdout, proc.stdout + proc.stderr
    assert "not a regular file" in proc.stdout and "== repair 0" in proc.stdout, proc.stdout + proc.stderr
    assert sorted(Store(root).jobs()["job_id"]) == ["k0", "k1", "k2"]


@pytest.mark.parametrize("table", ["carrier.big", "jobs"])
def test_a_table_folder_replaced_by_a_file_is_exit_1_and_readers_refuse(tmp_path, capsys, table):
    """tables/<table> a file: check said nothing (exit 0), compare answered another metric
    (jobs.wall_s), export wrote every table but that one, exit 0."""
    import shutil

    root = tmp_path / "store"
    small_store(root)
    shutil.rmtree(root / "tables" / table)
    (root / "tables" / table).write_text("not a table")
    code, out, _ = store_cmd(capsys, "check", root)
    assert code == 1 and f"unreadable: {root / 'tables' / table}: a regular file where the table's folder" in out, out
    code, _, err = store_cmd(capsys, "export", root, str(tmp_path / "export"))
    assert code == 2 and f"table {table}: a regular file where" in err and not (tmp_path / "export").exists(), err
    code = cli.main(["compare", "--probe", "carrier", "--store", str(root), "--cluster", str(tmp_path / "none.yaml")])
    assert code == 2 and f"table {table}: a regular file where" in capsys.readouterr().err


def test_a_table_folder_named_with_bytes_that_are_not_utf8_is_a_stray_not_a_traceback(tmp_path, capsys):
    import shutil

    root = tmp_path / "store"
    small_store(root)
    shutil.copytree(os.fsencode(root / "tables" / "carrier.big"), os.fsencode(root / "tables") + b"/carrier.b\xffg")
    age(root, 30 * DAY_S)
    code, out, err = store_cmd(capsys, "check", root)
    assert code == 0 and "stray: tables/carrier.b\\xffg is not a store table" in out, out + err
    for action, argv in (("vacuum", ["--retention-days", "0"]), ("compact", []), ("export", [str(tmp_path / "x")])):
        code, out, err = store_cmd(capsys, action, root, *argv)
        assert code == 0 and "Traceback" not in err, (action, out, err)  # UnicodeEncodeError before
    assert len(Store(root).read("carrier.big")) == 15


def test_a_tombstone_naming_a_url_is_never_a_vacuum_traceback(tmp_path, capsys):
    """A commit whose remove action names file:///elsewhere: vacuum raised ArrowInvalid (exit 1)."""
    import json

    root = tmp_path / "store"
    small_store(root)
    outside, before = outside_folder(tmp_path)
    then = int((time.time() - 40 * DAY_S) * 1000)
    actions = [
        {"commitInfo": {"timestamp": then, "operation": "DELETE", "operationParameters": {}}},
        {"remove": {"path": f"file://{outside}/f0.parquet", "deletionTimestamp": then, "dataChange": True}},
        {"remove": {"path": f"{outside}/f1.parquet", "deletionTimestamp": then, "dataChange": True}},
        {"remove": {"path": "../../../elsewhere/f2.parquet", "deletionTimestamp": then, "dataChange": True}},
    ]
    commit = newest_commit(root, "carrier.big")
    (commit.parent / f"{int(commit.stem) + 1:020d}.json").write_text("\n".join(map(json.dumps, actions)) + "\n")
    age(root, 30 * DAY_S)
    code, out, err = store_cmd(capsys, "vacuum", root, "--retention-days", "0")
    assert code == 0 and "Traceback" not in err, out + err
    assert snapshot(outside) == before


@pytest.mark.parametrize("swap", ["a folder for a link", "the file for a folder"])
def test_a_path_swapped_while_vacuum_deletes_is_left_alone_not_a_traceback(tmp_path, monkeypatch, swap):
    """Between owned's check of a name and its open or unlink, a folder became a link to /elsewhere
    or the file a folder: nothing outside was deleted, but the OSError escaped (a traceback)."""
    from runner.store import owned

    root, outside = tmp_path / "store", tmp_path / "elsewhere"
    (root / "tables" / "t").mkdir(parents=True)
    outside.mkdir()
    (root / "tables" / "t" / "f.parquet").write_text("x")
    (outside / "f.parquet").write_text("keep")
    real_stat, real_unlink = os.stat, os.unlink

    def stat_then_swap(path, *args, **kwargs):
        st = real_stat(path, *args, **kwargs)
        if swap.startswith("a folder") and path == "t" and not (root / "tables" / "t").is_symlink():
            os.rename(root / "tables" / "t", root / "tables" / "t.old")
            os.symlink(outside, root / "tables" / "t")
        return st

    def swap_then_unlink(name, *args, **kwargs):
        os.remove(root / "tables" / "t" / "f.parquet")
        os.mkdir(root / "tables" / "t" / "f.parquet")
        return real_unlink(name, *args, **kwargs)

    monkeypatch.setattr(owned.os, "stat", stat_then_swap)
    if swap.startswith("the file"):
        monkeypatch.setattr(owned.os, "unlink", swap_then_unlink)
    why = owned.delete_file(str(root), "tables/t/f.parquet")
    assert why and "left alone" in why, why
    assert (outside / "f.parquet").read_text() == "keep"
