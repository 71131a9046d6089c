"""labprobe purge tried again as an attacker and as a busy lab would (issue 23, items 2 to 7):
adapters that cannot be loaded, a tree 1,500 levels deep, errors and SIGKILL mid-purge, the store's
chores and a second purge beside it, a plan changed after it was shown, a run still training, and
stores and temp folders that cannot be written. Real trees, the shared Ray cluster's host `gx10`.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest
from purge_util import REPO, listing, make_run, python, write

from runner.chores import deletion, scan
from runner.chores import purge as purge_mod
from runner.cli import main
from runner.store.store import Store

HOUR_S = 3600


def backdate(path: Path, age_s: float = HOUR_S) -> None:
    """Every entry under `path` (and it) last modified `age_s` ago: a run long finished."""
    stamp = time.time() - age_s
    for folder, dirs, files in os.walk(path):
        for name in dirs + files:
            os.utime(os.path.join(folder, name), (stamp, stamp), follow_symlinks=False)
    os.utime(path, (stamp, stamp))


def touch_adapter(run: Path) -> None:
    """The final adapter saved now, after every checkpoint, as a trainer saves it last."""
    for f in (run / "adapter").iterdir():
        os.utime(f)


def approve_all(root: Path, glob: str = "*", quiet_s: float = 0.0):
    """The plan, then every `remove` row carried out, as an operator approving all of it would."""
    plan = scan.scan_root(str(root), glob, quiet_s=quiet_s)
    shown = {r.path: r.listing_sha256 for r in plan if r.action == "remove"}
    return {r.run: r for r in plan}, {r.run: r for r in deletion.execute(str(root), glob, shown, "", quiet_s).actions}


def one_host_lab(tmp_path: Path, quiet_min: float = 0, host: str = "gx10") -> dict:
    root = tmp_path / "runs"
    root.mkdir(parents=True)
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(
        f"store:\n  root: store\nhosts:\n  - name: {host}\n    address: 127.0.0.1\n    runs_root: {root}\n"
        f"    idle:\n      runs_quiet_min: {quiet_min}\n"
    )
    return {"root": root, "cluster": str(cluster), "store": tmp_path / "store"}


def one_line_error(capsys, *phrases: str) -> str:
    err = capsys.readouterr().err
    lines = [line for line in err.strip().splitlines() if "labprobe purge" in line]
    assert len(lines) == 1 and "Traceback" not in err, err[-3000:]
    for phrase in phrases:
        assert phrase in lines[0], lines[0]
    return lines[0]


# -- 2. the final adapter must load -------------------------------------------------------------
def _adapter(root: Path, name: str, config: str | None = '{"r": 8}') -> Path:
    run = make_run(root, name, adapter=False)
    (run / "adapter").mkdir()
    if config is not None:
        (run / "adapter" / "adapter_config.json").write_text(config)
    return run / "adapter"


def _safetensors(path: Path, header: dict, data: bytes) -> None:
    text = json.dumps(header).encode()
    path.write_bytes(len(text).to_bytes(8, "little") + text + data)


def test_an_adapter_that_does_not_load_refuses_its_run_and_nothing_is_removed(tmp_path):
    import torch

    root = tmp_path / "runs"
    make_run(root, "good")
    good = _adapter(root, "good-bin")
    torch.save({"lora_A.weight": torch.randn(64, 64), "lora_B.weight": torch.randn(64, 64)}, good / "adapter_model.bin")
    data = (good / "adapter_model.bin").read_bytes()
    assert len(data) > 30_000
    (_adapter(root, "bin-cut-to-200") / "adapter_model.bin").write_bytes(data[:200])
    (_adapter(root, "bin-header-only") / "adapter_model.bin").write_bytes(data[:15])
    with (
        zipfile.ZipFile(good / "adapter_model.bin") as full,
        zipfile.ZipFile(_adapter(root, "bin-no-tensor-data") / "adapter_model.bin", "w") as cut,
    ):
        for name in full.namelist():
            if "/data/" not in name:
                cut.writestr(name, full.read(name))
    torch.save({"w": torch.zeros(0, 8)}, _adapter(root, "bin-empty-tensor") / "adapter_model.bin")
    f32 = {"dtype": "F32", "shape": [1000, 1000], "data_offsets": [0, 4]}
    _safetensors(_adapter(root, "st-1000x1000-in-4-bytes") / "adapter_model.safetensors", {"w": f32}, b"abcd")
    nope = {"dtype": "NOPE", "shape": [1], "data_offsets": [0, 4]}
    _safetensors(_adapter(root, "st-dtype-nope") / "adapter_model.safetensors", {"w": nope}, b"abcd")
    empty = {"dtype": "F32", "shape": [0, 16], "data_offsets": [0, 0]}
    _safetensors(_adapter(root, "st-empty-tensor") / "adapter_model.safetensors", {"w": empty}, b"")
    (make_run(root, "no-config") / "adapter" / "adapter_config.json").unlink()
    (make_run(root, "config-not-json") / "adapter" / "adapter_config.json").write_text("{r: 8")
    (make_run(root, "config-too-deep") / "adapter" / "adapter_config.json").write_text("[" * 100_000)
    expected = {
        "bin-cut-to-200": "torch.load(weights_only=True) fails on its 200 bytes",
        "bin-header-only": "torch.load(weights_only=True) fails on its 15 bytes",
        "bin-no-tensor-data": "failed locating file data/0",
        "bin-empty-tensor": "tensor 'w' is empty (shape [0, 8])",
        "st-1000x1000-in-4-bytes": "shape [1000, 1000] of F32 is 4000000 bytes, its range holds 4",
        "st-dtype-nope": "tensor 'w' has an unknown dtype 'NOPE'",
        "st-empty-tensor": "tensor 'w' is empty (shape [0, 16])",
        "no-config": "final adapter's adapter/adapter_config.json is missing",
        "config-not-json": "final adapter's adapter/adapter_config.json is not JSON",
        "config-too-deep": "adapter_config.json is not JSON (nested too deeply",
    }
    before = listing(root)
    plan, done = approve_all(root)
    assert {n for n, r in plan.items() if r.action == "remove"} == {"good", "good-bin"}
    for name, phrase in expected.items():
        assert plan[name].action == "refuse" and phrase in plan[name].reason, (name, plan[name].reason)
    # Shown as removable once (a plan made before the weights went bad): refused at deletion too.
    shown = {r.path: "" for r in plan.values()}
    again = {r.run: r for r in deletion.execute(str(root), "*", shown).actions}
    assert {n for n, r in done.items() if r.action == "removed"} == {"good", "good-bin"}
    assert all(again[n].action == "refuse" and again[n].reason.startswith("at deletion: ") for n in expected)
    kept = {k: v for k, v in before.items() if not k.startswith(("good/checkpoints", "good-bin/checkpoints"))}
    assert listing(root) == kept


# -- 3. removal: iterative, and nothing left set aside ------------------------------------------
def test_a_checkpoints_tree_1500_levels_deep_is_removed(tmp_path):
    root = tmp_path / "runs"
    deep, plain = make_run(root, "deep"), make_run(root, "plain")
    fd = os.open(deep / "checkpoints", os.O_RDONLY)
    for _ in range(1500):  # os.makedirs itself recurses: one level at a time through fds
        os.mkdir("d", dir_fd=fd)
        inner = os.open("d", os.O_RDONLY, dir_fd=fd)
        os.close(fd)
        fd = inner
    with os.fdopen(os.open("w.bin", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd), "wb") as handle:
        handle.write(b"x" * 100)
    os.close(fd)
    touch_adapter(deep)
    plan, done = approve_all(root)
    assert plan["deep"].action == "remove" and plan["deep"].num_files == 4
    assert done["deep"].action == "removed" and done["plain"].action == "removed", done["deep"].reason
    assert not (deep / "checkpoints").exists() and not (plain / "checkpoints").exists()
    assert not list(root.glob("*/.labprobe-purging-*"))
    assert done["deep"].adapter_digests_verified is True


def test_any_error_while_removing_puts_what_remains_back(tmp_path, monkeypatch):
    root = tmp_path / "runs"
    make_run(root, "a")
    make_run(root, "b")
    before = listing(root / "a")
    real, calls = deletion.remove_tree, []

    def breaks_once(name, parent_fd, expect=None):
        calls.append(name)
        if len(calls) == 1:  # the first run's removal: part of it goes, then a bug
            os.unlink("step-100/optimizer.pt", dir_fd=os.open(name, os.O_RDONLY, dir_fd=parent_fd))
            raise RecursionError("maximum recursion depth exceeded")
        return real(name, parent_fd, expect)

    monkeypatch.setattr(deletion, "remove_tree", breaks_once)
    _, done = approve_all(root)
    assert done["a"].action == "failed" and "what remained was put back as checkpoints/" in done["a"].reason
    assert "RecursionError" in done["a"].reason and done["b"].action == "removed"
    assert listing(root / "a") == {k: v for k, v in before.items() if k != "checkpoints/step-100/optimizer.pt"}
    assert not list(root.glob("*/.labprobe-purging-*"))


def test_ctrl_c_during_the_removal_puts_every_checkpoints_back(tmp_path, monkeypatch):
    root = tmp_path / "runs"
    for name in ("a", "b", "c"):
        make_run(root, name)
    before = listing(root)

    def interrupted(*args):
        raise KeyboardInterrupt

    monkeypatch.setattr(deletion, "remove_tree", interrupted)
    with pytest.raises(KeyboardInterrupt):
        approve_all(root)
    assert listing(root) == before


KILLED = """
import os, signal, sys
from runner.chores import deletion, scan
root, glob, when = sys.argv[1:4]
plan = scan.scan_root(root, glob)
def kill(*args):
    if when == "mid":  # the mark written, part of the tree gone: then the kill
        name, parent_fd = args[0], args[1]
        os.unlink("step-100/optimizer.pt", dir_fd=os.open(name, os.O_RDONLY, dir_fd=parent_fd))
    os.kill(os.getpid(), signal.SIGKILL)
