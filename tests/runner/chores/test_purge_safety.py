"""What a purge must keep, tried as a hostile user would (issue 12, items 1 to 6): a bind mount in
checkpoints/, an adapter without weights, links from elsewhere under the runs root, swaps during
the deletion, FIFOs, and run names that are not UTF-8. Real trees; bind mounts in a private mount
namespace (the tests run as root, as CI does); the swaps from another thread at random moments.
"""

from __future__ import annotations

import json
import os
import random
import socket
import sys
import threading
import time
from pathlib import Path

import pytest
from purge_util import (
    dry_run_then_yes,
    listing,
    make_run,
    private_mounts_refused,
    python,
    write,
    write_weights,
)

from runner.chores import deletion, scan
from runner.chores import purge as purge_mod
from runner.store.store import Store

# Run inside the subprocess: plan, then carry out with every planned path approved (as an operator
# approving whatever the plan lists would), print both as JSON.
PLAN_AND_EXECUTE = """
import dataclasses, json, sys
from runner.chores import deletion, scan
root = sys.argv[1]
plan = scan.scan_root(root)
done = deletion.execute(root, "*", [r.path for r in plan])
rows = lambda rs: {r.run: {"action": r.action, "reason": r.reason,
                           "verified": r.adapter_digests_verified} for r in rs}
print(json.dumps({"plan": rows(plan), "outcome": rows(done.actions)}))
"""


def plan_and_execute(root: Path, *, timeout_s: float = 120, binds=()) -> dict:
    done = python(PLAN_AND_EXECUTE.replace("sys.argv[1]", repr(str(root))), timeout_s=timeout_s, binds=binds)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


# -- 1. a bind mount inside checkpoints/ -------------------------------------------------------
def test_a_bind_mount_inside_checkpoints_refuses_the_run_and_its_files_survive(tmp_path):
    why = private_mounts_refused()
    if why:
        pytest.skip(why)
    root, base = tmp_path / "runs", tmp_path / "shared-base-model"
    write(base / "model.safetensors", 4000, 9)
    write(base / "tokenizer" / "vocab.json", 300, 8)
    make_run(root, "clean")
    make_run(root, "base-inside")  # a base model mounted at checkpoints/base (same filesystem)
    (root / "base-inside" / "checkpoints" / "base").mkdir()
    make_run(root, "base-deep")  # deeper, in one step's folder
    (root / "base-deep" / "checkpoints" / "step-100" / "base").mkdir()
    make_run(root, "ckpt-is-mount")  # checkpoints/ itself a bind mount of a folder outside the root
    elsewhere = tmp_path / "ckpt-elsewhere"
    write(elsewhere / "step-1" / "w.bin", 2000, 7)
    make_run(tmp_path, "someone-elses-run")  # mounted as a run directory of the root
    (root / "run-is-mount").mkdir()
    make_run(root, "lender")  # one of its checkpoints mounted as another run's final adapter
    (make_run(root, "borrower", adapter=False) / "adapter").mkdir()
    binds = [
        (tmp_path / "someone-elses-run", root / "run-is-mount"),
        (root / "lender" / "checkpoints" / "step-200", root / "borrower" / "adapter"),
        (base, root / "base-inside" / "checkpoints" / "base"),
        (base, root / "base-deep" / "checkpoints" / "step-100" / "base"),
        (elsewhere, root / "ckpt-is-mount" / "checkpoints"),
    ]
    before = {"base": listing(base), "elsewhere": listing(elsewhere), "run": listing(tmp_path / "someone-elses-run")}
    got = plan_and_execute(root, binds=binds)
    for run, point in (
        ("base-inside", "checkpoints/base"),
        ("base-deep", "checkpoints/step-100/base"),
        ("ckpt-is-mount", "checkpoints/"),
    ):
        assert got["plan"][run]["action"] == "refuse", got["plan"][run]
        assert (
            f"a mount point inside checkpoints/ (what is mounted lives elsewhere): {point}"
            in got["plan"][run]["reason"]
        )
        assert got["outcome"][run]["action"] == "refuse"
        assert got["outcome"][run]["reason"].startswith("at deletion: ")
    assert "the run directory is a mount point" in got["plan"]["run-is-mount"]["reason"]
    assert (
        f"a folder of checkpoints/ is also mounted at {root / 'borrower' / 'adapter'}"
        in got["plan"]["lender"]["reason"]
    )
    assert "a mount point inside adapter/: adapter/" in got["plan"]["borrower"]["reason"]
    assert {got["outcome"][n]["action"] for n in ("lender", "borrower")} == {"refuse"}
    assert (root / "lender" / "checkpoints" / "step-200" / "adapter_model.safetensors").is_file()
    assert got["outcome"]["run-is-mount"]["action"] == "refuse"
    assert got["outcome"]["clean"]["action"] == "removed"
    assert {
        "base": listing(base),
        "elsewhere": listing(elsewhere),
        "run": listing(tmp_path / "someone-elses-run"),
    } == before
    assert (root / "base-inside" / "checkpoints" / "step-100" / "optimizer.pt").is_file()


