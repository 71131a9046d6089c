"""labprobe purge on real directory trees, on the shared cluster's two labelled hosts.

Each host gets its own runs root (a tmp dir). Expected sizes and digests are recomputed here from
the bytes the test wrote; "nothing else is gone" is a comparison of full no-follow listings.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import pytest
from purge_util import dry_run_then_yes, listing, make_run, write

from runner.chores import deletion, scan
from runner.chores import purge as purge_mod
from runner.chores.fstree import remove_tree
from runner.chores.mounts import filesystems
from runner.chores.purge import purge
from runner.cli import main
from runner.store.store import Store

HOSTS = ("gx10", "ana-ml2")


@pytest.fixture
def lab(tmp_path):
    """Two hosts' runs roots with a clean run each and every kind of run that must be refused."""
    roots = {h: tmp_path / f"runs-{h}" for h in HOSTS}
    outside = tmp_path / "outside"
    write(outside / "ckpts" / "step-1" / "weights.bin", 700, 6)
    write(outside / "elsewhere-run" / "checkpoints" / "step-1" / "w.bin", 600, 7)
    write(outside / "elsewhere-run" / "adapter" / "adapter_model.safetensors", 100, 8)
    gx, ana = roots["gx10"], roots["ana-ml2"]
    make_run(gx, "clean-a", 4000)
    make_run(ana, "clean-b", 5000)
    # The adapter is a symlink (to another run's adapter, inside the root).
    make_run(gx, "adapter-link", adapter=False)
    (gx / "adapter-link" / "adapter").symlink_to(gx / "clean-a" / "adapter")
    # The adapter is a symlink into its own checkpoints/.
    make_run(gx, "adapter-into-ckpt", adapter=False)
    (gx / "adapter-into-ckpt" / "adapter").symlink_to("checkpoints/step-200")
    # An otherwise clean run whose checkpoint another run's adapter links to; and the same with
    # a hard link.
    make_run(gx, "donor")
    make_run(gx, "borrower", adapter=False)
    (gx / "borrower" / "adapter").symlink_to(gx / "donor" / "checkpoints" / "step-200")
    make_run(ana, "donor-hard")
    run = make_run(ana, "borrower-hard")
    os.link(ana / "donor-hard" / "checkpoints" / "step-100" / "optimizer.pt", run / "adapter" / "opt.pt")
    # An adapter file hard-linked with a checkpoint file.
    run = make_run(gx, "hardlink", adapter=False)
    (run / "adapter").mkdir()
    os.link(
        run / "checkpoints" / "step-200" / "adapter_model.safetensors", run / "adapter" / "adapter_model.safetensors"
    )
    # A symlink inside checkpoints/ (`latest` pointing at the newest step, as trainers do).
    make_run(ana, "ckpt-inner-link")
    (ana / "ckpt-inner-link" / "checkpoints" / "latest").symlink_to("step-200")
    # checkpoints/ itself a symlink leading outside the runs root.
    run = make_run(ana, "ckpt-escapes")
    os.rename(run / "checkpoints", run / "checkpoints.moved")
    (run / "checkpoints").symlink_to(outside / "ckpts")
    # The run directory itself is a symlink leading outside the runs root.
    (ana / "run-escapes").symlink_to(outside / "elsewhere-run")
    make_run(ana, "no-adapter", adapter=False)
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(
        "store:\n  root: store\nhosts:\n"
        + "".join(
            f"  - name: {h}\n    address: 127.0.0.1\n    runs_root: {roots[h]}\n    idle:\n      runs_quiet_min: 0\n"
            for h in HOSTS
        )
    )
    return {"roots": roots, "outside": outside, "cluster": cluster, "store": tmp_path / "store", "tmp": tmp_path}