if when == "mid":
    deletion.remove_tree = kill
else:  # set aside, not yet deleted
    deletion.changed_adapters = kill
deletion.execute(root, glob, {r.path: r.listing_sha256 for r in plan})
"""


def test_recover_finishes_or_undoes_what_a_killed_purge_left_aside_and_stores_it(ray_cluster, tmp_path, capsys):
    lab = one_host_lab(tmp_path)
    root = lab["root"]
    for name in ("cut-before", "cut-mid", "untouched"):
        make_run(root, name)
    before = listing(root)
    for glob, when in (("cut-before", "before"), ("cut-mid", "mid")):
        code = "import sys; sys.argv[1:] = " + repr([str(root), glob, when]) + "\n" + KILLED
        done = python(code, timeout_s=120)
        assert done.returncode == -9, done.stderr[-2000:]
    assert len(list(root.glob("*/.labprobe-purging-*"))) == 2
    assert [r.action for r in scan.scan_root(str(root), "cut-*")] == ["refuse", "refuse"]
    assert main(["purge", "--cluster", lab["cluster"], "--recover", "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    rows = {r["run"]: r for r in printed["outcome"]["gx10"]}
    assert {n: r["action"] for n, r in rows.items()} == {"cut-before": "restored", "cut-mid": "removed"}
    assert not list(root.glob("*/.labprobe-purging-*"))
    expected = {k: v for k, v in before.items() if not k.startswith("cut-mid/checkpoints")}
    assert listing(root) == expected  # cut-before exactly as it was; cut-mid's deletion finished
    store = Store(lab["store"])
    jobs = store.jobs()
    assert list(jobs["job_id"].str.slice(0, 14)) == ["purge-recover-"] and list(jobs["status"]) == ["ok"]
    stored = store.read("purge.actions").set_index("run")
    assert stored.loc["cut-before", "action"] == "restored" and stored.loc["cut-mid", "action"] == "removed"
    plan = {r.run: r.action for r in scan.scan_root(str(root))}
    assert plan == {"cut-before": "remove", "untouched": "remove"}


# -- 4. locks: the store's chores and a second purge ---------------------------------------------
def test_purge_and_the_store_chores_never_run_at_once(ray_cluster, tmp_path, capsys, monkeypatch):
    from runner.dispatch.lock import SweepLock

    lab = one_host_lab(tmp_path)
    make_run(lab["root"], "a")
    with SweepLock(lab["store"], run_id="r1", plan="store vacuum"):
        assert main(["purge", "--cluster", lab["cluster"]]) == 2
    one_line_error(capsys, "is busy: store vacuum")
    assert main(["purge", "--cluster", lab["cluster"], "--json"]) == 0
    plan_id = json.loads(capsys.readouterr().out)["plan_id"]
    real_execute, vacuum = purge_mod._execute, []

    def with_vacuum(*args):  # `store vacuum --retention-days 0` started while the purge runs
        vacuum.append(main(["store", "vacuum", "--store", str(lab["store"]), "--retention-days", "0"]))
        real_execute(*args)

    monkeypatch.setattr(purge_mod, "_execute", with_vacuum)
    assert main(["purge", "--cluster", lab["cluster"], "--yes", "--plan", plan_id]) == 0
    assert vacuum == [2] and "plan 'purge --yes'" in capsys.readouterr().err
    actions = Store(lab["store"]).read("purge.actions")
    assert actions.loc[actions["phase"] == "outcome", "action"].tolist() == ["removed"]
    assert main(["store", "check", "--store", str(lab["store"])]) == 0


def test_a_second_purge_on_a_runs_root_is_refused_in_one_line(ray_cluster, tmp_path, capsys):
    """Another purge holds the runs root (its flock, from another process, as a purge's host task
    holds it): this one is refused in one line, whatever store it writes to, storing no rows."""
    lab = one_host_lab(tmp_path)
    make_run(lab["root"], "a")
    hold = (
        "import fcntl, os, sys, time; fd = os.open(sys.argv[1], os.O_RDONLY); fcntl.flock(fd, fcntl.LOCK_EX); "
        "print('held', flush=True); time.sleep(120)"
    )
    holder = subprocess.Popen([sys.executable, "-c", hold, str(lab["root"])], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        for store in (lab["store"], tmp_path / "other-store"):
            assert main(["purge", "--cluster", lab["cluster"], "--store", str(store)]) == 2
            one_line_error(capsys, f"gx10: runs root {lab['root']}: another purge is running there")
            assert not (Path(store) / "tables").exists()
    finally:
        holder.kill()
        holder.wait()
    assert (lab["root"] / "a" / "checkpoints").is_dir()


# -- 5. --yes deletes exactly the plan that was shown --------------------------------------------
def test_yes_deletes_exactly_the_plan_shown_and_leaves_anything_new_alone(ray_cluster, tmp_path, capsys):
    lab = one_host_lab(tmp_path)
    root = lab["root"]
    make_run(root, "shown")
    make_run(root, "grows")
    assert main(["purge", "--cluster", lab["cluster"], "--json"]) == 0
    plan_id = json.loads(capsys.readouterr().out)["plan_id"]
    make_run(root, "appeared")  # after the review: a new run, and 48 checkpoints in a planned run
    for step in range(48):
        write(root / "grows" / "checkpoints" / f"checkpoint-{step}" / "w.bin", 100, step)
    touch_adapter(root / "grows")  # saved after them: only the change since the plan refuses it
    grows_before, appeared_before = listing(root / "grows"), listing(root / "appeared")
    assert main(["purge", "--cluster", lab["cluster"], "--yes", "--plan", plan_id, "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    rows = {r["run"]: r for r in printed["outcome"]["gx10"]}
    assert rows["shown"]["action"] == "removed" and not (root / "shown" / "checkpoints").exists()
    assert rows["appeared"]["action"] == "refuse" and "not in the plan" in rows["appeared"]["reason"]
    assert rows["grows"]["action"] == "refuse" and "changed since the plan was shown" in rows["grows"]["reason"]
    assert listing(root / "grows") == grows_before and listing(root / "appeared") == appeared_before
    assert printed["plan_id"] == plan_id


def test_yes_without_a_plan_id_asks_on_a_terminal_and_refuses_elsewhere(ray_cluster, tmp_path, capsys, monkeypatch):
    lab = one_host_lab(tmp_path)
    make_run(lab["root"], "a")
    assert main(["purge", "--cluster", lab["cluster"], "--yes"]) == 2
    one_line_error(capsys, "--yes: give --plan ID")
    assert main(["purge", "--cluster", lab["cluster"], "--yes", "--plan", "20260101T000000Z-abcd"]) == 2
    one_line_error(capsys, "no dry-run plan with that id")
    assert main(["purge", "--cluster", lab["cluster"]]) == 0

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.setattr(sys, "stdin", Terminal("n\n"))
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True, raising=False)
    assert main(["purge", "--cluster", lab["cluster"], "--yes"]) == 2
    assert (lab["root"] / "a" / "checkpoints").is_dir()
    one_line_error(capsys, "not confirmed: nothing deleted")
    monkeypatch.setattr(sys, "stdin", Terminal("y\n"))
    assert main(["purge", "--cluster", lab["cluster"], "--yes"]) == 0
    assert "carry out exactly this plan?" in capsys.readouterr().out
    assert not (lab["root"] / "a" / "checkpoints").exists()


# -- 6. a run still training -------------------------------------------------------------------
def test_a_run_still_training_is_refused_in_the_plan_and_right_before_its_rename(tmp_path, monkeypatch):
    root = tmp_path / "runs"
    make_run(root, "fresh")
    for name in ("finished", "held-open", "resumed"):
        backdate(make_run(root, name))
    opened = root / "held-open" / "checkpoints" / "step-100" / "optimizer.pt"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; f = open(sys.argv[1], 'ab'); print('open', flush=True); time.sleep(120)",
        ]
        + [str(opened)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "open"
        plan = {r.run: r for r in scan.scan_root(str(root), quiet_s=600)}
    finally:
        holder.kill()
        holder.wait()
    assert {n: r.action for n, r in plan.items()} == {
        "fresh": "refuse",
        "finished": "remove",
        "held-open": "refuse",
        "resumed": "remove",
    }
    assert plan["fresh"].reason.startswith("training: something under the run changed")
    assert f"training: open for writing: pid {holder.pid} (python" in plan["held-open"].reason
    # `resumed` writes again after the re-scan at deletion, before its rename: asked again, refused.
    real_scan = deletion.scan_root

    def scan_then_resume(*args):
        rows = real_scan(*args)
        (root / "resumed" / "train.log").write_text("step 201\n")
        return rows

    monkeypatch.setattr(deletion, "scan_root", scan_then_resume)
    before = listing(root / "resumed")
    shown = {plan[n].path: plan[n].listing_sha256 for n in ("finished", "resumed")}
    done = {r.run: r for r in deletion.execute(str(root), "*", shown, "", 600).actions}
    assert done["finished"].action == "removed"
    assert done["resumed"].action == "refuse" and done["resumed"].reason.startswith("at deletion: training: ")
    assert listing(root / "resumed") == before | {"train.log": listing(root / "resumed")["train.log"]}


WRITER = """
import json, os, sys, time
ckpt, log, go, stop = sys.argv[1:5]
wrote, step = {}, 0
open(log + ".ready", "w").close()  # the test waits for this: a slow start must not miss the whole window
while not os.path.exists(go):  # started ahead, resumes training the moment `go` appears
    time.sleep(0.0005)
