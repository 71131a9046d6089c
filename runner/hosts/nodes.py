"""The lab's hosts as Ray nodes: connecting, pinning a task to a host, running a function on hosts.

A host is a Ray node carrying the label `labprobe.host=<name>` (`ray start --labels ...`). Tasks
are pinned with `label_selector`. A selector that matches no alive node leaves a task pending
forever with no error (docs/measurement.md), so every helper here checks the live labels first and waits
with a timeout.
"""

from __future__ import annotations

import dataclasses
import os
import socket
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from runner.hosts.reach import DEFAULT_CONNECT_TIMEOUT_S, ConnectError, check_reachable
from runner.log import logger, terminal_err

HOST_LABEL = "labprobe.host"
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


NODE_CHECK_S = 1.0
"""How often a wait on hosts' tasks checks that their nodes still answer."""
NODE_STRIKES = 2
"""Consecutive checks a host's raylets must all fail before the host counts as dead (one lost packet is not)."""


def raylets() -> dict[str, list[tuple[str, int]]]:
    """Host label -> (address, port) of the raylet of each node Ray lists alive with it."""
    import ray

    out: dict[str, list[tuple[str, int]]] = {}
    for node in ray.nodes():
        label = (node.get("Labels") or {}).get(HOST_LABEL)
        if node.get("Alive") and label:
            out.setdefault(label, []).append((node.get("NodeManagerAddress", ""), int(node.get("NodeManagerPort", 0))))
    return out


def raylet_answers(address: str, port: int, timeout_s: float = 1.0) -> bool:
    """Whether a node's raylet accepts a TCP connect: refused at once when it was killed, while Ray's
    own health check lists the node alive for ~15 s more."""
    try:
        socket.create_connection((address, port), timeout=timeout_s).close()
        return True
    except OSError:
        return False


class NodeWatch:
    """Which hosts lost every node, checked at most every NODE_CHECK_S: Ray's listing (a node it marked
    dead or that left) and each listed node's raylet port (a node killed a moment ago)."""

    def __init__(self) -> None:
        self._strikes: dict[str, int] = {}
        self._last = time.monotonic()

    def dead(self, hosts: set[str]) -> dict[str, str]:
        """host -> why it is dead, among `hosts`; {} between checks."""
        if not hosts or time.monotonic() - self._last < NODE_CHECK_S:
            return {}
        self._last = time.monotonic()
        listed = raylets()
        out = {}
        for host in sorted(hosts):
            nodes = listed.get(host, [])
            if not nodes:
                out[host] = f"its Ray node died or left (no alive node carries {HOST_LABEL}={host})"
            elif any(raylet_answers(a, p) for a, p in nodes):
                self._strikes.pop(host, None)
            else:
                self._strikes[host] = self._strikes.get(host, 0) + 1
                if self._strikes[host] >= NODE_STRIKES:
                    where = ", ".join(f"{a}:{p}" for a, p in nodes)
                    out[host] = f"its Ray node does not answer (raylet {where} refuses connections: the node died)"
        return out


def run_on_hosts(
    fn: Callable[..., Any], hosts: list[str], *args: Any, timeout_s: float = 60.0, num_cpus: float = 0.1, **kwargs: Any
) -> dict[str, Any]:
    """Run `fn(*args, **kwargs)` once on each host, in parallel; host -> result or HostFailure.

    A host that no alive node carries fails at once, one whose nodes stop answering within about
    NODE_CHECK_S x NODE_STRIKES (runner.hosts.nodes.NodeWatch); a task still running at `timeout_s` is
    cancelled and reported as a timeout. Never hangs; a dead host never delays the others' answers.
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
    watch = NodeWatch()
    while pending:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        done, _ = ray.wait(list(pending), num_returns=1, timeout=min(left, NODE_CHECK_S))
        for ref in done:
            host = pending.pop(ref)
            try:
                results[host] = ray.get(ref)
            except Exception as exc:  # a remote error of any kind is this host's answer
                results[host] = HostFailure(host, one_line(exc), getattr(exc, "cause", None) or exc)
        # A task on a node killed a moment ago neither runs nor fails until Ray's health check gives up
        # on the node (~15 s); its raylet refuses connections at once: fail that host now, not later.
        for host, why in watch.dead(set(pending.values())).items():
            for ref in [r for r, h in pending.items() if h == host]:
                del pending[ref]
                ray.cancel(ref, force=True)
            results[host] = HostFailure(host, why)
    for ref, host in pending.items():
        ray.cancel(ref, force=True)
        results[host] = HostFailure(host, f"timeout: no answer within {timeout_s:g} s")
    return {host: results[host] for host in hosts}
