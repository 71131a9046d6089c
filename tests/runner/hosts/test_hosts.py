"""Ray helpers on the shared real cluster: pinning by label, unknown hosts, errors, timeouts."""

from __future__ import annotations

import time

from runner.hosts.nodes import HostFailure, live_hosts, run_on_hosts


def _whoami() -> str:
    import ray

    return ray.get_runtime_context().get_node_labels().get("labprobe.host", "")


def _boom() -> None:
    raise ValueError("disk on fire")


def _sleep(seconds: float) -> str:
    time.sleep(seconds)
    return "woke"


def test_each_host_answers_from_its_own_node(ray_cluster):
    assert {"gx10", "ana-ml2"} <= set(live_hosts())
    assert run_on_hosts(_whoami, ["gx10", "ana-ml2"]) == {"gx10": "gx10", "ana-ml2": "ana-ml2"}


def test_unknown_host_fails_at_once_and_errors_become_one_line(ray_cluster):
    start = time.monotonic()
    out = run_on_hosts(_boom, ["gx10", "nowhere"], timeout_s=30)
    assert time.monotonic() - start < 10
    assert out["nowhere"] == HostFailure("nowhere", "no alive Ray node carries labprobe.host=nowhere")
    assert isinstance(out["gx10"], HostFailure) and out["gx10"].reason == "ValueError: disk on fire"


def test_a_slow_host_times_out(ray_cluster):
    start = time.monotonic()
    out = run_on_hosts(_sleep, ["gx10"], 30, timeout_s=1.5)
    assert time.monotonic() - start < 8
    assert out["gx10"] == HostFailure("gx10", "timeout: no answer within 1.5 s")