while not os.path.exists(stop):
    step += 1
    try:  # a trainer's save: a new checkpoint-N folder, and its progress file rewritten
        os.makedirs(os.path.join(ckpt, f"checkpoint-{step}"), exist_ok=True)
        with open(os.path.join(ckpt, f"checkpoint-{step}", "w.bin"), "w") as handle:
            handle.write(f"weights {step}")
        wrote[f"checkpoint-{step}/w.bin"] = f"weights {step}"
        with open(os.path.join(ckpt, "progress.txt"), "w") as handle:
            handle.write(f"step {step}")
        wrote["progress.txt"] = f"step {step}"
    except OSError:  # checkpoints/ renamed away under it: that save wrote nothing
        pass
    time.sleep(0.005)
with open(log, "w") as handle:
    json.dump(wrote, handle)
"""


@pytest.mark.parametrize("resume", ["before the purge", "right after the re-scan", "2 ms after", "10 ms after"])
def test_a_live_writer_loses_nothing_it_wrote(tmp_path, monkeypatch, resume):
    """The plan made while the run was quiet; then the trainer resumes: before the purge starts,
    or right after its re-scan at deletion (the window the rename used to race): whatever the
    moment, every file it wrote is there afterwards, and nothing is left set aside."""
    root, log, go, stop = tmp_path / "runs", tmp_path / "wrote.json", tmp_path / "go", tmp_path / "stop"
    run = make_run(root, "live")
    backdate(run)
    [row] = scan.scan_root(str(root), quiet_s=60)
    assert row.action == "remove"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    code = [sys.executable, "-c", WRITER, str(run / "checkpoints"), str(log), str(go), str(stop)]
    writer = subprocess.Popen(code, env=env)
    ready = Path(f"{log}.ready")
    for _ in range(6000):  # up to 60 s for the interpreter to start on a loaded machine
        if ready.exists() or writer.poll() is not None:
            break
        time.sleep(0.01)
    if not ready.exists():
        writer.kill()
        pytest.fail(f"the writer never started (exit {writer.wait()})")
    real_scan = deletion.scan_root

    def scan_then_train(*args):
        rows = real_scan(*args)
        go.touch()
        time.sleep({"right after the re-scan": 0, "2 ms after": 0.002, "10 ms after": 0.01}[resume])
        return rows

    if resume == "before the purge":
        go.touch()
        while not (run / "checkpoints" / "checkpoint-2").exists():
            time.sleep(0.001)
    else:
        monkeypatch.setattr(deletion, "scan_root", scan_then_train)
    [done] = deletion.execute(str(root), "*", {row.path: row.listing_sha256}, "", 60).actions
    time.sleep(0.3)
    stop.touch()
    assert writer.wait(timeout=60) == 0
    wrote = json.loads(log.read_text())
    assert wrote, "the writer wrote nothing: the test tested nothing"
    got = {rel: (run / "checkpoints" / rel).read_text() for rel in wrote if (run / "checkpoints" / rel).is_file()}
    assert got == wrote, (done.action, done.reason)
    assert not list(run.glob(".labprobe-purging-*"))


# -- 7. one line, never a traceback; --json stdout is JSON ---------------------------------------
def _cli(args: list[str], *, env: dict | None = None, prefix: list[str] = ()) -> subprocess.CompletedProcess:
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "PYTHONPATH": str(REPO), **(env or {})}
    env.pop("RAY_ADDRESS", None)
    argv = [*prefix, sys.executable, "-m", "runner.cli", "purge", *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=300, env=env, check=False)


def _assert_one_line(done: subprocess.CompletedProcess, phrase: str) -> None:
    assert done.returncode == 2, (done.returncode, done.stderr[-3000:])
    lines = [line for line in done.stderr.strip().splitlines() if line.startswith("labprobe purge: error:")]
    assert len(lines) == 1 and phrase in lines[0] and "Traceback" not in done.stderr, done.stderr[-3000:]


def test_a_store_that_cannot_be_written_is_one_line_before_anything_is_deleted(tmp_path):
    from purge_util import private_mounts_refused

    lab = one_host_lab(tmp_path / "lab")
    make_run(lab["root"], "a")
    before = listing(lab["root"])
    a_file = tmp_path / "store-file"
    a_file.write_text("not a store\n")
    _assert_one_line(_cli(["--cluster", lab["cluster"], "--store", str(a_file)]), f"store {a_file}")
    _assert_one_line(_cli(["--cluster", lab["cluster"]], env={"TMPDIR": str(tmp_path / "no-such-dir")}), "TMPDIR")
    if private_mounts_refused():
        pytest.skip(private_mounts_refused())
    store = tmp_path / "ro-store"
    store.mkdir()
    ro = ["unshare", "-m", "--propagation", "private", "sh", "-c"]
    mount_ro = f'mount --bind {store} {store} && mount -o remount,bind,ro {store} && exec "$@"'
    _assert_one_line(
        _cli(["--cluster", lab["cluster"], "--store", str(store)], prefix=[*ro, mount_ro, "sh"]), "Read-only"
    )
    full = tmp_path / "full-store"
    full.mkdir()
    fill = f'mount -t tmpfs -o size=64k tmpfs {full} && (cat /dev/zero > {full}/fill 2>/dev/null; true) && exec "$@"'
    _assert_one_line(
        _cli(["--cluster", lab["cluster"], "--store", str(full)], prefix=[*ro, fill, "sh"]), "No space left"
    )
    assert listing(lab["root"]) == before


NOISY = """
import os, sys
import runner.cli.purge as cli
real = cli.purge
def noisy(*args, **kwargs):  # Ray's worker-death line (from C++, straight to fd 1) and a banner
    os.write(1, b"\\x1b[33m(raylet)\\x1b[0m A worker died or was killed while executing a task\\n")
    print("Ray banner", flush=True)
    return real(*args, **kwargs)
