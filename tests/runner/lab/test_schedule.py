"""`labprobe schedule`: the crontab entry is tagged, idempotent, and runs the sweep as written.

Entries go to a crontab file (--crontab-file), read back with python-crontab. The last test takes
the installed command line out of the file and runs it with `sh -c` in a bare, cron-like
environment from another directory: a real sweep (embedded Ray, the mask probe on a tiny
config-only checkpoint) must land its result, its report and its log where the entry says.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from crontab import CronTab

from runner import cli
from runner.lab.schedule import TAG
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


def entries(tab: Path) -> list:
    return [job for job in CronTab(tabfile=str(tab)) if job.comment.startswith(TAG)]


@pytest.fixture
def lab(tmp_path) -> tuple[Path, Path]:
    tab = tmp_path / "crontab"
    tab.write_text(UNRELATED)
    return write_lab(tmp_path / "lab"), tab


def test_install_twice_leaves_one_entry_with_the_newer_schedule(lab, capsys):
    cluster, tab = lab
    for cron in ("0 1 * * *", "30 2 * * 1-5"):
        code, out, _ = schedule(
            capsys, "install", "--cluster", str(cluster), "--plan", "night", "--cron", cron, "--crontab-file", str(tab)
        )
        assert code == 0 and out.startswith("installed: ")
    (entry,) = entries(tab)
    assert str(entry.slices) == "30 2 * * 1-5"
    assert entry.comment == f"{TAG} plan=night cluster={cluster.resolve()}"
    assert tab.read_text().startswith(UNRELATED)  # the lab's own lines are kept as they were
    assert sum(1 for line in tab.read_text().splitlines() if "backup" in line) == 1


def test_remove_leaves_none_and_keeps_other_lines(lab, capsys):
    cluster, tab = lab
    for plan in ("night", "other"):
        schedule(
            capsys,
            "install",
            "--cluster",
            str(cluster),
            "--plan",
            plan,
            "--cron",
            "0 1 * * *",
            "--crontab-file",
            str(tab),
        )
    assert len(entries(tab)) == 2
    code, out, _ = schedule(capsys, "remove", "--cluster", str(cluster), "--plan", "other", "--crontab-file", str(tab))
    assert code == 0 and "removed 1 entry" in out
    assert [e.comment.split()[1] for e in entries(tab)] == ["plan=night"]
    schedule(capsys, "remove", "--cluster", str(cluster), "--crontab-file", str(tab))
    assert entries(tab) == []
    assert tab.read_text().strip() == UNRELATED.strip()
    code, out, _ = schedule(capsys, "show", "--crontab-file", str(tab))
    assert code == 0 and "no labprobe entries" in out


def test_the_schedule_section_gives_the_defaults(tmp_path, capsys):
    cluster = write_lab(
        tmp_path, schedule="schedule: {plan: other, cron: '15 3 * * *', deadline: '06:45', log: logs/night.log}\n"
    )
    tab = tmp_path / "tab"
    code, _, err = schedule(capsys, "install", "--cluster", str(cluster), "--crontab-file", str(tab))
    assert code == 0, err
    (entry,) = entries(tab)
    assert str(entry.slices) == "15 3 * * *" and "plan=other" in entry.comment
    assert "--plan other" in entry.command and "--deadline 06:45" in entry.command
    assert f">> {tmp_path / 'logs' / 'night.log'} 2>&1" in entry.command
    code, out, _ = schedule(capsys, "show", "--crontab-file", str(tab))
    assert "15 3 * * *" in out and "plan=other" in out


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--cron", "61 1 * * *"], "--cron: invalid cron expression '61 1 * * *'"),
        (["--cron", "every night"], "--cron: invalid cron expression"),
        (["--cron", "0 1 * * *", "--deadline", "7am"], "--deadline: expected HH:MM"),
        (["--cron", "0 1 * * *", "--plan", "weekly"], "--plan: unknown plan 'weekly'"),
        (["--cron", "0 1 * * *", "--deadline", "23:00"], "--deadline: 23:00 is not within 12 h after the 01:00 start"),
        ([], "--plan: not given"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_the_file_untouched(lab, capsys, argv, message):
    cluster, tab = lab
    argv = argv if "--plan" in argv or not argv else argv + ["--plan", "night"]
    code, _out, err = schedule(capsys, "install", "--cluster", str(cluster), "--crontab-file", str(tab), *argv)
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1
    assert tab.read_text() == UNRELATED


def test_the_installed_command_runs_the_sweep_as_written(lab, capsys):
    cluster, tab = lab
    # The sweep reads HH:MM as the occurrence nearest to now: six hours ahead is still to come.
    now = datetime.now()
    deadline = (now + timedelta(hours=6)).strftime("%H:%M")
    code, _, err = schedule(
        capsys,
        "install",
        "--cluster",
        str(cluster),
        "--plan",
        "night",
        "--cron",
        f"0 {now.hour} * * *",
        "--deadline",
        deadline,
        "--crontab-file",
        str(tab),
    )
    assert code == 0, err
    (entry,) = entries(tab)
    elsewhere = cluster.parent.parent / "elsewhere"
    elsewhere.mkdir()
    # cron's environment: almost nothing. Tests keep Ray's token auth off (conftest does the same).
    env = {
        "HOME": str(elsewhere),
        "SHELL": "/bin/sh",
        "PATH": "/usr/bin:/bin",
        "LOGNAME": "cron",
        "RAY_AUTH_MODE": "disabled",
    }
    proc = subprocess.run(
        ["sh", "-c", entry.command], check=False, cwd=elsewhere, env=env, capture_output=True, text=True, timeout=240
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


def test_the_entry_carries_this_environment_and_never_a_token(lab, capsys, monkeypatch):
    cluster, tab = lab
    token_path = cluster.parent / "ray_token"
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(token_path))
    monkeypatch.setenv("RAY_AUTH_TOKEN", "s3cret-token-value")
    monkeypatch.setenv("RAY_AUTH_MODE", "token")
    schedule(
        capsys, "install", "--cluster", str(cluster), "--plan", "night", "--cron", "@daily", "--crontab-file", str(tab)
    )
    (entry,) = entries(tab)
    command = entry.command
    script = Path(sys.executable).parent / "labprobe"  # this venv's console script, by absolute path
    assert f"{script} sweep --cluster {cluster.resolve()} --plan night --report" in command
    assert f"cd {cluster.parent.resolve()} &&" in command
    assert f"RAY_AUTH_TOKEN_PATH={token_path}" in command and "s3cret" not in tab.read_text()
    assert " RAY_AUTH_MODE=token " in command  # host-command: keep it set for every driver
    assert f"PATH={shlex.quote(os.environ['PATH'])}" in command


def test_the_entry_leaves_out_auth_settings_not_set_here(lab, capsys, monkeypatch):
    cluster, tab = lab
    monkeypatch.delenv("RAY_AUTH_MODE", raising=False)
    monkeypatch.delenv("RAY_AUTH_TOKEN_PATH", raising=False)
    schedule(
        capsys, "install", "--cluster", str(cluster), "--plan", "night", "--cron", "@daily", "--crontab-file", str(tab)
    )
    (entry,) = entries(tab)
    assert "RAY_AUTH" not in entry.command
    # What the entry sets is what the sweep sees: run its assignments in cron's bare environment.
    monkeypatch.setenv("RAY_AUTH_MODE", "token")
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", "/srv/ray token")
    schedule(
        capsys, "install", "--cluster", str(cluster), "--plan", "night", "--cron", "@daily", "--crontab-file", str(tab)
    )
    (entry,) = entries(tab)
    assignments = entry.command.split(" && ", 1)[1].split(" /", 1)[0]
    probe = subprocess.run(
        ["sh", "-c", f"{assignments} env"], env={"PATH": "/usr/bin:/bin"}, capture_output=True, text=True, check=True
    ).stdout.splitlines()
    assert "RAY_AUTH_MODE=token" in probe and "RAY_AUTH_TOKEN_PATH=/srv/ray token" in probe