def test_the_removal_walk_never_enters_a_bind_mount(tmp_path):
    """The last line of defence, with no scan in front: the fd walk stops at a mount point that
    st_dev cannot tell from a folder (its mount id differs) and deletes nothing behind it."""
    why = private_mounts_refused()
    if why:
        pytest.skip(why)
    base, victim = tmp_path / "base", tmp_path / "run" / "checkpoints"
    write(base / "model.safetensors", 3000, 1)
    write(victim / "step-1" / "w.bin", 300)
    (victim / "step-1" / "base").mkdir()
    before = listing(base)
    code = f"""
import os
from runner.chores.fstree import remove_tree
fd = os.open({str(victim.parent)!r}, os.O_RDONLY | os.O_DIRECTORY)
try:
    remove_tree("checkpoints", fd)
except OSError as exc:
    print("stopped:", exc)
"""
    done = python(code, timeout_s=60, binds=[(base, victim / "step-1" / "base")])
    assert done.returncode == 0, done.stderr[-2000:]
    assert listing(base) == before
    assert "stopped: base is a mount point" in done.stdout


# -- 2. a final adapter without weights --------------------------------------------------------
def test_a_final_adapter_without_parsable_weights_refuses_the_run(tmp_path):
    import torch

    root = tmp_path / "runs"
    make_run(root, "good")
    run = make_run(root, "good-bin", adapter=False)  # PEFT with safe_serialization=False
    (run / "adapter").mkdir()
    torch.save({"lora_A.weight": torch.ones(4, 8)}, run / "adapter" / "adapter_model.bin")
    (run / "adapter" / "adapter_config.json").write_text('{"r": 4}')
    broken = {
        "config-only": None,
        "zero-bytes": b"",
        "short": b"\x05\x00\x00",
        "header-too-long": (10**6).to_bytes(8, "little") + b"{}",
        "header-not-json": (4).to_bytes(8, "little") + b"nope",
        "no-tensor": (2).to_bytes(8, "little") + b"{}",
        "truncated": None,  # a real file cut short: the tensors' bytes lie past its end
    }
    for name, data in broken.items():
        run = make_run(root, name, adapter=False)
        (run / "adapter").mkdir()
        (run / "adapter" / "adapter_config.json").write_text('{"r": 8}')
        if name == "truncated":
            write_weights(run / "adapter" / "adapter_model.safetensors")
            with open(run / "adapter" / "adapter_model.safetensors", "r+b") as handle:
                handle.truncate(os.path.getsize(run / "adapter" / "adapter_model.safetensors") - 16)
        elif data is not None:
            (run / "adapter" / "adapter_model.safetensors").write_bytes(data)
    run = make_run(root, "bin-garbage", adapter=False)
    write(run / "adapter" / "adapter_model.bin", 900, 3)
    before = listing(root)
    plan = {r.run: r for r in scan.scan_root(str(root))}
    assert {n: r.action for n, r in plan.items()} == {
        "good": "remove",
        "good-bin": "remove",
        **{n: "refuse" for n in [*broken, "bin-garbage"]},
    }
    assert "final adapter holds no weights" in plan["config-only"].reason
    assert plan["zero-bytes"].reason.endswith("adapter/adapter_model.safetensors do not load: 0 bytes")
    assert "tensor 'base_model.model.q_proj.lora_B.weight' lies outside the file" in plan["truncated"].reason
    assert "adapter_model.bin do not load: torch.load(weights_only=True) fails" in plan["bin-garbage"].reason
    # Approved all the same (a plan shown before the weights went bad): refused at deletion.
    done = {r.run: r for r in deletion.execute(str(root), "*", [r.path for r in plan.values()]).actions}
    assert {n for n, r in done.items() if r.action == "removed"} == {"good", "good-bin"}
    assert all(done[n].reason.startswith("at deletion: ") for n in [*broken, "bin-garbage"])
    kept = {k: v for k, v in before.items() if not k.startswith(("good/checkpoints", "good-bin/checkpoints"))}
    assert listing(root) == kept