cli.purge = noisy
from runner.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_json_stdout_is_json_whatever_ray_prints(tmp_path):
    lab = one_host_lab(tmp_path)
    make_run(lab["root"], "a")
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "PYTHONPATH": str(REPO)}
    env.pop("RAY_ADDRESS", None)
    argv = [sys.executable, "-c", NOISY, "purge", "--cluster", lab["cluster"], "--json", "--host", "gx10"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300, env=env, check=False)
    printed = json.loads(done.stdout)  # the whole of stdout
    assert printed["mode"] == "dry-run" and "worker died" in done.stderr and "Ray banner" in done.stderr


def test_an_outcome_whose_commit_meets_a_vacuum_is_stored_on_a_fresh_handle(tmp_path):
    """The purge's store handle keeps each table open between commits; a compaction and a 0-day
    vacuum from another handle in between (as an object store without locks allows) make the next
    commit on the old handle fail: the outcome is committed again on a fresh one, not lost."""
    from datetime import datetime, timezone

    from runner.store import maintain
    from runner.store.store import JobKey

    purging = Store(tmp_path / "store")
    for i in range(3):  # earlier purges through this handle: its jobs table is kept open
        key = JobKey(
            run_id=f"r{i}",
            job_id=f"purge-{i}",
            probe="purge",
            host="gx10",
            checkpoint="-",
            checkpoint_fp="-",
            config_hash="c",
            code_version="v",
            finished_at=datetime.now(timezone.utc),
        )
        purging.write_job(key, status="ok", started_at=key.finished_at, wall_s=0.0, summary={}, config={}, env={})
    chores = Store(tmp_path / "store")
    chores.compact()
    # Vacuum never deletes a file younger than an hour (maintain.VACUUM_MIN_AGE_S): age them.
    hours_ago = time.time() - 2 * 3600
    for path in (tmp_path / "store").rglob("*.parquet"):
        os.utime(path, (hours_ago, hours_ago))
    assert maintain.vacuum(chores, 0.0).deleted["jobs"]  # the files the open handle knew are gone
    report = purge_mod.Report(yes=True, roots={"gx10": str(tmp_path / "runs")}, run_glob="*", plan_id="p")
    report.plan["gx10"], report.outcome["gx10"] = [], []
    purge_mod.store_phase(purging, report, "outcome")
    jobs = Store(tmp_path / "store").jobs()
    assert report.run_id in set(jobs["run_id"]) and len(jobs) == 4
    assert main(["store", "check", "--store", str(tmp_path / "store")]) == 0


