"""Fresh measurement processes without the imports: a server that has imported torch, transformers, peft and
the checkpoint's modeling module (peft and the modeling module only where torchao is not installed: they import
it, and it starts CUDA), forking one child per measurement.

Importing them costs ~7 CPU-s a process; a search of ten stacks paid it eleven times. The server imports them
and does nothing else: none of labprobe's code (it is started by path, and each fork imports the worker,
~0.4 s), no CUDA (torch's is_available() asks NVML, and the server checks that torch has not initialised CUDA
before it says ready and before each fork), no model, no torch op, no compile. A fork of it is therefore the
process `python -m probes.step.variants.worker` would be once those imports are done, with its own allocator,
autotuner, compiled graphs and profiler. The child takes the request's environment, sys.path and folder before it
runs anything (Ray's CUDA_VISIBLE_DEVICES, a harness's folder); a server serves one environment only, since
torch reads some variables as it imports.

Protocol, one JSON line each way: the parent sends {"argv", "env", "path", "cwd", "log"}; the server answers
{"pid"} once forked, then {"exit"} when the child ends (the parent kills the pid on its timeout), or
{"refused"} when it will not fork. The server ends at end of input (its parent gone) or after IDLE_S without
a request."""

from __future__ import annotations

import contextlib
import gc
import json
import logging
import os
import select
import signal
import subprocess
import sys
import time
import traceback
from pathlib import Path

LOG = logging.getLogger(__name__)

IDLE_S = 120.0
"""A probe's measurements follow each other within seconds; a server idle this long is not coming back."""
UNSERVED = "unserved"
"""run()'s answer when no server could take the request: the caller starts the worker itself."""
READY_TIMEOUT_S = 120.0
"""The server's imports; ~10 s on a busy 2-core machine."""


