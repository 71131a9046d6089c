"""Reaching a Ray head, bounded: before `ray.init`, and while a sweep runs.

`ray.init(address=...)` on Ray 2.60 never gives up on its own in useful time: each attempt waits
5 s for the GCS socket, 5 s for its pubsub and 30 s for the cluster id, and it makes about 20 of
them (measured here: over 600 s against a free port, printing only Ray's retry warnings). A wrong
token ends in a `ConnectionError` after 20 s, the cause (InvalidAuthToken) only in Ray's warnings.
So, before `ray.init`, `check_reachable` asks the address itself, within a time bound:

1. a TCP connect (refused at once when nothing listens; a name that does not resolve);
2. a GCS handshake (`GcsClient` asking for the session name) in a child process, killed at the
   bound: it tells a silent listener or another service from a Ray head, and answers
   `AuthenticationError` at once for a missing or wrong token.

Each failure is a `ConnectError` (exit 2, one line naming the address and the likely cause).
While a sweep runs, `HeadWatch` checks the head's port: Ray blocks every call once its head is
gone and kills the driver 60 s later (`gcs_rpc_server_reconnect_timeout_s`), so the sweep has to
notice by itself, sooner, to record its in-flight jobs and print its summary.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from probes.result import InputError

DEFAULT_CONNECT_TIMEOUT_S = 30.0
"""A healthy head answers the handshake in about a second here; ray.init then takes 2-5 s."""
HEAD_LOST_S = 30.0
"""The head's port unreachable this long means the head is lost. Ray's own limit is 60 s, counted
from about the same moment: the other 30 s are for storing the failed rows and printing the summary;
a shorter wait would end sweeps over a network blip that Ray itself rides out."""

TOKEN_HELP = (
    "set RAY_AUTH_TOKEN to the cluster's token, or RAY_AUTH_TOKEN_PATH to a copy of the head's "
    "~/.ray/auth_token, with RAY_AUTH_MODE=token (see `labprobe host-command`)"
)

_HANDSHAKE = """
import sys
from ray._raylet import GcsClient
from ray.exceptions import AuthenticationError
try:
    GcsClient(address=sys.argv[1]).internal_kv_get(b"session_name", b"session", timeout=float(sys.argv[2]))
except AuthenticationError as exc:
    print(str(exc).splitlines()[0] if str(exc) else "InvalidAuthToken")
    sys.exit(3)
except Exception as exc:
    print(f"{type(exc).__name__}: {exc}".splitlines()[0])
    sys.exit(4)
"""


class ConnectError(InputError):
    """The Ray address cannot be used: nothing there, not a Ray head, or this driver's token refused."""


def parse_address(address: str) -> tuple[str, int]:
    """`host:port` -> (host, port); ConnectError naming the address otherwise."""
    host, sep, port = address.strip().rpartition(":")
    host = host.strip("[]")  # [::1]:6379
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConnectError(
            f"Ray address {address!r}: expected HOST:PORT with a port 1-65535 (or `local` for the embedded Ray)"
        )
    return host, int(port)


def check_reachable(address: str, timeout_s: float) -> None:
    """Raise ConnectError unless a Ray head answers at `address` within `timeout_s`."""
    host, port = parse_address(address)
    t0 = time.monotonic()
    try:
        socket.create_connection((host, port), timeout=timeout_s).close()
    except socket.gaierror as exc:
        raise ConnectError(f"Ray address {address}: cannot resolve {host!r} ({exc.strerror})") from None
    except ConnectionRefusedError:
        raise ConnectError(
            f"Ray address {address}: nothing listens there (no Ray head at that address, "
            "or it is down; start it with the line `labprobe host-command HEAD` prints)"
        ) from None
    except TimeoutError:
        raise ConnectError(
            f"Ray address {address}: no answer within {timeout_s:g} s (the host is down or "
            "a firewall drops the port; --connect-timeout-s sets the wait)"
        ) from None
    except OSError as exc:  # no route to host, network unreachable...
        raise ConnectError(f"Ray address {address}: {exc.strerror or exc}") from None
    problem = local_token_problem()
    if problem is not None:
        raise ConnectError(f"Ray address {address}: {problem}")
    _handshake(address, timeout_s, left_s=max(1.0, timeout_s - (time.monotonic() - t0)))