def test_a_forced_ascii_locale_prints_non_ascii_run_names_escaped(tmp_path):
    lab = one_host_lab(tmp_path, host="local")  # the embedded Ray's one host: this machine
    make_run(lab["root"], "café-r8")
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "PYTHONPATH": str(REPO), "PYTHONIOENCODING": "ascii"}
    env.pop("RAY_ADDRESS", None)
    argv = [sys.executable, "-m", "runner.cli", "purge", "--cluster", lab["cluster"]]
    done = subprocess.run(argv, capture_output=True, timeout=300, env=env, check=False)
    assert b"Traceback" not in done.stderr and done.returncode == 0, done.stderr[-3000:]
    assert b"caf\\xe9-r8" in done.stdout and b"plan id: " in done.stdout


# -- the final adapter must be the run's last word, and stand on no checkpoint --------------------
def test_a_final_adapter_older_than_a_checkpoint_is_refused(tmp_path):
    """A resumed run went on after its adapter/ was saved: its checkpoints hold the newer weights."""
    root = tmp_path / "runs"
    backdate(make_run(root, "resumed"))
    write(root / "resumed" / "checkpoints" / "checkpoint-900" / "adapter_model.safetensors", 100, 9)
    backdate(root / "resumed" / "checkpoints" / "checkpoint-900", 60)  # newer than the adapter, yet quiet
    plan, _ = approve_all(root, quiet_s=30)
    assert plan["resumed"].action == "refuse"
    assert "checkpoints/checkpoint-900 newer than adapter/" in plan["resumed"].reason
    assert (root / "resumed" / "checkpoints" / "checkpoint-900").is_dir()


