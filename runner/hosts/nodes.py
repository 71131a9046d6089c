"""The lab's hosts as Ray nodes: connecting, pinning a task to a host, running a function on hosts.

A host is a Ray node carrying the label `labprobe.host=<name>` (`ray start --labels ...`). Tasks
are pinned with `label_selector`. A selector that matches no alive node leaves a task pending
forever with no error (docs/measurement.md), so every helper here checks the live labels first and waits
with a timeout.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from runner.hosts.reach import DEFAULT_CONNECT_TIMEOUT_S, ConnectError, check_reachable
from runner.log import logger, terminal_err

HOST_LABEL = "labprobe.host"
GPU_SLOT = "labprobe_gpu_slot"
"""A custom Ray resource, 1 per GPU host (`labprobe host-command` starts nodes with it): every GPU job
takes it, so a host runs one GPU job at a time across every sweep and driver, not just within one."""
LOCAL_HOST = "local"
"""The host name of this machine's node in the embedded Ray (no address, or `local`)."""


@dataclasses.dataclass(frozen=True)
class HostFailure:
    """A host that gave no answer: no alive node carries its label, the task failed or timed out."""

    host: str
    reason: str
    error: BaseException | None = None
    """The exception the task raised, when it raised one (its caller may re-raise it)."""


def connect(address: str | None = None, *, timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S) -> None:
    """Join the lab's Ray cluster at `address`, or, with None or "local", start the embedded Ray:
    one node on this machine, labelled host `local`.

    A remote address is checked first, within `timeout_s` (runner.hosts.reach): ConnectError,
    one line, when nothing usable answers there. Does nothing when Ray is already initialised (the
    tests' shared cluster, a second call).
    """
    import ray
    from ray.exceptions import AuthenticationError

    if ray.is_initialized():
        return
    kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False, "configure_logging": False}
    if address in (None, "local"):
        # "local" always starts a new Ray here; None would join any Ray already running on this
        # machine (another user's, a test's), and labels cannot be set on a cluster one joins.
        address = "local"
        kwargs["labels"] = {HOST_LABEL: LOCAL_HOST}
    else:
        address = _resolve(address)
        check_reachable(address, timeout_s)
    # A remote head answered a moment ago; one dying in between must still not hang us here. (The
    # embedded Ray is started by this process: Ray's own start-up timeouts bound it.)
    watchdog = threading.Timer(timeout_s + 60.0, _give_up, (address, timeout_s + 60.0))
    watchdog.daemon = True
    if address != "local":
        watchdog.start()
    try:
        ray.init(address=address, **kwargs)
    except (AuthenticationError, ConnectionError) as exc:
        raise ConnectError(f"Ray address {address}: {one_line(exc)}") from None
    finally:
        watchdog.cancel()


def _resolve(address: str) -> str:
    """`auto` -> the host:port Ray would pick (RAY_ADDRESS, or the cluster last started here)."""
    if address != "auto":
        return address
    from ray._private.services import canonicalize_bootstrap_address

    found = canonicalize_bootstrap_address("auto")
    if found is None:
        raise ConnectError("Ray address auto: no Ray cluster found (RAY_ADDRESS unset, none started here)")
    return found


def _give_up(address: str, waited_s: float) -> None:
    """ray.init is stuck inside Ray's C++ retries, which no Python exception can interrupt: say so,
    exit 2. The kernel drops the sweep lock with the process (none is held yet anyway)."""
    err = terminal_err()
    err.write(
        f"labprobe: error: Ray address {address}: ray.init did not return within "
        f"{waited_s:g} s (the head answered, then stopped answering)\n"
    )
    err.flush()
    os._exit(2)


def warn_embedded(command: str, address: str | None, hosts: set[str], consequence: str) -> None:
    """On the embedded Ray only host `local` exists: say so when the work names other hosts.
    `consequence` names them with `{hosts}`."""
    elsewhere = sorted(hosts - {LOCAL_HOST})
    if address in (None, "local") and elsewhere:
        logger.warning(
            f"labprobe {command}: no --address: the embedded Ray on this machine is host "
            f"`{LOCAL_HOST}` only; " + consequence.format(hosts=", ".join(elsewhere))
        )


def head_address() -> str:
    """host:port of the connected cluster's head (its GCS)."""
    import ray

    return ray.get_runtime_context().gcs_address


def node_host() -> str:
    """The host label of the Ray node running this code; "" outside Ray. Never imports Ray (a GPU
    box running probes inline has none)."""
    ray = sys.modules.get("ray")
    try:
        if ray is not None and ray.is_initialized():
            return ray.get_runtime_context().get_node_labels().get(HOST_LABEL, "")
    except Exception:  # a half-initialised Ray: the label is only informative
        pass
    return ""


def pinned(host: str) -> dict[str, Any]:
    """Ray `.options(...)` keyword arguments that pin a task to `host`'s node."""
    return {"label_selector": {HOST_LABEL: host}}


def live_hosts() -> dict[str, list[str]]:
    """Host label -> node ids of the alive nodes that carry it."""
    import ray

    hosts: dict[str, list[str]] = {}
    for node in ray.nodes():
        label = (node.get("Labels") or {}).get(HOST_LABEL)
        if node.get("Alive") and label:
            hosts.setdefault(label, []).append(node["NodeID"])
    return hosts


def one_line(exc: BaseException) -> str:
    """An exception as one line: Ray wraps remote errors in multi-line tracebacks."""
    cause = getattr(exc, "cause", None)
    if isinstance(cause, BaseException):
        exc = cause
    text = str(exc).strip().splitlines()
    last = text[-1].strip() if text else ""
    return f"{type(exc).__name__}: {last}" if last else type(exc).__name__


def run_on_hosts(
    fn: Callable[..., Any], hosts: list[str], *args: Any, timeout_s: float = 60.0, num_cpus: float = 0.1, **kwargs: Any
) -> dict[str, Any]:
    """Run `fn(*args, **kwargs)` once on each host, in parallel; host -> result or HostFailure.

    A host that no alive node carries fails at once; a task still running at `timeout_s` is
    cancelled and reported as a timeout. Never hangs.
    """
    import ray

    remote = ray.remote(max_retries=0)(fn)
    live = live_hosts()
    results: dict[str, Any] = {}
    pending: dict[Any, str] = {}
    for host in hosts:
        if host not in live:
            results[host] = HostFailure(host, f"no alive Ray node carries {HOST_LABEL}={host}")
            continue
        ref = remote.options(num_cpus=num_cpus, **pinned(host)).remote(*args, **kwargs)
        pending[ref] = host
    deadline = time.monotonic() + timeout_s
    while pending:
        left = deadline - time.monotonic()
        done, _ = ray.wait(list(pending), num_returns=1, timeout=max(0.0, left))
        if not done:
            break
        ref = done[0]
        host = pending.pop(ref)
        try:
            results[host] = ray.get(ref)
        except Exception as exc:  # a remote error of any kind is this host's answer
            results[host] = HostFailure(host, one_line(exc), getattr(exc, "cause", None) or exc)
    for ref, host in pending.items():
        ray.cancel(ref, force=True)
        results[host] = HostFailure(host, f"timeout: no answer within {timeout_s:g} s")
    return {host: results[host] for host in hosts}