# -- 3. links from elsewhere under the runs root -----------------------------------------------
def test_a_link_from_anywhere_under_the_root_into_checkpoints_refuses_that_removal(tmp_path):
    root = tmp_path / "runs"
    for name in ("A", "B", "C", "D", "E", "F", "G", "H", "clean"):
        make_run(root, name)
    # A run kept elsewhere and linked in: its adapter's links count as under the root.
    (make_run(tmp_path, "kept-elsewhere") / "adapter" / "peer").symlink_to(root / "H" / "checkpoints" / "step-200")
    (root / "linked-run").symlink_to(tmp_path / "kept-elsewhere")
    (root / "A" / "adapter" / "base_run").symlink_to("../../B")  # A's adapter reaches B's whole run
    (root / "C" / "merged" / "w.bin").symlink_to("../../D/checkpoints/step-100/optimizer.pt")
    (root / "latest-of-E").symlink_to("E/checkpoints")  # a loose link at the root's top
    # Passes through F's checkpoints/ to land outside it: dangles once they are gone.
    (root / "G" / "merged" / "log").symlink_to("../../F/checkpoints/step-100/../../train.log")
    reachable = root / "A" / "adapter" / "base_run" / "checkpoints" / "step-200" / "adapter_model.safetensors"
    content = reachable.read_bytes()
    got = plan_and_execute(root)
    plan, outcome = got["plan"], got["outcome"]
    assert {n: r["action"] for n, r in plan.items()} == {
        "A": "refuse",
        "B": "refuse",
        "C": "remove",
        "D": "refuse",
        "E": "refuse",
        "F": "refuse",
        "G": "remove",
        "H": "refuse",
        "linked-run": "refuse",
        "clean": "remove",
    }
    assert (
        "another run's final adapter rests on checkpoints/ through a symlink: A/adapter/base_run -> ../../B"
        in plan["B"]["reason"]
    )
    assert "a symlink elsewhere under the runs root rests on checkpoints/: C/merged/w.bin" in plan["D"]["reason"]
    assert "latest-of-E -> E/checkpoints" in plan["E"]["reason"]
    assert "G/merged/log -> ../../F/checkpoints/step-100/../../train.log" in plan["F"]["reason"]
    assert "final adapter rests on checkpoints/ through a symlink: linked-run/adapter/peer" in plan["H"]["reason"]
    assert reachable.read_bytes() == content and (root / "G" / "merged" / "log").read_text() == "done\n"
    # A digest that could not read something (A's link to a folder) is never `verified`.
    assert outcome["A"]["verified"] is None and outcome["clean"]["verified"] is True
    assert {n for n, r in outcome.items() if r["action"] == "removed"} == {"C", "G", "clean"}


def test_checkpoints_left_aside_by_an_interrupted_purge_are_named_and_refused(tmp_path):
    """Killed between setting checkpoints/ aside and deleting it: the next plan says where it is."""
    root = tmp_path / "runs"
    run = make_run(root, "cut-short")
    (run / ".labprobe-purging-0123456789ab").mkdir()
    os.rename(run / "checkpoints", run / ".labprobe-purging-0123456789ab" / "checkpoints")
    [row] = scan.scan_root(str(root))
    assert row.action == "refuse" and row.reason == (
        "an interrupted purge left .labprobe-purging-0123456789ab (holding checkpoints/ set aside): "
        "`labprobe purge --recover` finishes or undoes it"
    )


