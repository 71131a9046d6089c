"""A store that cannot take results: found before any job runs (exit 2, one line naming the store), and
once a write fails mid-sweep no further job is handed out and every computed result is kept in a spill
file that reads back.

Unwritable for real, also as root (CI): `chattr +i` on the store's folders (ext4 refuses new entries
even to root), and a full tmpfs mounted in a private mount namespace (`unshare -m`)."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from sweep_util import DEMO, write_cluster

from runner import cli
from runner.cli.sweep import print_end
from runner.clock import new_run_id
from runner.dispatch.launch import InlineLauncher
from runner.dispatch.lock import holder as lock_holder
from runner.dispatch.spill import check_writable, read_spill
from runner.dispatch.sweep import run_sweep
from runner.lab.cluster import load_cluster
from runner.lab.plan import expand
from runner.store.store import Store

REPO = Path(__file__).resolve().parents[3]
PLANS = {"four": [{"probe": "mask", "config": {"seq_len": n}, "hosts": ["gx10"]} for n in (64, 96)]}
needs_chattr = pytest.mark.skipif(shutil.which("chattr") is None, reason="needs chattr")


def freeze(root: Path, on: bool = True) -> None:
    """Make every folder under `root` refuse new entries (files stay writable: the lock's own file)."""
    folders = [str(root)] + [os.path.join(d, n) for d, names, _ in os.walk(root) for n in names]
    subprocess.run(["chattr", "+i" if on else "-i", *folders], check=True, capture_output=True)


@pytest.fixture(scope="module")
def lab(tmp_path_factory) -> Path:
    return write_cluster(tmp_path_factory.mktemp("lab"), PLANS)


@pytest.fixture
def store_root(tmp_path):
    root = tmp_path / "store"
    root.mkdir()
    yield root
    freeze(root, on=False)  # or pytest could not clean its temp folders


@needs_chattr
def test_an_unwritable_store_is_one_line_before_any_job_runs(lab, store_root, capsys):
    (store_root / ".sweep.lock").touch()  # the lock file stays between sweeps: the lock itself works
    freeze(store_root)
    with pytest.raises(Exception, match=f"store {store_root}: cannot be written"):
        check_writable(store_root)
    assert (
        cli.main(["sweep", "--cluster", str(lab), "--plan", "four", "--store", str(store_root), "--inline", "gx10"])
        == 2
    )
    captured = capsys.readouterr()
    assert captured.out == ""  # no job ran, no summary
    assert captured.err.strip() == (
        f"labprobe sweep: error: store {store_root}: cannot be written (Operation not permitted); no job was run"
    )
    assert lock_holder(store_root) is None


class FreezeAfterFirstJob(InlineLauncher):
    """Runs jobs inline; once the first has been handed out and stored, the store turns unwritable."""

    def __init__(self, root: Path) -> None:
        super().__init__()
        self.root, self.handed_out = root, []

    def submit(self, job, *, deadline, guard=None) -> None:
        if len(self.handed_out) == 1:
            freeze(self.root)
        self.handed_out.append(job)
        super().submit(job, deadline=deadline, guard=guard)


@needs_chattr
def test_a_write_failing_mid_sweep_stops_the_sweep_and_spills_what_was_computed(lab, store_root, tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # the spill's folder: $TMPDIR
    cluster, store = load_cluster(lab), Store(store_root)
    jobs, run_id = expand(cluster, "four"), new_run_id()
    launcher = FreezeAfterFirstJob(store_root)
    counts = run_sweep(
        cluster=cluster,
        store=store,
        plan="four",
        jobs=jobs,
        run_id=run_id,
        launcher=launcher,
        progress=False,
        inline=True,
    )
    assert len(jobs) == 4 and len(launcher.handed_out) == 2  # none handed out after the failed write
    assert (
        counts.store_failure.startswith(f"store {store_root}: ") and "Operation not permitted" in counts.store_failure
    )
    assert counts.spilled_to == tmp_path / f"labprobe-spill-{run_id}.jsonl" and counts.num_spilled == 3
    spilled = list(read_spill(counts.spilled_to))
    assert [r["status"] for r in spilled] == ["ok", "skipped", "skipped"]
    second = launcher.handed_out[1]
    computed = spilled[0]
    assert computed["key"]["job_id"] == second.job_id and computed["key"]["run_id"] == run_id
    config = json.loads((DEMO / "checkpoints" / second.checkpoint / "config.json").read_text())
    layers = computed["result"]["tables"]["layers"]
    assert len(layers) == (config.get("num_hidden_layers") or config["text_config"]["num_hidden_layers"])
    assert computed["result"]["config"]["seq_len"] == second.config["seq_len"]
    assert all(r["reason"].startswith("not started: store ") for r in spilled[1:])
    freeze(store_root, on=False)
    assert len(store.jobs()) == 1  # the first job, stored before the failure
    out = io.StringIO()
    print_end(store, jobs, counts, run_id, ["gx10"], out=out)
    assert f"kept in {counts.spilled_to}" in out.getvalue()


FULL_DISK_SWEEP = """set -e
mount -t tmpfs -o size=256k tmpfs "$1"
mkdir "$1/store"
dd if=/dev/zero of="$1/fill" bs=4k 2>/dev/null || true
exec "$2" -m runner.cli sweep --inline gx10 --cluster "$3" --plan four --store "$1/store"
"""


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("unshare") is None, reason="needs root and unshare -m")
def test_a_full_disk_is_one_line_naming_the_store_not_a_traceback(lab, tmp_path):
    mnt = tmp_path / "full"
    mnt.mkdir()
    proc = subprocess.run(
        ["unshare", "-m", "sh", "-c", FULL_DISK_SWEEP, "sh", str(mnt), sys.executable, str(lab)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert proc.stdout == ""
    assert proc.stderr.strip() == (
        f"labprobe sweep: error: store {mnt}/store: cannot be written (No space left on device); no job was run"
    )


@pytest.mark.parametrize("planted", ["a symlink", "a hard link", "a file of another user"])
def test_a_spill_name_planted_in_tmpdir_is_never_written_through(tmp_path, planted):
    """$TMPDIR is everyone's, and the spill's name is the run id's (a night's run id is a timestamp and
    4 hex digits): a symlink planted there had the night's results appended to any file the sweep's
    user can write (fs.protected_symlinks is 0 on many machines, this one included)."""
    import datetime as dt

    from runner.dispatch.spill import Spill
    from runner.store.rows import JobKey

    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    run_id = new_run_id()
    spill = Spill(run_id, folder=tmp_path)
    if planted == "a symlink":
        os.symlink(victim, spill.path)
    elif planted == "a hard link":
        os.link(victim, spill.path)
    else:
        spill.path.write_text("")
        os.chown(spill.path, 65534, 65534) if os.geteuid() == 0 else pytest.skip("needs root to give a file away")
    now = dt.datetime.now(dt.timezone.utc)
    key = JobKey(
        run_id=run_id, job_id="j", probe="mask", host="h", checkpoint="c", checkpoint_fp="f",
        config_hash="x", code_version="v", finished_at=now,
    )  # fmt: skip
    for _ in range(2):
        spill.add(key, status="ok", reason="", started_at=now, wall_s=1.0, env={}, config={}, plan="p")
    assert victim.read_text() == "precious\n"
    assert spill.path.parent == tmp_path and spill.path.name.startswith(f"labprobe-spill-{run_id}")
    assert [r["key"]["job_id"] for r in read_spill(spill.path)] == ["j", "j"]
    assert os.stat(spill.path).st_mode & 0o077 == 0  # results are the lab's: not for other users to read