EXPECTED = {  # run -> (action, a phrase its reason must contain)
    ("gx10", "clean-a"): ("remove", ""),
    ("ana-ml2", "clean-b"): ("remove", ""),
    ("gx10", "adapter-link"): ("refuse", "final adapter is a symlink (never followed)"),
    ("gx10", "adapter-into-ckpt"): ("refuse", "final adapter is a symlink into checkpoints/"),
    ("gx10", "hardlink"): (
        "refuse",
        ("adapter/adapter_model.safetensors shares an inode with checkpoints/step-200/adapter_model.safetensors"),
    ),
    ("ana-ml2", "ckpt-inner-link"): (
        "refuse",
        ("symlink inside checkpoints/ (never followed): checkpoints/latest -> step-200"),
    ),
    ("ana-ml2", "ckpt-escapes"): ("refuse", "checkpoints/ is a symlink resolving outside the runs root"),
    ("ana-ml2", "run-escapes"): ("refuse", "run directory is a symlink resolving outside the runs root"),
    ("ana-ml2", "no-adapter"): ("refuse", "final adapter missing"),
    ("gx10", "donor"): (
        "refuse",
        ("another run's final adapter rests on checkpoints/ through a symlink: borrower/adapter -> "),
    ),
    ("gx10", "borrower"): ("refuse", "final adapter is a symlink into another run's checkpoints/ (donor)"),
    ("ana-ml2", "donor-hard"): (
        "refuse",
        (
            "hard link with another run's final adapter: "
            "borrower-hard/adapter/opt.pt shares an inode with "
            "checkpoints/step-100/optimizer.pt"
        ),
    ),
    ("ana-ml2", "borrower-hard"): ("remove", ""),
}


def ckpt_bytes(run: Path) -> int:
    """Apparent size of the distinct files under checkpoints/, summed here from the tree."""
    seen, total = set(), 0
    for folder, _, files in os.walk(run / "checkpoints", followlinks=False):
        for name in files:
            st = os.lstat(Path(folder) / name)
            if (st.st_dev, st.st_ino) not in seen and not os.path.islink(Path(folder) / name):
                seen.add((st.st_dev, st.st_ino))
                total += st.st_size
    return total


def snapshot(lab) -> dict[str, dict[str, str]]:
    return {
        "tmp": listing(lab["tmp"] / "runs-gx10")
        | {"ana:" + k: v for k, v in listing(lab["tmp"] / "runs-ana-ml2").items()},
        "outside": listing(lab["outside"]),
    }


def test_plan_refuses_each_unsafe_run_with_its_reason(ray_cluster, lab):
    report = purge({h: str(r) for h, r in lab["roots"].items()})
    got = {(h, r["run"]): r for h, rows in report.plan.items() for r in rows}
    assert set(got) == set(EXPECTED)
    for key, (action, phrase) in EXPECTED.items():
        assert got[key]["action"] == action, (key, got[key]["reason"])
        assert phrase in got[key]["reason"], (key, got[key]["reason"])
    assert got[("gx10", "clean-a")]["bytes"] == 4 * 4000 == ckpt_bytes(lab["roots"]["gx10"] / "clean-a")
    assert got[("ana-ml2", "clean-b")]["bytes"] == 4 * 5000
    # The hard-linked file is counted once.
    hard = lab["roots"]["gx10"] / "hardlink"
    assert got[("gx10", "hardlink")]["bytes"] == ckpt_bytes(hard) == 4 * 3000
    assert report.failures == {} and report.ok
    # --run selecting the donor alone still sees the unselected borrower's adapter.
    [donor] = scan.scan_root(str(lab["roots"]["gx10"]), "donor")
    assert donor.action == "refuse" and "borrower/adapter ->" in donor.reason


def test_dry_run_deletes_nothing_and_is_stored(ray_cluster, lab, capsys):
    before = snapshot(lab)
    assert main(["purge", "--cluster", str(lab["cluster"])]) == 0
    out = capsys.readouterr().out
    assert snapshot(lab) == before
    assert "dry run: nothing deleted" in out
    assert str(lab["roots"]["gx10"] / "clean-a" / "checkpoints") in out
    assert "final adapter is a symlink into checkpoints/" in out
    actions = Store(lab["store"]).read("purge.actions")
    assert set(actions["phase"]) == {"plan"} and len(actions) == len(EXPECTED)
    assert sorted(actions.loc[actions["action"] == "remove", "run"]) == ["borrower-hard", "clean-a", "clean-b"]
    assert set(actions["checkpoint"]) == {"-"} and set(actions["host"]) == set(HOSTS)
    jobs = Store(lab["store"]).jobs()
    assert sorted(jobs["host"]) == sorted(HOSTS) and set(jobs["status"]) == {"ok"}