# -- 4. swaps during the deletion --------------------------------------------------------------
class Swapper(threading.Thread):
    """Until stopped, at random moments: move the adapter's weights (or adapter/ itself) into a
    folder of checkpoints/ and leave a symlink in its place, then move it back, as a hostile or
    confused process would. Each move is one rename (the link is replaced by the file in one go),
    so the swapper alone never loses anything."""

    def __init__(self, run: Path, kind: str, max_pause_s: float, rng: random.Random):
        super().__init__()
        self.folder, self.kind, self.max_pause_s, self.rng = run, kind, max_pause_s, rng
        self.stop, self.moved = threading.Event(), None
        self.num_attempts, self.num_swaps = 0, 0  # swaps tried; swaps done (checkpoints/ still there)

    def run(self) -> None:
        while not self.stop.wait(self.rng.uniform(0, self.max_pause_s)):
            if self.moved is None:
                self.num_attempts += 1
                self._swap()
            else:
                self._unswap()

    def _swap(self) -> None:
        run = self.folder
        try:
            steps = sorted(p for p in (run / "checkpoints").iterdir() if p.is_dir() and not p.is_symlink())
            step = self.rng.choice(steps)
            if self.kind == "weights":
                moved = step / "final.safetensors"
                os.rename(run / "adapter" / "adapter_model.safetensors", moved)
                os.symlink(os.path.relpath(moved, run / "adapter"), run / "adapter" / "adapter_model.safetensors")
            else:
                moved = step / "final-adapter"
                os.rename(run / "adapter", moved)
                os.symlink(os.path.relpath(moved, run), run / "adapter")
        except (OSError, IndexError):  # checkpoints/ gone or set aside: nothing to move into
            return
        self.moved, self.num_swaps = moved, self.num_swaps + 1

    def _unswap(self) -> None:
        run = self.folder
        try:
            if self.kind == "weights":
                os.rename(self.moved, run / "adapter" / "adapter_model.safetensors")
            else:
                os.rename(self.moved, run / "adapter-back")
                os.unlink(run / "adapter")
                os.rename(run / "adapter-back", run / "adapter")
        except OSError:  # set aside meanwhile: the link dangles until it is put back
            return
        self.moved = None


def _race_run(root: Path) -> Path:
    run = make_run(root, "r")
    for step in range(8):  # enough files that the deletion takes a while to race
        for i in range(40):
            write(run / "checkpoints" / f"step-{step}" / f"shard-{i}.bin", 64, i)
    for f in (run / "adapter").iterdir():  # saved last, as a trainer saves its final adapter
        os.utime(f)
    return run


def test_swaps_at_random_moments_during_the_deletion_never_lose_the_final_weights(tmp_path):
    probe = _race_run(tmp_path / "probe")
    [row] = scan.scan_root(str(probe.parent))
    start = time.perf_counter()
    deletion.execute(str(probe.parent), "*", [row.path])
    span_s = time.perf_counter() - start  # how long one purge of such a run takes here
    rng = random.Random(12)
    old_interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)  # let the swapping thread in at finer moments
    num_attempts = num_swaps = 0
    try:
        for trial in range(30):
            run = _race_run(tmp_path / f"trial-{trial}")
            weights = (run / "adapter" / "adapter_model.safetensors").read_bytes()
            [row] = scan.scan_root(str(run.parent))
            swapper = Swapper(run, ("weights", "adapter")[trial % 2], span_s / 3, rng)
            swapper.start()
            start = time.perf_counter()
            try:
                [done] = deletion.execute(str(run.parent), "*", [row.path]).actions
            finally:
                span_s = (span_s + time.perf_counter() - start) / 2  # follow the machine's load
                swapper.stop.set()
                swapper.join()
            num_attempts, num_swaps = num_attempts + swapper.num_attempts, num_swaps + swapper.num_swaps
            # No loss: the final weights still read through the adapter's path, swapped or not.
            assert (run / "adapter" / "adapter_model.safetensors").read_bytes() == weights, (trial, done)
            assert not list(run.glob(".labprobe-purging-*")), (trial, done)
            if done.action == "removed":
                assert swapper.moved is None and done.adapter_digests_verified is True, (trial, done)
            else:
                assert (run / "checkpoints").is_dir(), (trial, done)
    finally:
        sys.setswitchinterval(old_interval)
    # Swaps tried once checkpoints/ was set aside find nothing to move into: that is the fix.
    assert num_attempts >= 20, f"only {num_attempts} swaps tried ({num_swaps} done) in 30 purges"