class _Server:
    """The parent's end: one server process, the environment it serves, a line reader."""

    def __init__(self, env: dict):
        self.key = served(env)
        self.proc = subprocess.Popen(
            # by path, not `-m`: importing probes.step.variants would run our packages' code in the server
            [sys.executable, "-c", "import runpy, sys; runpy.run_path(sys.argv[1], run_name='__main__')", __file__],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            # torch.cuda.is_available() through NVML: a library that asks it while importing leaves the driver
            # unloaded (PyTorch's own switch for processes that fork); each fork gets `env` back as it was
            env={**env, "PYTORCH_NVML_BASED_CUDA_CHECK": "1"},
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
        try:
            message = json.loads(line)
        except ValueError:
            message = None
        if isinstance(message, dict):
            return message
        # a line something printed while importing, not the protocol's: the next one
        return self.read(None if deadline is None else max(0.0, deadline - time.monotonic()))

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


def served(env: dict) -> dict:
    """The part of an environment a server is for: all of it but what its imports cannot read. LABPROBE_*
    is read by labprobe's code (and the tests' harnesses), which runs only in the forks; PYTEST_CURRENT_TEST
    changes with every test; PYTHONPATH becomes each fork's sys.path, and the server refuses a request whose path
    would import one of its modules from elsewhere (_shadowed): a folder added to it (a lab's harness) costs no
    server start. (A variable left in needlessly costs a server start; one taken out wrongly would cost a fresh
    process.)"""
    return {
        k: v for k, v in env.items() if k not in ("PYTEST_CURRENT_TEST", "PYTHONPATH") and not k.startswith("LABPROBE_")
    }


_refused: list[dict] = []
"""Environments (served()) a server refused (it found CUDA started): not tried again, each refusal logged once."""


def run(argv: list[str], env: dict, log: Path, timeout_s: float) -> int | str | None:
    """The worker's exit status for `argv` in a fork of a server started with `env` (its output in `log`);
    None when it outlasted `timeout_s` and was killed; UNSERVED when no server takes it: preloading off
    (LABPROBE_PRELOAD=0 in `env`), a server refused this environment, would not start, or ended while idle (then
    the next call starts one). On by default on a GPU as on a CPU: an H100's forked step times matched spawned
    ones within 0.4% (benchmarks/RESULTS.md, 2026-12-07)."""
    global _server
    if env.get("LABPROBE_PRELOAD") == "0" or served(env) in _refused:
        return UNSERVED
    if _server is not None and (_server.key != served(env) or _server.proc.poll() is not None):
        _server.close()
        _server = None
    if _server is None:
        _server = _Server(env)
        ready = _server.read(READY_TIMEOUT_S)
        if not (ready and ready.get("ready")):
            _refuse(env, ready.get("why") if ready else "the server did not start")
            return UNSERVED
    path = env["PYTHONPATH"].split(os.pathsep)
    if not _server.send({"argv": argv, "env": env, "path": path, "cwd": os.getcwd(), "log": str(log)}):
        _server.close()  # it ended while idle
        _server = None
        return UNSERVED
    started = _server.read(READY_TIMEOUT_S)
    if started is None or "pid" not in started:  # it ended (idle, killed) or will not fork (CUDA started)
        if started is not None:
            _refuse(env, started.get("refused", str(started)))
        if _server is not None:
            _server.close()
            _server = None
        return UNSERVED
    ended = _server.read(timeout_s)
    if ended is None:
        with contextlib.suppress(ProcessLookupError):  # it may have ended as the wait did
            os.kill(started["pid"], signal.SIGKILL)
        _server.read(READY_TIMEOUT_S)  # its exit line: the next request's answers stay in step
        return None
    return ended["exit"]


def _refuse(env: dict, why: str) -> None:
    global _server
    LOG.warning("measurement processes start as `python -m` (~7 s of imports each): no preloaded server, %s", why)
    _refused.append(served(env))
    if _server is not None:
        _server.close()
        _server = None


def _serve_one(request: dict) -> int:
    """Fork, run the worker in the child with the request's environment, wait for it: the exit status."""
    # What the server holds (~380k objects: torch, transformers, peft) is frozen out of the collector right before
    # the fork, as Python's gc docs advise for a process that forks without exec: the child's collections skip them,
    # ~0.3 s less each, and leave their shared pages alone, up to the worker's timed steps. Those freeze the build
    # too and unfreeze everything after (worker._gc_watched: the model must be collectable), so the collections of
    # the stages after timing walk the server's objects again, as before. Collected first, so no garbage is frozen
    # with them (after the first fork that walks only what the server made since).
    gc.collect()
    gc.freeze()
    pid = os.fork()
    if pid == 0:  # the child: never returns into the server's loop
        code = 1
        try:
            log = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(log, 1)
            os.dup2(log, 2)
            os.environ.clear()
            os.environ.update(request["env"])
            os.chdir(request["cwd"])  # the caller's folder now, not the one it started the server in
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


def _shadowed(path: list[str]) -> str:
    """The first module this process imported (top-level, from a file) that `path` would import from another file,
    or "". ~10 ms over the ~400 modules the server holds."""
    from importlib.machinery import PathFinder

    for name, module in sorted(sys.modules.items()):
        loaded = getattr(module, "__spec__", None)
        # builtins, frozen modules, namespace packages and the script itself (__main__, __mp_main__) come from no
        # file the path chooses
        if "." in name or loaded is None or not loaded.has_location or name.startswith("__"):
            continue
        spec = PathFinder.find_spec(name, path)
        if spec is None or spec.origin != loaded.origin:
            return name
    return ""


def _answer(message: dict) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def _cuda_started() -> str:
    """Why a fork of this process would not be fresh for CUDA, or "": torch initialised CUDA. (Loading libcuda
    is not starting it: on an H100 `import torch` maps it. NVML, which is_available() asks here, is fork-safe.)"""
    import torch

    return "torch initialised CUDA" if torch.cuda.is_initialized() else ""


def _torchao_installed() -> bool:
    """torchao starts CUDA as it imports (its kernels ask Triton and torch for the card's capability: H100,
    torchao 0.18), and both peft's LoRA and transformers' modeling_utils import it where it is installed. There
    the server leaves those two to each fork: it still saves torch's and transformers' own imports."""
    import importlib.util

    return importlib.util.find_spec("torchao") is not None


def _import_heavy() -> None:
    """What every measurement imports, most of it lazily on its first use: ~4 s of a tiny model's 6. Third-party
    modules only: labprobe's own (~0.4 s) are imported by each fork, so nothing of ours runs in the server (an
    H100 showed a server that imported the worker with CUDA initialised)."""
    import torch.profiler  # noqa: F401
    from transformers import AutoModelForCausalLM  # noqa: F401  (the Auto class only: no modeling_utils)

    if not _torchao_installed():
        import peft.tuners.lora  # noqa: F401  (peft pulls transformers and accelerate)


def _import_model_class(request: dict) -> None:
    """The modeling module of the request's checkpoint (a second or more of imports), kept for the next fork:
    the class transformers maps the config's model_type (and its text_config's) to. A checkpoint that does not
    read is left to the fork, whose worker says why; so is every one where torchao is installed."""
    if _torchao_installed():
        return
    try:
        import transformers
        from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES as NAMES

        checkpoint = json.loads(Path(request["argv"][0]).read_text())["checkpoint"]
        config = json.loads((Path(checkpoint) / "config.json").read_text())
        for model_type in (config.get("model_type"), (config.get("text_config") or {}).get("model_type")):
            if model_type in NAMES:
                getattr(transformers, NAMES[model_type])
    except Exception:
        pass


def main() -> int:
    _import_heavy()
    why = _cuda_started()
    _answer({"ready": not why, "why": f"after the imports, {why}" if why else ""})
    if why:
        return 1
    while select.select([sys.stdin], [], [], IDLE_S)[0]:
        line = sys.stdin.readline()
        if not line:
            return 0
        request = json.loads(line)
        if shadowed := _shadowed(request["path"]):  # a fork would run our imports, not the ones its path names
            _answer({"refused": f"its sys.path imports {shadowed} from elsewhere than the server did"})
            return 1
        _import_model_class(request)
        if why := _cuda_started():  # a modeling module that started the driver: no fork of this server is fresh
            _answer({"refused": f"after importing the checkpoint's model class, {why}"})
            return 1
        _answer({"exit": _serve_one(request)})
    return 0


if __name__ == "__main__":
    sys.exit(main())