def test_purge_removes_only_planned_checkpoints_and_adapters_survive(ray_cluster, lab, capsys):
    before = snapshot(lab)
    planned = [
        lab["roots"]["gx10"] / "clean-a" / "checkpoints",
        lab["roots"]["ana-ml2"] / "clean-b" / "checkpoints",
        lab["roots"]["ana-ml2"] / "borrower-hard" / "checkpoints",
    ]
    assert dry_run_then_yes(lab["cluster"], lab["store"], capsys=capsys) == 0
    out = capsys.readouterr().out
    after = snapshot(lab)
    # Expected: the listing before, less the planned directories and everything under them.
    prefixes = ["clean-a/checkpoints", "ana:clean-b/checkpoints", "ana:borrower-hard/checkpoints"]
    expected = {k: v for k, v in before["tmp"].items() if not any(k == p or k.startswith(p + "/") for p in prefixes)}
    assert len(expected) == len(before["tmp"]) - 3 * 6  # 3 dirs x (itself, 2 steps, 3 files)
    assert after == {"tmp": expected, "outside": before["outside"]}
    assert not any(p.exists() for p in planned)
    # Every adapter's digest unchanged (the listing holds each file's sha256).
    adapters = {k: v for k, v in before["tmp"].items() if "/adapter/" in k and v.startswith("file:")}
    assert adapters and all(after["tmp"][k] == v for k, v in adapters.items())
    store = Store(lab["store"])
    actions = store.read("purge.actions")
    done = actions[actions["phase"] == "outcome"]
    removed = done[done["action"] == "removed"]
    assert sorted(removed["run"]) == ["borrower-hard", "clean-a", "clean-b"]
    assert removed["adapter_digests_verified"].tolist() == [True, True, True]
    assert removed["fs_freed_bytes"].notna().all()
    assert set(done.loc[done["action"] != "removed", "action"]) == {"refuse"}
    fs = store.read("purge.filesystems")
    fs = fs[fs["phase"] == "outcome"]
    assert set(fs["host"]) == set(HOSTS) and fs["freed_bytes"].notna().all()
    by_host = removed.groupby("host")["alloc_bytes"].sum().to_dict()
    assert dict(zip(fs["host"], fs["removed_bytes"])) == by_host
    assert set(store.jobs()["status"]) == {"ok"}
    assert "removed" in out and "verified" in out


def test_refusals_are_rechecked_at_the_moment_of_deletion(lab):
    root = lab["roots"]["gx10"]
    plan = scan.scan_root(str(root), "clean-*")
    assert [r.action for r in plan] == ["remove"]
    # Between the plan and the deletion, a trainer drops a `latest` link into checkpoints/, and a
    # new run appears that nobody approved.
    (root / "clean-a" / "checkpoints" / "latest").symlink_to("step-200")
    make_run(root, "clean-new")
    before = listing(root)
    result = deletion.execute(str(root), "clean-*", [r.path for r in plan])
    rows = {r.run: r for r in result.actions}
    assert rows["clean-a"].action == "refuse"
    assert rows["clean-a"].reason.startswith("at deletion: symlink inside checkpoints/")
    assert rows["clean-new"].action == "refuse" and "not in the plan" in rows["clean-new"].reason
    assert listing(root) == before
    # Approved while clean; then the adapter replaced by a link into checkpoints/: refused at
    # deletion, nothing touched.
    [row] = scan.scan_root(str(root), "clean-new")
    os.rename(root / "clean-new" / "adapter", root / "clean-new" / "adapter.old")
    (root / "clean-new" / "adapter").symlink_to("checkpoints/step-100")
    before = listing(root)
    [late] = deletion.execute(str(root), "clean-new", [row.path]).actions
    assert late.action == "refuse" and late.reason.startswith("at deletion: final adapter is a symlink into")
    assert listing(root) == before