@pytest.mark.parametrize("kind", ["weights", "adapter"])
def test_a_swap_after_the_last_check_is_caught_once_checkpoints_is_set_aside(tmp_path, monkeypatch, kind):
    """The swap at the worst moment, made deterministic: right after the check at deletion,
    before checkpoints/ is renamed aside. The adapter's digest, taken again once it is aside,
    differs; checkpoints/ goes back and nothing is deleted."""
    run = _race_run(tmp_path / "runs")
    weights = (run / "adapter" / "adapter_model.safetensors").read_bytes()
    [row] = scan.scan_root(str(run.parent))
    real_scan = deletion.scan_root

    def scan_then_swap(*args):
        rows = real_scan(*args)
        swapper = Swapper(run, kind, 0, random.Random(1))
        swapper._swap()
        assert swapper.moved is not None
        return rows

    monkeypatch.setattr(deletion, "scan_root", scan_then_swap)
    [done] = deletion.execute(str(run.parent), "*", [row.path]).actions
    # Caught by checkpoints/' listing once it is aside (the swap moved a file into it) or by the
    # adapter's digest: either way put back, nothing deleted.
    assert done.action == "refuse" and "put back" in done.reason
    assert (run / "adapter" / "adapter_model.safetensors").read_bytes() == weights
    assert (run / "checkpoints").is_dir() and not list(run.glob(".labprobe-purging-*"))


def test_checkpoints_replaced_after_the_last_check_is_put_back_untouched(tmp_path, monkeypatch):
    """checkpoints/ itself swapped for another folder (holding the final weights, say) between
    the check and the rename: the folder renamed is not the one checked, so it goes back."""
    run = _race_run(tmp_path / "runs")
    [row] = scan.scan_root(str(run.parent))
    real_scan = deletion.scan_root

    def scan_then_replace(*args):
        rows = real_scan(*args)
        os.rename(run / "checkpoints", run / "checkpoints.checked")
        os.rename(run / "adapter", run / "checkpoints")
        return rows

    monkeypatch.setattr(deletion, "scan_root", scan_then_replace)
    [done] = deletion.execute(str(run.parent), "*", [row.path]).actions
    assert done.action == "failed" and done.reason == (
        "could not set checkpoints/ aside (checkpoints/ was replaced since it was checked): nothing removed"
    )
    assert (run / "checkpoints" / "adapter_model.safetensors").is_file()
    assert (run / "checkpoints.checked" / "step-100" / "optimizer.pt").is_file()
    assert not list(run.glob(".labprobe-purging-*"))


# -- 5. FIFOs and other non-files --------------------------------------------------------------
def test_a_fifo_or_socket_in_an_adapter_refuses_it_and_never_blocks_the_purge(tmp_path):
    root = tmp_path / "runs"
    make_run(root, "clean")
    os.mkfifo(make_run(root, "fifo") / "adapter" / "pipe")
    run = make_run(root, "fifo-weights", adapter=False)  # the weights file itself a FIFO
    (run / "adapter").mkdir()
    os.mkfifo(run / "adapter" / "adapter_model.safetensors")
    run = make_run(root, "socket")
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(run / "adapter" / "sock"))
    shared = tmp_path / "shared"  # a folder an adapter links to, holding a FIFO
    write(shared / "w.bin", 10)
    os.mkfifo(shared / "pipe")
    run = make_run(root, "linked")
    (run / "adapter" / "extra").symlink_to(shared)
    (run / "adapter" / "pipe-link").symlink_to(shared / "pipe")
    start = time.monotonic()
    got = plan_and_execute(root, timeout_s=60)  # before the fix: blocked on the first FIFO, for ever
    assert time.monotonic() - start < 60
    plan, outcome = got["plan"], got["outcome"]
    assert "final adapter holds what is not a regular file: adapter/pipe (FIFO)" in plan["fifo"]["reason"]
    assert "adapter/adapter_model.safetensors (FIFO)" in plan["fifo-weights"]["reason"]
    assert "adapter/sock (socket)" in plan["socket"]["reason"]
    assert plan["linked"]["action"] == "refuse"
    assert {n: r["action"] for n, r in outcome.items()} == {
        "clean": "removed",
        "fifo": "refuse",
        "fifo-weights": "refuse",
        "socket": "refuse",
        "linked": "refuse",
    }
    assert outcome["clean"]["verified"] is True
    assert {outcome[n]["verified"] for n in ("fifo", "fifo-weights", "socket", "linked")} == {None}


