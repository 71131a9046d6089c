"""Shared fixtures. One real multi-node Ray cluster per test session (Ray takes ~5 s to start here)."""

from __future__ import annotations

import os

import pytest

# Tests run on one machine with throwaway clusters; the product keeps Ray's token auth on.
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")

HOST_LABEL = "labprobe.host"


@pytest.fixture(scope="session")
def ray_cluster():
    """A head (no host label, the driver's node) and two lab hosts, `gx10` and `ana-ml2`.

    Tests that kill nodes or need logical GPUs add their own nodes with `cluster.add_node(...)`
    and remove them when done, so the shared nodes stay as described here.
    """
    import ray
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 1, "include_dashboard": False})
    cluster.add_node(num_cpus=2, labels={HOST_LABEL: "gx10"})
    cluster.add_node(num_cpus=2, labels={HOST_LABEL: "ana-ml2"})
    ray.init(address=cluster.address, include_dashboard=False, log_to_driver=False)
    cluster.wait_for_nodes()
    yield cluster
    ray.shutdown()
    cluster.shutdown()