def test_anything_else_in_the_run_resting_on_checkpoints_refuses_it(tmp_path):
    """merged/ (or any entry besides adapter/) linked to checkpoints/ would break with it."""
    root = tmp_path / "runs"
    make_run(root, "plain")
    run = make_run(root, "merged-is-link")  # merged/ itself a symlink to a checkpoint step
    for path in (run / "merged").iterdir():
        path.unlink()
    (run / "merged").rmdir()
    (run / "merged").symlink_to("checkpoints/step-200")
    run = make_run(root, "deep-link")  # a file deep in merged/ links into checkpoints/ by absolute path
    (run / "merged" / "sub").mkdir()
    (run / "merged" / "sub" / "w.bin").symlink_to(run / "checkpoints" / "step-100" / "optimizer.pt")
    run = make_run(root, "merged-hard")  # merged/ shares an inode with a checkpoint file
    os.link(run / "checkpoints" / "step-100" / "optimizer.pt", run / "merged" / "optimizer.pt")
    run = make_run(root, "top-hard")  # a file at the run's top level, hard-linked likewise
    os.link(run / "checkpoints" / "step-200" / "adapter_model.safetensors", run / "best.safetensors")
    run = make_run(root, "link-elsewhere")  # links that do not lead into checkpoints/ are fine
    (run / "merged" / "cfg.json").symlink_to("../adapter/adapter_config.json")
    (run / "latest-log").symlink_to("train.log")
    rows = {r.run: r for r in scan.scan_root(str(root))}
    assert {n: r.action for n, r in rows.items()} == {
        "plain": "remove",
        "link-elsewhere": "remove",
        "merged-is-link": "refuse",
        "deep-link": "refuse",
        "merged-hard": "refuse",
        "top-hard": "refuse",
    }
    assert rows["merged-is-link"].reason == ("symlink into checkpoints/ outside it: merged -> checkpoints/step-200")
    assert rows["deep-link"].reason.startswith("symlink into checkpoints/ outside it: merged/sub/w.bin -> ")
    assert rows["merged-hard"].reason == (
        "hard link between checkpoints/ and the rest of the run: "
        "merged/optimizer.pt shares an inode with "
        "checkpoints/step-100/optimizer.pt"
    )
    assert rows["top-hard"].reason.endswith(
        "best.safetensors shares an inode with checkpoints/step-200/adapter_model.safetensors"
    )
    # Re-checked at deletion: approved while clean, a merged/ link made afterwards stops it.
    planned = [rows["plain"].path, rows["link-elsewhere"].path]
    (root / "plain" / "merged" / "w.bin").symlink_to("../checkpoints/step-200/adapter_model.safetensors")
    before = listing(root)
    done = {r.run: r for r in deletion.execute(str(root), "*", planned).actions}
    assert done["plain"].action == "refuse" and done["plain"].reason.startswith(
        "at deletion: symlink into checkpoints/ outside it: merged/w.bin"
    )
    assert done["link-elsewhere"].action == "removed"
    after = listing(root)
    assert {k for k in before if k not in after} == {k for k in before if k.startswith("link-elsewhere/checkpoints")}
    assert (root / "merged-is-link" / "merged" / "adapter_model.safetensors").read_bytes()  # intact


def test_removal_unlinks_symlinks_without_following_them(tmp_path):
    """The deletion walk itself, with no scan in front: a link to a directory outside is unlinked,
    its target kept; the target's files survive."""
    outside = tmp_path / "outside"
    write(outside / "precious.bin", 300)
    victim = tmp_path / "run" / "checkpoints"
    write(victim / "step-1" / "w.bin", 300)
    (victim / "step-1" / "escape").symlink_to(outside)
    (victim / "file-link").symlink_to(outside / "precious.bin")
    before = listing(outside)
    fd = os.open(tmp_path / "run", os.O_RDONLY | os.O_DIRECTORY)
    try:
        remove_tree("checkpoints", fd)
    finally:
        os.close(fd)
    assert not victim.exists() and listing(outside) == before