# -- 6. run names that are not UTF-8 -----------------------------------------------------------
@pytest.fixture
def odd_lab(tmp_path):
    root = tmp_path / "runs"
    make_run(root, b"r\xff\xfe-lora")
    make_run(root, "back\\slash")
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(
        f"store:\n  root: store\nhosts:\n  - name: gx10\n    address: 127.0.0.1\n    runs_root: {root}\n"
        "    idle:\n      runs_quiet_min: 0\n"
    )
    return {"root": root, "cluster": cluster, "store": tmp_path / "store"}


def test_non_utf8_run_names_are_planned_deleted_shown_and_stored_readably(ray_cluster, odd_lab, capsys, monkeypatch):
    real_execute = purge_mod._execute

    def appearing(report, *args):  # a run that appears between the plan and the deletion
        make_run(odd_lab["root"], b"late-\x80")
        real_execute(report, *args)

    monkeypatch.setattr(purge_mod, "_execute", appearing)
    assert dry_run_then_yes(odd_lab["cluster"], odd_lab["store"]) == 0
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err and "r\\xff\\xfe-lora" in captured.out
    actions = Store(odd_lab["store"]).read("purge.actions")
    outcome = actions[actions["phase"] == "outcome"].set_index("run")
    assert outcome.loc["r\\xff\\xfe-lora", "action"] == "removed"
    assert outcome.loc["r\\xff\\xfe-lora", "path"] == f"{odd_lab['root']}/r\\xff\\xfe-lora/checkpoints"
    assert outcome.loc["back\\\\slash", "action"] == "removed"  # a backslash doubled: one name, one text
    assert outcome.loc["late-\\x80", "action"] == "refuse"  # stored, and left alone
    assert not (odd_lab["root"] / os.fsdecode(b"r\xff\xfe-lora") / "checkpoints").exists()
    assert (odd_lab["root"] / os.fsdecode(b"late-\x80") / "checkpoints").is_dir()
    assert set(Store(odd_lab["store"]).jobs()["status"]) == {"ok"}


def test_configs_read_for_their_base_never_block_never_run_forever_and_never_walk_a_link(tmp_path):
    """The configs read for a base under checkpoints/: a FIFO named config.json and one linked to /dev/zero
    are neither hung on nor read for ever; an adapter/ that is a link to `/` is neither walked for bases
    nor hashed (walked, either would take the whole machine)."""
    root = tmp_path / "runs"
    os.mkfifo(make_run(root, "fifo") / "merged" / "config.json")
    (make_run(root, "zero") / "merged" / "config.json").symlink_to("/dev/zero")
    start = time.monotonic()
    got = plan_and_execute(root, timeout_s=60)  # before the fix: blocked on the FIFO
    assert {n: r["action"] for n, r in got["outcome"].items()} == {"fifo": "removed", "zero": "removed"}
    linked = make_run(tmp_path / "elsewhere", "to-root", adapter=False)
    (linked / "adapter").symlink_to("/")
    got = plan_and_execute(linked.parent, timeout_s=60)  # before the fix: walked, then hashed, all of `/`
    assert got["outcome"]["to-root"]["action"] == "refuse" and time.monotonic() - start < 60
