"""Measurement processes forked from one preloaded server (probes.step.variants.preload): each a new process
under the caller's environment and sys.path, a new server when that environment changes, killed at its
timeout with the server still serving, and the plain `python -m` worker when preloading is off."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from probes.step.variants import catalog, preload, processes
from probes.step.variants.measurement import Spec

STEP = dict(weights="random", lora_rank=4, seq_len=16, batch_size=2, warmup_steps=0, steps=1, max_steps=1)


def _spec(checkpoint: Path) -> Spec:
    return Spec(checkpoint=str(checkpoint), harness="harness_whoami", lora_alpha=8.0, ce_chunk=8,
                variant=catalog.BASELINE_VARIANT, profile_steps=1, device="cpu", **STEP)  # fmt: skip


def _calls(path: Path) -> list[tuple[int, int, str]]:
    """(pid, parent pid, LAB_MARK) of each process that ran a step, one entry per process."""
    seen = {}
    for line in path.read_text().splitlines():
        pid, ppid, mark, _ = line.split()
        seen[int(pid)] = (int(pid), int(ppid), mark)
    return list(seen.values())


def _frozen_at_first_step(path: Path) -> list[int]:
    """Each process's count of objects frozen out of its collector at its first step (before the worker's own
    freeze around its timed steps), in the order the processes first stepped."""
    first = {}
    for line in path.read_text().splitlines():
        pid, _, _, frozen = line.split()
        first.setdefault(int(pid), int(frozen))
    return list(first.values())


@pytest.fixture
def calls(harness_calls, monkeypatch) -> Path:
    monkeypatch.delenv("LABPROBE_PRELOAD", raising=False)
    return harness_calls


def test_measurements_fork_from_one_server_under_the_callers_environment(tiny, calls, monkeypatch):
    monkeypatch.setenv("LAB_MARK", "first")
    assert processes.run(_spec(tiny)).status == "ok"
    assert processes.run(_spec(tiny)).status == "ok"
    server = preload._server.proc.pid
    monkeypatch.setenv("LAB_MARK", "second")  # an environment the server was not started with: a new server
    assert processes.run(_spec(tiny)).status == "ok"
    (a, b, c) = _calls(calls)
    assert a[0] != b[0] and a[1] == b[1] == server and a[2] == b[2] == "first"  # two forks of one server
    assert c[1] == preload._server.proc.pid != server and c[2] == "second"
    assert os.getpid() not in (a[1], c[1])


def test_a_fork_starts_with_the_servers_imports_frozen_out_of_the_collector(tiny, calls, monkeypatch):
    """The server freezes what it holds before it forks: a fork's collections walk its own objects, not ~380k
    imported ones. A spawned worker has nothing frozen before its timed steps."""
    assert processes.run(_spec(tiny)).status == "ok"
    monkeypatch.setenv("LABPROBE_PRELOAD", "0")
    assert processes.run(_spec(tiny)).status == "ok"
    forked, spawned = _frozen_at_first_step(calls)
    assert forked > 100_000 and spawned == 0


def test_a_timed_out_fork_is_killed_and_the_server_serves_the_next(tiny, calls):
    assert processes.run(_spec(tiny)).status == "ok"  # the server is up and warm
    server = preload._server.proc.pid
    late = processes.run(_spec(tiny), timeout_s=0.05)
    assert late.status == "failed: timed out after 0 s"
    assert processes.run(_spec(tiny)).status == "ok" and preload._server.proc.pid == server
    assert len(_calls(calls)) == 2  # the killed fork never stepped


def test_a_server_gone_is_replaced_and_preloading_off_spawns_the_worker(tiny, calls, monkeypatch):
    assert processes.run(_spec(tiny)).status == "ok"
    preload._server.proc.kill()  # as if it had ended idle
    preload._server.proc.wait()
    assert processes.run(_spec(tiny)).status == "ok"
    monkeypatch.setenv("LABPROBE_PRELOAD", "0")
    assert processes.run(_spec(tiny)).status == "ok"
    first, second, spawned = _calls(calls)
    assert first[1] != second[1] and spawned[1] == os.getpid()  # the plain worker is this process's child


def test_a_server_that_cannot_serve_is_refused_once_and_said(tmp_path, monkeypatch, caplog):
    started = []
    monkeypatch.setattr(preload, "_Server", lambda env: started.append(env) or _Broken())
    env = {"PYTHONPATH": str(tmp_path), "LAB_MARK": "refused"}
    assert preload.run(["spec", "out"], env, tmp_path / "log", 5) == preload.UNSERVED
    assert preload.run(["spec", "out"], env, tmp_path / "log", 5) == preload.UNSERVED
    assert len(started) == 1  # refused once, not started again for the same environment
    warned = [r.getMessage() for r in caplog.records if r.name == preload.__name__]
    assert warned == ["measurement processes start as `python -m` (~7 s of imports each): no preloaded server, "
                      "after the imports, torch initialised CUDA"]  # fmt: skip


class _Broken:
    """A server that answers as one does when CUDA was started at import."""

    proc = SimpleNamespace(poll=lambda: 1, kill=lambda: None, wait=lambda: 1)

    def read(self, timeout_s):
        return {"ready": False, "why": "after the imports, torch initialised CUDA"}

    def close(self):
        pass


def test_preloading_is_the_default_and_off_spawns(tmp_path, monkeypatch):
    started = []
    monkeypatch.setattr(preload, "_Server", lambda env: started.append(env) or _Broken())
    log = tmp_path / "log"
    unset = {"PYTHONPATH": "", "LAB_MARK": "gpu"}
    preload.run(["s", "o"], unset, log, 5)
    assert started == [unset]  # no setting, on a CPU or a GPU: a server is tried
    off = {"PYTHONPATH": "", "LAB_MARK": "off", "LABPROBE_PRELOAD": "0"}
    assert preload.run(["s", "o"], off, log, 5) == preload.UNSERVED and len(started) == 1


def test_a_server_serves_the_tests_and_settings_that_its_imports_cannot_read():
    env = {"PYTHONPATH": "a", "OMP_NUM_THREADS": "1", "PYTEST_CURRENT_TEST": "t1", "LABPROBE_PRELOAD": "1"}
    assert preload.served(env) == {"OMP_NUM_THREADS": "1"}
    assert preload.served({**env, "PYTEST_CURRENT_TEST": "t2", "LABPROBE_FAKE_CUDA": "1"}) == preload.served(env)
    assert preload.served({**env, "OMP_NUM_THREADS": "2"}) != preload.served(env)  # torch reads it: a new server
    # the path is each fork's own: a folder put on it (a lab's harness) costs no server start
    assert preload.served({**env, "PYTHONPATH": "lab:a"}) == preload.served(env)


def test_a_path_that_would_import_a_preloaded_module_from_elsewhere_is_named(tmp_path):
    """The server refuses such a request (its fork would run the server's torch, not the path's). Asked in a fresh
    process that imported torch, as the server did (this one holds modules of other tests' folders)."""
    harness = tmp_path / "lab"
    harness.mkdir()
    (harness / "harness.py").write_text("")
    shadow = tmp_path / "shadow"
    (shadow / "torch").mkdir(parents=True)
    (shadow / "torch" / "__init__.py").write_text("")
    code = (
        "import json, runpy, sys, torch\n"
        f"preload = runpy.run_path({preload.__file__!r}, run_name='preload')\n"
        "print(json.dumps([preload['_shadowed']([folder, *sys.path]) for folder in sys.argv[1:]]))\n"
    )
    out = subprocess.run([sys.executable, "-c", code, str(harness), str(shadow)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout) == ["", "torch"]


def test_with_torchao_installed_the_server_leaves_peft_and_the_model_class_to_each_fork(tiny, tmp_path):
    """peft's LoRA and transformers' modeling_utils import torchao where it is installed, and torchao's kernels start
    CUDA as they import (an H100: every server refused). A torchao the import system finds (here a stand-in
    package on the path, which those imports would import): the server's imports and its model class import leave
    both out, and torchao with them; without one they take them. Each asked in a fresh process, as the server
    imports."""
    (tmp_path / "torchao").mkdir()
    (tmp_path / "torchao" / "__init__.py").write_text('__version__ = "0.18.0"\n')
    request = tmp_path / "request.json"
    request.write_text(json.dumps({"checkpoint": str(tiny)}))
    code = (
        "import json, runpy, sys\n"
        f"preload = runpy.run_path({preload.__file__!r}, run_name='preload')\n"
        "preload['_import_heavy']()\n"
        f"preload['_import_model_class']({{'argv': [{str(request)!r}]}})\n"
        "names = ('peft', 'transformers.modeling_utils', 'transformers.models.qwen3.modeling_qwen3', 'torchao')\n"
        "print(json.dumps([name in sys.modules for name in names]))\n"
    )
    plain = importlib.util.find_spec("torchao") is None  # this machine's own: a GPU box with labprobe[stacks] has it
    for path, imported in ((str(tmp_path), False), ("", plain)):
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (path, os.environ.get("PYTHONPATH"))))}
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
        assert out.returncode == 0, out.stderr[-2000:]
        assert json.loads(out.stdout) == [imported, imported, imported, False], path


def test_a_fork_runs_in_the_callers_folder_of_now(tiny, calls, tmp_path, monkeypatch):
    assert processes.run(_spec(tiny)).status == "ok"  # the server starts in this folder
    here = tmp_path / "elsewhere"
    here.mkdir()
    (here / "ckpt").symlink_to(tiny)
    monkeypatch.chdir(here)
    assert processes.run(_spec(Path("ckpt"))).status == "ok"  # a relative checkpoint, read from the new folder


def test_a_line_printed_at_import_is_not_taken_for_the_servers_answer(tmp_path):
    server = preload._Server.__new__(preload._Server)
    server.proc = SimpleNamespace(stdout=open(tmp_path / "out", "w+b"))  # noqa: SIM115
    server.proc.stdout.write(b'Some library says hello\n[1, 2]\n{"ready": true}\n')
    server.proc.stdout.seek(0)
    server.buffer = b""
    assert server.read(5) == {"ready": True}