def test_zfs_snapshots_are_reported_as_holding_the_space(tmp_path):
    run = make_run(tmp_path / "runs", "r")
    dev = os.lstat(run / "checkpoints").st_dev
    mountinfo = tmp_path / "mountinfo"
    mountinfo.write_text(
        f"22 1 {os.major(dev)}:{os.minor(dev)} / {tmp_path} rw,relatime shared:1 - zfs tank/lab rw\n"
        f"23 1 0:99 / /proc rw - proc proc rw\n"
    )
    zfs = tmp_path / "zfs"  # stands in for the zfs command: prints two snapshots of the dataset
    zfs.write_text("#!/bin/sh\nprintf 'tank/lab@nightly-1\\ntank/lab@nightly-2\\n'\n")
    zfs.chmod(0o755)
    rows = scan.scan_root(str(tmp_path / "runs"))
    [fs] = filesystems(rows, "gx10", {}, mountinfo=str(mountinfo), zfs=str(zfs))
    assert (fs.fstype, fs.source, fs.mount, fs.zfs_snapshots) == ("zfs", "tank/lab", str(tmp_path), 2)
    assert "held by them, not returned" in fs.note
    [fs] = filesystems(rows, "gx10", {}, mountinfo=str(mountinfo), zfs=str(tmp_path / "no-zfs-here"))
    assert fs.zfs_snapshots is None and "no `zfs` command" in fs.note


@pytest.mark.parametrize("case", ["unknown host", "missing runs root", "bad glob"])
def test_bad_input_is_one_line_exit_2_and_stores_nothing(ray_cluster, lab, capsys, case):
    argv = ["purge", "--cluster", str(lab["cluster"])]
    if case == "unknown host":
        argv += ["--host", "nowhere"]
    elif case == "missing runs root":
        lab["roots"]["ana-ml2"].rename(lab["tmp"] / "gone")
    else:
        argv += ["--run", "a/b"]
    before = listing(lab["roots"]["gx10"])
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "error" in err
    assert {"unknown host": "nowhere", "missing runs root": "does not exist", "bad glob": "--run"}[case] in err
    assert listing(lab["roots"]["gx10"]) == before and not (lab["store"] / "tables").exists()  # the lock file only


def test_digest_check_catches_an_adapter_lost_through_a_hole_in_the_refusals(lab, monkeypatch):
    """Defence in depth: were the adapter checks to miss a link into checkpoints/, the digests
    taken once checkpoints/ is set aside differ, and it is put back, nothing deleted; were that
    missed too, the digests after the deletion report the adapter as changed."""
    root = lab["roots"]["gx10"]
    monkeypatch.setattr(scan, "_adapter_reasons", lambda *a: ([], 1))
    [row] = scan.scan_root(str(root), "adapter-into-ckpt")
    assert row.action == "remove"  # the simulated hole
    before = listing(root)
    [done] = deletion.execute(str(root), "adapter-into-ckpt", [row.path]).actions
    assert done.action == "refuse" and "changed while checkpoints/ were set aside" in done.reason
    assert listing(root) == before and done.adapter_digests_verified is True
    monkeypatch.setattr(deletion, "changed_adapters", lambda *a: [])  # the second hole
    [done] = deletion.execute(str(root), "adapter-into-ckpt", [row.path]).actions
    assert done.action == "removed" and done.adapter_digests_verified is False


def test_an_unreachable_host_fails_its_job_and_the_others_still_purge(ray_cluster, lab, capsys):
    ghost_root = lab["tmp"] / "runs-ghost"
    make_run(ghost_root, "clean-ghost")
    with lab["cluster"].open("a") as handle:
        handle.write(
            f"  - name: ghost\n    address: 10.0.0.9\n    runs_root: {ghost_root}\n    idle:\n      runs_quiet_min: 0\n"
        )
    assert dry_run_then_yes(lab["cluster"], lab["store"], "--json", capsys=capsys) == 1
    printed = json.loads(capsys.readouterr().out)
    assert set(printed["failures"]) == {"ghost"}
    assert {h: s["num_removed"] for h, s in printed["summary"].items()} == {"gx10": 1, "ana-ml2": 2, "ghost": 0}
    jobs = Store(lab["store"]).jobs()
    jobs = jobs[jobs["run_id"] == printed["run_id"]].set_index("host")
    assert jobs.loc["ghost", "status"] == "failed"
    assert "no alive Ray node carries labprobe.host=ghost" in jobs.loc["ghost", "reason"]
    assert set(jobs.loc[list(HOSTS), "status"]) == {"ok"}
    assert not (lab["roots"]["gx10"] / "clean-a" / "checkpoints").exists()
    assert (ghost_root / "clean-ghost" / "checkpoints").is_dir()


