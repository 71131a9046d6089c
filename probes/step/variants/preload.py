"""Fresh measurement processes without the import: a server that has imported the worker (torch,
transformers, peft) and forks one child per measurement.

Importing them costs ~7 CPU-s a process; a search of ten stacks paid it eleven times. The server imports and
does nothing else: no CUDA (it checks that no /dev/nvidia* file is open before it says ready), no model, no
torch op, no compile. A fork of it is therefore the process `python -m probes.step.variants.worker` would be
once its imports are done, with its own allocator, autotuner, compiled graphs and profiler. The child takes
the request's environment and sys.path before it runs anything (Ray's CUDA_VISIBLE_DEVICES, a harness's
folder); a server serves one environment only, since torch reads some variables as it imports.

Protocol, one JSON line each way: the parent sends {"argv", "env", "path", "log"}; the server answers
{"pid"} once forked, then {"exit"} when the child ends (the parent kills the pid on its timeout). The server
ends at end of input (its parent gone) or after IDLE_S without a request.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
import traceback
from pathlib import Path

IDLE_S = 120.0
"""A probe's measurements follow each other within seconds; a server idle this long is not coming back."""
UNSERVED = "unserved"
"""run()'s answer when no server could take the request: the caller starts the worker itself."""
READY_TIMEOUT_S = 120.0
"""The server's imports; ~10 s on a busy 2-core machine."""


class _Server:
    """The parent's end: one server process, the environment it was started with, a line reader."""

    def __init__(self, env: dict):
        self.env = env
        self.proc = subprocess.Popen(
            [sys.executable, "-m", __name__],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
        )
        self.buffer = b""

    def read(self, timeout_s: float | None) -> dict | None:
        """The next message; None at end of output or past the timeout."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        fd = self.proc.stdout.fileno()
        while b"\n" not in self.buffer:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not select.select([fd], [], [], left)[0]:
                return None
            chunk = os.read(fd, 65536)
            if not chunk:
                return None
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        return json.loads(line)

    def send(self, message: dict) -> bool:
        try:
            self.proc.stdin.write((json.dumps(message) + "\n").encode())
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            return False
        return True

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


_server: _Server | None = None


def run(argv: list[str], env: dict, log: Path, timeout_s: float) -> int | str | None:
    """The worker's exit status for `argv` in a fork of a server started with `env` (its output in `log`);
    None when it outlasted `timeout_s` and was killed; UNSERVED when no server could take it (LABPROBE_PRELOAD=0,
    the server would not start, or it ended while idle: then the next call starts a new one)."""
    global _server
    if env.get("LABPROBE_PRELOAD", "1") == "0":
        return UNSERVED
    if _server is not None and (_server.env != env or _server.proc.poll() is not None):
        _server.close()
        _server = None
    if _server is None:
        _server = _Server(env)
        ready = _server.read(READY_TIMEOUT_S)
        if not (ready and ready.get("ready")):
            _server.close()
            _server = None
            return UNSERVED
    if not _server.send({"argv": argv, "env": env, "path": env["PYTHONPATH"].split(os.pathsep), "log": str(log)}):
        _server = None
        return UNSERVED
    started = _server.read(READY_TIMEOUT_S)
    if started is None or "pid" not in started:  # it ended (idle, killed) or will not fork (CUDA opened)
        _server.close()
        _server = None
        return UNSERVED
    ended = _server.read(timeout_s)
    if ended is None:
        os.kill(started["pid"], signal.SIGKILL)
        ended = _server.read(READY_TIMEOUT_S)
        return None
    return ended["exit"]


def _serve_one(request: dict) -> int:
    """Fork, run the worker in the child with the request's environment, wait for it: the exit status."""
    pid = os.fork()
    if pid == 0:  # the child: never returns into the server's loop
        code = 1
        try:
            log = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(log, 1)
            os.dup2(log, 2)
            os.environ.clear()
            os.environ.update(request["env"])
            sys.path[:] = request["path"]
            from probes.step.variants import worker

            worker.restart_clock()
            code = worker.main(request["argv"])
        except BaseException:
            traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    _answer({"pid": pid})
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def _answer(message: dict) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def _cuda_opened() -> list[str]:
    """Device files this process holds open: a fork after CUDA's driver started would share its state."""
    opened = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith("/dev/nvidia"):
            opened.append(target)
    return opened


def _import_heavy() -> None:
    """What every measurement imports, most of it lazily on its first use: ~4 s of a tiny model's 6."""
    import peft.tuners.lora  # noqa: F401  (peft pulls transformers and accelerate)
    import torch.profiler  # noqa: F401
    from transformers import AutoModelForCausalLM  # noqa: F401

    from probes.step.variants import worker  # noqa: F401


def _import_model_class(request: dict) -> None:
    """The modeling module of the request's checkpoint (a second or more of imports), kept for the next fork.
    A checkpoint that does not read is left to the child, which says why."""
    try:
        from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING

        from probes.step.train.checkpoint import load_text_config

        checkpoint = json.loads(Path(request["argv"][0]).read_text())["checkpoint"]
        MODEL_FOR_CAUSAL_LM_MAPPING[type(load_text_config(Path(checkpoint)))]
    except Exception:
        pass


def main() -> int:
    _import_heavy()
    opened = _cuda_opened()
    _answer({"ready": not opened, "why": f"CUDA opened at import: {opened}" if opened else ""})
    if opened:
        return 1
    while select.select([sys.stdin], [], [], IDLE_S)[0]:
        line = sys.stdin.readline()
        if not line:
            return 0
        request = json.loads(line)
        _import_model_class(request)
        if _cuda_opened():  # a modeling module that touched the driver: no fork of this server is fresh
            _answer({"exit": UNSERVED})
            return 1
        _answer({"exit": _serve_one(request)})
    return 0


if __name__ == "__main__":
    sys.exit(main())