def _handshake(address: str, timeout_s: float, *, left_s: float) -> None:
    """The GCS handshake in a child process, killed after `left_s` (`timeout_s`: the figure to name)."""
    try:
        proc = subprocess.run(
            [sys.executable, "-c", _HANDSHAKE, address, str(left_s)],
            capture_output=True,
            text=True,
            timeout=left_s,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise ConnectError(
            f"Ray address {address}: something listens there but no Ray head answered within "
            f"{timeout_s:g} s (another service on that port, or a head that is stuck; "
            "--connect-timeout-s sets the wait)"
        ) from None
    said = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else ""
    aborted = ray_check_failure(proc.stderr)
    if aborted is not None:  # Ray's C++ aborted the child (a failed check), no exception: its words, one line
        raise ConnectError(f"Ray address {address}: {aborted}")
    if proc.returncode == 3:
        raise ConnectError(f"Ray address {address}: {_token_problem()} (Ray: InvalidAuthToken); {TOKEN_HELP}")
    if proc.returncode != 0:
        cause = said or (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]
        if "Timed out" in cause:
            cause = f"no Ray head answered within {timeout_s:g} s (--connect-timeout-s sets the wait)"
        raise ConnectError(f"Ray address {address}: {cause}")


RAY_NO_TOKEN_FILE = "RAY_AUTH_TOKEN_PATH is set but file cannot be opened or is empty"
RAY_NO_TOKEN = "couldn't find an authentication token"
"""Ray 2.60's words (authentication_token_loader.cc) when token mode finds no usable token: it aborts the
process with a C++ check failure and a native stack trace instead of raising."""


def ray_check_failure(stderr: str) -> str | None:
    """One line for a Ray C++ abort (`Check failed: ...`) in a child's stderr; None when there is none."""
    line = next((x for x in stderr.splitlines() if "Check failed:" in x), None)
    if line is None:
        return None
    if RAY_NO_TOKEN_FILE in line:
        path = line.split(RAY_NO_TOKEN_FILE, 1)[1].lstrip(": ").strip() or os.environ.get("RAY_AUTH_TOKEN_PATH", "")
        return f"no Ray token: RAY_AUTH_TOKEN_PATH={path} cannot be opened or is empty; {TOKEN_HELP}"
    if RAY_NO_TOKEN in line:
        return f"no Ray token found (RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH and ~/.ray/auth_token) with RAY_AUTH_MODE=token; {TOKEN_HELP}"
    return "Ray aborted: " + line.split("Check failed:", 1)[1].strip()


def local_token_problem() -> str | None:
    """What is wrong with this driver's token set-up before asking the head: a RAY_AUTH_TOKEN_PATH that
    names no readable, non-empty file (Ray would abort with a native stack trace). None: nothing seen."""
    path = os.environ.get("RAY_AUTH_TOKEN_PATH")
    if not path or os.environ.get("RAY_AUTH_TOKEN"):  # RAY_AUTH_TOKEN comes first: the path is not read
        return None
    try:
        empty = not Path(path).read_text().strip()
    except OSError as exc:
        return f"no Ray token: RAY_AUTH_TOKEN_PATH={path} cannot be read ({exc.strerror}); {TOKEN_HELP}"
    return f"no Ray token: RAY_AUTH_TOKEN_PATH={path} is empty; {TOKEN_HELP}" if empty else None


def _token_problem() -> str:
    """Which token this driver presented, in words: none (token mode off here), missing, or from where (and
    so wrong)."""
    mode = os.environ.get("RAY_AUTH_MODE")
    if mode != "token":  # Ray 2.60 sends no token at all unless told: a right token is refused as missing
        return (
            f"the head wants a token and this driver sends none: RAY_AUTH_MODE is "
            f"{'unset' if mode is None else repr(mode)}, set RAY_AUTH_MODE=token"
        )
    if os.environ.get("RAY_AUTH_TOKEN"):
        return "the Ray token in RAY_AUTH_TOKEN is wrong for this cluster"
    path = os.environ.get("RAY_AUTH_TOKEN_PATH")
    if path:
        return (
            f"the Ray token in RAY_AUTH_TOKEN_PATH={path} is wrong for this cluster"
            if Path(path).is_file()
            else f"no Ray token: RAY_AUTH_TOKEN_PATH={path} does not exist"
        )
    default = Path.home() / ".ray" / "auth_token"
    if default.is_file():
        return f"the Ray token in {default} is wrong for this cluster"
    return "no Ray token found (RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH and ~/.ray/auth_token are all unset)"


class HeadWatch(threading.Thread):
    """Calls `on_lost(reason)` once, from this thread, when `address` has refused or ignored TCP
    connects for `lost_after_s`. The caller's threads may be blocked inside Ray by then."""

    def __init__(
        self, address: str, on_lost: Callable[[str], None], *, lost_after_s: float = HEAD_LOST_S, every_s: float = 1.0
    ) -> None:
        super().__init__(name="labprobe-head-watch", daemon=True)
        self.address, self.on_lost = address, on_lost
        self.lost_after_s, self.every_s = lost_after_s, every_s
        self._stop_event = threading.Event()

    def run(self) -> None:
        host, port = parse_address(self.address)
        last_ok = time.monotonic()
        while not self._stop_event.wait(self.every_s):
            try:
                socket.create_connection((host, port), timeout=min(2.0, self.every_s * 2)).close()
                last_ok = time.monotonic()
            except OSError:
                if time.monotonic() - last_ok >= self.lost_after_s:
                    self.on_lost(f"Ray head lost: {self.address} unreachable for {self.lost_after_s:g} s")
                    return

    def stop(self) -> None:
        self._stop_event.set()