def test_an_adapter_whose_config_names_a_checkpoint_as_its_base_keeps_that_checkpoint(tmp_path):
    root = tmp_path / "runs"
    for name in ("stacked", "lender", "borrower"):
        backdate(make_run(root, name))
    own = root / "stacked" / "checkpoints" / "step-200"
    (root / "stacked" / "adapter" / "adapter_config.json").write_text(
        json.dumps({"r": 8, "base_model_name_or_path": str(own)})
    )
    (root / "borrower" / "adapter" / "adapter_config.json").write_text(
        json.dumps({"r": 8, "base_model_name_or_path": "../../lender/checkpoints/step-100"})
    )
    for name in ("stacked", "borrower"):
        backdate(root / name)
    plan, done = approve_all(root)
    assert (
        plan["stacked"].action == "refuse"
        and "adapter or model config names a base under checkpoints/" in plan["stacked"].reason
    )
    assert (
        plan["lender"].action == "refuse"
        and "borrower/adapter/adapter_config.json -> ../../lender" in plan["lender"].reason
    )
    assert done["borrower"].action == "removed"  # its own checkpoints/ carries nobody's base
    assert own.is_dir() and (root / "lender" / "checkpoints" / "step-100").is_dir()


def test_a_process_reading_a_checkpoint_keeps_the_run(tmp_path):
    root = tmp_path / "runs"
    backdate(make_run(root, "evaluated"))
    opened = root / "evaluated" / "checkpoints" / "step-200" / "adapter_model.safetensors"
    reader = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; f = open(sys.argv[1], 'rb'); print('open', flush=True); time.sleep(120)", str(opened)],
        stdout=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    try:
        assert reader.stdout.readline().strip() == "open"
        plan, done = approve_all(root)
    finally:
        reader.kill()
        reader.wait()
    assert plan["evaluated"].action == "refuse"
    assert (
        f"in use by a process: pid {reader.pid} (python" in plan["evaluated"].reason
        and " reads " in plan["evaluated"].reason
    )
    assert opened.is_file()