def test_digest_check_covers_the_adapters_of_runs_not_selected(lab, monkeypatch):
    """--run donor alone, with the cross-run check knocked out: the borrower's adapter (not
    selected) dangles once donor's checkpoints/ is set aside, so it is put back; with that check
    knocked out too, the borrower loses its adapter and the purge says so in a failed row."""
    root = lab["roots"]["gx10"]
    monkeypatch.setattr(scan, "_resting_on", lambda *a: [])
    [row] = scan.scan_root(str(root), "donor")
    before = listing(root)
    by_run = {r.run: r for r in deletion.execute(str(root), "donor", [row.path]).actions}
    assert by_run["donor"].action == "refuse" and "the final adapter of borrower changed" in by_run["donor"].reason
    assert listing(root) == before and set(by_run) == {"donor"}
    monkeypatch.setattr(deletion, "changed_adapters", lambda *a: [])
    by_run = {r.run: r for r in deletion.execute(str(root), "donor", [row.path]).actions}
    assert by_run["donor"].action == "removed" and by_run["donor"].adapter_digests_verified is True
    assert by_run["borrower"].action == "failed" and by_run["borrower"].adapter_digests_verified is False
    assert set(by_run) == {"donor", "borrower"}


def test_the_plan_is_stored_before_anything_is_deleted(ray_cluster, lab, monkeypatch):
    """Ctrl-C during the deletions: the plan that was being carried out is in the store."""
    store, real_execute = Store(lab["store"]), purge_mod._execute

    def interrupted(report, *args):
        plan = store.read("purge.actions")  # committed by its jobs row before any deletion
        plan = plan[plan["run_id"] == report.run_id]
        assert set(plan["phase"]) == {"plan"} and len(plan) == len(EXPECTED)
        assert (lab["roots"]["gx10"] / "clean-a" / "checkpoints").is_dir()
        real_execute(report, *args)
        raise KeyboardInterrupt

    monkeypatch.setattr(purge_mod, "_execute", interrupted)
    assert dry_run_then_yes(lab["cluster"], lab["store"]) == 130  # the CLI's Ctrl-C
    assert not (lab["roots"]["gx10"] / "clean-a" / "checkpoints").exists()  # the deletions happened
    actions, jobs = store.read("purge.actions"), store.jobs()
    carried_out = jobs.loc[jobs["config_json"].str.contains('"yes": true'), "run_id"].iloc[0]
    actions, jobs = actions[actions["run_id"] == carried_out], jobs[jobs["run_id"] == carried_out]
    assert set(actions["phase"]) == {"plan"}  # no outcome: an interrupted purge, visible as such
    assert sorted(actions.loc[actions["action"] == "remove", "run"]) == ["borrower-hard", "clean-a", "clean-b"]
    assert sorted(jobs["host"]) == sorted(HOSTS) and all(j.startswith("purge-plan-") for j in jobs["job_id"])


def test_a_purge_run_id_names_its_utc_start_second():
    report = purge_mod.Report(
        yes=False, roots={}, run_glob="*", started_at=datetime(2026, 12, 3, 7, 22, 7, 500_000, tzinfo=timezone.utc)
    )
    assert re.fullmatch(r"20261203T072207Z-[0-9a-f]{4}", report.run_id), report.run_id
    assert purge_mod.Report(yes=False, roots={}, run_glob="*", run_id="given").run_id == "given"


def test_a_full_purge_stores_plan_and_outcome_under_one_run_id(ray_cluster, lab, capsys):
    assert dry_run_then_yes(lab["cluster"], lab["store"], "--json", capsys=capsys) == 0
    printed = json.loads(capsys.readouterr().out)
    store = Store(lab["store"])
    actions, jobs = store.read("purge.actions"), store.jobs()
    assert actions["run_id"].nunique() == 2 and jobs["run_id"].nunique() == 2  # the dry run, then --yes
    assert printed["plan_id"] in set(jobs["run_id"]) and printed["plan_id"] != printed["run_id"]
    actions, jobs = actions[actions["run_id"] == printed["run_id"]], jobs[jobs["run_id"] == printed["run_id"]]
    # The sweep's run-id form (runner/clock.py): a purge's run sorts among the sweeps' by its start.
    assert re.fullmatch(r"\d{8}T\d{6}Z-[0-9a-f]{4}", actions["run_id"].iloc[0]), actions["run_id"].iloc[0]
    by_phase = actions.groupby("phase")["run"].count().to_dict()
    assert by_phase == {"plan": len(EXPECTED), "outcome": len(EXPECTED)}
    assert sorted(jobs["host"]) == sorted(HOSTS * 2)
    assert set(store.read("purge.filesystems")["phase"]) == {"plan", "outcome"}


