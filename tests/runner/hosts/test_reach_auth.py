"""Token authentication errors in one true line, against a real `ray start --head` with token auth on and
the installed Ray's own words (runner/hosts/reach.py matches them: a Ray that words them differently fails
here, not on a user's terminal). One head for the module."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest
from ray_head import RayHead

from runner.hosts.reach import ConnectError, _handshake, check_reachable

REPO = Path(__file__).resolve().parents[3]
TOKEN = secrets.token_hex(16)


def clean_env(home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    return {**env, "HOME": str(home), "RAY_ENABLE_UV_RUN_RUNTIME_ENV": "0", **extra}


@pytest.fixture(scope="module")
def head(tmp_path_factory):
    head = RayHead(env=clean_env(tmp_path_factory.mktemp("home"), RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=TOKEN))
    yield head
    head.kill()


@pytest.fixture
def driver_env(monkeypatch, tmp_path):
    """This process as a driver with no Ray settings and an empty home (no ~/.ray/auth_token)."""
    for key in [k for k in os.environ if k.startswith("RAY_")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("HOME", str(tmp_path))
    return monkeypatch


def test_a_missing_token_file_is_named(head, driver_env, tmp_path):
    missing = tmp_path / "nowhere" / "auth_token"
    driver_env.setenv("RAY_AUTH_MODE", "token")
    driver_env.setenv("RAY_AUTH_TOKEN_PATH", str(missing))
    with pytest.raises(ConnectError) as err:
        check_reachable(head.address, 20)
    [line] = str(err.value).splitlines()
    assert f"RAY_AUTH_TOKEN_PATH={missing} cannot be read (No such file or directory)" in line
    # Past labprobe's own check, Ray aborts with a native stack trace: its words are read into the same line.
    with pytest.raises(ConnectError) as err:
        _handshake(head.address, 20, left_s=20)
    [line] = str(err.value).splitlines()
    assert f"no Ray token: RAY_AUTH_TOKEN_PATH={missing} cannot be opened or is empty" in line, line
    assert "_start" not in line and "StackTrace" not in line


def test_token_mode_without_any_token_says_so_in_ray_s_words(head, driver_env):
    driver_env.setenv("RAY_AUTH_MODE", "token")
    with pytest.raises(ConnectError) as err:
        _handshake(head.address, 20, left_s=20)
    [line] = str(err.value).splitlines()
    assert "no Ray token found" in line and "RAY_AUTH_MODE=token" in line, line


@pytest.mark.parametrize("how", ["RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"])
def test_the_right_token_without_token_mode_names_ray_auth_mode(head, driver_env, tmp_path, how):
    if how == "RAY_AUTH_TOKEN":
        driver_env.setenv("RAY_AUTH_TOKEN", TOKEN)
    else:
        (tmp_path / "tok").write_text(TOKEN)
        driver_env.setenv("RAY_AUTH_TOKEN_PATH", str(tmp_path / "tok"))
    with pytest.raises(ConnectError) as err:
        check_reachable(head.address, 20)
    line = str(err.value)
    assert "RAY_AUTH_MODE is unset, set RAY_AUTH_MODE=token" in line and "wrong" not in line, line
    driver_env.setenv("RAY_AUTH_MODE", "token")
    check_reachable(head.address, 20)  # the same token in token mode: accepted


def test_labprobe_sweep_with_a_missing_token_file_is_one_line_exit_2(head, tmp_path):
    missing = tmp_path / "auth_token"
    env = clean_env(tmp_path, RAY_AUTH_MODE="token", RAY_AUTH_TOKEN_PATH=str(missing))
    cmd = [sys.executable, "-m", "runner.cli", "sweep", "--address", head.address, "--store", str(tmp_path / "s")]
    proc = subprocess.run(cmd, env=env, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    [line] = proc.stderr.strip().splitlines()
    assert str(missing) in line and "RAY_AUTH_TOKEN_PATH" in line and "_start" not in line, line