def test_without_an_address_only_this_machine_is_purged_as_host_local(tmp_path):
    """The embedded Ray (no address, or `--address local`) is host `local` as in `sweep`, never the
    head host: the head's runs root is left alone (unreachable), this machine's is purged."""
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "PYTHONPATH": str(Path(__file__).parents[3])}
    env.pop("RAY_ADDRESS", None)
    procs = {}
    for name, extra in {"none": [], "local": ["--address", "local"]}.items():
        roots = {h: tmp_path / name / f"runs-{h}" for h in ("local", "gx10")}
        for host, root in roots.items():
            make_run(root, f"run-{host}")
        cluster = tmp_path / name / "cluster.yaml"
        cluster.write_text(
            "store:\n  root: store\nray:\n  head: gx10\nhosts:\n"
            + "".join(
                f"  - name: {h}\n    address: 127.0.0.1\n    runs_root: {roots[h]}\n    idle:\n      runs_quiet_min: 0\n"
                for h in roots
            )
        )
        # The dry run, then --yes on the plan it stored, in one process (one embedded Ray).
        code = (
            "import sys; from runner.cli import main; from runner.chores.plans import newest_plan_id; "
            "from runner.store.store import Store; "
            f"a = ['purge', '--cluster', {str(cluster)!r}, '--json', '--timeout-s', '120', *{extra!r}]; "
            "main(a); "
            f"sys.exit(main([*a, '--yes', '--plan', newest_plan_id(Store({str(tmp_path / name / 'store')!r}))]))"
        )
        procs[name] = (
            roots,
            subprocess.Popen(
                [sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
            ),
        )
    for name, (roots, proc) in procs.items():
        out, err = proc.communicate(timeout=240)
        assert proc.returncode == 1, err[-2000:]  # gx10 unreachable from here
        dry, end = json.JSONDecoder().raw_decode(out)
        printed = json.loads(out[end:])  # stdout: the two JSON objects and nothing else
        assert dry["mode"] == "dry-run" and printed["plan_id"] == dry["run_id"]
        assert {h: s["num_removed"] for h, s in printed["summary"].items()} == {"local": 1, "gx10": 0}
        assert "no alive Ray node carries labprobe.host=gx10" in printed["failures"]["gx10"]
        assert "host `local` only" in err
        jobs = Store(tmp_path / name / "store").jobs()
        jobs = jobs[jobs["run_id"] == printed["run_id"]]
        assert sorted(zip(jobs["host"], jobs["status"])) == [("gx10", "failed"), ("local", "ok"), ("local", "ok")]
        assert set(Store(tmp_path / name / "store").read("purge.actions")["host"]) == {"local"}
        assert not (roots["local"] / "run-local" / "checkpoints").exists()
        assert (roots["gx10"] / "run-gx10" / "checkpoints").is_dir()
        assert (roots["local"] / "run-local" / "adapter" / "adapter_model.safetensors").is_file()


def test_bad_input_on_a_host_is_raised_there_and_carried_back_as_itself(ray_cluster, tmp_path):
    """No runs root on the host: the host task raises InputError (never an in-band value), and
    the driver gets that exception back, to raise before any host deletes anything."""
    from probes.result import InputError
    from runner.hosts.nodes import HostFailure, run_on_hosts

    answers = run_on_hosts(purge_mod.plan_on_host, ["gx10"], {"gx10": str(tmp_path / "nowhere")}, "*")
    assert isinstance(answers["gx10"], HostFailure) and isinstance(answers["gx10"].error, InputError)
    assert str(answers["gx10"].error) == f"gx10: runs root {tmp_path / 'nowhere'} does not exist or is not a directory"
